"""Regression tests for the crashes of issue 17, and the promises around them.

1. A SKILL.md whose front matter nests thousands of levels deep took the whole app down
   (RecursionError from str() of the value; at 100,000 levels libyaml's C composer even
   segfaulted): now the bank opens with every good skill and lists the file with its reason.
2. ``skilldesk import conversations`` of a JSON file nested 100,000 deep ended in a
   RecursionError traceback: now the file is skipped with a one-line reason.
3. ``"top_k": "many"`` in settings.json ended every command in a ValueError: now the default is
   used and the problem is reported once.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from bench.fuzz_inputs import GOOD_SKILL
from cli.main import main
from engine.bank.store import SkillBank
from engine.chat.conversations import ConversationStore
from engine.errors import ChatHistoryError
from engine.imports import readers
from engine.learning.queue import LearningQueue
from engine.settings import Settings


def deep_skill_files() -> dict[str, bytes]:
    block = ["---", "name: deep-block", "tags:"] + ["  " * (i + 1) + "-" for i in range(600)]
    return {
        "deep-flow": ("---\nname: deep-flow\ndescription: d\nmetadata:\n  tags: "
                      + "[" * 5000 + "]" * 5000 + "\n---\nbody\n").encode(),
        # 100,000 levels: segfaulted the interpreter inside libyaml before the fix
        "deep-100k": ("---\nname: deep-100k\nexamples: " + "[" * 100_000 + "]" * 100_000
                      + "\n---\nbody\n").encode(),
        "deep-block": ("\n".join(block) + "\n---\nbody\n").encode(),
        "recursive": b"---\nname: recursive\nmetadata: &m {k: *m}\n---\nbody\n",
        "wrong-type": b"---\nname: [not, text]\ndescription: d\n---\nbody\n",
    }


@pytest.fixture
def hostile_bank(bank_dir):
    users = bank_dir / "Users" / "default"
    (users / "good").mkdir(parents=True)
    (users / "good" / "SKILL.md").write_bytes(GOOD_SKILL)
    for name, data in deep_skill_files().items():
        (users / name).mkdir()
        (users / name / "SKILL.md").write_bytes(data)
    return bank_dir


def test_deep_front_matter_costs_only_its_own_file(hostile_bank):
    result = SkillBank(hostile_bank).load()
    assert [s.name for s in result.skills] == ["tldr-first"]
    reasons = {e.path.split("/")[-2]: e.reason for e in result.errors}
    assert set(reasons) == set(deep_skill_files())
    for name in ("deep-flow", "deep-100k", "deep-block", "recursive"):
        assert "nests more than 32 levels" in reasons[name], reasons[name]
    assert reasons["wrong-type"] == "'name' must be text, not a list"


def test_deep_front_matter_desk_and_cli_open(hostile_bank, capsys):
    from engine.desk import SkillDesk

    with SkillDesk.open(hostile_bank, "default", Settings()) as desk:
        assert [s.name for s in desk.skills] == ["tldr-first"]
        assert len(desk.load_errors) == len(deep_skill_files())
        assert desk.search("summarize this")[0].skill.name == "tldr-first"
    assert main(["skills", "list", "--bank", str(hostile_bank)]) == 0
    out = capsys.readouterr()
    assert "tldr-first" in out.out
    assert (out.out + out.err).count("nests more than 32 levels") == 4


def test_import_of_100000_deep_json_is_a_clean_skip(tmp_path, bank_dir, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    items, skipped = readers.read_conversations(deep)
    assert items == []
    assert [s.reason for s in skipped] == ["JSON nested too deeply (more than 64 levels)"]
    # JSONL: the good line is read, the deep one skipped
    mixed = tmp_path / "mixed.jsonl"
    good = [{"role": "user", "content": "Always answer in French."},
            {"role": "assistant", "content": "D'accord."}]
    mixed.write_text(json.dumps(good) + "\n" + '{"a":' * 100_000 + "1" + "}" * 100_000 + "\n")
    items, skipped = readers.read_conversations(mixed)
    assert len(items) == 1 and [s.source for s in skipped] == [f"{mixed}:2"]
    # and the command the issue ran: no traceback, exit 0, the reason on stderr
    assert main(["import", "conversations", str(deep), "--bank", str(bank_dir)]) == 0
    err = capsys.readouterr().err
    assert "nested too deeply" in err and "Traceback" not in err


def test_settings_with_wrong_types_use_defaults_and_say_so_once(bank_dir, capsys):
    path = Settings.path()
    path.write_text(json.dumps({"retrieval": {"top_k": "many", "min_relevance": 0.3},
                                "colour": "red", "learning": False}))
    s = Settings.load()
    assert s.retrieval.top_k == 3 and s.retrieval.min_relevance == 0.3 and s.learning is False
    assert s.problems == [
        "settings.json: unknown setting 'colour' ignored",
        "settings.json: 'retrieval.top_k' must be a whole number, not \"many\"; using 3"]
    (bank_dir / "Users" / "default" / "good").mkdir(parents=True)
    (bank_dir / "Users" / "default" / "good" / "SKILL.md").write_bytes(GOOD_SKILL)
    assert main(["search", "summarize this", "--bank", str(bank_dir)]) == 0
    out = capsys.readouterr()
    assert "tldr-first" in out.out
    assert out.err.count("'retrieval.top_k' must be a whole number") == 1


def test_settings_file_that_is_not_json_is_reported_and_kept_on_save():
    path = Settings.path()
    path.write_text('{"retrieval": {"top_k": 5,')  # cut short
    s = Settings.load()
    assert s.retrieval.top_k == 3
    assert s.problems == ["settings.json is not valid JSON (line 1: Expecting property name "
                          "enclosed in double quotes); using the default settings"]
    s.theme = "dark"
    s.save()  # the user's broken file is kept beside, not silently replaced
    kept = list(path.parent.glob("settings.json.bad-*"))
    assert [k.read_text() for k in kept] == ['{"retrieval": {"top_k": 5,']
    assert Settings.load().theme == "dark" and Settings.load().problems == []


def test_damaged_chat_history_is_kept_aside_and_a_new_one_started(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    store = ConversationStore(path)
    c = store.new("hello")
    store.add_message(c.id, "user", "hi " * 2000)
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * 3996  # the first page: the schema b-tree
    path.write_bytes(bytes(data))
    store = ConversationStore(path)
    assert store.list() == [] and "kept as conversations.sqlite3.damaged-" in store.notice
    kept = list(tmp_path.glob("conversations.sqlite3.damaged-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == bytes(data)  # nothing erased
    store.add_message(store.new("after").id, "user", "works")  # the new history works
    store.close()


def test_chat_history_damage_found_later_is_a_one_line_error(tmp_path, monkeypatch):
    store = ConversationStore(tmp_path / "c.sqlite3")

    def broken(*_a, **_k):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(store, "_exec", broken)
    with pytest.raises(ChatHistoryError, match="cannot be read or written"):
        store.list()
    store.close()


def test_event_log_cut_short_and_wrong_types_are_skipped(tmp_path):
    log = tmp_path / "events.jsonl"
    good = {"id": "e1", "kind": "add", "title": "T", "time": 1.0}
    log.write_text("\n".join([json.dumps(good), "[1, 2]", json.dumps({"id": ["x"], "kind": "add"}),
                              json.dumps({**good, "id": "e2", "undoes": {"a": 1}}),
                              json.dumps({**good, "id": "e3"})[:-7],
                              json.dumps({**good, "id": "e4", "replaced": ["ok", 3]}),
                              json.dumps({**good, "id": "e5", "kind": "merge",
                                          "replaced": ["A star per chore"]})]), encoding="utf-8")
    q = LearningQueue(lambda: None, log_path=log)
    assert [e.id for e in q.events] == ["e1", "e5"]
    assert q.events[1].replaced == ["A star per chore"]  # a merge's taken-out rules survive
    q.close()


def test_chat_history_with_a_damaged_schema_text_is_kept_aside(tmp_path):
    """Found by `bench fuzz`: invalid UTF-8 inside the stored schema made sqlite3 raise
    UnicodeDecodeError (not a DatabaseError) while opening."""
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    data = path.read_bytes()
    at = data.index(b"CREATE TABLE conversations")
    path.write_bytes(data[:at + 7] + b"\x8b" + data[at + 8:])
    store = ConversationStore(path)
    assert "could not be read" in store.notice and store.list() == []
    store.close()


def test_settings_problems_stay_on_one_line():
    """Found by `bench fuzz`: a key holding a newline broke the one-line promise."""
    s = Settings.from_dict({"a\nb": 1, "theme": "x\u2028y"})
    assert s.problems == ['settings.json: unknown setting "a\\nb" ignored',
                          "settings.json: 'theme' must be one of light, dark, not "
                          '"x\\u2028y"; using "light"']


def test_a_locked_chat_history_is_not_mistaken_for_damage(tmp_path, monkeypatch):
    path = tmp_path / "c.sqlite3"
    ConversationStore(path).close()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process writing, for longer than the timeout
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: sqlite3.Connection(
        *a, **{**k, "timeout": 0.2}))
    with pytest.raises(ChatHistoryError, match="cannot be used now .*locked"):
        ConversationStore(path)
    other.execute("ROLLBACK")
    other.close()
    assert not list(tmp_path.glob("*.damaged-*"))  # nothing moved aside
