"""Desktop app: chats survive a restart (with rename / delete + undo / search / export), the
settings dialog saves, theme and splitter state are remembered. No model needed."""

from __future__ import annotations

import json
import os
import time

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings  # noqa: E402

from engine.settings import Settings  # noqa: E402


def start(tmp_path, bank_dir, qtbot, settings: Settings | None = None):
    from desktop.app import create_window

    settings = settings or Settings.load()
    settings.bank = str(bank_dir)
    qs = QSettings(str(tmp_path / "qt.ini"), QSettings.Format.IniFormat)
    w = create_window(None, settings, qs, engine=False)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    return w


def test_conversations_persist_across_restart(tmp_path, bank_dir, qtbot):
    w = start(tmp_path, bank_dir, qtbot)
    store = w.session.store
    # a conversation as the controller stores it (user turn, assistant turn with its skills)
    c = store.new()
    store.add_message(c.id, "user", "请用正式的语气写周报")
    store.add_message(c.id, "assistant", "好的。\n\n```text\n周报\n```",
                      meta={"injected": [{"name": "weekly", "title": "周报格式",
                                          "version": "0.1.1", "score": 0.71, "path": "/x"}],
                            "model": "SmolLM2", "decode_tps": 30.0})
    other = store.new("Scratch")
    store.add_message(other.id, "user", "throwaway")
    w.conversations.refresh()
    w.conversations.rename(c.id, "周报 chat")
    w.conversations.delete(other.id)
    assert w.toast.isVisible() and w.toast.undo_btn.isVisible()
    w.close()

    w2 = start(tmp_path, bank_dir, qtbot)
    titles = [w2.conversations.list.item(i).text() for i in range(w2.conversations.list.count())]
    assert titles == ["周报 chat"]
    w2.controller.open_conversation(c.id)
    qtbot.waitUntil(lambda: not w2.controller.loading)
    bubbles = w2.chat.bubbles
    assert [b.role for b in bubbles] == ["user", "assistant"]
    assert bubbles[0].text == "请用正式的语气写周报"
    assert "周报格式" in bubbles[1].footer.text() and "0.71" in bubbles[1].footer.text()
    assert bubbles[1].copy_blocks() == ["周报"]
    # search across all chats, then undo the earlier delete
    w2.conversations.search.setText("周报")
    assert w2.conversations.list.count() >= 1
    w2.conversations.search.setText("")
    w2.conversations.undo_delete(other.id)
    assert w2.conversations.list.count() == 2
    # export both formats
    md = w2.session.store.export(c.id, tmp_path / "chat.md").read_text("utf-8")
    assert md.startswith("# 周报 chat")
    data = json.loads(w2.session.store.export(c.id, tmp_path / "chat.json").read_text("utf-8"))
    assert data["messages"][0] == {"role": "user", "content": "请用正式的语气写周报"}
    w2.close()


def test_long_chat_opens_without_freezing_the_gui(tmp_path, bank_dir, qtbot):
    w = start(tmp_path, bank_dir, qtbot)
    store = w.session.store
    c = store.new("long")
    for i in range(60):
        store.add_message(c.id, "user" if i % 2 == 0 else "assistant",
                          f"message {i}\n\n```python\nprint({i})\n```\n- a\n- b")
    t0 = time.perf_counter()
    w.controller.open_conversation(c.id)
    first_slice = time.perf_counter() - t0
    assert w.controller.loading and len(w.chat.bubbles) < 60  # the rest arrives in turns
    assert [b.text.split("\n")[0] for b in w.chat.bubbles][-1] == "message 59"  # newest first
    qtbot.waitUntil(lambda: not w.controller.loading, timeout=20000)
    assert [b.text.split("\n")[0] for b in w.chat.bubbles] == [f"message {i}" for i in range(60)]
    print(f"\nopening a 60-message chat: first slice {first_slice * 1000:.0f} ms")
    w.close()


def test_settings_dialog_saves(tmp_path, bank_dir, qtbot, _private_home):
    from desktop.views.settings_dialog import SettingsDialog

    dlg = SettingsDialog(Settings.load())
    qtbot.addWidget(dlg)
    dlg.threads.setValue(2)
    dlg.n_ctx.setValue(1024)
    dlg.temperature.setValue(0.4)
    dlg.system_prompt.setPlainText("Answer in one paragraph.")
    dlg.bank.setText(str(bank_dir))
    dlg.user.setText("alice")
    dlg.top_k.setValue(5)
    dlg.threshold.setValue(0.6)
    assert dlg.self_filter.isChecked()  # on by default (issue 15b)
    dlg.self_filter.setChecked(False)
    dlg.learning.setChecked(False)
    dlg.editor.setText("code -w {path}")
    dlg.theme.setCurrentIndex(dlg.theme.findData("dark"))
    dlg.server_radio.setChecked(True)
    dlg.base_url.setText("http://127.0.0.1:9999/v1")
    dlg.api_model.setText("qwen")
    dlg.accept()
    saved = Settings.load()
    assert (saved.model.n_threads, saved.model.n_ctx, saved.model.temperature) == (2, 1024, 0.4)
    assert saved.model.system_prompt == "Answer in one paragraph."
    assert saved.model.backend == "openai" and saved.model.api_model == "qwen"
    assert saved.bank == str(bank_dir) and saved.user == "alice"
    assert (saved.retrieval.top_k, saved.retrieval.min_relevance) == (5, 0.6)
    assert saved.retrieval.self_filter is False
    assert saved.learning is False and saved.theme == "dark"
    assert saved.editor_command == "code -w {path}"
    assert (_private_home / "settings.json").is_file()

    # "model default" temperature round-trips as None; a bad user name is refused
    dlg2 = SettingsDialog(saved)
    qtbot.addWidget(dlg2)
    assert dlg2.server_radio.isChecked() and dlg2.theme.currentData() == "dark"
    dlg2.temperature.setValue(dlg2.temperature.minimum())
    dlg2.user.setText("../evil")
    dlg2.accept()
    assert dlg2.result_settings is None and Settings.load().user == "alice"
    dlg2.user.setText("bob")
    dlg2.accept()
    assert Settings.load().model.temperature is None and Settings.load().user == "bob"


def test_theme_and_splitters_are_remembered(tmp_path, bank_dir, qtbot):
    w = start(tmp_path, bank_dir, qtbot)
    w.set_theme("dark")
    w.resize(790, 560)  # inside the offscreen screen, so the geometry is restored as is
    qtbot.waitUntil(lambda: w.split.width() < 800)
    default = w.split.sizes()
    w.split.setSizes([default[0] + 30, default[1] - 30, default[2]])
    sizes = w.split.sizes()
    assert sizes != default
    w.close()
    assert Settings.load().theme == "dark"
    w2 = start(tmp_path, bank_dir, qtbot)
    qtbot.wait(50)
    assert w2.size().width() == 790
    assert w2.split.sizes() == sizes
    from desktop import theme

    assert theme.current() == "dark"
    w2.set_theme("light")
    w2.close()
