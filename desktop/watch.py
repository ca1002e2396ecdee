"""Hand edits on disk → one Qt signal on the GUI thread.

The engine's Qt-free :class:`engine.bank.watcher.SkillWatcher` does the work (watchdog, debounce,
ignoring temp/swap files and the bank's own folders, recording hand edits as versions, and
dropping the app's own writes once the engine has indexed them). Its callback runs on the
watcher's thread; this adapter re-emits the batch as ``changed(list[str])``, which Qt queues to
the GUI thread. The session then reindexes in the pool and reloads the views.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from engine.bank.store import SkillBank
from engine.bank.watcher import SkillWatcher


class WatchBridge(QObject):
    """``changed(list[str])`` (absolute paths) shortly after skills under the bank change."""

    changed = Signal(list)

    def __init__(self, bank: SkillBank, parent: QObject | None = None):
        super().__init__(parent)
        self.bank = bank
        self._engine: SkillWatcher | None = None

    def start(self, is_current: Callable[[Path, str | None], bool] | None = None) -> bool:
        """Begin watching; False (and no crash) when the platform offers no watcher."""
        emit = self.changed.emit

        def callback(paths: set[Path]) -> None:  # the watcher's thread
            emit(sorted(os.fspath(p) for p in paths))

        try:
            (self.bank.root / "Users").mkdir(parents=True, exist_ok=True)
            self._engine = SkillWatcher(self.bank.root, callback, bank=self.bank,
                                         is_current=is_current).start()
        except OSError:
            self._engine = None
            return False
        return True

    def set_is_current(self, is_current: Callable[[Path, str | None], bool] | None) -> None:
        """Once the engine is open, its index tells the app's own writes from hand edits."""
        if self._engine is not None:
            self._engine.is_current = is_current

    def stop(self) -> None:
        watcher, self._engine = self._engine, None
        if watcher is not None:
            watcher.stop()
