"""The Review view (issue 18): which of your skills earn their place.

Three lists, computed off the GUI thread by ``SkillDesk.review`` (engine/desk_skills.py):
skills not used in the last N days (and not changed in them), near-duplicates (the
consolidation clustering of engine/consolidate) and skills the junk filter flags
(engine/consolidate/flags.py). Each row has one-click actions — Disable, Delete (to the trash,
with Undo) and, for a group of near-duplicates, Merge (undoable like any consolidation). Nothing
is ever deleted automatically.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from .. import theme
from ..workers import run_async

PATH_ROLE = Qt.ItemDataRole.UserRole


class ReviewPanel(QWidget):
    """Emits ``show_skill(path)`` on a double click and ``merged(record)`` after a merge."""

    show_skill = Signal(str)
    merged = Signal(object)
    status = Signal(str)

    def __init__(self, session: Any, actions: Any, parent=None):
        super().__init__(parent)
        self.session = session
        self.actions = actions
        self.review: Any = None
        self.busy = False
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.addWidget(QLabel("Review your skills", objectName="PanelTitle"))
        head = QHBoxLayout()
        head.addWidget(QLabel("Not used in"))
        self.days = QSpinBox(minimum=0, maximum=3650, value=30, suffix=" days")
        self.days.setToolTip("List skills that were neither used in an answer nor changed in "
                             "this many days")
        head.addWidget(self.days)
        head.addStretch(1)
        self.refresh_btn = QPushButton(theme.icon("regenerate"), "Refresh")
        self.refresh_btn.clicked.connect(self.compute)
        head.addWidget(self.refresh_btn)
        lay.addLayout(head)
        self.hint = QLabel("Nothing is ever deleted automatically: each action is yours, and "
                           "Delete goes to the bank's trash.", objectName="Hint")
        self.hint.setWordWrap(True)
        lay.addWidget(self.hint)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(3)
        self.tree.setHeaderLabels(["Skill", "Why", ""])
        hdr = self.tree.header()
        hdr.setStretchLastSection(False)
        hdr.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        hdr.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        hdr.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.setIndentation(14)
        self.tree.itemDoubleClicked.connect(self._open)
        lay.addWidget(self.tree, 1)

    # ------------------------------------------------------------------ data
    def compute(self) -> bool:
        desk = self.session.desk
        if desk is None or self.busy:
            self.status.emit("The skill engine is still starting; try again in a moment")
            return False
        self.busy = True
        self.refresh_btn.setEnabled(False)
        self.hint.setText("Looking through your skills…")
        days = self.days.value()

        def done(review: Any) -> None:
            self.busy = False
            self.refresh_btn.setEnabled(True)
            self.show_review(review)

        def failed(message: str) -> None:
            self.busy = False
            self.refresh_btn.setEnabled(True)
            self.hint.setText(f"Review failed: {html.escape(message)}")

        run_async(lambda: desk.review(days), done, failed)
        return True

    def show_review(self, review: Any) -> None:
        self.review = review
        self.tree.clear()
        n = len(review.unused) + len(review.clusters) + len(review.flags)
        self.hint.setText(f"{n} to look at. Nothing is ever deleted automatically: each action "
                          "is yours, and Delete goes to the bank's trash (Undo).")
        days = int(review.days)
        g = self._group(f"Not used in {days} days ({len(review.unused)})", "pause")
        for s, u in review.unused:
            why = f"last used {u.last_used[:10]}" if u.last_used else "never used"
            row = self._skill_row(g, s, why + (" · off" if u.disabled else ""),
                                  disable=not u.disabled)
            row.setToolTip(1, f"Used {u.uses}× in answers; file last changed "
                              f"{(u.last_changed or '?')[:10]}"
                              + ("; disabled" if u.disabled else ""))
        g = self._group(f"Near-duplicates ({len(review.clusters)})", "merged")
        for c in review.clusters:
            item = QTreeWidgetItem(g, [f"{len(c.skills)} alike: {c.keeper.display_name}",
                                       f"similarity {c.similarity:.2f}"])
            item.setIcon(0, theme.icon("merged"))
            item.setToolTip(0, "Merge keeps “" + c.keeper.display_name + "” and folds the "
                            "others into it (undoable in Consolidate…)")
            self._buttons(item, [("Merge", lambda c=c: self.merge(c))])
            for s in c.skills:
                self._skill_row(item, s, "kept" if s is c.keeper else "merged in",
                                disable=False)
        g = self._group(f"Flagged ({len(review.flags)})", "warning")
        for f in review.flags:
            skill = next((s for s in self._skills() if str(s.path) == f.path), None)
            if skill is None:
                continue
            row = self._skill_row(g, skill, ", ".join(f.kinds), disable=True)
            row.setToolTip(1, "<br>".join(html.escape(r) for r in f.reasons))
        self.tree.expandAll()

    def _skills(self) -> list[Any]:
        desk = self.session.desk
        return list(desk.skills) if desk is not None else []

    def _group(self, text: str, icon: str) -> QTreeWidgetItem:
        g = QTreeWidgetItem(self.tree, [text])
        g.setIcon(0, theme.icon(icon))
        g.setFirstColumnSpanned(True)
        f = g.font(0)
        f.setBold(True)
        g.setFont(0, f)
        return g

    def _skill_row(self, parent: QTreeWidgetItem, skill: Any, why: str, *,
                   disable: bool) -> QTreeWidgetItem:
        item = QTreeWidgetItem(parent, [skill.display_name, why])
        item.setData(0, PATH_ROLE, str(skill.path))
        item.setIcon(0, theme.icon("skill"))
        item.setToolTip(0, f"<b>{html.escape(skill.display_name)}</b><br>"
                           f"{html.escape(skill.description)}")
        buttons = []
        if disable:
            buttons.append(("Disable", lambda s=skill: self.actions.set_disabled(s, True)))
        elif why.endswith("· off"):
            buttons.append(("Enable", lambda s=skill: self.actions.set_disabled(s, False)))
        buttons.append(("Delete", lambda s=skill: self.actions.delete(s)))
        self._buttons(item, buttons)
        return item

    def _buttons(self, item: QTreeWidgetItem, buttons: list[tuple[str, Any]]) -> None:
        box = QWidget()
        lay = QHBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(4)
        for text, slot in buttons:
            b = QToolButton(text=text)  # compact: no push button's minimum width
            b.setObjectName(f"Review{text}")
            b.setIcon(theme.icon({"Disable": "pause", "Delete": "trash", "Enable": "play",
                                  "Merge": "merged"}.get(text, "")))
            b.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
            b.clicked.connect(lambda _=False, slot=slot: slot())
            lay.addWidget(b)
        lay.addStretch(1)
        self.tree.setItemWidget(item, 2, box)

    # ------------------------------------------------------------------ actions
    def merge(self, cluster: Any) -> bool:
        review = self.review

        def done(record: Any) -> None:
            self.status.emit(f"Merged {record.merged} near-duplicate(s) into "
                             f"“{cluster.keeper.display_name}” (Undo in the toast or in "
                             "Consolidate…)")
            self.merged.emit(record)
            self.compute()

        return self.session.run_desk(lambda d: d.merge_cluster(review, cluster), done,
                                     what="Merge")

    def _open(self, item: QTreeWidgetItem, _col: int) -> None:
        path = item.data(0, PATH_ROLE)
        if path:
            self.show_skill.emit(path)


class ReviewDialog(QDialog):
    """The Review view in its own window (non-modal, like Consolidate…): the three lists need
    more width than the skill pane has."""

    def __init__(self, panel: ReviewPanel, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Review skills")
        self.setModal(False)
        self.resize(860, 560)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.addWidget(panel)
        self.panel = panel
