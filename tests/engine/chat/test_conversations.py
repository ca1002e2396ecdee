"""engine.chat.conversations: the SQLite chat history shared by the app and the CLI."""

from __future__ import annotations

import json
import time

import pytest

from engine.chat.conversations import DEFAULT_TITLE, ConversationStore, default_path, title_from
from engine.errors import NotFoundError


@pytest.fixture
def store(tmp_path):
    s = ConversationStore(tmp_path / "chats.sqlite3")
    yield s
    s.close()


def test_default_path_is_in_skilldesk_home(_private_home):
    assert default_path().parent == _private_home
    with ConversationStore() as s:
        s.new("x")
    assert (_private_home / "conversations.sqlite3").is_file()


def test_new_message_title_and_order(store):
    c = store.new()
    assert c.title == DEFAULT_TITLE
    store.add_message(c.id, "user", "How do I write a weekly report?\nMore detail")
    store.add_message(c.id, "assistant", "Like this.", meta={"model": "m", "injected": []})
    conv = store.get(c.id)
    assert conv.title == "How do I write a weekly report?"
    assert conv.message_count == 2
    msgs = store.messages(c.id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[1].meta["model"] == "m"
    with pytest.raises(ValueError):
        store.add_message(c.id, "tool", "x")


def test_list_orders_by_recent_update(store):
    a = store.new("a")
    time.sleep(0.01)
    b = store.new("b")
    assert [c.id for c in store.list()] == [b.id, a.id]
    time.sleep(0.01)
    store.add_message(a.id, "user", "later")
    assert [c.id for c in store.list()] == [a.id, b.id]


def test_rename_delete_undo_purge(store):
    c = store.new("first")
    store.rename(c.id, "renamed")
    assert store.get(c.id).title == "renamed"
    store.add_message(c.id, "user", "needle in a haystack")
    store.delete(c.id)
    assert c.id not in [x.id for x in store.list()]
    assert store.search("needle") == []
    assert c.id in [x.id for x in store.list(include_deleted=True)]
    store.undo_delete(c.id)
    assert c.id in [x.id for x in store.list()]
    assert len(store.search("needle")) == 1
    store.delete(c.id)
    assert store.purge(older_than_s=0) == 1
    with pytest.raises(NotFoundError):
        store.get(c.id)
    assert store.messages(c.id) == []


def test_search_across_chats_including_chinese(store):
    a = store.new()
    b = store.new()
    store.add_message(a.id, "user", "请用正式的商务语气写周报")
    store.add_message(b.id, "user", "Use 100% of the budget_x")
    hits = store.search("商务语气")
    assert [h.conversation_id for h in hits] == [a.id]
    assert "商务语气" in hits[0].snippet
    # LIKE wildcards in the query are literal
    assert [h.conversation_id for h in store.search("100%")] == [b.id]
    assert store.search("budget_x")[0].conversation_id == b.id
    assert store.search("budgetXx") == []


def test_edit_and_regenerate_truncate(store):
    c = store.new()
    store.add_message(c.id, "user", "one")
    store.add_message(c.id, "assistant", "reply one")
    u2 = store.add_message(c.id, "user", "two")
    store.add_message(c.id, "assistant", "reply two")
    assert store.delete_messages_from(c.id, u2.id) == 2
    assert [m.content for m in store.messages(c.id)] == ["one", "reply one"]
    m = store.update_message(store.messages(c.id)[0].id, content="uno")
    assert m.content == "uno"
    # a note added later (what a "Remember this" came to) is no new activity in the chat
    before = store.get(c.id).updated
    m = store.update_message(m.id, meta={"remembered": "Remembered as “x”"}, touch=False)
    assert m.meta == {"remembered": "Remembered as “x”"} and store.get(c.id).updated == before
    store.update_message(m.id, content="one")
    assert store.get(c.id).updated > before


def test_exports(store, tmp_path):
    c = store.new("Export me")
    store.add_message(c.id, "user", "你好")
    store.add_message(c.id, "assistant", "```py\nprint(1)\n```",
                      meta={"injected": [{"name": "greet", "version": "0.1.1", "score": 0.8}]})
    data = store.export_json(c.id)
    assert data["messages"] == [{"role": "user", "content": "你好"},
                                {"role": "assistant", "content": "```py\nprint(1)\n```"}]
    md = store.export_markdown(c.id)
    assert md.startswith("# Export me") and "## You" in md and "greet v0.1.1" in md
    pj = store.export(c.id, tmp_path / "out.json")
    assert json.loads(pj.read_text("utf-8"))["messages"][0]["content"] == "你好"
    pm = store.export(c.id, tmp_path / "out.md")
    assert "print(1)" in pm.read_text("utf-8")


def test_persistence_and_flags(tmp_path):
    path = tmp_path / "c.sqlite3"
    with ConversationStore(path) as s:
        c = s.new()
        s.add_message(c.id, "user", "remember me")
        s.set_learning_paused(c.id, True)
        s.set_meta(c.id, model="bundled")
    with ConversationStore(path) as s:
        conv = s.get(c.id)
        assert conv.learning_paused and conv.meta["model"] == "bundled"
        assert s.messages(c.id)[0].content == "remember me"


def test_title_from():
    assert title_from("") == DEFAULT_TITLE
    assert title_from("\n\n# Heading here\nbody") == "Heading here"
    assert len(title_from("x" * 100)) == 48


def test_a_read_only_or_full_history_is_never_moved_aside(tmp_path, monkeypatch):
    """A healthy file SkillDesk cannot write now (read-only mount, full disk) is an error, not
    damage: it stays where it is, byte for byte."""
    import sqlite3

    import pytest

    from engine.chat.conversations import ConversationStore
    from engine.errors import ChatHistoryError

    path = tmp_path / "conversations.sqlite3"
    ConversationStore(path)
    before = path.read_bytes()
    for why in ("attempt to write a readonly database", "database or disk is full"):
        def refuse(self, why=why):
            raise sqlite3.OperationalError(why)

        monkeypatch.setattr(ConversationStore, "_open", refuse)
        with pytest.raises(ChatHistoryError, match="cannot be used now"):
            ConversationStore(path)
    assert path.read_bytes() == before and not list(tmp_path.glob("*.damaged-*"))
