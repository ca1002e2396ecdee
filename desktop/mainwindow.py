"""The main window: chats (left), the chat (centre), skills and learning (right), status bar.

It wires the panes to the engine session (``desktop.session.Session``): the skill tree reloads
when the bank changes on disk, learning events become log rows and toasts, and the status bar
shows the model, its speed and the learning state. Splitter sizes and the window geometry are
kept in QSettings.
"""

from __future__ import annotations

import html
import itertools
import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QMainWindow,
    QSplitter,
    QTabWidget,
    QToolButton,
)

from engine.errors import SkillDeskError
from engine.settings import home_dir

from . import theme
from .chat_controller import ChatController
from .session import Session
from .skill_actions import SkillActions
from .views.chat import ChatView
from .views.consolidate_dialog import ConsolidateDialog
from .views.conversations import ConversationsPanel
from .views.import_dialog import ImportDialog
from .views.learning import LearningPanel, Toast, replaced_text
from .views.review import ReviewDialog, ReviewPanel
from .views.skill_detail import SkillDetail
from .views.skill_tree import SkillTree

STATE_KEYS = ("main_splitter", "skills_splitter")
log = logging.getLogger("skilldesk.desktop")


class MainWindow(QMainWindow):
    def __init__(self, session: Session, qsettings: QSettings | None = None):
        super().__init__()
        self.session = session
        self._first_load = True  # files unreadable at start are listed, not announced
        # "Remember this" jobs by turn id: (the user's bubble, its message id in the store,
        # what the job has come to); the id outlives the bubble when another chat is opened
        self._remembering: dict[str, tuple[Any, int, str]] = {}
        self._remember_ids = itertools.count(1)
        # Window state lives beside settings.json, so SKILLDESK_HOME isolates it too.
        self.qsettings = qsettings or QSettings(str(home_dir() / "window.ini"),
                                                QSettings.Format.IniFormat)
        self.setWindowTitle("SkillDesk")
        self.setWindowIcon(theme.icon("app"))
        self.resize(1360, 820)

        self.conversations = ConversationsPanel(session.store)
        self.chat = ChatView()
        self.tree = SkillTree()
        self.detail = SkillDetail()
        self.learning = LearningPanel()
        self.actions = SkillActions(session, self)
        self.detail.actions = self.actions
        self.detail.desk_getter = lambda: self.session.desk
        self.detail.usage_getter = lambda skill: self.usage.get(skill.id)
        self.review = ReviewPanel(session, self.actions)
        self.review_dialog = ReviewDialog(self.review, self)
        self.usage: dict[str, Any] = {}
        self.skills_split = QSplitter(Qt.Orientation.Vertical)
        self.skills_split.addWidget(self.tree)
        self.skills_split.addWidget(self.detail)
        self.skills_split.setSizes([300, 480])
        self.right = QTabWidget()
        self.right.addTab(self.skills_split, theme.icon("skill"), "Skills")
        self.right.addTab(self.learning, theme.icon("learning"), "Learning")
        self.split = QSplitter(Qt.Orientation.Horizontal)
        for w in (self.conversations, self.chat, self.right):
            self.split.addWidget(w)
        self.split.setStretchFactor(1, 1)
        self.split.setSizes([250, 680, 430])
        self.split.setChildrenCollapsible(False)
        self.setCentralWidget(self.split)
        self.toast = Toast(self.chat)
        self.consolidate_dialog: ConsolidateDialog | None = None
        self.import_dialog: ImportDialog | None = None

        self.controller = ChatController(session.store, session.chat, self.chat,
                                         learn_default=lambda: self.session.settings.learning,
                                         parent=self)
        self._build_status_bar()
        self._build_menus()
        self._wire()
        self.restore_state()
        self.apply_settings()
        self.conversations.refresh()
        self._state_timer = QTimer(self, interval=500)
        self._state_timer.timeout.connect(self.update_learning_state)
        self._state_timer.start()

    # ------------------------------------------------------------------ building
    def _build_status_bar(self) -> None:
        sb = self.statusBar()
        self.model_label = QLabel("Model: loading…")
        self.speed_label = QLabel("")
        self.learn_button = QToolButton(icon=theme.icon("learning"), text="Learning: idle")
        self.learn_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.learn_button.setAutoRaise(True)
        self.learn_button.clicked.connect(lambda: self.right.setCurrentWidget(self.learning))
        # what could not be used at start (a broken settings file, a damaged chat history)
        self.notice_label = QLabel("")
        self.notice_label.setObjectName("startupNotice")
        self.notice_label.hide()
        sb.addWidget(self.notice_label)
        for w in (self.speed_label, self.model_label, self.learn_button):
            sb.addPermanentWidget(w)

    def show_notices(self, notices: list[str]) -> None:
        """Say once, at start, what SkillDesk could not use and what it did instead.

        The first notice is shown as a toast; all of them stay in the status bar (full text in
        its tooltip) so a notice hidden by a later toast is not lost.
        """
        if not notices:
            return
        more = f" (+{len(notices) - 1} more)" if len(notices) > 1 else ""
        self.notice_label.setText(f"⚠ {notices[0]}{more}")
        self.notice_label.setToolTip("\n".join(notices))
        self.notice_label.show()
        self.toast.notify(f"{notices[0]}{more}", icon="warning")

    def _build_menus(self) -> None:
        m = self.menuBar().addMenu("&File")
        self._action(m, "New chat", self.controller.new_conversation, QKeySequence.StandardKey.New)
        self._action(m, "New skill…", lambda: self.actions.new_skill())
        self._action(m, "Import…", self.open_import, QKeySequence("Ctrl+I"))
        self._action(m, "Export chat as Markdown…", lambda: self.export_current("md"))
        self._action(m, "Export chat as JSON…", lambda: self.export_current("json"))
        m.addSeparator()
        self._action(m, "Settings…", self.open_settings, QKeySequence("Ctrl+,"))
        m.addSeparator()
        self._action(m, "Quit", self.close, QKeySequence.StandardKey.Quit)
        v = self.menuBar().addMenu("&View")
        self._action(v, "Light theme", lambda: self.set_theme("light"))
        self._action(v, "Dark theme", lambda: self.set_theme("dark"))
        self._action(v, "Reload skills", self.reload_skills, QKeySequence("F5"))
        v.addSeparator()
        self.consolidate_action = self._action(v, "Consolidate skills…", self.open_consolidate)
        self._action(v, "Review skills…", self.open_review, QKeySequence("Ctrl+R"))
        h = self.menuBar().addMenu("&Help")
        self._action(h, "Welcome", lambda: self.session.show_welcome(self))

    def _action(self, menu, text, slot, shortcut=None) -> QAction:
        act = QAction(text, self)
        if shortcut is not None:
            act.setShortcut(shortcut)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _wire(self) -> None:
        s = self.session
        c = self.controller
        self.conversations.opened.connect(c.open_conversation)
        self.conversations.new_requested.connect(c.new_conversation)
        self.conversations.deleted.connect(self._on_deleted)
        self.conversations.export_requested.connect(self.export)
        c.conversation_changed.connect(self._on_conversation_changed)
        c.status.connect(lambda t: self.statusBar().showMessage(t, 5000))
        c.turn_done.connect(self._on_turn_done)
        c.live_speed.connect(lambda r: self.speed_label.setText(f"{r:.1f} tok/s"))
        self.chat.skill_link.connect(self.show_skill)
        self.tree.selected.connect(self._on_tree_selected)
        self.tree.consolidate_requested.connect(self.open_consolidate)
        self.tree.review_requested.connect(self.open_review)
        self.tree.context_requested.connect(self._on_tree_context)
        self.actions.status.connect(lambda t: self.statusBar().showMessage(t, 6000))
        self.actions.created.connect(self._select_when_loaded)
        self.actions.deleted.connect(self._on_skill_deleted)
        self.review.status.connect(lambda t: self.statusBar().showMessage(t, 8000))
        self.review.show_skill.connect(self.show_skill)
        self.review.merged.connect(self._on_review_merged)
        self.chat.skill_feedback.connect(self._on_skill_feedback)
        self.chat.remember_requested.connect(self.remember)
        s.usage_loaded.connect(self._on_usage_loaded)
        self.detail.status.connect(lambda t: self.statusBar().showMessage(t, 6000))
        self.detail.changed.connect(lambda p: s.skills_changed([p]))
        self.learning.show_skill.connect(self.show_skill)
        self.learning.undo_requested.connect(s.undo_event)
        self.learning.pause_toggled.connect(s.pause_learning)
        self.toast.show_clicked.connect(self._toast_show)
        self.toast.undo_clicked.connect(self._toast_undo)
        s.load_errors.connect(self._on_load_errors)
        s.skills_loaded.connect(self._on_skills_loaded)
        s.files_changed.connect(self._on_files_changed)
        s.engine_ready.connect(self._on_engine_ready)
        s.engine_failed.connect(self._on_engine_failed)
        s.model_ready.connect(self._on_model_ready)
        s.model_failed.connect(self._on_model_failed)
        s.learning_event.connect(self._on_learning_event)
        s.message.connect(lambda t: self.statusBar().showMessage(t, 8000))

    # ------------------------------------------------------------------ state
    def restore_state(self) -> None:
        geo = self.qsettings.value("window/geometry")
        if geo is not None:
            self.restoreGeometry(geo)
        for key, split in zip(STATE_KEYS, (self.split, self.skills_split), strict=True):
            state = self.qsettings.value(f"window/{key}")
            if state is not None:
                split.restoreState(state)

    def save_state(self) -> None:
        self.qsettings.setValue("window/geometry", self.saveGeometry())
        for key, split in zip(STATE_KEYS, (self.split, self.skills_split), strict=True):
            self.qsettings.setValue(f"window/{key}", split.saveState())
        self.qsettings.sync()

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt override
        self.save_state()
        self._state_timer.stop()
        self.session.shutdown()
        super().closeEvent(event)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        if self.toast.isVisible():
            self.toast.place()

    # ------------------------------------------------------------------ settings
    def apply_settings(self) -> None:
        st = self.session.settings
        self.tree.user = st.user
        self.detail.editor_command = st.editor_command
        self.detail.bank = self.session.bank
        self.model_label.setText(f"Model: {self.session.model_title()}")

    def set_theme(self, name: str) -> None:
        self.session.set_theme(name)
        self._rerender()

    def _rerender(self) -> None:
        for b in self.chat.bubbles:
            b.set_text(b.text)
            b.set_meta(b.meta)
        self.detail.show_skill(self.detail.skill)

    def open_settings(self) -> None:
        if self.session.open_settings(self):
            self.apply_settings()
            self._rerender()

    # ------------------------------------------------------------------ skills
    def reload_skills(self) -> None:
        self.session.load_skills()

    def open_consolidate(self) -> ConsolidateDialog:
        """The consolidation dialog (one per window: an applied merge keeps its Undo button)."""
        dlg = self.consolidate_dialog
        if dlg is None:
            dlg = self.consolidate_dialog = ConsolidateDialog(self.session, self)
            dlg.bank_changed.connect(self._on_consolidated)
        dlg.show()
        dlg.raise_()
        dlg.activateWindow()
        if not dlg.busy and dlg.record is None:
            dlg.compute()
        return dlg

    def _on_consolidated(self, paths: list) -> None:
        self.session.load_skills()
        if paths:
            self.session.files_changed.emit(list(paths))

    def _on_skills_loaded(self, skills: list) -> None:
        self.tree.set_skills(skills, self.session.settings.user)
        self.detail.bank = self.session.bank
        shown = self.detail.skill
        if shown is not None:
            fresh = self.tree.find(str(shown.path))
            if fresh is not None and fresh.content_hash == shown.content_hash:
                self.detail.skill = fresh  # same file; the effective version from the load
            self.detail.set_usage(self.usage.get(shown.id))
        want, self._want_select = getattr(self, "_want_select", None), None
        if want and not self.tree.select_path(want):
            self._want_select = want

    def _on_usage_loaded(self, usage: dict) -> None:
        self.usage = usage
        self.actions.usage = usage
        self.tree.set_usage(usage)

    # ------------------------------------------------------------------ managing skills
    def _on_tree_context(self, path: str, pos) -> None:
        skill = self.tree.find(path) if path else None
        self.context_menu = self.actions.menu(skill, self)
        self.context_menu.popup(pos)

    def _select_when_loaded(self, path: str) -> None:
        if not self.tree.select_path(path):
            self._want_select = path

    def _on_skill_deleted(self, title: str, trash_path: str) -> None:
        self.toast.notify(f"Moved “{title}” to the trash", ("trash", trash_path), undo=True,
                          icon="trash")

    def _on_review_merged(self, record: Any) -> None:
        self.toast.notify(f"Merged {record.merged} near-duplicate skill(s)",
                          ("consolidation", record.id), undo=True, icon="merged")

    def _on_skill_feedback(self, bubble: Any, ref: str, query: str) -> None:
        """"didn't fit" on the Skills used line: record it, then offer to disable the skill."""
        desk = self.session.desk
        if desk is None:
            return
        try:
            skill = desk.read(ref) if ref.endswith(".md") else desk.find(ref)
        except Exception as exc:  # noqa: BLE001 - a stale link: say so
            self.statusBar().showMessage(f"Skill not found: {exc}", 6000)
            return

        def done(_ev: Any) -> None:
            bubble.mark_didnt_fit(ref)
            self.toast.notify(f"Noted: “{skill.display_name}” didn't fit. It won't be used "
                              "for similar requests. Disable it everywhere?",
                              ("disable", skill), show=True, icon="warning",
                              show_text="Disable it")

        self.session.run_desk(lambda d: d.feedback(skill, query), done, what="Feedback")

    def open_review(self) -> ReviewPanel:
        self.review_dialog.show()
        self.review_dialog.raise_()
        self.review_dialog.activateWindow()
        if self.review.review is None and not self.review.busy:
            self.review.compute()
        return self.review

    def open_import(self) -> ImportDialog:
        dlg = self.import_dialog
        if dlg is None:
            dlg = self.import_dialog = ImportDialog(self.session, self)
            dlg.imported.connect(lambda _out: self.session.load_skills())
        dlg.show()
        dlg.raise_()
        return dlg

    def _on_load_errors(self, errors: list) -> None:
        """Say so when a file becomes unreadable (a hand edit that broke its YAML, say)."""
        before = {e.path for e in self.tree.errors}
        self.tree.set_errors(errors)
        new = [e for e in errors if e.path not in before]
        if new and not self._first_load:
            e = new[0]
            name = Path(e.path).parent.name if Path(e.path).name == "SKILL.md" else e.path
            more = f" (and {len(new) - 1} more)" if len(new) > 1 else ""
            self.toast.notify(f"Can't read “{name}”{more}: {e.reason}. Fix it in your editor; "
                              "nothing was lost.", ("path", e.path), show=True, icon="warning")
        self._first_load = False

    def _on_files_changed(self, paths: list) -> None:
        shown = self.detail.shown_path()
        if shown is not None and any(
                Path(p) == Path(shown) or Path(shown).parent in Path(p).parents or
                Path(p) == Path(shown).parent for p in paths):
            self.detail.reload()

    def _on_tree_selected(self, path: str) -> None:
        skill = self.tree.find(path)
        if skill is not None:
            self.detail.show_skill(skill)
        elif (err := self.tree.error_for(path)) is not None:
            self.detail.show_error(path, err.reason)

    def show_skill(self, ref: str) -> None:
        path = ref[6:] if ref.startswith("skill:") else ref
        self.right.setCurrentWidget(self.skills_split)
        if self.tree.filter.text():
            self.tree.filter.clear()
        if not self.tree.select_path(path):
            try:
                self.detail.show_skill(self.session.bank.read(path))
            except Exception as exc:  # noqa: BLE001 - a stale link: say so
                self.statusBar().showMessage(f"Skill not found: {exc}", 6000)
                return
            self._want_select = path  # just written: the tree selects it once it is loaded

    # ------------------------------------------------------------------ chats
    def _on_conversation_changed(self, cid: str) -> None:
        self.conversations.refresh()
        self.conversations.select(cid)

    def _on_deleted(self, cid: str, title: str) -> None:
        if self.controller.cid == cid:
            self.controller.new_conversation()
        self.toast.notify(f"Deleted “{title}”", ("chat", cid), undo=True, icon="trash")

    def _toast_undo(self, payload: tuple[str, Any]) -> None:
        kind, obj = payload
        if kind == "trash":
            self.actions.restore(obj)
        elif kind == "consolidation":
            from engine.consolidate import undo

            self.session.run_desk(lambda d: (undo(d.bank, obj), d.refresh())[0],
                                  lambda _r: self.statusBar().showMessage("Merge undone", 5000),
                                  what="Undo")
        elif kind == "disable":
            self.actions.set_disabled(obj, True)
        elif kind == "chat":
            self.conversations.undo_delete(obj)
            self.controller.open_conversation(obj)
        elif kind == "event":
            self.session.undo_event(obj)

    def _toast_show(self, payload: tuple[str, Any]) -> None:
        kind, obj = payload
        if kind == "disable":
            self.actions.set_disabled(obj, True)
        elif kind == "event" and obj.path:
            self.show_skill(obj.path)
        elif kind == "path":
            self.show_skill(obj)

    def export_current(self, fmt: str) -> None:
        if not self.controller.cid:
            self.statusBar().showMessage("Nothing to export yet", 3000)
            return
        self.export(self.controller.cid, fmt)

    def export(self, cid: str, fmt: str) -> None:
        title = self.session.store.get(cid).title
        safe = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in title).strip()
        ext = "json" if fmt == "json" else "md"
        path, _ = QFileDialog.getSaveFileName(
            self, "Export chat", str(Path.home() / f"{safe or 'chat'}.{ext}"),
            "JSON (*.json)" if ext == "json" else "Markdown (*.md)")
        if path:
            out = self.session.store.export(cid, path)
            self.statusBar().showMessage(f"Exported to {out}", 5000)

    def _on_turn_done(self, info: dict) -> None:
        tps = info.get("decode_tps")
        self.speed_label.setText(f"{tps:.1f} tok/s" if isinstance(tps, int | float) else "")
        if info.get("model"):
            self.model_label.setText(f"Model: {info['model']}")

    # ------------------------------------------------------------------ engine
    def _on_engine_ready(self, _desk: Any) -> None:
        self.model_label.setText(f"Model: {self.session.model_title()}")
        self.chat.banner.hide()
        self.learning.log.clear()
        for ev in self.session.learning_history():  # the log so far: rows, no toasts
            self.learning.add_event(ev)

    def _on_model_ready(self, name: str) -> None:
        self.model_label.setText(f"Model: {name or self.session.model_title()}")

    def _on_model_failed(self, message: str) -> None:
        self.model_label.setText("Model: not loaded")
        self.chat.banner.show_text(f"<b>No model could be loaded.</b> {html.escape(message)}<br>"
                                   "Choose one in <i>File → Settings → Model</i> (a GGUF file, "
                                   "the recommended model, or an OpenAI-compatible server).")

    def _on_engine_failed(self, message: str) -> None:
        self.chat.banner.show_text(f"<b>The skill engine could not start.</b> {html.escape(message)}<br>"
                                   "Open <i>File → Settings</i> to choose a bank or model.")

    def remember(self, bubble: Any) -> None:
        """"Remember this" on a user message: learn from it now, whatever the model would
        have guessed (SkillDesk.remember); the message's footer follows the job by its turn
        id, picked here so that no event of it can come before the bubble is known."""
        msgs = self.controller.messages_to_remember(bubble)
        if msgs is None or bubble.meta.get("remembered"):
            return
        turn_id = f"remember-{bubble.message_id}-{next(self._remember_ids)}"
        self._remembering[turn_id] = (bubble, bubble.message_id,
                                      "Not remembered: nothing lasting found")
        bubble.set_remembered("Remembering… (learned in the background)")
        if not self.session.run_desk(lambda d: d.remember(msgs, turn_id=turn_id),
                                     what="Remember this"):
            del self._remembering[turn_id]
            bubble.set_remembered("")

    def _remembered(self, ev: Any) -> None:
        """A learning event of a "Remember this" job: what it came to, on the message."""
        if ev.turn_id not in self._remembering:
            return
        bubble, message_id, state = self._remembering[ev.turn_id]
        if ev.kind in ("add", "merge"):
            verb = "Remembered as" if ev.kind == "add" else "Added to"
            state = f"{verb} “{ev.title or ev.skill_name}”"
        elif ev.kind in ("discard", "error") and not state.startswith(("Remembered", "Added")):
            state = f"Not remembered: {ev.reason}"
        self._remembering[ev.turn_id] = (bubble, message_id, state)
        if ev.kind == "done":
            del self._remembering[ev.turn_id]
            self._keep_remembered(message_id, state)
            try:
                bubble.set_remembered(state)
            except RuntimeError:  # the bubble is gone (another chat was opened)
                pass

    def _keep_remembered(self, message_id: int, state: str) -> None:
        """What a "Remember this" came to, kept with the message: the chat reopened shows it
        (and no second *Remember this* link) as it did when the job finished."""
        store = self.controller.store
        try:
            meta = dict(store.message(message_id).meta)
            meta["remembered"] = state
            store.update_message(message_id, meta=meta, touch=False)
        except SkillDeskError as exc:  # the chat was deleted meanwhile, the store is broken
            log.info("the remembered state of message %s was not kept: %s", message_id, exc)

    def _on_learning_event(self, ev: Any) -> None:
        self.learning.add_event(ev)
        self._remembered(ev)
        if ev.kind in ("add", "merge") and ev.path:
            self.tree.mark(ev.skill_id or ev.path, ev.kind)
            verb = "Learned a new skill" if ev.kind == "add" else "Updated a skill"
            self.toast.notify(f"{verb}: “{ev.title or ev.skill_name}”{replaced_text(ev)}",
                              ("event", ev),
                              show=True, undo=True, icon="new" if ev.kind == "add" else "merged")
        elif ev.kind == "undo":
            self.learning.mark_undone(getattr(ev, "undoes", "") or "")
        self.update_learning_state()

    def update_learning_state(self) -> None:
        text = self.learning.set_state(self.session.learning_state())
        self.learn_button.setText(text)
