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
