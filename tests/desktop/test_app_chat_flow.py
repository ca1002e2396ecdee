"""Desktop app, chat flow on the scripted model (the same Session and engine, a scripted
ModelWorker): Regenerate, edit-and-resend, the chat surviving a restart, and switching chats
mid-answer. Milliseconds per turn; the real-model chat tests are in test_app_chat.py."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from bench.oracle import OracleLLM  # noqa: E402
from tests.desktop.test_app_chat import TURN_TIMEOUT_MS, send  # noqa: E402, F401


def test_regenerate_edit_and_restart(qtbot, open_app, bank_dir):
    w = open_app(bank_dir, scripted=OracleLLM(reply="Blue."))
    send(w, qtbot, "Name one colour.")
    cid = w.controller.cid
    first = w.chat.bubbles[-1].text
    assert first.strip()
    # Regenerate: the last answer is replaced, not added
    w.chat.regen_btn.click()
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=TURN_TIMEOUT_MS)
    msgs = w.session.store.messages(cid)
    assert [m.role for m in msgs] == ["user", "assistant"]
    # Edit the last user message and resend it
    w.chat.edit_btn.click()
    assert w.chat.input.toPlainText() == "Name one colour."
    w.chat.input.setPlainText("Name one fruit.")
    w.chat.send_btn.click()
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=TURN_TIMEOUT_MS)
    msgs = w.session.store.messages(cid)
    assert [(m.role, m.content) for m in msgs][0] == ("user", "Name one fruit.")
    assert [m.role for m in msgs] == ["user", "assistant"]
    last_answer = msgs[1].content
    w.close()

    # the chat is there after a restart
    w2 = open_app(bank_dir, scripted=OracleLLM(reply="Blue."))
    first_item = w2.conversations.list.item(0)
    assert first_item.text() == "Name one colour."  # titled from the first message
    w2.conversations._activate(first_item)
    qtbot.waitUntil(lambda: not w2.controller.loading)
    assert [b.text for b in w2.chat.bubbles] == ["Name one fruit.", last_answer]


def test_switching_chats_while_answering_keeps_the_answer_where_it_belongs(
        qtbot, open_app, bank_dir):
    w = open_app(bank_dir, scripted=OracleLLM(reply=" ".join(["wave"] * 300),
                                              token_delay_s=0.01))
    chunks: list[str] = []
    w.session.chat.worker.chunk.connect(lambda _rid, t: chunks.append(t))
    w.chat.input.setPlainText("Write a long poem about rivers.")
    w.chat.send_btn.click()
    first = w.controller.cid
    qtbot.waitUntil(lambda: len(chunks) >= 2, timeout=TURN_TIMEOUT_MS)
    w.controller.new_conversation()  # the user leaves mid-answer: the answer stops
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=10_000)
    assert w.chat.bubbles == [] and w.controller.cid == ""
    msgs = w.session.store.messages(first)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[1].meta["finish_reason"] == "cancelled" and msgs[1].content.strip()


def test_a_pause_in_typing_gets_the_drafts_turn_ready_and_the_send_uses_it(
        qtbot, open_app, bank_dir):
    """The composer's text, after a pause (DRAFT_PAUSE_MS), is prepared with the chat's history
    (SkillDesk.prepare); sending it starts from that decision. While editing the last message,
    the draft replaces it and what came after."""
    w = open_app(bank_dir, scripted=OracleLLM(reply="Blue."))
    send(w, qtbot, "Name one colour.")
    desk = w.session.chat.worker.desk
    history = [{"role": "user", "content": "Name one colour."},
               {"role": "assistant", "content": w.chat.bubbles[-1].text}]
    infos: list[dict] = []
    w.session.chat.worker.finished.connect(lambda _rid, info: infos.append(info))
    w.chat.input.setPlainText("Name one fruit.")
    qtbot.waitUntil(lambda: desk._prepared is not None and desk._prepared.decided is not None,
                    timeout=TURN_TIMEOUT_MS)
    assert desk._prepared.key == desk._turn_key(
        [*history, {"role": "user", "content": "Name one fruit."}], None, None, None)
    w.chat.send_btn.click()
    qtbot.waitUntil(lambda: bool(infos), timeout=TURN_TIMEOUT_MS)
    assert infos[-1]["prepared"] is True
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=TURN_TIMEOUT_MS)
    # editing the last message: the draft is prepared in its place
    w.chat.edit_btn.click()
    w.chat.input.setPlainText("Name one vegetable.")
    assert w.controller.draft_messages() == [
        *history, {"role": "user", "content": "Name one vegetable."}]
    # switched off in the settings: nothing is prepared
    desk.config.retrieval.prepare = False
    desk._prepared = None
    w.controller.prepare_draft()
    assert desk._prepared is None
