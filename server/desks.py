"""The desks the proxy serves: one :class:`~engine.SkillDesk` per configured user, one bank.

Users are known when the server starts (the single local user, or the users of the key
mapping), so every desk is opened up front and a request can never make the server open a
desk (or a folder) for a name it chose. This module is also the one place that adapts the
engine's API to HTTP: the turn call, the model's name and the embedder.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from engine.desk import SkillDesk
from engine.errors import NotFoundError
from engine.llm.base import GenParams
from engine.settings import Settings


class Desks:
    def __init__(self, bank_dir: str | os.PathLike, users: list[str],
                 settings: Settings | None = None,
                 opener: Callable[[str], SkillDesk] | None = None, *, watch: bool = True,
                 preload: bool = True):
        if opener is None:

            def opener(user: str) -> SkillDesk:
                return SkillDesk.open(bank_dir, user=user, config=settings, watch=watch)

        self.settings = settings or Settings()
        self._desks: dict[str, SkillDesk] = {}
        self._lock = threading.Lock()
        try:
            for user in users:
                self._desks[user] = opener(user)
        except BaseException:
            self.close()
            raise
        self.first = self._desks[users[0]]
        self._worker: Any = None
        if preload:
            self.model_worker()

    def model_worker(self) -> Any:
        """The one model worker, shared by every user's desk (the first desk builds it, and it
        starts loading on its own thread; the others borrow it and do not close it)."""
        with self._lock:
            if self._worker is None:
                worker = self.first.worker
                for desk in self._desks.values():
                    if desk is not self.first:
                        desk.worker = worker
                self._worker = worker
            return self._worker

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until the model is loaded (raises its load error, e.g. a ModelError)."""
        self.model_worker().wait_ready(timeout)

    # --- lookup -----------------------------------------------------------------------------
    def get(self, user: str) -> Any:
        try:
            return self._desks[user]
        except KeyError:  # only reachable through a bug: users come from the config
            raise NotFoundError(f"no desk for user {user!r}") from None

    @property
    def users(self) -> list[str]:
        return list(self._desks)

    # --- the model --------------------------------------------------------------------------
    def status(self) -> str:
        """``ok`` (loaded, or loads on first use), ``loading``, or ``error``."""
        worker = self._worker
        if worker is None:
            return "ok"
        if not worker.ready.is_set():
            return "loading"
        try:
            worker.wait_ready(0)
        except Exception:  # noqa: BLE001 - the load error is reported on every request
            return "error"
        return "ok"

    @property
    def model_name(self) -> str:
        backend = getattr(self._worker, "backend", None)
        spec = getattr(backend, "spec", None)
        name = getattr(spec, "key", None) or getattr(backend, "model", None) or getattr(
            backend, "name", None)
        m = self.settings.model
        return str(name or m.api_model or m.model or "skilldesk")

    def chat(self, desk: SkillDesk, messages: list[dict[str, str]], *, params: GenParams,
             learn: bool, stream: bool) -> Any:
        """One turn: a TurnResult, or a TurnStream when ``stream``."""
        self.model_worker()
        return desk.chat(messages, stream=stream, learn=learn, params=params)

    # --- embeddings -------------------------------------------------------------------------
    @property
    def embedder(self) -> Any:
        return self.first.index.embedder

    @property
    def embedder_name(self) -> str:
        return str(getattr(self.embedder, "name", "embedder"))

    def embed(self, texts: list[str]) -> tuple[Any, int]:
        """Unit vectors for ``texts`` (an array, one row each) and how many tokens they held."""
        emb = self.embedder
        return emb.encode(list(texts)), _count_tokens(emb, texts)

    def close(self) -> None:
        for desk in list(self._desks.values()):
            try:
                desk.close()
            except Exception:  # noqa: BLE001 - closing the rest matters more
                pass


def _count_tokens(embedder: Any, texts: list[str]) -> int:
    """The embedder's own token count when it has a tokenizer, else words and punctuation."""
    model = getattr(embedder, "_model", None)
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None:
        try:
            return sum(len(ids) for ids in tokenizer(list(texts))["input_ids"])
        except Exception:  # noqa: BLE001 - fall back to the estimate
            pass
    import re

    return sum(len(re.findall(r"\w+|[^\w\s]", t)) for t in texts)
