"""A skill's version history: every stored version, a diff between any two, and revert."""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from engine.bank.history import Version
from engine.bank.skill import Skill
from engine.bank.store import SkillBank

from .. import theme


def diff_html(diff: str) -> str:
    """A unified diff as coloured HTML lines."""
    c = theme.colors()
    if not diff.strip():
        return f'<p style="color:{c["muted"]};">The two versions are identical.</p>'
    rows = []
    for line in diff.splitlines():
        bg = ""
        if line.startswith("+") and not line.startswith("+++"):
            bg = c["add"]
        elif line.startswith("-") and not line.startswith("---"):
            bg = c["del"]
        elif line.startswith("@@"):
            bg = c["hunk"]
        style = f' style="background-color:{bg};"' if bg else ""
        rows.append(f"<tr><td{style}><pre style=\"margin:0px; font-family:"
                    f"{theme.mono_css_families()};\">{html.escape(line) or ' '}</pre></td></tr>")
    return f'<table width="100%" cellspacing="0" cellpadding="1">{"".join(rows)}</table>'


class HistoryTab(QWidget):
    """Pick two versions to compare; revert makes a new version with an old version's content."""

    revert_requested = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.bank: SkillBank | None = None
        self.skill: Skill | None = None
        self.versions: list[Version] = []
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        row = QHBoxLayout()
        self.a = QComboBox()
        self.b = QComboBox()
        self.a.currentIndexChanged.connect(self.update_diff)
        self.b.currentIndexChanged.connect(self.update_diff)
        row.addWidget(QLabel("Compare"))
        row.addWidget(self.a, 1)
        row.addWidget(QLabel("with"))
        row.addWidget(self.b, 1)
        lay.addLayout(row)
        self.diff = QTextBrowser(objectName="DiffView")
        lay.addWidget(self.diff, 1)
        bottom = QHBoxLayout()
        self.info = QLabel(objectName="Hint")
        self.info.setWordWrap(True)
        self.revert_btn = QPushButton(theme.icon("regenerate"), "Revert to the first version…")
        self.revert_btn.clicked.connect(self._ask_revert)
        bottom.addWidget(self.info, 1)
        bottom.addWidget(self.revert_btn)
        lay.addLayout(bottom)

    def show_versions(self, bank: SkillBank | None, skill: Skill | None) -> None:
        self.bank, self.skill = bank, skill
        self.versions = bank.history.versions(skill.id) if bank and skill else []
        for combo in (self.a, self.b):
            combo.blockSignals(True)
            combo.clear()
            for v in self.versions:
                label = f"v{v.version}  ·  {v.source or '?'}  ·  {v.updated.replace('T', ' ')}"
                combo.addItem(label, v.version)
            combo.blockSignals(False)
        n = len(self.versions)
        if n:
            self.a.setCurrentIndex(max(0, n - 2))
            self.b.setCurrentIndex(n - 1)
        readonly = skill is not None and skill.scope == "common"
        self.info.setText(
            "Shared skills are read-only." if readonly else
            f"{n} stored version{'s' if n != 1 else ''}. Reverting keeps every version." if n
            else "No stored versions yet (a hand-made skill gets one when it is first saved).")
        self.update_diff()
        self.revert_btn.setEnabled(n > 1 and not readonly)

    def select(self, a: str, b: str) -> None:
        self.a.setCurrentIndex(max(0, self.a.findData(a)))
        self.b.setCurrentIndex(max(0, self.b.findData(b)))

    def update_diff(self) -> None:
        if not self.versions or self.bank is None or self.skill is None:
            self.diff.setHtml("")
            return
        va, vb = self.a.currentData(), self.b.currentData()
        self.revert_btn.setText(f"Revert to v{va}…")
        self.diff.setHtml(diff_html(self.bank.history.diff(self.skill.id, va, vb)))

    def _ask_revert(self) -> None:
        version = self.a.currentData()
        if version is None or self.skill is None:
            return
        answer = QMessageBox.question(
            self, "Revert skill",
            f"Make a new version of “{self.skill.display_name}” with the content of "
            f"v{version}? Nothing is lost: the current version stays in the history.")
        if answer == QMessageBox.StandardButton.Yes:
            self.revert_requested.emit(version)
