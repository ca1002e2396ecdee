"""``skilldesk`` with no command: run_app opens the window and, on a first run, the welcome
(starter bank, two-sentence explanation), then exits cleanly when the window closes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from engine.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


CHILD = textwrap.dedent("""
    import argparse, json, sys
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QDialog, QLabel
    from desktop.app import ensure_app, run_app

    ensure_app()  # run_app reuses it; the timer needs its event loop
    seen = {}

    polls = {"n": 0}

    def close_all():
        # polled, not one fixed delay: on a loaded machine the skill tree fills late
        polls["n"] += 1
        for w in QApplication.topLevelWidgets():
            if isinstance(w, QDialog) and w.isVisible():
                seen["dialog"] = w.windowTitle()
                seen["text"] = " ".join(lbl.text() for lbl in w.findChildren(QLabel))
                w.accept()
        for w in QApplication.topLevelWidgets():
            if hasattr(w, "session") and w.isVisible():
                seen["title"] = w.windowTitle()
                seen["tree"] = len(w.tree.items())
                if (seen["tree"] and "dialog" in seen) or polls["n"] > 150:
                    w.close()  # the last window: the app quits
                    return
        QTimer.singleShot(200, close_all)

    QTimer.singleShot(1000, close_all)
    rc = run_app(argparse.Namespace(bank=sys.argv[1], user="alice", debug=False))
    print("SEEN " + json.dumps({**seen, "rc": rc}))
""")


def test_run_app_first_run_shows_welcome_and_starter_bank(tmp_path, _private_home):
    """The real entry point in its own process (it runs the app's event loop to the end)."""
    from desktop.first_run import WELCOME

    bank = tmp_path / "newbank"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SKILLDESK_HOME": str(_private_home),
           "PYTHONPATH": str(ROOT)}
    assert not Settings.path().exists()
    out = subprocess.run([sys.executable, "-c", CHILD, str(bank)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=180)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("SEEN ")), None)
    assert line, out.stdout + out.stderr
    seen = json.loads(line[5:])
    assert seen["rc"] == 0 and out.returncode == 0, out.stderr
    assert seen.get("dialog") == "Welcome to SkillDesk"
    assert WELCOME[:40] in seen["text"]
    assert seen["title"] == "SkillDesk"
    assert (bank / "Users" / "alice").is_dir()
    assert any((bank / "Common").rglob("SKILL.md"))  # the starter bank
    assert seen["tree"] >= 1
    assert Settings.path().exists()  # not a first run next time


def test_qt_bindings_keep_references_to_none(qapp):
    """PySide6 6.12.0 on CPython 3.11 lost a reference to None on every void call and aborted
    the app after a few thousand calls (none_dealloc); the pinned version must not."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QLabel, QTreeWidgetItem

    label, item = QLabel(), QTreeWidgetItem(["x"])
    before = sys.getrefcount(None)
    for _ in range(2000):
        label.setText("x")  # returns None
        item.data(0, Qt.ItemDataRole.UserRole)  # an empty QVariant → None
    assert abs(sys.getrefcount(None) - before) < 10  # the bug: -4000


def test_missing_model_is_reported_never_faked(qtbot, open_app, tmp_path, bank_dir):
    """No loadable model: a clear message in the window, and sending gives no answer at all."""
    w = open_app(bank_dir, model=tmp_path / "missing.gguf", wait="model_failed")
    assert w.chat.banner.isVisible()
    assert "No model could be loaded" in w.chat.banner.label.text()
    assert "missing.gguf" in w.chat.banner.label.text()
    assert w.model_label.text() == "Model: not loaded"
    w.chat.input.setPlainText("hello?")
    w.chat.send_btn.click()
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=60_000)
    answer = w.chat.bubbles[-1]
    assert answer.role == "assistant" and "missing.gguf" in answer.meta.get("error", "")
    assert [m.role for m in w.session.store.messages(w.controller.cid)] == ["user"]


def test_first_run_offers_the_recommended_model_when_missing(qtbot, tmp_path, monkeypatch):
    from desktop.first_run import WelcomeDialog, recommended_missing
    from desktop.views.learning import MODEL_NOTE

    monkeypatch.setenv("SKILLDESK_MODELS_DIR", str(tmp_path / "empty-models"))
    assert recommended_missing()
    dlg = WelcomeDialog(offer_model=recommended_missing())
    qtbot.addWidget(dlg)
    assert dlg.install_btn.isVisibleTo(dlg) and "recommended model" in dlg.install_btn.text()
    labels = " ".join(lbl.text() for lbl in dlg.findChildren(type(dlg.status)))
    assert MODEL_NOTE in labels  # "learning quality depends on the model"
    monkeypatch.delenv("SKILLDESK_MODELS_DIR")
    installed = WelcomeDialog(offer_model=False)
    qtbot.addWidget(installed)
    assert not installed.install_btn.isVisibleTo(installed)
