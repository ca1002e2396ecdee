"""File → Import…: bring old conversations, documents or skill folders into the bank (issue 18).

Conversations (ChatGPT, Claude, Open WebUI and AutoSkill web-UI exports, plain JSON/JSONL message
lists) and documents go through the same learning pipeline as a live chat
(``engine.imports.bootstrap.run_import``: resumable, a repeated import changes nothing); skill
folders and ``.zip`` files are copied in as they are (``SkillDesk.move_in``). "Check" reads the
input without learning (what would be read, what is skipped and why). The import runs in the
pool with a progress bar; Cancel stops between two items (what was learned stays, and importing
again continues with the rest). The summary says what was learned.
"""

from __future__ import annotations

import html
import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
)

from ..workers import run_async

KINDS = [("conversations", "Conversations (ChatGPT, Claude, Open WebUI, AutoSkill, JSON/JSONL)"),
         ("documents", "Documents (.md, .txt)"),
         ("skills", "Skill folders or .zip (copied in as they are)")]


class _Progress(QObject):
    step = Signal(int, int, str)  # emitted on the pool thread, delivered on the GUI thread


class ImportDialog(QDialog):
    """Emits ``imported(summary_dict)`` when an import finished (or was cancelled)."""

    imported = Signal(dict)

    def __init__(self, session: Any, parent=None):
        super().__init__(parent)
        self.session = session
        self.setWindowTitle("Import")
        self.resize(620, 480)
        self.running = False
        self._cancel = threading.Event()
        self._progress = _Progress()
        self._progress.step.connect(self._on_step)
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.kind = QComboBox()
        for key, text in KINDS:
            self.kind.addItem(text, key)
        form.addRow("What", self.kind)
        row = QHBoxLayout()
        self.path = QLineEdit(placeholderText="a file or a folder")
        file_btn = QPushButton("File…")
        file_btn.clicked.connect(self._pick_file)
        dir_btn = QPushButton("Folder…")
        dir_btn.clicked.connect(self._pick_dir)
        row.addWidget(self.path, 1)
        row.addWidget(file_btn)
        row.addWidget(dir_btn)
        form.addRow("From", row)
        lay.addLayout(form)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1)
        self.bar.setValue(0)
        self.step_label = QLabel(objectName="Hint")
        lay.addWidget(self.bar)
        lay.addWidget(self.step_label)
        self.summary = QTextBrowser()
        self.summary.setOpenLinks(False)
        lay.addWidget(self.summary, 1)
        buttons = QHBoxLayout()
        self.check_btn = QPushButton("Check")
        self.check_btn.setToolTip("Read the input without learning anything")
        self.check_btn.clicked.connect(self.check)
        self.import_btn = QPushButton("Import")
        self.import_btn.setDefault(True)
        self.import_btn.clicked.connect(self.start)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.clicked.connect(self.cancel)
        self.cancel_btn.setEnabled(False)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        buttons.addWidget(self.check_btn)
        buttons.addStretch(1)
        for b in (self.import_btn, self.cancel_btn, close):
            buttons.addWidget(b)
        lay.addLayout(buttons)

    # ------------------------------------------------------------------ input
    def _pick_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import from a file", str(Path.home()),
                                              "Exports (*.json *.jsonl *.zip *.md *.txt);;"
                                              "All files (*)")
        if path:
            self.path.setText(path)

    def _pick_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Import from a folder", str(Path.home()))
        if path:
            self.path.setText(path)

    def set_input(self, kind: str, path: str | Path) -> None:
        self.kind.setCurrentIndex(next(i for i, (k, _) in enumerate(KINDS) if k == kind))
        self.path.setText(str(path))

    # ------------------------------------------------------------------ check (dry run)
    def check(self) -> bool:
        kind, path = self.kind.currentData(), self.path.text().strip()
        if not path:
            self.summary.setHtml("<p>Choose a file or a folder first.</p>")
            return False
        if kind == "skills":
            self.summary.setHtml("<p>Skill folders are copied in as they are; "
                                 "press Import.</p>")
            return True
        from engine.imports.bootstrap import preview

        def done(out: dict) -> None:
            n = out.get(kind, 0)
            msgs = f", {out['messages']} messages" if "messages" in out else ""
            rows = "".join(f"<li>{html.escape(s['source'])}: {html.escape(s['reason'])}</li>"
                           for s in out["skipped"][:50])
            self.summary.setHtml(f"<p><b>{n} {kind}</b> would be read{msgs}; nothing was "
                                 f"learned yet.</p>"
                                 + (f"<p>Skipped {len(out['skipped'])}:</p><ul>{rows}</ul>"
                                    if rows else "<p>Nothing skipped.</p>"))

        run_async(lambda: preview(kind, path), done,
                  lambda m: self.summary.setHtml(f"<p>Cannot read it: {html.escape(m)}</p>"))
        return True

    # ------------------------------------------------------------------ import
    def start(self) -> bool:
        kind, path = self.kind.currentData(), self.path.text().strip()
        if self.running or not path:
            return False
        self._cancel.clear()
        emit = self._progress.step.emit

        def work(desk: Any) -> dict:
            if kind == "skills":
                emit(0, 1, path)
                rep = desk.move_in(path)
                emit(1, 1, "done")
                return {"kind": "skills", "added": len(rep.imported), "merged": 0,
                        "skipped": [{"source": p, "reason": r} for p, r in rep.skipped],
                        "skills": [{"action": "add", "title": s.title, "path": str(s.path)}
                                   for s in rep.imported], "cancelled": False}
            from engine.imports.bootstrap import run_import

            s = run_import(desk, kind, path, progress=emit, cancel=self._cancel.is_set)
            desk.refresh()
            return s.to_dict()

        if not self.session.run_desk(work, self._done, what="Import"):
            return False
        self.running = True
        self.import_btn.setEnabled(False)
        self.check_btn.setEnabled(False)
        self.cancel_btn.setEnabled(True)
        self.bar.setRange(0, 0)  # busy until the first step says how many
        self.step_label.setText("Reading…")
        return True

    def cancel(self) -> None:
        if self.running:
            self._cancel.set()
            self.step_label.setText("Stopping after the current item…")

    def _on_step(self, done: int, total: int, what: str) -> None:
        self.bar.setRange(0, max(total, 1))
        self.bar.setValue(done)
        self.step_label.setText(f"{done}/{total}  {what[-70:]}")

    def _done(self, out: dict) -> None:
        self.running = False
        self.import_btn.setEnabled(True)
        self.check_btn.setEnabled(True)
        self.cancel_btn.setEnabled(False)
        if self.bar.maximum() == 0:
            self.bar.setRange(0, 1)
        self.summary.setHtml(summary_html(out))
        self.step_label.setText("Cancelled: import again to continue" if out.get("cancelled")
                                else "Done")
        self.imported.emit(out)

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt override
        self.cancel()
        super().closeEvent(event)


def summary_html(out: dict) -> str:
    """What was learned, in words a user reads."""
    learned = [s for s in out.get("skills", []) if s.get("action") in ("add", "merge")]
    head = (f"<p><b>{out.get('added', 0)} skills added, {out.get('merged', 0)} merged</b>"
            + (f", {out.get('discarded', 0)} candidates discarded" if "discarded" in out else "")
            + (f", {out.get('errors')} errors (retried next time)" if out.get("errors") else "")
            + (f"; {out.get('processed', 0)} items read, {out.get('already_imported', 0)} "
               "already imported" if "processed" in out else "")
            + (" — <b>cancelled</b>: import again to continue" if out.get("cancelled") else "")
            + ".</p>")
    rows = "".join(f"<li>{html.escape(s['action'])}: {html.escape(s['title'])}</li>"
                   for s in learned[:100])
    skipped = "".join(f"<li>{html.escape(s['source'])}: {html.escape(s['reason'])}</li>"
                      for s in out.get("skipped", [])[:50])
    return (head + (f"<p>Learned:</p><ul>{rows}</ul>" if rows else "")
            + (f"<p>Skipped:</p><ul>{skipped}</ul>" if skipped else ""))
