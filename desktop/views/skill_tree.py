"""The skill tree: Users/<user> and Common/<library>, grouped by level and tag, with a filter.

Skills are loaded off the GUI thread (``SkillBank.load`` in the pool) and the tree is rebuilt
from the list; expansion and selection survive a rebuild. Icons mark skills that are new or
recently merged (in the last day, or in this session's learning events) and hand-edited ones.
Files that cannot be read (a hand edit that broke the YAML, a binary file…) are listed under
"Can't read" with the reason, so a skill never silently disappears.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.bank.skill import LEVELS, Skill
from engine.bank.store import LoadError, SkillBank

from .. import theme

PATH_ROLE = Qt.ItemDataRole.UserRole
GROUP_ROLE = Qt.ItemDataRole.UserRole + 1
ERROR_ROLE = Qt.ItemDataRole.UserRole + 2
RECENT_S = 24 * 3600


def _age_s(stamp: str) -> float:
    try:
        return time.time() - datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return float("inf")


def badge(skill: Skill, session_marks: dict[str, str]) -> str:
    """``new`` | ``merged`` | ``edited`` | ``""`` for a skill's icon."""
    mark = session_marks.get(skill.id) or session_marks.get(str(skill.path))
    if mark in ("add", "new"):
        return "new"
    if mark == "merge":
        return "merged"
    if skill.scope == "user":
        if skill.source in ("extracted", "") and _age_s(skill.created) < RECENT_S:
            return "new"
        if skill.source == "merged" and _age_s(skill.updated) < RECENT_S:
            return "merged"
        if skill.source == "user-edit" and _age_s(skill.updated) < RECENT_S:
            return "edited"
    return ""


def matches(skill: Skill, needle: str) -> bool:
    if not needle:
        return True
    hay = " ".join([skill.title, skill.name, skill.description, skill.level, *skill.tags,
                    *skill.triggers]).casefold()
    return all(word in hay for word in needle.casefold().split())


class SkillTree(QWidget):
    """Emits ``selected(path)`` when a skill is chosen, ``consolidate_requested()`` from the
    header's Consolidate button."""

    selected = Signal(str)
    consolidate_requested = Signal()
    review_requested = Signal()
    context_requested = Signal(str, QPoint)  # a skill's path ("" elsewhere), global position

    def __init__(self, parent=None):
        super().__init__(parent)
        self.skills: list[Skill] = []
        self.errors: list[LoadError] = []
        self.user = "default"
        self.session_marks: dict[str, str] = {}
        self.usage: dict[str, object] = {}  # skill id -> SkillUsage (engine.desk_skills)
        self._expanded: set[str] = set()
        self._first = True
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        head = QHBoxLayout()
        self.title = QLabel("Skills", objectName="PanelTitle")
        self.count_label = QLabel(objectName="Hint")
        head.addWidget(self.title)
        head.addStretch(1)
        head.addWidget(self.count_label)
        self.consolidate_btn = QToolButton(icon=theme.icon("merged"), text="Consolidate…")
        self.consolidate_btn.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.consolidate_btn.setAutoRaise(True)
        self.consolidate_btn.setToolTip("Merge near-duplicate skills and flag junk (undoable)")
        self.consolidate_btn.clicked.connect(self.consolidate_requested)
        head.addWidget(self.consolidate_btn)
        self.review_btn = QToolButton(icon=theme.icon("review"), text="Review…")
        self.review_btn.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)  # narrow pane
        self.review_btn.setAutoRaise(True)
        self.review_btn.setToolTip("Review… (Ctrl+R): skills not used lately, near-duplicates and junk, with "
                                   "one-click disable / delete / merge")
        self.review_btn.clicked.connect(self.review_requested)
        head.addWidget(self.review_btn)
        lay.addLayout(head)
        self.filter = QLineEdit(placeholderText="Filter skills (name, tag, trigger)…")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self.rebuild)
        lay.addWidget(self.filter)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(2)
        self.tree.setHeaderHidden(True)
        self.tree.header().setStretchLastSection(False)
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.tree.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.setUniformRowHeights(True)
        self.tree.currentItemChanged.connect(self._on_current)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._on_context)
        self.tree.itemExpanded.connect(lambda it: self._expanded.add(it.data(0, GROUP_ROLE)))
        self.tree.itemCollapsed.connect(lambda it: self._expanded.discard(it.data(0, GROUP_ROLE)))
        lay.addWidget(self.tree, 1)

    # ------------------------------------------------------------------ data
    @staticmethod
    def load(bank: SkillBank, user: str) -> list[Skill]:
        """Runs in the pool."""
        return bank.load(user).skills

    def set_skills(self, skills: list[Skill], user: str) -> None:
        self.skills = skills
        self.user = user
        self.rebuild()

    def set_usage(self, usage: dict) -> None:
        """Uses, last use, disabled / always-on per skill id (shown on the next rebuild)."""
        self.usage = dict(usage)

    def set_errors(self, errors: list[LoadError]) -> None:
        """The files that cannot be read; shown on the next rebuild (``set_skills`` follows)."""
        self.errors = list(errors)

    def error_for(self, path: str) -> LoadError | None:
        return next((e for e in self.errors if str(Path(e.path)) == str(Path(path))), None)

    def mark(self, key: str, kind: str) -> None:
        self.session_marks[key] = kind

    def find(self, path: str) -> Skill | None:
        for s in self.skills:
            if str(s.path) == path:
                return s
        return None

    # ------------------------------------------------------------------ view
    def _group(self, parent, key: str, text: str, icon: str) -> QTreeWidgetItem:
        item = QTreeWidgetItem(parent, [text, ""])
        item.setIcon(0, theme.icon(icon))
        item.setData(0, GROUP_ROLE, key)
        item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsSelectable)
        return item

    def _fill(self, root: QTreeWidgetItem, key: str, skills: list[Skill]) -> None:
        by_level: dict[str, dict[str, list[Skill]]] = defaultdict(lambda: defaultdict(list))
        for s in skills:
            by_level[s.level][s.tags[0] if s.tags else "untagged"].append(s)
        for level in [lv for lv in LEVELS if lv in by_level]:
            tags = by_level[level]
            n = sum(len(v) for v in tags.values())
            lv_item = self._group(root, f"{key}/{level}", f"{level.capitalize()} ({n})", "level")
            for tag in sorted(tags, key=lambda t: (t == "untagged", t.casefold())):
                group = tags[tag]
                tag_item = self._group(lv_item, f"{key}/{level}/{tag}", f"{tag} ({len(group)})",
                                       "tag")
                for s in sorted(group, key=lambda s: s.display_name.casefold()):
                    self._skill_item(tag_item, s)

    def _skill_item(self, parent: QTreeWidgetItem, s: Skill) -> QTreeWidgetItem:
        u = self.usage.get(s.id)
        uses = getattr(u, "uses", 0)
        right = f"v{s.version}" + (f" · {uses}×" if uses else "")
        item = QTreeWidgetItem(parent, [s.display_name, right])
        item.setData(0, PATH_ROLE, str(s.path))
        mark = badge(s, self.session_marks)
        icon = mark or ("common" if s.scope == "common" else "skill")
        tip = f"<b>{s.display_name}</b> v{s.version}<br>{s.description}"
        if mark:
            tip += f"<br><i>{mark}</i>"
        if u is not None:
            last = u.last_used[:16].replace("T", " ") if u.last_used else "never"
            changed = u.last_changed[:16].replace("T", " ") if u.last_changed else "?"
            tip += (f"<br>Used {uses}× · last used {last} · last changed {changed}")
            if u.always_on:
                icon = "pin"
                item.setText(1, f"always · {right}")
                tip += "<br><i>always applied</i>"
            if u.disabled:
                icon = "disabled"
                item.setText(1, f"off · {right}")
                grey = QBrush(QColor(theme.colors()["muted"]))
                item.setForeground(0, grey)
                item.setForeground(1, grey)
                tip += "<br><i>disabled: never used in answers or merged into</i>"
        item.setIcon(0, theme.icon(icon))
        item.setToolTip(0, tip)
        return item

    def rebuild(self) -> None:
        current = self.current_path()
        needle = self.filter.text().strip()
        shown = [s for s in self.skills if matches(s, needle)]
        self.tree.setUpdatesEnabled(False)
        self.tree.clear()
        if self.errors:
            bad = self._group(self.tree, "errors", f"Can't read ({len(self.errors)})", "warning")
            self._expanded.add("errors")
            for e in sorted(self.errors, key=lambda e: e.path):
                p = Path(e.path)
                name = p.parent.name if p.name == "SKILL.md" else p.name
                item = QTreeWidgetItem(bad, [name, "error"])
                item.setIcon(0, theme.icon("warning"))
                item.setData(0, PATH_ROLE, str(p))
                item.setData(0, ERROR_ROLE, e.reason)
                item.setToolTip(0, f"<b>{e.path}</b><br>{e.reason}")
        mine = [s for s in shown if s.scope == "user"]
        root_key = f"Users/{self.user}"
        top = self._group(self.tree, root_key, f"Users/{self.user} ({len(mine)})", "user")
        self._fill(top, root_key, mine)
        libs: dict[str, list[Skill]] = defaultdict(list)
        for s in shown:
            if s.scope == "common":
                libs[s.owner].append(s)
        for lib in sorted(libs):
            key = f"Common/{lib}"
            item = self._group(self.tree, key, f"Common/{lib} ({len(libs[lib])})", "common")
            self._fill(item, key, libs[lib])
        if self._first and self.skills:
            self._expanded |= {root_key, *(f"Common/{lib}" for lib in libs)}
            self._first = False
        self._restore_expansion(needle)
        total = len(self.skills)
        self.count_label.setText(f"{len(shown)} of {total}" if needle else f"{total} skills")
        self.tree.setUpdatesEnabled(True)
        if current:
            self.select_path(current, emit=False)

    def _restore_expansion(self, needle: str) -> None:
        stack = [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]
        while stack:
            item = stack.pop()
            key = item.data(0, GROUP_ROLE)
            if key is not None and (needle or key in self._expanded):
                item.setExpanded(True)
            stack += [item.child(i) for i in range(item.childCount())]

    def items(self) -> list[QTreeWidgetItem]:
        out, stack = [], [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]
        while stack:
            item = stack.pop(0)
            if item.data(0, PATH_ROLE):
                out.append(item)
            stack += [item.child(i) for i in range(item.childCount())]
        return out

    def current_path(self) -> str:
        item = self.tree.currentItem()
        return item.data(0, PATH_ROLE) or "" if item else ""

    def select_path(self, path: str, emit: bool = True) -> bool:
        target = str(Path(path))
        for item in self.items():
            if item.data(0, PATH_ROLE) == target:
                parent = item.parent()
                while parent is not None:
                    parent.setExpanded(True)
                    parent = parent.parent()
                self.tree.blockSignals(not emit)
                self.tree.setCurrentItem(item)
                self.tree.blockSignals(False)
                self.tree.scrollToItem(item)
                return True
        return False

    def _on_context(self, pos: QPoint) -> None:
        item = self.tree.itemAt(pos)
        path = (item.data(0, PATH_ROLE) or "") if item is not None else ""
        if item is not None and item.data(0, ERROR_ROLE):
            path = ""
        if path:
            self.tree.setCurrentItem(item)
        self.context_requested.emit(path, self.tree.viewport().mapToGlobal(pos))

    def _on_current(self, item: QTreeWidgetItem | None, _prev) -> None:
        if item is not None and item.data(0, PATH_ROLE):
            self.selected.emit(item.data(0, PATH_ROLE))
