"""Desktop app, learning side, on the real bundled model: the activity log and state line, the
toast on a learned skill with Show and Undo, pause per chat and everywhere."""

from __future__ import annotations

import os
import threading

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")



pytestmark = pytest.mark.model


@pytest.fixture
def window(open_app, bank_dir, bundled_model_path):
    return open_app(bank_dir, model=bundled_model_path, max_tokens=12, n_ctx=1024)


def test_learned_skill_toast_show_and_undo(window, qtbot, preference_chat):
    w = window
    events, where = [], []
    w.session.learning_event.connect(events.append)
    pool = w.session.learning.pool
    queue = w.session.desk.learning

    def on_engine_thread(ev):  # called where the job runs
        if ev.kind == "running":
            where.append((threading.get_ident(), pool.activeThreadCount()))

    queue.subscribe(on_engine_thread)
    assert pool.activeThreadCount() == 0
    queue.submit(preference_chat)
    qtbot.waitUntil(lambda: any(e.kind == "done" for e in events), timeout=300_000)
    kinds = [e.kind for e in events]
    assert kinds[:2] == ["queued", "running"]
    # the job ran in the app's learning QThreadPool, not on the GUI thread
    [(ident, active)] = where
    assert active == 1 and ident != threading.main_thread().ident
    qtbot.waitUntil(lambda: pool.activeThreadCount() == 0, timeout=10_000)
    added = [e for e in events if e.kind in ("add", "merge")]
    if not added:
        pytest.skip(f"the tiny model learned nothing from this chat this time: {kinds}")
    ev = added[0]
    # a log row, a toast with Show and Undo, a "new" mark in the tree
    rows = [w.learning.log.item(i).text() for i in range(w.learning.log.count())]
    assert any((ev.title or ev.skill_name) in r for r in rows), rows
    assert w.toast.isVisible() and w.toast.undo_btn.isVisible() and w.toast.show_btn.isVisible()
    assert "Learned a new skill" in w.toast.label.text()
    qtbot.waitUntil(lambda: any(it.data(0, 0x0100) == ev.path for it in w.tree.items()),
                    timeout=10_000)
    assert w.tree.session_marks.get(ev.skill_id) == "add"
    w.toast.show_btn.click()
    assert w.detail.skill is not None and str(w.detail.skill.path) == ev.path
    # Undo (from the toast, as a user would): the new skill goes to the trash
    w.toast.payload = ("event", ev)
    w.toast.show()
    w.toast.undo_btn.click()
    qtbot.waitUntil(lambda: not os.path.exists(ev.path), timeout=30_000)
    qtbot.waitUntil(lambda: all(it.data(0, 0x0100) != ev.path for it in w.tree.items()),
                    timeout=10_000)
    qtbot.waitUntil(lambda: any(e.kind == "undo" for e in events), timeout=10_000)
    assert any("(undone)" in w.learning.log.item(i).text() for i in range(w.learning.log.count()))
    trash = w.session.bank.trash_dir
    assert any(trash.iterdir())  # recoverable, never deleted


def test_pause_per_chat_and_everywhere(window, qtbot):
    w = window
    queue = w.session.desk.learning
    events = []
    w.session.learning_event.connect(events.append)
    # per chat: this conversation never reaches the learning queue
    w.chat.learn_box.setChecked(False)
    w.chat.input.setPlainText("From now on always answer in French.")
    w.chat.send_btn.click()
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=180_000)
    qtbot.wait(300)
    assert not [e for e in events if e.kind == "queued"]
    assert w.session.store.get(w.controller.cid).learning_paused
    # on again for this chat → the next turn is queued
    w.chat.learn_box.setChecked(True)
    w.chat.input.setPlainText("Again: always answer in French.")
    w.chat.send_btn.click()
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=180_000)
    qtbot.waitUntil(lambda: any(e.kind == "queued" for e in events), timeout=10_000)
    # everywhere: the queue pauses, and the status bar says so
    w.learning.pause_box.setChecked(True)
    assert queue.paused
    w.update_learning_state()
    assert w.learn_button.text() == "Learning: paused"
    w.learning.pause_box.setChecked(False)
    assert not queue.paused


def test_remember_this_on_a_message_learns_from_it_in_a_chat_that_does_not_learn(window, qtbot):
    """"Remember this" under the user's message: the user says it lasts, so it is learned
    although this chat's learning is off, and the message's footer follows the job to the
    skill it became."""
    w = window
    w.chat.learn_box.setChecked(False)  # nothing of this chat is learned unless asked
    w.chat.input.setPlainText("Always start summaries with a one-line TL;DR.")
    w.chat.send_btn.click()
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=180_000)
    [mine] = [b for b in w.chat.bubbles if b.role == "user"]
    assert "Remember this" in mine.footer.text()
    assert w.session.desk.bank.load("default", scope="user").skills == []
    mine._on_link("remember:")
    assert "Remembering" in mine.footer.text()
    qtbot.waitUntil(lambda: "Remembering" not in mine.footer.text(), timeout=180_000)
    assert "Remembered as" in mine.footer.text(), mine.footer.text()
    [skill] = w.session.desk.bank.load("default", scope="user").skills
    assert "tl;dr" in skill.instructions.lower()
    mine._on_link("remember:")  # asked again: nothing happens twice
    assert "Remembered as" in mine.footer.text()
    # the chat reopened (another chat first) still says what the message became
    cid = w.controller.cid
    w.controller.new_conversation()
    w.controller.open_conversation(cid)
    qtbot.waitUntil(lambda: not w.controller.loading, timeout=10_000)
    [again] = [b for b in w.chat.bubbles if b.role == "user"]
    assert "Remembered as" in again.footer.text(), again.footer.text()
    assert "Remember this" not in again.footer.text()


def test_show_on_a_skill_the_tree_has_not_loaded_yet_selects_it_once_loaded(window, qtbot):
    """"Show" right after a skill is written (a toast, a remembered message): the detail shows
    it at once and the tree selects it when its reload comes, not the skill selected before."""
    from engine.learning.candidate import Candidate

    w = window
    bank = w.session.desk.bank
    skill = bank.create(Candidate(name="Metric units", description="Use metric units.",
                                  constraints=["Give lengths in metres"]).to_skill(),
                        "default")
    w.show_skill(str(skill.path))
    assert w.detail.skill is not None and w.detail.skill.id == skill.id
    w.session.load_skills()
    qtbot.waitUntil(lambda: w.tree.current_path() == str(skill.path), timeout=10_000)
