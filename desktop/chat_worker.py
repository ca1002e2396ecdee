"""The long-lived chat thread: opens the engine, runs each turn, streams its tokens as signals.

All model and index work of the foreground happens here, never on the GUI thread. The engine's
own ``ModelWorker`` owns the ``Llama`` instance; this thread drives a turn (``desk.chat(...,
stream=True)``) and forwards every chunk. Stop is thread-safe: :meth:`ChatWorker.cancel` is
called directly from the GUI thread and cancels the running stream within one token.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from .workers import error_text

log = logging.getLogger(__name__)


def turn_info(result: Any, elapsed_s: float) -> dict[str, Any]:
    """The parts of a TurnResult the UI shows and the chat history keeps."""
    return {**result.info(), "elapsed_s": round(elapsed_s, 3)}


class ChatWorker(QObject):
    """Lives in its own QThread; slots run there, in the order they were requested."""

    opened = Signal(object)  # the engine (SkillDesk)
    open_failed = Signal(str)
    model_ready = Signal(str)  # the model's name
    model_failed = Signal(str)
    chunk = Signal(int, str)  # request id, text
    finished = Signal(int, dict)  # request id, turn info
    failed = Signal(int, str)  # request id, message

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._streams: dict[int, Any] = {}
        self._cancelled: set[int] = set()
        self.desk: Any = None

    # -------------------------------------------------------------- slots (chat thread)
    @Slot(object)
    def open_engine(self, opener: Any) -> None:
        """``opener()`` builds the engine (index load, watcher); the old one is closed first."""
        old, self.desk = self.desk, None
        if old is not None:
            try:
                old.close()
            except Exception as exc:  # noqa: BLE001 - closing must not stop a reopen
                error_text(exc)
        try:
            self.desk = opener()
        except Exception as exc:  # noqa: BLE001 - shown to the user
            self.open_failed.emit(error_text(exc))
            return
        self.opened.emit(self.desk)
        self.load_model()

    def load_model(self) -> None:
        """Load the model now (on the engine's model thread) so the first answer is quick and
        a missing or broken model is reported before the user types."""
        try:
            backend = self.desk.worker.wait_ready()
        except Exception as exc:  # noqa: BLE001 - shown to the user, never a stand-in model
            self.model_failed.emit(error_text(exc))
            return
        self.model_ready.emit(str(getattr(backend, "name", "") or ""))
        try:  # the self-filter's fixed prompt, evaluated while the user types (background)
            self.desk.warm_up()
        except Exception as exc:  # noqa: BLE001 - a missed warm-up only costs the first turn
            log.info("warm-up skipped: %s", exc)

    @Slot(int, object)
    def run_turn(self, rid: int, request: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        with self._lock:
            if rid in self._cancelled:
                self._cancelled.discard(rid)
                self.finished.emit(rid, {"text": "", "finish_reason": "cancelled",
                                         "injected": []})
                return
        if self.desk is None:
            self.failed.emit(rid, "The skill engine is not open (see the message above); "
                                  "check Settings → Skills.")
            return
        try:
            kwargs: dict[str, Any] = {"stream": True, "learn": request.get("learn", True)}
            if request.get("max_tokens"):
                from engine.llm.base import GenParams

                kwargs["params"] = GenParams(max_tokens=int(request["max_tokens"]))
            stream = self.desk.chat(request["messages"], **kwargs)
            with self._lock:
                self._streams[rid] = stream
                cancel_now = rid in self._cancelled
            if cancel_now:
                stream.cancel()
            for piece in stream:
                if piece:
                    self.chunk.emit(rid, piece)
            result = stream.result
        except Exception as exc:  # noqa: BLE001 - shown in the answer's bubble
            self.failed.emit(rid, error_text(exc))
            return
        finally:
            with self._lock:
                self._streams.pop(rid, None)
                self._cancelled.discard(rid)
        info = turn_info(result, time.perf_counter() - t0)
        try:  # the "Skills used" line marks always-on skills as such
            always = {s.id for s in self.desk.always_on()} if self.desk is not None else set()
        except Exception:  # noqa: BLE001 - a display detail must not cost the answer
            always = set()
        for s in info["injected"]:
            if s.get("id") in always:
                s["always"] = True
        self.finished.emit(rid, info)

    @Slot()
    def shutdown(self) -> None:
        desk, self.desk = self.desk, None
        if desk is not None:
            try:
                desk.close()
            except Exception as exc:  # noqa: BLE001
                error_text(exc)

    # -------------------------------------------------------------- any thread
    def prepare(self, messages: list[dict[str, str]]) -> None:
        """Decide the skills of the message being typed (``SkillDesk.prepare``: on its own
        thread, at a priority that never delays an answer or restarts learning)."""
        desk = self.desk
        if desk is None or not desk.config.retrieval.prepare:
            return
        try:
            desk.prepare(messages)
        except Exception as exc:  # noqa: BLE001 - a missed guess only costs the time it saves
            log.info("prepare skipped: %s", exc)

    def cancel(self, rid: int) -> None:
        """Stop request ``rid`` (running: within one token; queued: it never starts)."""
        with self._lock:
            self._cancelled.add(rid)
            stream = self._streams.get(rid)
        if stream is not None:
            stream.cancel()

    def cancel_all(self) -> None:
        """Stop every request that runs now."""
        with self._lock:
            rids = list(self._streams)
        for rid in rids:
            self.cancel(rid)


_stuck: list[Any] = []


class ChatThread(QObject):
    """Owns the QThread and the worker; requests go through queued signals."""

    _open = Signal(object)
    _run = Signal(int, object)
    _shutdown = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.thread = QThread()
        self.thread.setObjectName("skilldesk-chat")
        self.worker = ChatWorker()
        self.worker.moveToThread(self.thread)
        self._open.connect(self.worker.open_engine)
        self._run.connect(self.worker.run_turn)
        self._shutdown.connect(self.worker.shutdown)
        self._next = 0
        self.max_tokens: int | None = None  # None: the engine's default answer length
        self.thread.start()

    def open_engine(self, opener: Any) -> None:
        self._open.emit(opener)

    def submit(self, messages: list[dict[str, str]], learn: bool = True) -> int:
        self._next += 1
        self._run.emit(self._next, {"messages": messages, "learn": learn,
                                    "max_tokens": self.max_tokens})
        return self._next

    def cancel(self, rid: int) -> None:
        self.worker.cancel(rid)

    def stop(self, timeout_ms: int = 15000) -> None:
        """Cancel what runs, close the engine on its thread, and end the thread."""
        self.worker.cancel_all()
        self._shutdown.emit()
        self.thread.quit()
        if not self.thread.wait(timeout_ms):
            # Still inside a long engine call (an index build): never destroy a running
            # QThread; keep it referenced until the process ends.
            _stuck.append((self.thread, self.worker))
