"""Bookkeeping that is not the user's text: ``<bank>/.skilldesk/<user>.json``.

What SkillDesk knows about a skill beyond its SKILL.md — whether the user disabled it or marked
it "always apply", how often it was injected and when last, and the "didn't fit" feedback the
user gave on an answer — lives here, beside the skills, never in the file the user may have open
in an editor. A hand edit therefore never causes a write into the edited file (issue 18: vim's
"file has been changed since reading it" after every ``:w``).

One JSON document per user, keyed by skill id (stable across edits; a move migrates the entry)::

    {"version": 1, "skills": {"<id>": {"key": "user/default/tldr", "disabled": true,
        "always_on": false, "uses": 3, "last_used": "2026-11-23T20:01:02Z",
        "feedback": [{"query": "...", "time": "...", "kind": "didnt_fit"}]}}}

Writes are atomic (``fsutil.atomic_write``) and serialised across threads and processes (a
thread lock plus an ``fcntl`` lock on a sibling ``.lock`` file): the app's chat thread records
usage while the CLI disables a skill. Readers re-read the file when its mtime/size changed, so a
change made by another process is seen on the next call. A missing or unreadable file reads as
empty (it is bookkeeping: losing it loses counts, never a skill), and the unreadable one is kept
as ``<user>.json.bad`` rather than overwritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.bank.skill import now_iso
from engine.fsutil import atomic_write, check_component, file_lock

STATE_DIR = ".skilldesk"
MAX_FEEDBACK = 20  # per skill: the newest "didn't fit" requests kept for the similarity check


class SkillState:
    """The bookkeeping of one user in one bank (cheap to construct; file-backed)."""

    def __init__(self, bank_root: str | os.PathLike, user: str):
        self.dir = Path(bank_root) / STATE_DIR
        self.path = self.dir / f"{check_component(user, 'user')}.json"
        self._lock = threading.RLock()
        self._data: dict[str, Any] = {"version": 1, "skills": {}}
        self._stamp: tuple[float, int] | None = None

    # ------------------------------------------------------------------ reading
    def _load(self) -> dict[str, Any]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._data, self._stamp = {"version": 1, "skills": {}}, None
            return self._data
        stamp = (st.st_mtime, st.st_size)
        if stamp == self._stamp:
            return self._data
        try:
            data = json.loads(self.path.read_text("utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("skills"), dict):
                raise ValueError("not a state document")
        except OSError:  # cannot read it now (permissions, I/O): keep what we had, move nothing
            return self._data
        except ValueError:
            with contextlib.suppress(OSError):
                os.replace(self.path, self.path.with_suffix(".json.bad"))
            data = {"version": 1, "skills": {}}
            stamp = None
        self._data, self._stamp = data, stamp
        return data

    def entry(self, skill_id: str) -> dict[str, Any]:
        """A copy of what is recorded for ``skill_id`` (empty dict when nothing is)."""
        with self._lock:
            return dict(self._load()["skills"].get(skill_id) or {})

    def all(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self._load()["skills"].items()}

    def ids_where(self, flag: str) -> set[str]:
        """Ids whose ``flag`` (``disabled`` / ``always_on``) is set."""
        with self._lock:
            return {k for k, v in self._load()["skills"].items() if v.get(flag)}

    def is_disabled(self, skill_id: str) -> bool:
        return bool(self.entry(skill_id).get("disabled"))

    def is_always_on(self, skill_id: str) -> bool:
        return bool(self.entry(skill_id).get("always_on"))

    def feedback(self, skill_id: str) -> list[dict[str, Any]]:
        return list(self.entry(skill_id).get("feedback") or [])

    # ------------------------------------------------------------------ writing
    @contextlib.contextmanager
    def _write(self) -> Iterator[dict[str, Any]]:
        """Read-modify-write under both locks; the document is saved when the block ends."""
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            with file_lock(self.dir / f"{self.path.name}.lock"):
                self._stamp = None  # another process may have written: read it afresh
                data = self._load()
                yield data
                atomic_write(self.path, json.dumps(data, ensure_ascii=False, indent=1))
                st = self.path.stat()
                self._stamp = (st.st_mtime, st.st_size)

    def update(self, skill_id: str, fn: Callable[[dict[str, Any]], object],
               key: str = "") -> dict[str, Any]:
        """Apply ``fn(entry)`` to the entry of ``skill_id``; returns a copy of the result."""
        with self._write() as data:
            e = data["skills"].setdefault(skill_id, {})
            fn(e)
            if key:
                e["key"] = key
            if not any(v for k, v in e.items() if k != "key"):
                data["skills"].pop(skill_id, None)  # nothing left worth keeping
            return dict(e)

    def set_flag(self, skill_id: str, flag: str, value: bool, key: str = "") -> None:
        def fn(e: dict[str, Any]) -> None:
            if value:
                e[flag] = True
            else:
                e.pop(flag, None)
        self.update(skill_id, fn, key)

    def record_uses(self, used: list[tuple[str, str]], when: str | None = None) -> None:
        """One more use for each ``(skill id, key)`` (the skills injected into one answer)."""
        if not used:
            return
        when = when or now_iso()
        with self._write() as data:
            for skill_id, key in used:
                e = data["skills"].setdefault(skill_id, {})
                e["uses"] = int(e.get("uses") or 0) + 1
                e["last_used"] = when
                if key:
                    e["key"] = key

    def add_feedback(self, skill_id: str, record: dict[str, Any], key: str = "") -> None:
        def fn(e: dict[str, Any]) -> None:
            e["feedback"] = [*(e.get("feedback") or []), record][-MAX_FEEDBACK:]
        self.update(skill_id, fn, key)
