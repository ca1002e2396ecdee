"""The one interface every chat model backend implements (local llama.cpp, OpenAI-compatible HTTP).

Messages are OpenAI-style dicts: ``{"role": "system"|"user"|"assistant", "content": str}``.
Backends are NOT thread-safe: exactly one :class:`~engine.llm.worker.ModelWorker` owns each
backend instance and serialises every call to it (llama.cpp contexts must never run two
inferences at once; two busy OpenMP pools on 2 cores slow generation ~20x).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, str]


class CancelToken:
    """Set by the UI's Stop; a backend checks it between tokens and stops within one token.

    A backend that blocks outside its token loop (an HTTP read) registers a callback with
    :meth:`add_callback` that unblocks it (closes the socket); callbacks run once, on the
    cancelling thread, or at once when the token is already cancelled.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []

    def cancel(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            with contextlib.suppress(Exception):  # a callback must never break Stop
                fn()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until cancelled or ``timeout`` passes; True when cancelled (used for backoff)."""
        return self._event.wait(timeout)

    def add_callback(self, fn: Callable[[], object]) -> Callable[[], None]:
        """Run ``fn`` on cancel (now, if already cancelled). Returns a function that unregisters it."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)

                def remove() -> None:
                    with self._lock, contextlib.suppress(ValueError):
                        self._callbacks.remove(fn)

                return remove
        with contextlib.suppress(Exception):
            fn()
        return lambda: None


@dataclass
class GenParams:
    """Sampling and length settings for one request (None = the model's registry default)."""

    max_tokens: int | None = 512
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    repeat_penalty: float | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class ChatResult:
    """What a finished (or stopped) generation produced."""

    text: str
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"  # "stop" | "length" | "cancelled"
    ttft_s: float | None = None  # time to first token
    decode_tps: float | None = None  # generated tokens / decode seconds
    trimmed_messages: int = 0  # history turns dropped to fit the context window
    cached_tokens: int = 0  # prompt tokens reused from the KV cache (shared prefix), local only


def decode_rate(n_tokens: int, t_first: float | None, t_last: float | None) -> float | None:
    """Tokens per second after the first one (the first token's time is TTFT, not decode)."""
    if t_first is None or t_last is None or n_tokens < 2 or t_last <= t_first:
        return None
    return (n_tokens - 1) / (t_last - t_first)


class ChatFromStream:
    """``chat()`` for a backend whose ``stream_chat`` leaves its result in ``last_result``."""

    last_result: ChatResult | None = None

    def chat(self, messages: list[Message], params: GenParams | None = None,
             cancel: CancelToken | None = None) -> ChatResult:
        for _ in self.stream_chat(messages, params, cancel):  # type: ignore[attr-defined]
            pass
        assert self.last_result is not None
        return self.last_result


@runtime_checkable
class LLMBackend(Protocol):
    """A chat model. Implementations: ``LlamaCppBackend`` and ``OpenAICompatBackend``."""

    name: str  # human-readable model name for the status bar

    def stream_chat(self, messages: list[Message], params: GenParams | None = None,
                    cancel: CancelToken | None = None) -> Iterator[str]:
        """Yield text chunks as they are decoded. Stops early when ``cancel`` is set.

        After the iterator is exhausted, ``last_result`` holds the :class:`ChatResult`.
        """
        ...

    def chat(self, messages: list[Message], params: GenParams | None = None,
             cancel: CancelToken | None = None) -> ChatResult:
        """The whole answer at once."""
        ...

    def structured(self, messages: list[Message], schema: dict[str, Any],
                   params: GenParams | None = None,
                   cancel: CancelToken | None = None) -> dict[str, Any]:
        """A JSON object matching ``schema`` (constrained decoding where the backend has it).

        Always validated against the schema; raises ``StructuredOutputError`` otherwise.
        """
        ...

    def count_tokens(self, text: str) -> int: ...

    @property
    def context_length(self) -> int: ...

    def close(self) -> None: ...
