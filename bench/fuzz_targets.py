"""What the reader fuzzing feeds and checks: one target per reader of outside input.

Shared by the property tests (``tests/test_fuzz_readers.py``, small budgets, part of the suite)
and ``skilldesk bench fuzz`` (the same targets, many more cases). A target takes one generated
input, runs the reader on it in a private temporary folder and returns normally when the reader
returned a value or raised the project's own error (``SkillDeskError``) with a one-line reason;
anything else (RecursionError, AttributeError, a crash...) escapes and is a failure. Targets
also assert the reader's promises (every file of a bank is either loaded or listed with a
reason; settings values have their field's type).

The inputs (bytes, trees deep and wide, huge strings, mutated real files from
``shared/corpora``, damaged zips and databases) are in bench/fuzz_inputs.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from bench.fuzz_inputs import (
    GOOD_EVENT,
    GOOD_RECORD,
    GOOD_SKILL,
    db_files,
    huge_text,
    json_files,
    json_trees,
    mutated,
    mutated_json,
    scratch,
    skill_files,
    skill_samples,
    zip_files,
)
from engine.errors import SkillDeskError


def _expected(fn: Callable[[], Any]) -> Any:
    """Run ``fn``; the project's own error is an expected outcome (it must be one line)."""
    try:
        return fn()
    except SkillDeskError as exc:
        message = str(exc)
        assert message and "\n" not in message.strip(), f"not a one-line reason: {message!r}"
        return None


def target_skillfile(data: bytes) -> None:
    """skillfile.parse: a Skill, or SkillFormatError."""
    from engine.bank import skillfile

    skill = _expected(lambda: skillfile.parse(data, "/bank/Users/u/s/SKILL.md"))
    if skill is not None:  # what was read can be written back and read again
        text = skillfile.render(skill)
        skillfile.parse(text.encode("utf-8", "surrogatepass"))


def target_bank(files: list[bytes]) -> None:
    """SkillBank.load: each file is a skill or a listed error; good ones are never lost."""
    from engine.bank.store import SkillBank

    with scratch() as root:
        bank = SkillBank(root / "bank")
        good = root / "bank" / "Users" / "default" / "good" / "SKILL.md"
        good.parent.mkdir(parents=True)
        good.write_bytes(GOOD_SKILL)
        for i, data in enumerate(files):
            p = root / "bank" / ("Common/lib" if i % 3 == 2 else "Users/default") / f"s{i}"
            p.mkdir(parents=True)
            (p / "SKILL.md").write_bytes(data)
        result = bank.load()
        assert len(result.skills) + len(result.errors) == len(files) + 1, "a file went missing"
        assert any(s.name == "tldr-first" for s in result.skills), "the good skill was lost"
        for e in result.errors:
            assert e.reason and "\n" not in e.reason.strip(), e


def target_history(files: list[bytes]) -> None:
    """History.versions / text / skill_at over version files of any content."""
    from engine.bank.history import History

    with scratch() as root:
        d = root / "sid"
        d.mkdir()
        for i, data in enumerate(files):
            (d / f"0.1.{i}.md").write_bytes(data)
        (d / "0.1.0+².md").write_bytes(GOOD_SKILL)
        h = History(root)
        versions = h.versions("sid")
        assert len(versions) == len(files) + 1
        for v in versions[:4]:
            _expected(lambda v=v: h.skill_at("sid", v.version))
        if len(versions) > 1:
            _expected(lambda: h.diff("sid", versions[0].version, versions[-1].version))


def target_transfer(data: bytes) -> None:
    """import_skills from a zip: imported + skipped, or one SkillDeskError; nothing escapes."""
    from engine.bank.store import SkillBank
    from engine.bank.transfer import import_skills

    with scratch() as root:
        src = root / "in.zip"
        src.write_bytes(data)
        bank = SkillBank(root / "bank")
        before = set((root / "bank").rglob("*"))
        report = _expected(lambda: import_skills(bank, src, "default"))
        if report is not None:
            for s in report.imported:
                assert Path(s.path).resolve().is_relative_to((root / "bank").resolve())
        # nothing was written outside the bank's own folders
        assert all(p.resolve().is_relative_to(root.resolve()) for p in before)


def _write_json_source(root: Path, data: bytes, suffix: str) -> Path:
    p = root / f"in{suffix}"
    p.write_bytes(data)
    return p


def target_conversations(data: bytes, suffix: str = ".json") -> None:
    from engine.imports import readers

    with scratch() as root:
        items, skipped = readers.read_conversations(_write_json_source(root, data, suffix))
        for s in skipped:
            assert s.reason and "\n" not in s.reason, s


def target_trajectories(data: bytes, suffix: str = ".json") -> None:
    """read_trajectories, then the deterministic candidate builder on every item."""
    from engine.imports import readers, trajectories

    with scratch() as root:
        path = _write_json_source(root, data, suffix)
        items, skipped = readers.read_trajectories(path)
        for item in items[:20]:
            trajectories.candidates_from_trajectory(item.raw, None, require_success=False)
        _expected(lambda: trajectories.load(path))


def target_documents(data: bytes) -> None:
    from engine.imports import bootstrap, readers

    with scratch() as root:
        items, _skipped = readers.read_documents(_write_json_source(root, data, ".md"))
        for item in items[:20]:
            bootstrap.document_candidate(item)


def target_settings(data: bytes) -> None:
    """Settings.load never raises, and every value it returns has its field's type."""
    from engine.settings import Settings

    with scratch() as home:
        old = os.environ.get("SKILLDESK_HOME")
        os.environ["SKILLDESK_HOME"] = str(home)
        try:
            (home / "settings.json").write_bytes(data)
            s = Settings.load()
        finally:
            if old is None:
                os.environ.pop("SKILLDESK_HOME", None)
            else:
                os.environ["SKILLDESK_HOME"] = old
    r, m = s.retrieval, s.model
    assert type(r.top_k) is int and r.top_k >= 1
    assert type(r.min_relevance) in (int, float) and r.scope in ("user", "common", "all")
    assert isinstance(s.bank, str) and isinstance(s.user, str) and type(s.learning) is bool
    assert type(m.n_ctx) is int and type(m.n_threads) is int and isinstance(m.model, str)
    assert all(isinstance(p, str) and "\n" not in p for p in s.problems)


def target_records(data: bytes) -> None:
    """Consolidation records and the flags report: listed/loaded or a one-line error."""
    from engine.bank.store import SkillBank
    from engine.consolidate import flags, record

    with scratch() as root:
        bank = SkillBank(root / "bank")
        d = bank.root / record.RECORDS
        d.mkdir()
        (d / "r1.json").write_bytes(data)
        record.list_records(bank)
        _expected(lambda: record.load_record(bank, "r1"))
        _expected(lambda: record.undo(bank, "r1"))
        flags.report_path(bank.root, "default").parent.mkdir(parents=True, exist_ok=True)
        flags.report_path(bank.root, "default").write_bytes(data)
        flags.load_report(bank.root, "default")


def target_event_log(data: bytes) -> None:
    """The learning event log (JSONL, a torn last line included) and the import ledger."""
    from engine.imports.readers import Ledger
    from engine.learning.queue import LearningQueue

    with scratch() as root:
        log = root / "events.jsonl"
        log.write_bytes(data)
        q = LearningQueue(lambda: None, log_path=log)  # type: ignore[arg-type]
        for ev in q.events:
            assert isinstance(ev.id, str) and isinstance(ev.kind, str)
        (root / ".imports").mkdir()
        (root / ".imports" / "default.json").write_bytes(data)
        ledger = Ledger(root, "default")
        assert ("conv:x" in ledger) in (True, False)
        ledger.mark("conv:x", {"source": "fuzz"})


def target_conversations_db(data: bytes) -> None:
    """ConversationStore on a damaged file: opens (kept aside when unreadable) and reads."""
    from engine.chat.conversations import ConversationStore

    with scratch() as root:
        path = root / "c.sqlite3"
        path.write_bytes(data)
        store = _expected(lambda: ConversationStore(path))
        if store is None:
            return
        try:
            def read_all() -> None:
                for c in store.list()[:5]:
                    store.messages(c.id)
                store.search("message")

            _expected(read_all)  # reads may meet damage the checks missed: one line, then
            c = store.new("after")  # but a store that opened must keep the user's new chats
            store.add_message(c.id, "user", "still works")
        finally:
            store.close()


@dataclass(frozen=True)
class Reader:
    name: str
    target: Callable[..., None]
    strategy: st.SearchStrategy


def readers() -> list[Reader]:
    """Every reader of outside input with the inputs it is fuzzed with."""
    json_in = json_files()
    return [
        Reader("skillfile (SKILL.md)", target_skillfile, skill_files()),
        Reader("bank load", target_bank, st.lists(skill_files(), min_size=1, max_size=4)),
        Reader("history", target_history, st.lists(skill_files(), min_size=1, max_size=3)),
        Reader("transfer (zip import)", target_transfer, zip_files()),
        Reader("import conversations .json", target_conversations, json_in),
        Reader("import conversations .jsonl",
               lambda d: target_conversations(d, ".jsonl"), json_in),
        Reader("import trajectories", target_trajectories, json_in),
        Reader("import trajectories .jsonl",
               lambda d: target_trajectories(d, ".jsonl"), json_in),
        Reader("import documents", target_documents,
               st.one_of(st.binary(max_size=3000), mutated(skill_samples), huge_text.map(
                   lambda t: t.encode()))),
        Reader("settings.json", target_settings, st.one_of(
            json_in, st.fixed_dictionaries({}, optional={
                "retrieval": st.dictionaries(st.sampled_from(["top_k", "min_relevance", "threshold", "scope", "x"]),
                                             json_trees, max_size=4),
                "model": st.dictionaries(st.sampled_from(["n_ctx", "n_threads", "model",
                                                          "temperature", "backend"]),
                                         json_trees, max_size=4),
                "learning": json_trees, "user": json_trees, "theme": json_trees,
                "unknown": json_trees}).map(lambda d: json.dumps(d).encode()))),
        Reader("consolidation records", target_records,
               st.one_of(json_in, mutated_json(GOOD_RECORD))),
        Reader("event log + import ledger", target_event_log, st.one_of(
            json_in, st.lists(mutated_json(GOOD_EVENT), min_size=1, max_size=5).map(
                lambda lines: b"\n".join(lines)))),
        Reader("chat database", target_conversations_db, db_files()),
    ]
