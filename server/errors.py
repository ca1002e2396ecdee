"""Errors in the OpenAI shape, the request-size limit, and API-key authentication.

Every error the proxy sends is ``{"error": {"message", "type", "code", "param"}}`` with a
4xx/5xx status: malformed JSON and bad fields are 400, a missing or wrong key 401, an unknown
skill 404, a body over the limit 413, a busy model 503 with ``Retry-After``.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import (
    ConflictError,
    ModelError,
    NotFoundError,
    ReadOnlyError,
    SkillDeskError,
    UnsafePathError,
)
from server.config import ServerConfig
from server.gate import Busy

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 409: "conflict_error",
          413: "invalid_request_error", 415: "invalid_request_error", 422: "invalid_request_error",
          503: "server_busy", 500: "server_error", 502: "upstream_error"}


class APIError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or {}


def error_body(status: int, message: str, code: str | None = None,
               param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _TYPES.get(status, "invalid_request_error"),
                      "code": code, "param": param}}


def error_response(status: int, message: str, code: str | None = None,
                   param: str | None = None, headers: dict[str, str] | None = None
                   ) -> JSONResponse:
    return JSONResponse(error_body(status, message, code, param), status_code=status,
                        headers=headers)


def from_engine(exc: Exception) -> APIError:
    """The HTTP error for an engine exception (anything unexpected is a 500)."""
    if isinstance(exc, Busy):
        return APIError(503, str(exc), "model_busy", headers={"Retry-After":
                                                              str(exc.retry_after)})
    if isinstance(exc, NotFoundError):
        return APIError(404, str(exc), "not_found")
    if isinstance(exc, UnsafePathError):
        return APIError(400, str(exc), "invalid_name")
    if isinstance(exc, ReadOnlyError):
        return APIError(403, str(exc), "read_only")
    if isinstance(exc, ConflictError):
        return APIError(409, "the skill changed on disk meanwhile; read it again and retry",
                        "conflict")
    if isinstance(exc, ModelError):
        return APIError(502, str(exc), "model_error")
    if isinstance(exc, TimeoutError):
        return APIError(503, str(exc) or "the model is busy", "model_busy",
                        headers={"Retry-After": "5"})
    if isinstance(exc, SkillDeskError):
        return APIError(400, str(exc), "invalid_request")
    return APIError(500, f"internal error ({type(exc).__name__}); see the server log",
                    "internal_error")


def _is_type_tag(part: object) -> bool:
    """pydantic puts the union member tried into ``loc`` ("str", "list[ContentPart]")."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "list", "dict")
                                      or "[" in part or "-" in part)


def _validation_message(exc: RequestValidationError) -> tuple[str, str, str | None]:
    errors = exc.errors()
    first = errors[0] if errors else {}
    kind = first.get("type", "")
    if kind == "json_invalid":
        ctx = first.get("ctx") or {}
        return (f"the request body is not valid JSON ({ctx.get('error', 'parse error')})",
                "invalid_json", None)
    loc = [str(p) for p in first.get("loc", ()) if p != "body" and not _is_type_tag(p)]
    param = ".".join(loc) or None
    if kind == "missing" and not loc:
        return "the request needs a JSON body", "invalid_json", None
    msg = str(first.get("msg", "invalid request"))
    if kind == "model_attributes_type" or (kind.endswith("_type") and not loc):
        return "the request body must be a JSON object", "invalid_json", None
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return (f"{param}: {msg}{more}" if param else msg + more), "invalid_value", param


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.code, exc.param, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, code, param = _validation_message(exc)
        ctype = request.headers.get("content-type", "")
        if code == "invalid_json" and ctype and "json" not in ctype.lower():
            message = f"send the body as JSON with Content-Type: application/json (not {ctype})"
        return error_response(400, message, code, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = "no such endpoint; the API is described at /openapi.json"
        return error_response(exc.status_code, message, None, None,
                              dict(exc.headers or {}))

    @app.exception_handler(SkillDeskError)
    async def _engine(_request: Request, exc: SkillDeskError) -> JSONResponse:
        err = from_engine(exc)
        return error_response(err.status, err.message, err.code, None, err.headers)


# --- authentication ----------------------------------------------------------------------------
def user_for(config: ServerConfig, authorization: str | None) -> str:
    """The user a request acts as. With keys configured, the key decides; else the local user.

    Every configured key is compared (constant-time, no early exit), so timing tells nothing
    about which key or how much of it matched.
    """
    if not config.auth:
        return config.user
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    found: str | None = None
    if scheme.lower() == "bearer" and token:
        given = token.encode("utf-8", "surrogatepass")
        for key, user in config.api_keys.items():
            if hmac.compare_digest(given, key.encode("utf-8")) and found is None:
                found = user
    if found is None:
        raise APIError(401, "missing or invalid API key; send 'Authorization: Bearer <key>'",
                       "invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
    return found


# --- request size ------------------------------------------------------------------------------
class BodyLimit:
    """ASGI middleware: a body over ``limit`` bytes is answered 413 before any handler runs.

    The body is read (never more than ``limit`` bytes kept) and handed to the app unchanged; a
    bigger one is read away and discarded (so the client gets the answer, not a reset), unless
    it declares more than ``DRAIN_MAX`` bytes: then the connection is closed at once.
    """

    DRAIN_MAX = 64 * 1024 * 1024

    def __init__(self, app: Any, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                await self._reject(send, 400, "Content-Length is not a number", "invalid_length")
                return
            if length > self.limit:
                if length <= self.DRAIN_MAX:  # read it away, so the client sees our answer
                    await self._drain(receive)
                await self._too_big(send)
                return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.limit:
                if message.get("more_body", False):
                    await self._drain(receive, size)
                await self._too_big(send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        whole = b"".join(chunks)
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": whole, "more_body": False}
            return await receive()  # after the body: wait for the disconnect

        await self.app(scope, replay, send)

    async def _drain(self, receive: Any, size: int = 0) -> None:
        """Discard the rest of a refused body (up to DRAIN_MAX): closing a socket with unread
        data makes the kernel send a reset, and the client would never see the 413."""
        while size <= self.DRAIN_MAX:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    async def _too_big(self, send: Any) -> None:
        await self._reject(send, 413, f"the request body is larger than {self.limit} bytes",
                           "request_too_large")

    @staticmethod
    async def _reject(send: Any, status: int, message: str, code: str) -> None:
        data = json.dumps(error_body(status, message, code)).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(data)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": data})
