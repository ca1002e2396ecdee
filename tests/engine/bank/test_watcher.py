"""The watcher: hand edits become searchable within a second; swap files and own writes don't."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

from engine.bank import skillfile
from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.bank.watcher import SkillWatcher
from engine.desk import SkillDesk
from engine.settings import Settings


def _bank(root: Path) -> SkillBank:
    bank = SkillBank(root)
    for title, desc in [("Weekly report format", "Weekly reports in three parts."),
                        ("SQL query tuning", "Speed up slow SQL queries with indexes."),
                        ("Git commit messages", "Imperative, 50-character subject lines.")]:
        bank.create(Skill(name=title, title=title, description=desc,
                          instructions=f"# Goal\n{desc}\n"))
    return bank


def _atomic_save(path: Path, text: str) -> None:
    """What vim/VS Code do: write a temp file beside it, then rename it onto the file."""
    fd, tmp = tempfile.mkstemp(prefix=".SKILL.md.", suffix=".swp", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _wait(pred, timeout: float) -> float | None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if pred():
            return time.perf_counter() - t0
        time.sleep(0.01)
    return None


def test_atomic_rename_save_is_searchable_within_a_second(bank_dir):
    bank = _bank(bank_dir)
    with SkillDesk.open(bank_dir, "default", Settings()) as desk:
        desk.watch()
        time.sleep(0.2)
        s = next(x for x in desk.skills if x.title == "SQL query tuning")
        changes = []
        desk.add_listener(changes.append)
        _atomic_save(s.path, skillfile.render(s.copy(description="Zorblax tuning for SQL.")))
        took = _wait(lambda: any(h.skill.path == s.path for h in desk.search(
            "zorblax", 3, threshold=0.0)), 1.0)
        assert took is not None and took < 1.0
        assert _wait(lambda: changes, 1.0) is not None and changes[0].updated
        # the hand edit is kept as a version
        assert _wait(lambda: len(bank.history.versions(s.id)) >= 2, 2.0) is not None


def test_new_and_deleted_skills_are_picked_up(bank_dir):
    bank = _bank(bank_dir)
    with SkillDesk.open(bank_dir, "default", Settings()) as desk:
        desk.watch()
        time.sleep(0.2)
        new = bank.create(Skill(name="Haiku", title="Haiku writer",
                                description="Write haiku about quasars.", instructions="x"))
        assert _wait(lambda: "Haiku writer" in [h.skill.title for h in desk.search(
            "haiku about quasars", 3, threshold=0.0)], 1.5) is not None
        bank.delete(new)  # moves the folder into .trash/
        assert _wait(lambda: "Haiku writer" not in [h.skill.title for h in desk.search(
            "haiku about quasars", 3, threshold=0.0)], 1.5) is not None
        assert len(desk.index) == 3


def test_swap_files_and_foreign_folders_are_ignored(bank_dir):
    _bank(bank_dir)
    seen: list[set] = []
    skill_dir = next((bank_dir / "Users" / "default").iterdir())
    with SkillWatcher(bank_dir, seen.append, debounce=0.05):
        time.sleep(0.2)
        for name in (".SKILL.md.swp", "SKILL.md~", "#SKILL.md#", ".SKILL.md.abc.tmp",
                     "notes.txt"):
            (skill_dir / name).write_text("junk")
        (bank_dir / "vectors").mkdir(exist_ok=True)
        (bank_dir / "vectors" / "x.json").write_text("{}")
        time.sleep(0.6)
        assert seen == []
        # ...while a real change in the same folder is reported, debounced into one batch
        for i in range(5):
            (skill_dir / "SKILL.md").write_text((skill_dir / "SKILL.md").read_text() + f"\n{i}")
        assert _wait(lambda: seen, 1.0) is not None
        time.sleep(0.3)
        assert len(seen) == 1 and seen[0] == {skill_dir / "SKILL.md"}


def test_own_writes_already_indexed_are_ignored(bank_dir):
    bank = _bank(bank_dir)
    calls = []
    with SkillDesk.open(bank_dir, "default", Settings()) as desk:
        orig = desk.refresh
        lock = threading.Lock()

        def counting(paths=None):
            with lock:
                calls.append(paths)
            return orig(paths)

        desk.refresh = counting
        desk.watch(record_hand_edits=False)
        time.sleep(0.2)
        s = next(x for x in desk.skills if x.title == "Git commit messages")
        new = bank.write(s.copy(description="Conventional commits."), expected_hash=s.content_hash)
        orig([new.path])  # the app refreshes right after its own write
        time.sleep(0.8)
        assert calls == []  # the watcher saw the write but the content was already indexed
        assert desk.search("conventional commits", 1, threshold=0.0)[0].skill.title == \
            "Git commit messages"


def test_moved_away_and_other_users_skills(bank_dir):
    bank = _bank(bank_dir)
    with SkillDesk.open(bank_dir, "default", Settings()) as desk:
        reports = []
        desk.add_listener(reports.append)
        desk.watch()
        time.sleep(0.2)
        bank.create(Skill(name="Bob only", title="Bob only", description="Quasar haiku.",
                          instructions="x"), "bob")
        time.sleep(0.8)
        assert reports == [] and len(desk.index) == 3  # another user's skill: not ours
        s = next(x for x in desk.skills if x.title == "SQL query tuning")
        os.rename(s.path, s.path.with_name("SKILL.md.bak"))  # moved away: no skill any more
        assert _wait(lambda: len(desk.index) == 2, 1.5) is not None
        assert "SQL query tuning" not in [h.skill.title for h in desk.search(
            "slow SQL queries", 3, threshold=0.0)]
