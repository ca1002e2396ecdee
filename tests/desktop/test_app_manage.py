"""Issue 18, the app: manage skills from the tree's context menu and the detail pane, usage in
both, the Review view, File → Import…, and "didn't fit" on the Skills used line. The real
window (offscreen), the real engine (embedder + index; no chat model), a real bank on disk."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from bench.oracle import OracleLLM  # noqa: E402
from engine.bank.skill import Skill  # noqa: E402
from engine.bank.state import SkillState  # noqa: E402
from engine.bank.store import SkillBank  # noqa: E402
from tests.conftest import SESSIONS as SAMPLES  # noqa: E402


def make_skill(bank: SkillBank, title: str, description: str, rules: list[str]) -> Skill:
    return bank.create(Skill(name=title, title=title, description=description,
                             instructions=f"# Goal\n{description}\n\n# Constraints & Style\n"
                             + "".join(f"- {r}\n" for r in rules)), "default")


@pytest.fixture
def window(qtbot, open_app, bank_dir):
    bank = SkillBank(bank_dir)
    make_skill(bank, "TL;DR first", "Start every summary with a one-line TL;DR.",
               ["One line, then details"])
    make_skill(bank, "SQL query tuning", "Speed up slow SQL queries with indexes.",
               ["Run EXPLAIN ANALYZE first"])
    make_skill(bank, "Git commit messages", "Imperative commit subject lines.",
               ["Subject under 50 characters"])
    w = open_app(bank_dir, scripted=OracleLLM())  # not about the model: no real one loads
    qtbot.waitUntil(lambda: len(w.tree.items()) == 3, timeout=20000)
    yield w
    w.close()


def item(w, title: str):
    return next(it for it in w.tree.items() if it.text(0) == title)


def open_menu(w, title: str):
    """Right-click on a skill in the tree (expanded first, as a user would)."""
    it = item(w, title)
    w.tree.select_path(it.data(0, 256))
    w.tree.tree.customContextMenuRequested.emit(w.tree.tree.visualItemRect(it).center())
    return w.context_menu


def menu_action(menu, text: str):
    for act in menu.actions():
        if act.text() == text:
            return act
        if act.menu() is not None:
            found = menu_action(act.menu(), text)
            if found is not None:
                return found
    return None


def state(w) -> dict:
    return SkillState(w.session.bank.root, "default").all()


def test_context_menu_disable_enable_always_on_and_level(qtbot, window):
    w = window
    menu = open_menu(w, "SQL query tuning")
    assert menu.isVisible()
    texts = [a.text() for a in menu.actions() if a.text()]
    for t in ("New skill…", "Open in editor", "Disable", "Always apply", "Move to level",
              "Move to a folder…", "Delete", "Restore from trash"):
        assert t in texts, texts
    menu_action(menu, "Disable").trigger()
    menu.close()
    qtbot.waitUntil(lambda: item(w, "SQL query tuning").text(1).startswith("off"),
                    timeout=10000)
    sql = w.tree.find(item(w, "SQL query tuning").data(0, 256))
    assert state(w)[sql.id]["disabled"] is True
    assert "SQL query tuning" not in [h.skill.title for h in
                                      w.session.desk.search("slow SQL query index")]
    # the detail pane says so and enables it again
    w.tree.select_path(str(sql.path))
    qtbot.waitUntil(lambda: w.detail.disable_btn.text() == "Enable", timeout=5000)
    assert "Disabled" in w.detail.usage_label.text()
    w.detail.disable_btn.click()
    qtbot.waitUntil(lambda: not item(w, "SQL query tuning").text(1).startswith("off"),
                    timeout=10000)
    # always apply, from the detail pane
    w.detail.always_box.click()
    qtbot.waitUntil(lambda: item(w, "SQL query tuning").text(1).startswith("always"),
                    timeout=10000)
    assert w.session.desk.render_context("what's the weather like?").startswith(
        'Skill "SQL query tuning"')
    # move to another level from the menu: the tree regroups it
    menu_action(open_menu(w, "SQL query tuning"), "Atomic").trigger()
    w.context_menu.close()
    qtbot.waitUntil(lambda: item(w, "SQL query tuning").parent().parent().text(0)
                    .startswith("Atomic"), timeout=10000)


def test_new_delete_undo_and_restore(qtbot, window):
    w = window
    assert w.actions.new_skill("Meeting notes", open_editor=False)
    qtbot.waitUntil(lambda: w.detail.skill is not None
                    and w.detail.skill.title == "Meeting notes", timeout=10000)
    path = Path(w.detail.skill.path)
    assert "# Constraints & Style" in path.read_text()
    w.detail.delete_btn.click()
    qtbot.waitUntil(lambda: w.toast.isVisible() and "trash" in w.toast.label.text(),
                    timeout=10000)
    qtbot.waitUntil(lambda: "Meeting notes" not in [i.text(0) for i in w.tree.items()],
                    timeout=10000)
    assert not path.exists()
    w.toast.undo_btn.click()
    qtbot.waitUntil(lambda: "Meeting notes" in [i.text(0) for i in w.tree.items()],
                    timeout=10000)
    # delete again, then restore from the context menu's trash list
    w.actions.delete(w.tree.find(str(path)))
    qtbot.waitUntil(lambda: "Meeting notes" not in [i.text(0) for i in w.tree.items()],
                    timeout=10000)
    w.tree.tree.customContextMenuRequested.emit(w.tree.tree.viewport().rect().bottomLeft())
    act = next(a for a in w.context_menu.actions() if a.text() == "Restore from trash")
    entry = next(a for a in act.menu().actions() if a.text().startswith("Meeting notes"))
    entry.trigger()
    w.context_menu.close()
    qtbot.waitUntil(lambda: "Meeting notes" in [i.text(0) for i in w.tree.items()],
                    timeout=10000)


def test_usage_shows_in_tree_and_detail(qtbot, window):
    w = window
    desk = w.session.desk
    tldr = desk.find("TL;DR first")
    desk.record_use([tldr])
    desk.record_use([tldr])
    w.session.load_skills()
    qtbot.waitUntil(lambda: item(w, "TL;DR first").text(1).endswith("2×"), timeout=10000)
    w.tree.select_path(str(tldr.path))
    qtbot.waitUntil(lambda: "Used 2×" in w.detail.usage_label.text(), timeout=5000)
    assert "last used 20" in w.detail.usage_label.text()
    assert "Used 2×" in item(w, "TL;DR first").toolTip(0)


def test_review_view_lists_and_acts_without_deleting(qtbot, window):
    w = window
    bank = w.session.bank
    make_skill(bank, "Misc", "Misc.", ["Be helpful", "Be good"])
    old = time.time() - 90 * 86400
    for s in bank.load("default", "user").skills:
        os.utime(s.path, (old, old))
    w.session.desk.refresh()
    before = sorted(p.name for p in (bank.root / "Users" / "default").iterdir())
    panel = w.open_review()
    qtbot.waitUntil(lambda: panel.review is not None, timeout=30000)
    groups = [panel.tree.topLevelItem(i).text(0) for i in range(panel.tree.topLevelItemCount())]
    assert groups[0].startswith("Not used in 30 days (4)") and groups[2].startswith("Flagged")
    assert sorted(p.name for p in (bank.root / "Users" / "default").iterdir()) == before
    unused = panel.tree.topLevelItem(0)
    row = next(unused.child(i) for i in range(unused.childCount())
               if unused.child(i).text(0) == "Misc")
    from PySide6.QtWidgets import QToolButton

    buttons = {b.text(): b for b in panel.tree.itemWidget(row, 2).findChildren(QToolButton)}
    assert set(buttons) == {"Disable", "Delete"}
    buttons["Disable"].click()
    misc = w.session.desk.find("Misc")
    qtbot.waitUntil(lambda: state(w).get(misc.id, {}).get("disabled") is True, timeout=10000)
    assert misc.path.exists()


def test_file_import_skills_and_conversation_check_and_cancel(qtbot, window, tmp_path):
    w = window
    src = tmp_path / "incoming" / "units"
    src.mkdir(parents=True)
    (src / "SKILL.md").write_text("---\nname: units\ndescription: Use metric units.\n---\n"
                                  "# Goal\nMetric units.\n", "utf-8")
    dlg = w.open_import()
    dlg.set_input("skills", src.parent)
    with qtbot.waitSignal(dlg.imported, timeout=30000) as sig:
        assert dlg.start()
    assert sig.args[0]["added"] == 1 and "units" in dlg.summary.toPlainText()
    qtbot.waitUntil(lambda: "units" in [i.text(0) for i in w.tree.items()], timeout=10000)
    if not SAMPLES.is_dir():
        pytest.skip("AutoSkill session samples not found")
    sessions = tmp_path / "sessions"
    shutil.copytree(SAMPLES, sessions)
    dlg.set_input("conversations", sessions)
    assert dlg.check()
    qtbot.waitUntil(lambda: "3 conversations" in dlg.summary.toPlainText(), timeout=20000)
    assert "26 messages" in dlg.summary.toPlainText()
    # an import cancelled before its first item learns nothing and loads no model
    dlg._cancel.set()
    dlg.start()
    dlg.cancel()
    qtbot.waitUntil(lambda: not dlg.running, timeout=30000)
    assert "cancelled" in dlg.summary.toPlainText()
    assert dlg.cancel_btn.isEnabled() is False


def test_didnt_fit_on_the_skills_used_line(qtbot, window):
    w = window
    desk = w.session.desk
    sql = desk.find("SQL query tuning")
    query = "my SQL query is slow, add an index?"
    meta = {"injected": [{"id": sql.id, "name": sql.name, "title": sql.title,
                          "version": sql.version, "path": str(sql.path), "score": 0.8}],
            "query": query}
    bubble = w.chat.add_message("assistant", "Use an index.", meta)
    assert "didn't fit?" in bubble.footer.text()
    bubble._on_link(f"fit:{sql.path}")
    qtbot.waitUntil(lambda: w.toast.isVisible() and "didn't fit" in w.toast.label.text(),
                    timeout=10000)
    assert "noted" in bubble.footer.text()
    assert w.toast.show_btn.text() == "Disable it"
    fb = state(w)[sql.id]["feedback"]
    assert fb[-1]["query"] == query and fb[-1]["kind"] == "didnt_fit"
    qtbot.waitUntil(lambda: any("didn't fit" in w.learning.log.item(i).text()
                                for i in range(w.learning.log.count())), timeout=5000)
    assert "SQL query tuning" not in [h.skill.title for h in desk.search(query)]
    w.toast.show_btn.click()  # "Disable it"
    qtbot.waitUntil(lambda: state(w)[sql.id].get("disabled") is True, timeout=10000)
    assert json.dumps(state(w))  # still a readable sidecar


@pytest.mark.model
def test_file_import_conversations_learns_with_progress_and_summary(
        qtbot, open_app, bank_dir, tmp_path, bundled_model_path, preference_chat):
    """File → Import… on a real conversation export with the bundled model: progress, then a
    summary naming what was learned; importing again changes nothing."""
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"sessions": [{"id": "s1", "meta": {"title": "TL;DR"},
                                                "state": {"messages": preference_chat}}]}),
                      "utf-8")
    w = open_app(bank_dir, model=bundled_model_path, max_tokens=16, n_ctx=2048)
    dlg = w.open_import()
    dlg.set_input("conversations", export)
    steps = []
    dlg._progress.step.connect(lambda d, t, what: steps.append((d, t)))
    with qtbot.waitSignal(dlg.imported, timeout=300_000) as sig:
        assert dlg.start()
    out = sig.args[0]
    assert out["read"] == 1 and out["processed"] == 1 and not out["cancelled"]
    assert steps[0] == (0, 1) and steps[-1] == (1, 1)
    text = dlg.summary.toPlainText()
    assert f"{out['added']} skills added" in text
    for s in out["skills"]:
        assert s["title"] in text
    with qtbot.waitSignal(dlg.imported, timeout=60_000) as again:
        assert dlg.start()
    assert again.args[0]["processed"] == 0 and again.args[0]["already_imported"] == 1
    w.close()
