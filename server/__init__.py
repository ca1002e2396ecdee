"""``skilldesk serve``: an OpenAI-compatible HTTP proxy in front of a SkillDesk (Qt-free).

- :mod:`.app`: ``/v1/chat/completions`` (SSE and not), ``/v1/embeddings``, ``/v1/models``,
  ``/health``; :mod:`.skills`: ``/v1/skills`` list / get / search / history / revert.
- :mod:`.config`: bind address, API keys (key -> user), limits; :mod:`.errors`: the OpenAI
  error shape, the body-size limit, constant-time key checks; :mod:`.gate`: bounded waiting for
  the model (503 + Retry-After); :mod:`.desks`: one desk per configured user;
  :mod:`.runner`: uvicorn in the foreground or on a thread.

Importing this package needs FastAPI and uvicorn (pinned in pyproject.toml); the rest of the
engine never imports it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"create_app": "app", "DEFAULT_PORT": "config", "ServerConfig": "config",
            "load_keys": "config", "Desks": "desks", "ServerThread": "runner", "serve": "runner"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Lazy exports: ``skilldesk --help`` must not pay for importing FastAPI."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
