"""The Settings dialog: model, chat, skills and appearance, saved to ``settings.json``."""

from __future__ import annotations

import copy
from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine.errors import SkillDeskError
from engine.llm import registry
from engine.settings import Settings

from .learning import MODEL_NOTE

DEFAULT_TEMP = -0.05  # the spin box's "model default" value


def model_choices() -> list[tuple[str, str]]:
    """``[(reference, label)]``: the default, registry models, dropped GGUFs."""
    out = [("", "Default (the recommended model if installed)")]
    try:
        for spec in registry.list_models():
            ref = spec.key if spec.source in ("package", "parts") else str(spec.path)
            state = "" if spec.available else "  (not installed)"
            where = "  · models/" if spec.source == "file" else ""
            out.append((ref, f"{spec.title}{where}{state}"))
    except SkillDeskError as exc:
        out.append(("", f"(model registry unreadable: {exc})"))
    return out


class SettingsDialog(QDialog):
    def __init__(self, settings: Settings, parent=None, install_recommended=None):
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setMinimumWidth(560)
        self.original = settings
        self.result_settings: Settings | None = None
        tabs = QTabWidget()
        tabs.addTab(self._model_tab(settings, install_recommended), "Model")
        tabs.addTab(self._skills_tab(settings), "Skills")
        tabs.addTab(self._appearance_tab(settings), "Appearance")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(tabs)
        lay.addWidget(buttons)

    # ------------------------------------------------------------------ tabs
    def _model_tab(self, s: Settings, install_recommended) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        self.local_radio = QRadioButton("Local GGUF model (offline)")
        self.server_radio = QRadioButton("OpenAI-compatible server")
        (self.server_radio if s.model.backend == "openai" else self.local_radio).setChecked(True)
        form.addRow(self.local_radio)
        self.model_combo = QComboBox()
        for ref, label in model_choices():
            self.model_combo.addItem(label, ref)
        self._select_model(s.model.model)
        pick = QPushButton("File…")
        pick.clicked.connect(self._pick_file)
        row = QHBoxLayout()
        row.addWidget(self.model_combo, 1)
        row.addWidget(pick)
        form.addRow("Model", row)
        if install_recommended is not None:
            inst = QPushButton("Install the recommended model (1.1 GB, from PyPI)…")
            inst.clicked.connect(install_recommended)
            spec = registry.registry_specs().get("recommended")
            inst.setVisible(spec is not None and not spec.available)
            form.addRow("", inst)
        form.addRow(self.server_radio)
        self.base_url = QLineEdit(s.model.base_url)
        self.api_model = QLineEdit(s.model.api_model, placeholderText="model name on the server")
        self.api_key = QLineEdit(s.model.api_key, placeholderText="optional")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        form.addRow("Server URL", self.base_url)
        form.addRow("Server model", self.api_model)
        form.addRow("API key", self.api_key)
        self.threads = QSpinBox(minimum=0, maximum=256, value=s.model.n_threads)
        self.threads.setSpecialValueText("auto")
        self.n_ctx = QSpinBox(minimum=0, maximum=262144, singleStep=512, value=s.model.n_ctx)
        self.n_ctx.setSpecialValueText("model default")
        self.temperature = QDoubleSpinBox(minimum=DEFAULT_TEMP, maximum=2.0, singleStep=0.05,
                                          decimals=2)
        self.temperature.setSpecialValueText("model default")
        self.temperature.setValue(DEFAULT_TEMP if s.model.temperature is None
                                  else s.model.temperature)
        form.addRow("Threads", self.threads)
        form.addRow("Context length", self.n_ctx)
        form.addRow("Temperature", self.temperature)
        self.system_prompt = QPlainTextEdit(s.model.system_prompt)
        self.system_prompt.setFixedHeight(70)
        form.addRow("System prompt", self.system_prompt)
        note = QLabel(MODEL_NOTE, objectName="Hint")
        note.setWordWrap(True)
        form.addRow(note)
        return w

    def _skills_tab(self, s: Settings) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        self.bank = QLineEdit(s.bank, placeholderText=str(s.bank_dir()))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._pick_bank)
        row = QHBoxLayout()
        row.addWidget(self.bank, 1)
        row.addWidget(browse)
        form.addRow("Skill bank folder", row)
        self.user = QLineEdit(s.user)
        form.addRow("User name", self.user)
        self.top_k = QSpinBox(minimum=0, maximum=20, value=s.retrieval.top_k)
        self.threshold = QDoubleSpinBox(minimum=0.0, maximum=1.0, singleStep=0.05, decimals=2,
                                        value=s.retrieval.min_relevance)
        form.addRow("Skills per answer (top-K)", self.top_k)
        form.addRow("Relevance threshold", self.threshold)
        self.self_filter = _check(form, "Let the model check that a skill fits",
                                  s.retrieval.self_filter,
                                  "Before answering, the model judges each matching skill and "
                                  "drops those that do not fit the request (about a second per "
                                  "skill on two cores; capable models only; nothing runs when "
                                  "no skill matches).")
        self.prepare = _check(form, "Get skills ready while I type", s.retrieval.prepare,
                              "When you pause typing, the model picks the skills for your "
                              "message and reads them in, so the answer starts as soon as you "
                              "send it (uses the model while you type; never delays an "
                              "answer).")
        self.learning = _check(form, "Learn skills from my chats", s.learning)
        self.editor = QLineEdit(s.editor_command, placeholderText="e.g. code -w {path}  "
                                "(empty: the desktop's default app)")
        form.addRow("Editor command", self.editor)
        return w

    def _appearance_tab(self, s: Settings) -> QWidget:
        w = QWidget()
        form = QFormLayout(w)
        self.theme = QComboBox()
        self.theme.addItem("Light", "light")
        self.theme.addItem("Dark", "dark")
        self.theme.setCurrentIndex(max(0, self.theme.findData(s.theme)))
        form.addRow("Theme", self.theme)
        return w

    # ------------------------------------------------------------------ helpers
    def _select_model(self, ref: str) -> None:
        idx = self.model_combo.findData(ref or "")
        if idx < 0 and ref:
            self.model_combo.addItem(Path(ref).name, ref)
            idx = self.model_combo.count() - 1
        self.model_combo.setCurrentIndex(max(0, idx))

    def _pick_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a GGUF model", str(Path.home()),
                                              "GGUF models (*.gguf)")
        if path:
            self._select_model(path)
            self.local_radio.setChecked(True)

    def _pick_bank(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Choose the skill bank folder",
                                                self.bank.text() or str(Path.home()))
        if path:
            self.bank.setText(path)

    def collect(self) -> Settings:
        s = copy.deepcopy(self.original)
        s.model.backend = "openai" if self.server_radio.isChecked() else "local"
        s.model.model = self.model_combo.currentData() or ""
        s.model.base_url = self.base_url.text().strip()
        s.model.api_model = self.api_model.text().strip()
        s.model.api_key = self.api_key.text()
        s.model.n_threads = self.threads.value()
        s.model.n_ctx = self.n_ctx.value()
        t = self.temperature.value()
        s.model.temperature = None if t <= DEFAULT_TEMP + 1e-9 else round(t, 2)
        s.model.system_prompt = self.system_prompt.toPlainText().strip()
        s.bank = self.bank.text().strip()
        s.user = self.user.text().strip() or "default"
        s.retrieval.top_k = self.top_k.value()
        s.retrieval.min_relevance = round(self.threshold.value(), 3)
        s.retrieval.self_filter = self.self_filter.isChecked()
        s.retrieval.prepare = self.prepare.isChecked()
        s.learning = self.learning.isChecked()
        s.editor_command = self.editor.text().strip()
        s.theme = self.theme.currentData()
        return s

    def accept(self) -> None:
        from engine.fsutil import check_component

        try:
            check_component(self.user.text().strip() or "default", "user name")
        except SkillDeskError as exc:
            self.user.setToolTip(str(exc))
            self.user.setFocus()
            self.user.selectAll()
            return
        self.result_settings = self.collect()
        self.result_settings.save()
        super().accept()


def _check(form: QFormLayout, label: str, checked: bool, tip: str = "") -> QCheckBox:
    """A checkbox row of ``form`` (its detail in the tooltip: a long label is cut off)."""
    box = QCheckBox(label)
    if tip:
        box.setToolTip(tip)
    box.setChecked(checked)
    form.addRow("", box)
    return box
