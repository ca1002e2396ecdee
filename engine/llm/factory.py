"""Building the configured backend (and the worker that owns it) from settings.

``make_backend`` picks ``local`` (llama-cpp-python on a resolved GGUF) or ``openai`` (an
OpenAI-compatible server) from :class:`~engine.settings.ModelSettings`; ``make_worker`` wraps it
in a :class:`~engine.llm.worker.ModelWorker` that loads the model on its own thread, so a UI
never blocks on loading.
"""

from __future__ import annotations

import os
from typing import Any

from engine.errors import ModelError
from engine.llm.base import LLMBackend
from engine.llm.registry import resolve
from engine.llm.worker import ModelWorker
from engine.settings import ModelSettings


def make_backend(settings: ModelSettings | None = None, model: str | None = None,
                 **overrides: Any) -> LLMBackend:
    """The backend ``settings`` describe. ``model`` (a reference, see ``registry.resolve``)
    overrides ``$SKILLDESK_MODEL``, which overrides ``settings.model``. ``overrides`` go to the
    backend's constructor (``n_threads``, ``n_ctx``, ``timeout``...)."""
    s = settings or ModelSettings()
    kind = (s.backend or "local").lower()
    if kind == "local":
        from engine.llm.llama_backend import LlamaCppBackend

        spec = resolve(model or os.environ.get("SKILLDESK_MODEL") or s.model)
        kwargs: dict[str, Any] = {"n_threads": s.n_threads or None, "n_ctx": s.n_ctx or None}
        kwargs.update(overrides)
        backend = LlamaCppBackend(spec, **kwargs)
        if s.temperature is not None:
            backend.spec.sampling["temperature"] = s.temperature
        return backend
    if kind == "openai":
        from engine.llm.openai_backend import OpenAICompatBackend

        kwargs = {"base_url": s.base_url, "model": s.api_model or model or "",
                  "api_key": s.api_key}
        kwargs.update(overrides)
        return OpenAICompatBackend(**kwargs)
    raise ModelError(f"unknown model backend '{s.backend}'; use 'local' or 'openai'")


def make_worker(settings: ModelSettings | None = None, model: str | None = None,
                **overrides: Any) -> ModelWorker:
    """A worker that builds the backend on its own thread (``worker.wait_ready()`` to block)."""
    return ModelWorker(lambda: make_backend(settings, model, **overrides),
                       name=(settings.backend if settings else "local"))
