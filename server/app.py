"""The FastAPI application: OpenAI-compatible chat, embeddings, models and health.

A chat request is turned into one SkillDesk turn (``desk.chat``): retrieval and skill injection
on the way in, background evolution on the way out (unless the server runs with ``--no-learn``
or the request says ``{"skilldesk": {"learn": false}}``). Streaming answers are Server-Sent
Events in OpenAI's ``chat.completion.chunk`` format, ending with ``data: [DONE]``.

Requests wait for the model at the :class:`~server.gate.ModelGate` (on the event loop,
holding no thread) and get a 503 with ``Retry-After`` when it stays busy. Skill endpoints live in
:mod:`server.skills`.
"""

from __future__ import annotations

import base64
import functools
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import numpy as np
from fastapi import APIRouter, Depends, FastAPI, Header
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from engine import __version__
from engine.llm.base import GenParams
from server.config import ServerConfig
from server.desks import Desks
from server.errors import APIError, BodyLimit, error_body, from_engine, install_handlers, user_for
from server.gate import Busy, ModelGate
from server.schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    EmbeddingList,
    EmbeddingRequest,
    ErrorResponse,
    Health,
    ModelList,
)
from server.skills import plain_messages, skills_router

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": why} for code, why in [
        (400, "malformed JSON or a bad field"), (401, "missing or wrong API key"),
        (413, "request body too large"), (503, "the model stayed busy (see Retry-After)")]}
_MAX_INPUT_CHARS = 32_000
_DONE = object()
_COMPACT = (",", ":")

DESCRIPTION = """\
An OpenAI-compatible endpoint in front of SkillDesk: every chat turn retrieves the skills that
apply, injects them into the prompt, and (in the background) learns new skills from the turn.
The skill endpoints read and revert the SKILL.md files of the caller's bank.

Identity comes only from the API key (or the single local user); the OpenAI `user` field is
accepted and ignored.
"""


def create_app(desks: Desks, config: ServerConfig) -> FastAPI:
    app = FastAPI(title="SkillDesk proxy", version=__version__, description=DESCRIPTION)
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    install_handlers(app)
    started = int(time.time())
    gate = ModelGate(1, config.queue_wait_s, config.max_waiting)
    embed_gate = ModelGate(1, config.queue_wait_s, config.max_waiting)
    app.state.desks, app.state.config, app.state.gate = desks, config, gate

    def current_user(authorization: str | None = Header(None, include_in_schema=False)) -> str:
        return user_for(config, authorization)

    api = APIRouter(responses=_ERRORS)

    @app.get("/health", response_model=Health, tags=["server"])
    async def health() -> Health:
        status = desks.status()
        return Health(status=status, version=__version__, model=desks.model_name,
                      waiting=gate.waiting, busy=gate.busy)

    @api.get("/v1/models", response_model=ModelList, tags=["openai"])
    async def models(_user: str = Depends(current_user)) -> dict:
        return {"object": "list", "data": [{"id": desks.model_name, "object": "model",
                                            "created": started, "owned_by": "skilldesk"}]}

    @api.post("/v1/chat/completions", response_model=ChatCompletion, tags=["openai"],
              responses={200: {"content": {"text/event-stream": {}},
                               "description": "a completion, or SSE chunks when stream=true"}})
    async def chat_completions(req: ChatCompletionRequest, user: str = Depends(current_user)):
        messages, params, learn = prepare_chat(req, config)
        desk = desks.get(user)
        slot = await _admit(gate)
        run = functools.partial(desks.chat, desk, messages, params=params, learn=learn,
                                stream=req.stream)
        try:
            turn = await anyio.to_thread.run_sync(run)
        except Exception as exc:
            slot.release()
            raise from_engine(exc) from exc
        meta = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": desks.model_name}
        if not req.stream:
            slot.release()
            return completion_body(turn, meta, learn)
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return StreamingResponse(
            sse_events(turn, meta, learn, include_usage, slot.release),
            media_type="text/event-stream", background=BackgroundTask(slot.release),
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @api.post("/v1/embeddings", response_model=EmbeddingList, tags=["openai"])
    async def embeddings(req: EmbeddingRequest, _user: str = Depends(current_user)) -> dict:
        inputs = [req.input] if isinstance(req.input, str) else list(req.input)
        if not inputs or len(inputs) > config.max_embedding_inputs:
            raise APIError(400, f"input must hold 1 to {config.max_embedding_inputs} strings",
                           "invalid_value", "input")
        for i, text in enumerate(inputs):
            if not text or len(text) > _MAX_INPUT_CHARS:
                raise APIError(400, f"input[{i}] must be a non-empty string of at most "
                               f"{_MAX_INPUT_CHARS} characters", "invalid_value", "input")
        slot = await _admit(embed_gate)
        try:
            vectors, tokens = await anyio.to_thread.run_sync(desks.embed, inputs)
        except Exception as exc:
            raise from_engine(exc) from exc
        finally:
            slot.release()
        if req.encoding_format == "base64":
            vectors = [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()
                       for v in vectors]
        else:
            vectors = [[float(x) for x in v] for v in vectors]
        return {"object": "list", "model": desks.embedder_name,
                "data": [{"object": "embedding", "index": i, "embedding": v}
                         for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    app.include_router(api)
    app.include_router(skills_router(desks, current_user, config.learn), responses=_ERRORS)
    return app


async def _admit(gate: ModelGate):
    try:
        return await gate.acquire()
    except Busy as exc:
        raise from_engine(exc) from None


# --- chat helpers ------------------------------------------------------------------------------
def prepare_chat(req: ChatCompletionRequest, config: ServerConfig
                 ) -> tuple[list[dict[str, str]], GenParams, bool]:
    """Messages, generation parameters and the learn flag of a request (APIError if unusable)."""
    if req.tools:
        raise APIError(400, "tools / function calling are not supported by this server",
                       "unsupported_parameter", "tools")
    if req.logprobs:
        raise APIError(400, "logprobs are not supported", "unsupported_parameter", "logprobs")
    if req.response_format and req.response_format.get("type") not in (None, "text"):
        raise APIError(400, "only response_format {'type': 'text'} is supported",
                       "unsupported_parameter", "response_format")
    messages = plain_messages(req.messages)
    if messages[-1]["role"] != "user" or not messages[-1]["content"].strip():
        raise APIError(400, "the last message must be a non-empty 'user' message",
                       "invalid_value", "messages")
    max_tokens = req.max_completion_tokens or req.max_tokens or config.default_max_tokens
    if max_tokens > config.max_tokens_cap:
        raise APIError(400, f"max_tokens must be at most {config.max_tokens_cap}",
                       "invalid_value", "max_tokens")
    params = GenParams(max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p,
                       seed=req.seed, stop=list(req.stop or []))
    learn = config.learn and not (req.skilldesk and req.skilldesk.learn is False)
    return messages, params, learn


def _finish(reason: str | None) -> str:
    return reason if reason in ("stop", "length") else "stop"


def turn_info(result: Any, learn: bool) -> dict[str, Any]:
    info = result.info()
    return {"query": info["query"], "rewritten": info["rewritten"], "learn": learn,
            "injected": [{k: s[k] for k in ("id", "name", "title", "version", "score")}
                         for s in info["injected"]],
            "timings": info["timings"]}


def usage_body(result: Any) -> dict[str, int]:
    u = result.usage
    return {"prompt_tokens": int(u.prompt_tokens), "completion_tokens": int(u.completion_tokens),
            "total_tokens": int(u.prompt_tokens) + int(u.completion_tokens)}


def completion_body(result: Any, meta: dict[str, Any], learn: bool) -> dict[str, Any]:
    return {**meta, "object": "chat.completion", "system_fingerprint": None,
            "choices": [{"index": 0, "logprobs": None,
                         "message": {"role": "assistant", "content": result.text,
                                     "refusal": None},
                         "finish_reason": _finish(result.finish_reason)}],
            "usage": usage_body(result), "skilldesk": turn_info(result, learn)}


def _chunk(meta: dict[str, Any], delta: dict[str, Any], finish: str | None = None,
           **extra: Any) -> str:
    body = {**meta, "object": "chat.completion.chunk", "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None,
                         "finish_reason": finish}], **extra}
    return f"data: {json.dumps(body, ensure_ascii=False, separators=_COMPACT)}\n\n"


async def sse_events(stream: Any, meta: dict[str, Any], learn: bool, include_usage: bool,
                     release: Any) -> AsyncIterator[str]:
    """OpenAI SSE chunks for a TurnStream: role, content deltas, finish, [usage], [DONE]."""
    it = iter(stream)
    finished = False
    try:
        yield _chunk(meta, {"role": "assistant", "content": ""})
        while True:
            piece = await anyio.to_thread.run_sync(next, it, _DONE)
            if piece is _DONE:
                break
            if piece:
                yield _chunk(meta, {"content": piece})
        finished = True
        result = stream.result
        yield _chunk(meta, {}, _finish(result.finish_reason), skilldesk=turn_info(result, learn))
        if include_usage:
            body = {**meta, "object": "chat.completion.chunk", "system_fingerprint": None,
                    "choices": [], "usage": usage_body(result)}
            yield f"data: {json.dumps(body, separators=_COMPACT)}\n\n"
    except Exception as exc:  # headers are sent: report in-band, as OpenAI does
        finished = True
        err = from_engine(exc)
        yield f"data: {json.dumps(error_body(err.status, err.message, err.code))}\n\n"
    finally:
        if not finished:  # the client went away: stop the model within a token
            cancel = getattr(stream, "cancel", None)
            if cancel is not None:
                cancel()
        release()
    yield "data: [DONE]\n\n"
