"""Desktop app on hostile input: a bank of 34 hostile SKILL.md files (100,000-deep nesting, alias
bombs, python tags, binary, wrong types, 1 MB files...) plus good ones opens with every good
skill in the tree and every bad file under "Can't read" with its reason; a broken settings file
or a damaged chat history gives a notice, not a crash. Offscreen, tmp SKILLDESK_HOME and bank.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from bench.fuzz_inputs import build_hostile_bank  # noqa: E402


def tree_rows(w) -> tuple[list[str], list[str]]:
    items = w.tree.items()
    return ([it.text(0) for it in items if it.text(1) != "error"],
            [it.text(0) for it in items if it.text(1) == "error"])


def test_hostile_bank_opens_with_good_skills_and_the_cant_read_list(open_app, qtbot, bank_dir,
                                                                    tmp_path):
    good, hostile = build_hostile_bank(bank_dir, real=5)
    # the engine opens too (SkillDesk.open is what crashed); no model is needed for that
    w = open_app(bank_dir, model=tmp_path / "missing.gguf", wait="engine_ready")
    qtbot.waitUntil(lambda: len(w.tree.errors) == len(hostile), timeout=30000)
    tops = [w.tree.tree.topLevelItem(i).text(0) for i in range(w.tree.tree.topLevelItemCount())]
    assert tops[0] == f"Can't read ({len(hostile)})"
    readable, unreadable = tree_rows(w)
    assert sorted(unreadable) == hostile
    assert len(readable) == len(good)
    assert {Path(s.path).parent.name for s in w.session.desk.skills} == set(good)
    reasons = {Path(e.path).parent.name: e.reason for e in w.tree.errors}
    assert reasons["deep-flow-100k"] == "front-matter nests more than 32 levels deep"
    assert reasons["name-list"] == "'name' must be text, not a list"
    w.close()


def test_broken_settings_give_a_notice_not_a_crash(qtbot, tmp_path, bank_dir, monkeypatch):
    from PySide6.QtCore import QSettings

    from desktop.app import create_window
    from engine.settings import Settings

    build_hostile_bank(bank_dir, real=0)
    monkeypatch.setenv("SKILLDESK_BANK", str(bank_dir))
    Settings.path().write_text(json.dumps({"retrieval": {"top_k": "many"}, "theme": 7,
                                           "colour": "red"}), encoding="utf-8")
    qs = QSettings(str(tmp_path / "qt.ini"), QSettings.Format.IniFormat)
    w = create_window(None, None, qs, engine=False)  # the app loads the settings itself
    qtbot.addWidget(w)
    w.show()
    assert w.session.settings.retrieval.top_k == 3 and w.session.settings.theme == "light"
    assert w.notice_label.isVisible()
    assert "'theme' must be text, not 7" in w.notice_label.text()
    assert "(+2 more)" in w.notice_label.text()
    assert "retrieval.top_k" in w.notice_label.toolTip()
    assert w.toast.isVisible() and "settings.json" in w.toast.label.text()
    # the user's file is untouched (not a first run, nothing saved)
    assert json.loads(Settings.path().read_text("utf-8"))["retrieval"]["top_k"] == "many"
    w.close()


def test_a_settings_file_cut_short_and_a_damaged_history_both_noticed(qtbot, tmp_path, bank_dir,
                                                                      monkeypatch):
    from PySide6.QtCore import QSettings

    from desktop.app import create_window
    from engine.chat.conversations import DB_NAME
    from engine.settings import Settings, home_dir

    monkeypatch.setenv("SKILLDESK_BANK", str(bank_dir))
    Settings.path().write_text('{"theme": "dark", "retrieval": {', encoding="utf-8")
    (home_dir() / DB_NAME).write_bytes(b"SQLite format 3\x00" + b"\xee" * 5000)
    qs = QSettings(str(tmp_path / "qt.ini"), QSettings.Format.IniFormat)
    w = create_window(None, None, qs, engine=False)
    qtbot.addWidget(w)
    w.show()
    tip = w.notice_label.toolTip()
    assert "settings.json is not valid JSON" in tip and "chat history could not be read" in tip
    assert list(home_dir().glob(f"{DB_NAME}.damaged-*"))  # kept aside, not deleted
    w.conversations.refresh()  # the new, empty history works
    w.close()
