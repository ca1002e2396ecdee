"""Work off the GUI thread: one-shot tasks in a QThreadPool, results back as Qt signals.

``run_async(fn, on_done, on_error)`` runs ``fn()`` in the pool; the callbacks run on the GUI
thread (queued signal delivery). Exceptions become a one-line message: ``SkillDeskError`` as
its text, anything else as ``Type: text`` (a bug, also logged).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

from engine.errors import SkillDeskError

log = logging.getLogger("skilldesk.desktop")

_live: set[Task] = set()
_live_lock = threading.Lock()


def error_text(exc: BaseException) -> str:
    if isinstance(exc, SkillDeskError):
        return str(exc)
    log.exception("unexpected error in a background task", exc_info=exc)
    return f"{type(exc).__name__}: {exc}"


class _Signals(QObject):
    done = Signal(object)
    failed = Signal(str)


class Task(QRunnable):
    """One call of ``fn`` in a pool thread."""

    def __init__(self, fn: Callable[[], Any]):
        super().__init__()
        self.fn = fn
        self.signals = _Signals()
        self.setAutoDelete(False)

    def run(self) -> None:  # pool thread
        try:
            result = self.fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the GUI, never swallowed
            self.signals.failed.emit(error_text(exc))
        else:
            self.signals.done.emit(result)
        finally:
            with _live_lock:
                _live.discard(self)


def pool() -> QThreadPool:
    return QThreadPool.globalInstance()


def run_async(fn: Callable[[], Any], on_done: Callable[[Any], Any] | None = None,
              on_error: Callable[[str], Any] | None = None,
              thread_pool: QThreadPool | None = None) -> Task:
    """Run ``fn`` in the pool; ``on_done(result)`` / ``on_error(message)`` on the GUI thread."""
    task = Task(fn)
    if on_done is not None:
        task.signals.done.connect(on_done)
    if on_error is not None:
        task.signals.failed.connect(on_error)
    with _live_lock:
        _live.add(task)
    (thread_pool or pool()).start(task)
    return task

