"""What a user can do to a skill from the app: the tree's context menu and the detail pane's
buttons share these actions (issue 18).

New skill (from the template, opened in the user's editor), Open in editor, Disable / Enable,
Always apply, Move to level, Move to a folder…, Bring skills in from a folder…, Delete (to the
bank's trash, with Undo in a toast) and Restore from the trash. Every action runs through the
engine's :class:`~engine.desk.SkillDesk` in the pool (``Session.run_desk``), which reindexes;
the views reload when it is done. Dialog-free variants (``new_skill(title)``,
``move_out(skill, folder)``) are what the dialogs call, and what tests call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMenu, QWidget

from engine.bank.skill import LEVELS, Skill

from . import theme
from .views.skill_detail import open_in_editor


class SkillActions(QObject):
    """Emits ``status(text)``, ``created(path)`` (select it), ``deleted(title, trash_path)``
    (offer Undo)."""

    status = Signal(str)
    created = Signal(str)
    deleted = Signal(str, str)

    def __init__(self, session: Any, parent: QWidget):
        super().__init__(parent)
        self.session = session
        self.parent_widget = parent
        self.usage: dict[str, Any] = {}  # skill id -> SkillUsage (the window keeps it current)

    # ------------------------------------------------------------------ the menu
    def menu(self, skill: Skill | None, parent: QWidget | None = None) -> QMenu:
        """The context menu for ``skill`` (None: the tree's empty space or a group)."""
        m = QMenu(parent or self.parent_widget)
        m.setObjectName("SkillMenu")
        self._add(m, "New skill…", lambda: self.new_skill(), "plus")
        self._add(m, "Bring skills in from a folder…", lambda: self.move_in(), "import")
        trash = m.addMenu(theme.icon("trash"), "Restore from trash")
        self._fill_trash(trash)
        if skill is None:
            return m
        m.addSeparator()
        u = self.usage.get(skill.id)
        mine = skill.scope == "user"
        self._add(m, "Open in editor", lambda: self.open_editor(skill), "open")
        disabled = bool(u and u.disabled)
        self._add(m, "Enable" if disabled else "Disable",
                  lambda: self.set_disabled(skill, not disabled), "play" if disabled else "pause")
        always = self._add(m, "Always apply", lambda on: self.set_always_on(skill, on), "pin",
                           checkable=True)
        always.setChecked(bool(u and u.always_on))
        levels = m.addMenu(theme.icon("level"), "Move to level")
        levels.setEnabled(mine)
        for lv in LEVELS:
            current = skill.level == lv
            act = self._add(levels, lv.capitalize() + (" (current)" if current else ""),
                            lambda lv=lv: self.set_level(skill, lv))
            act.setEnabled(not current)
        self._add(m, "Move to a folder…", lambda: self.move_out(skill), "folder").setEnabled(mine)
        m.addSeparator()
        self._add(m, "Delete", lambda: self.delete(skill), "trash").setEnabled(mine)
        return m

    def _add(self, menu: QMenu, text: str, slot, icon: str = "", *,
             checkable: bool = False) -> QAction:
        act = QAction(theme.icon(icon) if icon else theme.icon(""), text, menu)
        act.setCheckable(checkable)
        if checkable:  # triggered: the user's click only (setChecked() must not act)
            act.triggered.connect(slot)
        else:
            act.triggered.connect(lambda _=False: slot())
        menu.addAction(act)
        return act

    def _fill_trash(self, menu: QMenu) -> None:
        desk = self.session.desk
        entries = desk.trash() if desk is not None else []
        if not entries:
            menu.addAction("(the trash is empty)").setEnabled(False)
            return
        for t in entries[:15]:
            self._add(menu, f"{t.title}  ·  deleted {t.deleted[:16].replace('T', ' ')}",
                      lambda p=t.path: self.restore(p))

    # ------------------------------------------------------------------ actions
    def _run(self, fn, done_text, what: str, on_done=None) -> bool:
        def done(out: Any) -> None:
            self.status.emit(done_text(out) if callable(done_text) else done_text)
            if on_done is not None:
                on_done(out)
        return self.session.run_desk(fn, done, what=what)

    def new_skill(self, title: str | None = None, *, open_editor: bool = True) -> bool:
        if title is None:
            title, ok = QInputDialog.getText(self.parent_widget, "New skill",
                                             "What should the skill be called?")
            if not ok or not title.strip():
                return False

        def done(s: Skill) -> None:
            self.created.emit(str(s.path))
            if open_editor:
                self.status.emit(open_in_editor(s.path, self.session.settings.editor_command))
        return self._run(lambda d: d.new_skill(title), lambda s: f"Created “{s.display_name}”",
                         "New skill", done)

    def open_editor(self, skill: Skill) -> None:
        self.status.emit(open_in_editor(skill.path, self.session.settings.editor_command))

    def set_disabled(self, skill: Skill, disabled: bool) -> bool:
        if disabled:
            return self._run(lambda d: d.disable(skill),
                             f"Disabled “{skill.display_name}”: kept on disk, never used",
                             "Disable")
        return self._run(lambda d: d.enable(skill), f"Enabled “{skill.display_name}”", "Enable")

    def set_always_on(self, skill: Skill, on: bool) -> bool:
        text = (f"“{skill.display_name}” now applies to every chat" if on
                else f"“{skill.display_name}” applies only when it fits")
        return self._run(lambda d: d.set_always_on(skill, on), text, "Always apply")

    def set_level(self, skill: Skill, level: str) -> bool:
        return self._run(lambda d: d.set_level(skill, level),
                         lambda s: f"Moved “{s.display_name}” to {level} (v{s.version})",
                         "Move to level")

    def move_out(self, skill: Skill, folder: str | None = None) -> bool:
        if folder is None:
            folder = QFileDialog.getExistingDirectory(
                self.parent_widget, f"Move “{skill.display_name}” to a folder", str(Path.home()))
            if not folder:
                return False
        return self._run(lambda d: d.move_out(skill, folder),
                         lambda where: f"Moved “{skill.display_name}” to {where} "
                                       "(the bank's copy is in the trash)", "Move")

    def move_in(self, folder: str | None = None) -> bool:
        if folder is None:
            folder = QFileDialog.getExistingDirectory(
                self.parent_widget, "Bring skills in from a folder", str(Path.home()))
            if not folder:
                return False
        return self._run(lambda d: d.move_in(folder),
                         lambda rep: f"Brought in {len(rep.imported)} skills"
                                     + (f", skipped {len(rep.skipped)}" if rep.skipped else ""),
                         "Bring in")

    def delete(self, skill: Skill) -> bool:
        return self._run(lambda d: d.delete(skill),
                         f"Moved “{skill.display_name}” to the trash", "Delete",
                         lambda where: self.deleted.emit(skill.display_name, str(where)))

    def restore(self, trashed: str | Path) -> bool:
        return self._run(lambda d: d.restore(trashed),
                         lambda s: f"Restored “{s.display_name}”", "Restore",
                         lambda s: self.created.emit(str(s.path)))
