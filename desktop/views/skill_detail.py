"""The selected skill: rendered with its metadata, its version history (diff, revert), its files.

"Open in editor" uses the configured editor command (``{path}`` is replaced; without it the path
is appended) or the desktop's default application for Markdown files.
"""

from __future__ import annotations

import html
import shlex
from pathlib import Path

from PySide6.QtCore import QProcess, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QTabWidget,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.errors import SkillDeskError

from .. import markdown, theme
from ..workers import run_async
from .history import HistoryTab


def open_in_editor(path: str | Path, command: str = "") -> str:
    """Launch the user's editor on ``path``; returns a message for the status bar."""
    path = str(path)
    if command.strip():
        parts = shlex.split(command)
        args = [p.replace("{path}", path) for p in parts]
        if not any("{path}" in p for p in parts):
            args.append(path)
        ok = QProcess.startDetached(args[0], args[1:])[0]
        return f"Opened in {args[0]}" if ok else f"Could not start editor command: {args[0]}"
    ok = QDesktopServices.openUrl(QUrl.fromLocalFile(path))
    return "Opened in your default editor" if ok else (
        "No default application for .md files: set an editor command in Settings")


def skill_html(skill: Skill) -> str:
    c = theme.colors()
    rows = [("Name", skill.name), ("Version", skill.version), ("Level", skill.level),
            ("About", "you (applies in any area where it matters)" if skill.about_user
             else ""),
            ("Scope", f"{skill.scope} · {skill.owner}"), ("Tags", ", ".join(skill.tags)),
            ("Triggers", "; ".join(skill.triggers)), ("Source", skill.source),
            ("Created", skill.created), ("Updated", skill.updated), ("Id", skill.id)]
    meta = "".join(
        f'<tr><td style="color:{c["muted"]}; padding-right:10px;">{k}</td>'
        f"<td>{html.escape(str(v))}</td></tr>" for k, v in rows if v)
    body = markdown.render(skill.instructions or "").html
    return (f"<h2>{html.escape(skill.display_name)}</h2>"
            f'<p style="color:{c["muted"]};">{html.escape(skill.description)}</p>'
            f'<table cellspacing="0" cellpadding="2">{meta}</table><hr>{body}')


RAW_MAX_CHARS = 20_000


def error_html(path: str | Path, reason: str) -> str:
    """A file that cannot be read: why, what to do, and its text as it is on disk."""
    c = theme.colors()
    try:
        with open(path, "rb") as fh:  # a huge or binary file is never read whole
            raw = fh.read(RAW_MAX_CHARS).decode("utf-8", "replace")
    except OSError as exc:
        raw = f"({exc.strerror or exc})"
    if "\x00" in raw:
        raw = "(binary content not shown)"
    return (f'<h3>This file cannot be read</h3>'
            f'<p style="color:{c["danger"]};">{html.escape(reason)}</p>'
            "<p>Nothing was lost: the file is unchanged on disk, and its earlier versions (if "
            "SkillDesk ever read it) stay in the bank's history. Fix it in your editor and save: "
            "SkillDesk reloads it and uses it again. Until then it is not used in answers.</p>"
            f'<p style="color:{c["muted"]};">{html.escape(str(path))}</p>'
            f"<pre>{html.escape(raw)}</pre>")


class SkillDetail(QWidget):
    """Emits ``changed(path)`` after a revert, and ``status(text)`` for the status bar."""

    changed = Signal(str)
    status = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.bank: SkillBank | None = None
        self.skill: Skill | None = None
        self.error_path: str | None = None  # shown: a file that cannot be read
        self.editor_command = ""
        self.actions = None  # desktop.skill_actions.SkillActions (set by the window)
        self.usage = None  # engine.desk_skills.SkillUsage of the shown skill
        self.desk_getter = lambda: None  # the open SkillDesk, for writes that reindex
        self.usage_getter = lambda _skill: None  # skill -> SkillUsage (the window's last load)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        self.title = QLabel("Select a skill", objectName="PanelTitle")
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        lay.addWidget(self.title)
        head = QHBoxLayout()
        self.info = QLabel(objectName="Hint")
        self.info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.open_btn = QPushButton(theme.icon("open"), "Open in editor")
        self.open_btn.clicked.connect(self.open_editor)
        self.folder_btn = QPushButton(theme.icon("folder"), "Folder")
        self.folder_btn.clicked.connect(self.open_folder)
        head.addWidget(self.info, 1)
        head.addWidget(self.folder_btn)
        head.addWidget(self.open_btn)
        lay.addLayout(head)
        # usage and management (issue 18): used N×, last used, last changed; the actions
        manage = QHBoxLayout()
        self.usage_label = QLabel(objectName="Hint")
        self.usage_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.usage_label.setWordWrap(True)  # a narrow pane wraps "changed …", never cuts it
        self.disable_btn = QToolButton(icon=theme.icon("pause"), text="Disable")
        self.disable_btn.setToolTip("Keep the skill on disk but never use it in answers or "
                                    "merge into it")
        self.disable_btn.clicked.connect(self._toggle_disabled)
        self.always_box = QCheckBox("Always apply")
        self.always_box.setToolTip("Inject this skill in every chat (within the skill budget)")
        self.always_box.clicked.connect(self._toggle_always)
        self.delete_btn = QToolButton(icon=theme.icon("trash"), text="Delete")
        self.delete_btn.setToolTip("Move to the bank's trash (Undo, or restore it later)")
        self.delete_btn.clicked.connect(self._delete)
        self.more_btn = QToolButton(text="More…")
        self.more_btn.setToolTip("Level, move to a folder, restore from the trash, new skill")
        self.more_btn.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.more_btn.clicked.connect(self._more)
        usage_row = QHBoxLayout()
        usage_row.addWidget(self.usage_label, 1)
        usage_row.addWidget(self.always_box)
        lay.addLayout(usage_row)
        manage.addStretch(1)
        for w in (self.disable_btn, self.delete_btn, self.more_btn):
            w.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
            manage.addWidget(w)
        lay.addLayout(manage)
        self.tabs = QTabWidget()
        self.view = QTextBrowser(objectName="SkillView")
        self.view.setOpenLinks(False)
        self.history = HistoryTab()
        self.history.revert_requested.connect(self.revert)
        self.files = QListWidget()
        self.files.itemActivated.connect(
            lambda it: open_in_editor(it.data(Qt.ItemDataRole.UserRole), self.editor_command))
        self.tabs.addTab(self.view, "Skill")
        self.tabs.addTab(self.history, "History")
        self.tabs.addTab(self.files, "Files")
        lay.addWidget(self.tabs, 1)
        self.show_skill(None)

    def show_error(self, path: str | Path, reason: str) -> None:
        """A SKILL.md that does not load (say, a hand edit broke its YAML)."""
        self.show_skill(None)
        self.error_path = str(path)
        p = Path(path)
        self.title.setText(p.parent.name if p.name == "SKILL.md" else p.name)
        self.info.setText("cannot be read")
        self.info.setToolTip(str(path))
        self.view.setHtml(error_html(path, reason))
        for w in (self.open_btn, self.folder_btn, self.tabs):
            w.setEnabled(True)
        self.tabs.setCurrentWidget(self.view)

    def show_skill(self, skill: Skill | None) -> None:
        if skill is not None and self.bank is not None and skill.scope == "user":
            # a hand edit is versioned in the history, not in the file: show that version
            skill = skill.copy(version=self.bank.effective_version(skill))
        self.skill = skill
        self.error_path = None
        has = skill is not None
        for w in (self.open_btn, self.folder_btn, self.tabs):
            w.setEnabled(has)
        self.usage = self.usage_getter(skill) if has else None
        self._show_usage()
        if skill is None:
            self.title.setText("Select a skill")
            self.info.setText("")
            self.view.setHtml("")
            self.history.show_versions(None, None)
            self.files.clear()
            return
        scope = "shared" if skill.scope == "common" else "yours"
        self.info.setToolTip(f"{skill.scope}/{skill.owner}: {skill.path}")
        self.title.setText(skill.display_name)
        self.info.setText(f"v{skill.version}  ·  {skill.level}  ·  {scope}")
        self.view.setHtml(skill_html(skill))
        self.history.show_versions(self.bank, skill)
        self.files.clear()
        if skill.dir is not None:
            for rel in [skill.path.name, *skill.resources]:
                item = QListWidgetItem(theme.icon("skill"), rel)
                item.setData(Qt.ItemDataRole.UserRole, str(skill.dir / rel))
                self.files.addItem(item)

    def set_usage(self, usage) -> None:
        """The shown skill's usage (``SkillUsage`` or None) — the window passes it."""
        self.usage = usage
        self._show_usage()

    def _show_usage(self) -> None:
        skill, u = self.skill, self.usage
        has = skill is not None
        mine = has and skill.scope == "user"
        for w in (self.disable_btn, self.always_box, self.more_btn):
            w.setEnabled(has and self.actions is not None)
        self.delete_btn.setEnabled(bool(mine) and self.actions is not None)
        if not has:
            self.usage_label.setText("")
            return
        uses = getattr(u, "uses", 0)
        last = u.last_used[:10] if u is not None and u.last_used else "never"
        changed = u.last_changed[:10] if u is not None and u.last_changed else "?"
        parts = [f"Used {uses}×", f"last used {last}", f"changed {changed}"]
        if u is not None and u.disabled:
            parts.insert(0, "<b>Disabled</b>")
        if u is not None and u.always_on:
            parts.insert(0, "<b>Always applied</b>")
        if u is not None and u.didnt_fit:
            parts.append(f"didn't fit {u.didnt_fit}×")
        self.usage_label.setText(" · ".join(parts))
        disabled = bool(u is not None and u.disabled)
        self.disable_btn.setText("Enable" if disabled else "Disable")
        self.disable_btn.setIcon(theme.icon("play" if disabled else "pause"))
        self.always_box.setChecked(bool(u is not None and u.always_on))

    def _toggle_disabled(self) -> None:
        if self.skill is not None and self.actions is not None:
            self.actions.set_disabled(self.skill, not (self.usage and self.usage.disabled))

    def _toggle_always(self, on: bool) -> None:
        if self.skill is not None and self.actions is not None:
            self.actions.set_always_on(self.skill, on)

    def _delete(self) -> None:
        if self.skill is not None and self.actions is not None:
            self.actions.delete(self.skill)

    def _more(self) -> None:
        if self.skill is not None and self.actions is not None:
            menu = self.actions.menu(self.skill, self)
            menu.exec(self.more_btn.mapToGlobal(self.more_btn.rect().bottomLeft()))

    def shown_path(self) -> str | None:
        if self.skill is not None and self.skill.path is not None:
            return str(self.skill.path)
        return self.error_path

    def reload(self) -> None:
        """Re-read the shown skill from disk (after a hand edit, a merge or a revert)."""
        path = self.shown_path()
        if path is None or self.bank is None:
            return
        if not Path(path).exists():
            self.show_skill(None)
            return
        try:
            self.show_skill(self.bank.read(path))
        except (SkillDeskError, OSError) as exc:
            self.show_error(path, getattr(exc, "reason", None) or str(exc))

    def open_editor(self) -> None:
        path = self.shown_path()
        if path is not None:
            self.status.emit(open_in_editor(path, self.editor_command))

    def open_folder(self) -> None:
        path = self.shown_path()
        if path is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(path).parent)))

    def revert(self, version: str) -> None:
        if self.skill is None or self.bank is None:
            return
        bank, skill = self.bank, self.skill
        self.history.setEnabled(False)

        def done(new: Skill) -> None:
            self.history.setEnabled(True)
            self.status.emit(f"Reverted {new.display_name} to the content of v{version} "
                             f"(now v{new.version})")
            if self.skill is not None and self.skill.path == new.path:
                self.show_skill(bank.read(new.path))
            self.changed.emit(str(new.path))

        def failed(message: str) -> None:
            self.history.setEnabled(True)
            self.status.emit(f"Revert failed: {message}")
            self.reload()

        desk = self.desk_getter()  # through the desk: it reindexes
        fn = desk.revert if desk is not None else bank.revert
        run_async(lambda: fn(skill, version), done, failed)
