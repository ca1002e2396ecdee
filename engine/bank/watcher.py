"""Hand edits of SKILL.md files, noticed through watchdog and handed on, debounced. Qt-free.

``SkillWatcher`` watches a bank folder (recursively) and reports the skill files that were
created, modified (written and closed), moved onto (an editor's atomic save renames a temp
file onto ``SKILL.md``), moved away or deleted, and skill folders that were moved or deleted
(``SkillBank.delete`` moves a folder into ``.trash/``). Events are collected until the bank has
been quiet for ``debounce`` seconds (at most ``max_delay`` after the first), then:

- editors' swap/backup files and SkillDesk's own temp files (``fsutil.is_temp_name``), and the
  bank's own folders (``vectors/``, ``.history/``, ``.locks/``, ``.trash/``), are ignored;
- a file whose content is already what the desk indexed (``is_current(path, hash)``) is
  dropped: that is the app's own write, already picked up;
- a user skill whose content is not in the history is recorded as a hand edit
  (``SkillBank.record_hand_edit``), so it gets a version like any other change — in the
  history only: the file the user may still have open in an editor is never written;
- the remaining paths go to ``callback(paths)`` (the desk's ``refresh``, which then tells its
  listeners; the app adapts those to Qt signals). The callback runs on the watcher's thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from engine.bank.store import SKILL_FILES, SkillBank
from engine.errors import SkillDeskError
from engine.fsutil import file_hash, is_temp_name

log = logging.getLogger("skilldesk.watcher")

DEBOUNCE_S = 0.2    # editors write in bursts (truncate, write, rename, chmod)
MAX_DELAY_S = 1.0   # a file written continuously is still picked up every second
_IGNORED_TOP = ("vectors", ".history", ".locks", ".trash")
WATCHED_EVENTS = [FileCreatedEvent, FileModifiedEvent, FileClosedEvent, FileDeletedEvent,
                  FileMovedEvent, DirCreatedEvent, DirDeletedEvent, DirMovedEvent]


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: SkillWatcher):
        self.w = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        if kind in ("opened", "closed_no_write", "attrib"):
            return
        if event.is_directory and kind not in ("moved", "deleted"):
            return  # a new or touched folder: its SKILL.md brings its own event
        paths = [event.src_path]
        if kind == "moved":
            paths.append(event.dest_path)
        for p in paths:
            self.w._offer(os.fsdecode(p), event.is_directory)


class SkillWatcher:
    """Watch ``bank_root`` and call ``callback(set_of_paths)`` for changed skills."""

    def __init__(self, bank_root: str | os.PathLike, callback: Callable[[set[Path]], object], *,
                 bank: SkillBank | None = None,
                 is_current: Callable[[Path, str | None], bool] | None = None,
                 record_hand_edits: bool = True, debounce: float = DEBOUNCE_S,
                 max_delay: float = MAX_DELAY_S,
                 accept: Callable[[Path], bool] | None = None):
        self.root = Path(bank_root).resolve()
        self.callback = callback
        self.bank = bank
        self.is_current = is_current
        self.accept = accept  # e.g. the desk's "is this one of my user's or a Common skill"
        self.record_hand_edits = record_hand_edits and bank is not None
        self.debounce, self.max_delay = debounce, max_delay
        self._pending: set[Path] = set()
        self._first = self._last = 0.0
        self._cond = threading.Condition()
        self._stop = False
        self._observer = None
        self._thread: threading.Thread | None = None
        self.batches = 0  # how many batches reached the callback (for tests and the bench)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> SkillWatcher:
        if self._observer is not None:
            return self
        self._stop = False
        self._observer = Observer()
        # Only the events _Handler uses: without this filter the kernel also queues an "opened"
        # and a "closed_no_write" event for every read, and on a big bank (10k skills) the
        # overflow -> rescan -> overflow loop burns a whole core while idle.
        self._observer.schedule(_Handler(self), str(self.root), recursive=True,
                                event_filter=WATCHED_EVENTS)
        self._observer.daemon = True
        self._observer.start()
        self._thread = threading.Thread(target=self._run, name="skill-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        obs, self._observer = self._observer, None
        if obs is not None:
            obs.stop()
            obs.join(timeout=5)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> SkillWatcher:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ events
    def _relevant(self, path: Path, is_dir: bool) -> bool:
        try:
            rel = path.relative_to(self.root).parts
        except ValueError:
            return False
        if not rel or rel[0] in _IGNORED_TOP or rel[0] not in ("Users", "Common"):
            return False
        if is_dir:
            return len(rel) >= 2  # a skill, user or library folder moved or deleted
        return path.name in SKILL_FILES and not is_temp_name(path.name) and len(rel) == 4

    def _offer(self, raw: str, is_dir: bool) -> None:
        path = Path(raw)
        if is_temp_name(path.name) or not self._relevant(path, is_dir):
            return
        if self.accept is not None and not self.accept(path):
            return
        now = time.monotonic()
        with self._cond:
            if not self._pending:
                self._first = now
            self._pending.add(path)
            self._last = now
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                while True:
                    now = time.monotonic()
                    due = min(self._last + self.debounce, self._first + self.max_delay)
                    if now >= due or self._stop:
                        break
                    self._cond.wait(due - now)
                batch, self._pending = self._pending, set()
            try:
                self._process(batch)
            except Exception:  # noqa: BLE001 - the watcher must outlive any one bad batch
                log.exception("could not process changed skills %s", sorted(map(str, batch)))

    def _process(self, batch: Iterable[Path]) -> None:
        todo: set[Path] = set()
        for p in batch:
            if p.name in SKILL_FILES and p.is_file():
                h = file_hash(p)
                if self.is_current is not None and self.is_current(p, h):
                    continue  # our own write, already indexed
                if self.record_hand_edits:
                    self._record(p)
            todo.add(p)
        if todo:
            self.batches += 1
            self.callback(todo)

    def _record(self, path: Path) -> None:
        try:
            rel = path.relative_to(self.root).parts
            if rel[0] == "Users":
                self.bank.record_hand_edit(path)
        except (SkillDeskError, OSError, ValueError) as exc:
            log.info("hand edit of %s not recorded: %s", path, exc)
