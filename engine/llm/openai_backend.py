"""The remote backend: any OpenAI-compatible chat server, with the standard library only.

Works with llama.cpp's server, llama-cpp-python's ``llama_cpp.server``, vLLM, Ollama and LM
Studio (``base_url`` ends in ``/v1``). Streaming reads Server-Sent Events line by line.
Cancellation closes the socket from the cancelling thread, so a Stop takes effect even while
the read is blocked waiting for the next token. Connection failures and HTTP 429/5xx are
retried with exponential backoff before any token has streamed; an unreachable server is a
``ModelError`` that says so.

Structured calls ask for ``response_format={"type": "json_schema", ...}``; a server that
rejects it (HTTP 400/422, as llama-cpp-python's does) is asked again with
``{"type": "json_object", "schema": ...}`` (llama.cpp's grammar-constrained form), and the mode
that worked is remembered. The answer is always validated with jsonschema.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

from engine.errors import Cancelled, ModelError, StructuredOutputError
from engine.llm.base import (
    CancelToken,
    ChatFromStream,
    ChatResult,
    GenParams,
    Message,
    Usage,
    decode_rate,
)
from engine.llm.structured import check_schema, parse_and_validate

RETRY_STATUS = {429, 500, 502, 503, 504}


class _HTTPStatusError(ModelError):
    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


class OpenAICompatBackend(ChatFromStream):
    """Chat through ``POST {base_url}/chat/completions``; implements ``LLMBackend``."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080/v1", model: str = "",
                 api_key: str = "", timeout: float = 120.0, connect_timeout: float = 5.0,
                 retries: int = 3, backoff: float = 0.5, n_ctx: int = 4096,
                 structured_mode: str = "auto"):
        parts = urllib.parse.urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ModelError(f"'{base_url}' is not an http(s) URL; use e.g. "
                             f"http://127.0.0.1:8080/v1")
        self.base_url = base_url.rstrip("/")
        self._parts = parts
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retries = max(0, int(retries))
        self.backoff = backoff
        self.n_ctx = n_ctx
        self.structured_mode = structured_mode  # "auto" | "json_schema" | "json_object"
        self.name = f"{model or 'model'} @ {parts.netloc}"
        self.last_result: ChatResult | None = None

    # --- HTTP -------------------------------------------------------------------------------
    def _connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._parts.scheme == "https" else \
            http.client.HTTPConnection
        conn = cls(self._parts.hostname, self._parts.port, timeout=self.connect_timeout)
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(self.timeout)
        return conn

    def _headers(self, stream: bool) -> dict[str, str]:
        h = {"Content-Type": "application/json",
             "Accept": "text/event-stream" if stream else "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _post(self, path: str, body: dict[str, Any], stream: bool, cancel: CancelToken | None,
              retry_status: bool = True,
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, socket.socket]:
        """POST with retries; returns the connection, a 2xx response and its socket.

        Connection failures are always retried; HTTP 429/5xx only with ``retry_status``.
        """
        url_path = (self._parts.path or "") + path
        data = json.dumps(body).encode("utf-8")
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if cancel is not None and cancel.cancelled:
                raise Cancelled("the request was stopped")
            conn = None
            try:
                conn = self._connect()
                conn.request("POST", url_path, body=data, headers=self._headers(stream))
                sock = conn.sock  # getresponse() drops conn.sock when the server will close
                resp = conn.getresponse()
                if 200 <= resp.status < 300:
                    assert sock is not None
                    return conn, resp, sock
                detail = _error_detail(resp.read())
                conn.close()
                err = _HTTPStatusError(resp.status, f"{self.base_url}: the server answered HTTP "
                                                    f"{resp.status}: {detail}")
                if resp.status not in RETRY_STATUS or not retry_status:
                    raise err
                last = err
            except (ConnectionError, TimeoutError, OSError, http.client.HTTPException) as exc:
                if conn is not None:
                    conn.close()
                last = exc
            if attempt < self.retries:
                delay = self.backoff * (2 ** attempt)
                if cancel is not None and cancel.wait(delay):
                    raise Cancelled("the request was stopped")
                if cancel is None:
                    time.sleep(delay)
        if isinstance(last, ModelError):
            raise last
        reason = getattr(last, "strerror", None) or str(last) or type(last).__name__
        raise ModelError(f"cannot reach the model server at {self.base_url} ({reason}) after "
                         f"{self.retries + 1} tries; start it or check the URL in Settings")

    def _body(self, messages: list[Message], params: GenParams, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": messages, "stream": stream}
        if stream:  # real token counts from servers that report them (others ignore this)
            body["stream_options"] = {"include_usage": True}
        if self.model:
            body["model"] = self.model
        if params.max_tokens:
            body["max_tokens"] = params.max_tokens
        for key in ("temperature", "top_p", "seed", "top_k", "repeat_penalty"):
            value = getattr(params, key)
            if value is not None:  # top_k / repeat_penalty are llama.cpp/vLLM extensions
                body[key] = value
        if params.stop:
            body["stop"] = list(params.stop)
        return body

    # --- chat -------------------------------------------------------------------------------
    def stream_chat(self, messages: list[Message], params: GenParams | None = None,
                    cancel: CancelToken | None = None) -> Iterator[str]:
        return self._stream(messages, params or GenParams(), cancel)

    def _stream(self, messages: list[Message], params: GenParams,
                cancel: CancelToken | None) -> Iterator[str]:
        t0 = time.perf_counter()
        result = ChatResult(text="", finish_reason="stop")
        self.last_result = result
        conn, resp, sock = self._post("/chat/completions", self._body(messages, params, True),
                                      True, cancel)
        unhook = cancel.add_callback(lambda: _shutdown(sock)) if cancel is not None else None
        parts: list[str] = []
        n_chunks, t_first, t_last = 0, None, None
        try:
            for event in _sse_events(resp):
                if cancel is not None and cancel.cancelled:
                    break
                if event == "[DONE]":
                    break
                try:
                    payload = json.loads(event)
                except ValueError:
                    continue
                if isinstance(payload.get("error"), dict | str):
                    raise ModelError(f"{self.base_url}: {_error_detail(event.encode())}")
                usage = payload.get("usage")
                if isinstance(usage, dict):
                    result.usage = Usage(int(usage.get("prompt_tokens") or 0),
                                         int(usage.get("completion_tokens") or 0))
                for choice in payload.get("choices") or []:
                    text = (choice.get("delta") or {}).get("content") or ""
                    if choice.get("finish_reason"):
                        result.finish_reason = choice["finish_reason"]
                    if text:
                        t_last = time.perf_counter()
                        if t_first is None:
                            t_first = t_last
                            result.ttft_s = t_first - t0
                        n_chunks += 1
                        parts.append(text)
                        yield text
                if cancel is not None and cancel.cancelled:
                    break
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if not (cancel is not None and cancel.cancelled):
                raise ModelError(f"{self.base_url}: the stream broke off ({exc})") from exc
        except GeneratorExit:
            result.finish_reason = "cancelled"
            raise
        finally:
            if unhook is not None:
                unhook()
            resp.close()
            conn.close()
            result.text = "".join(parts)
            if cancel is not None and cancel.cancelled:
                result.finish_reason = "cancelled"
            if not result.usage.completion_tokens:
                result.usage.completion_tokens = n_chunks
            if not result.usage.prompt_tokens:  # the server did not say: estimate it
                result.usage.prompt_tokens = sum(
                    self.count_tokens(str(m.get("content") or "")) + 4 for m in messages)
            result.decode_tps = decode_rate(n_chunks, t_first, t_last)

    # --- structured -------------------------------------------------------------------------
    def _complete(self, body: dict[str, Any], cancel: CancelToken | None,
                  retry_status: bool = True) -> tuple[str, str]:
        conn, resp, sock = self._post("/chat/completions", body, False, cancel, retry_status)
        unhook = cancel.add_callback(lambda: _shutdown(sock)) if cancel is not None else None
        try:
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            if cancel is not None and cancel.cancelled:
                raise Cancelled("the structured call was stopped") from None
            raise ModelError(f"{self.base_url}: the answer broke off ({exc})") from exc
        finally:
            if unhook is not None:
                unhook()
            conn.close()
        if cancel is not None and cancel.cancelled:
            raise Cancelled("the structured call was stopped")
        try:
            choice = json.loads(raw)["choices"][0]
            return choice["message"].get("content") or "", choice.get("finish_reason") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ModelError(f"{self.base_url}: not an OpenAI chat completion answer") from exc

    def structured(self, messages: list[Message], schema: dict[str, Any],
                   params: GenParams | None = None,
                   cancel: CancelToken | None = None) -> dict[str, Any]:
        check_schema(schema)
        body = self._body(messages, params or GenParams(), False)
        formats = {
            "json_schema": {"type": "json_schema",
                            "json_schema": {"name": "answer", "schema": schema, "strict": True}},
            "json_object": {"type": "json_object", "schema": schema},
        }
        modes = ["json_schema", "json_object"] if self.structured_mode == "auto" \
            else [self.structured_mode]
        error: Exception | None = None
        for mode in modes:
            probing = mode != modes[-1]  # a failure here means "try the next format"
            try:
                text, finish = self._complete({**body, "response_format": formats[mode]}, cancel,
                                              retry_status=not probing)
            except _HTTPStatusError as exc:
                if probing and _format_rejected(exc):
                    error = exc
                    continue  # this server does not know the format: try the next one
                raise
            try:
                value = parse_and_validate(text, schema, finish)
            except StructuredOutputError as exc:
                error = exc
                continue
            self.structured_mode = mode  # remember what this server understands
            self.last_result = ChatResult(text=text, finish_reason=finish or "stop")
            return value
        raise StructuredOutputError(f"{self.name}: {error}")

    # --- the rest ---------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """An estimate (the OpenAI API has no tokenizer endpoint): ~4 characters a token."""
        return max(1, (len(text) + 3) // 4) if text else 0

    @property
    def context_length(self) -> int:
        return self.n_ctx

    def close(self) -> None:
        pass


def _format_rejected(exc: _HTTPStatusError) -> bool:
    """Whether an error answer means "unsupported response_format" (llama-cpp-python's server
    says so with HTTP 500, others with 400/422)."""
    text = str(exc).lower()
    return exc.status in (400, 415, 422) or ("response_format" in text or "json_schema" in text)


def _shutdown(sock: socket.socket) -> None:
    """Unblock a read on ``sock`` from another thread (cancellation)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _sse_events(resp: http.client.HTTPResponse) -> Iterator[str]:
    """The ``data`` payloads of a Server-Sent Events stream."""
    data: list[str] = []
    while True:
        line = resp.readline()
        if not line:
            break
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        if not text:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if text.startswith(":"):
            continue  # a comment / keep-alive
        field, _, value = text.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def _error_detail(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        payload = json.loads(text)
    except ValueError:
        return text[:300] or "(no details)"
    err = payload.get("error", payload) if isinstance(payload, dict) else payload
    if isinstance(err, dict):
        msg = err.get("message") or err.get("detail") or json.dumps(err)[:300]
    else:
        msg = str(err)
    return str(msg)[:300]
