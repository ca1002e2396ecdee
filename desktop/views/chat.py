"""The chat pane: header, the transcript of bubbles, a banner for notices, and the composer.

Presentation only: it emits what the user asked for (send, stop, regenerate, edit) and the
controller (``desktop.chat_controller``) does it.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from .. import theme
from .message import MessageWidget


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter adds a line."""

    submit = Signal()

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt override
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
                event.modifiers() & Qt.KeyboardModifier.ShiftModifier):
            self.submit.emit()
            return
        super().keyPressEvent(event)


class Banner(QFrame):
    """A notice above the composer (no model, first-run hints); hidden when empty."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Banner")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 6)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setOpenExternalLinks(False)
        self.close_btn = QPushButton("×")
        self.close_btn.setFixedWidth(28)
        self.close_btn.clicked.connect(self.hide)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.close_btn)
        self.hide()

    def show_text(self, html_text: str) -> None:
        self.label.setText(html_text)
        self.setVisible(bool(html_text))


class ChatView(QWidget):
    send_requested = Signal(str)
    stop_requested = Signal()
    regenerate_requested = Signal()
    edit_last_requested = Signal()
    learning_toggled = Signal(bool)  # learning on for this chat
    skill_link = Signal(str)
    skill_feedback = Signal(object, str, str)  # (bubble, skill path or id, the turn's query)
    remember_requested = Signal(object)  # the user's bubble to learn from

    def __init__(self, parent=None):
        super().__init__(parent)
        self._bubbles: list[MessageWidget] = []
        self._busy = False
        self._editing = False

        root = QVBoxLayout(self)
        root.setContentsMargins(8, 8, 8, 8)
        root.setSpacing(6)

        head = QHBoxLayout()
        self.title = QLabel("New chat", objectName="PanelTitle")
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.learn_box = QCheckBox("Learn from this chat")
        self.learn_box.setChecked(True)
        self.learn_box.setToolTip("When off, this conversation never becomes skills.")
        self.learn_box.toggled.connect(self.learning_toggled)
        head.addWidget(self.title, 1)
        head.addWidget(self.learn_box)
        root.addLayout(head)

        self.scroll = QScrollArea(objectName="Transcript")
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = QWidget(objectName="TranscriptBody")
        self.list_layout = QVBoxLayout(body)
        self.list_layout.setContentsMargins(4, 4, 4, 4)
        self.list_layout.setSpacing(10)
        self.list_layout.addStretch(1)
        self.scroll.setWidget(body)
        self._stick = True
        bar = self.scroll.verticalScrollBar()
        bar.valueChanged.connect(lambda v: setattr(self, "_stick", v >= bar.maximum() - 24))
        bar.rangeChanged.connect(lambda _a, b: bar.setValue(b) if self._stick else None)
        root.addWidget(self.scroll, 1)

        self.banner = Banner()
        root.addWidget(self.banner)

        composer = QFrame(objectName="Composer")
        cl = QVBoxLayout(composer)
        cl.setContentsMargins(8, 6, 8, 6)
        self.input = Composer()
        self.input.setPlaceholderText("Message SkillDesk…  (Enter to send, Shift+Enter for a new line)")
        self.input.setFixedHeight(72)
        self.input.submit.connect(self._on_send)
        cl.addWidget(self.input)
        buttons = QHBoxLayout()
        self.regen_btn = QPushButton(theme.icon("regenerate"), "Regenerate")
        self.edit_btn = QPushButton(theme.icon("edit"), "Edit last")
        self.edit_btn.setToolTip("Edit your last message and send it again")
        self.stop_btn = QPushButton(theme.icon("stop"), "Stop", objectName="StopButton")
        self.send_btn = QPushButton(theme.icon("send"), "Send", objectName="SendButton")
        self.send_btn.setDefault(True)
        self.regen_btn.clicked.connect(self.regenerate_requested)
        self.edit_btn.clicked.connect(self.edit_last_requested)
        self.stop_btn.clicked.connect(self.stop_requested)
        self.send_btn.clicked.connect(self._on_send)
        buttons.addWidget(self.regen_btn)
        buttons.addWidget(self.edit_btn)
        buttons.addStretch(1)
        buttons.addWidget(self.stop_btn)
        buttons.addWidget(self.send_btn)
        cl.addLayout(buttons)
        root.addWidget(composer)
        self.set_busy(False)
        self.input.installEventFilter(self)
        stop = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        stop.activated.connect(lambda: self.stop_requested.emit() if self._busy else None)

    # ------------------------------------------------------------------ state
    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.stop_btn.setVisible(busy)
        self.send_btn.setEnabled(not busy)
        self._update_actions()

    @property
    def busy(self) -> bool:
        return self._busy

    def set_editing(self, editing: bool) -> None:
        self._editing = editing
        self.send_btn.setText("Resend" if editing else "Send")

    def _update_actions(self) -> None:
        has_user = any(b.role == "user" for b in self._bubbles)
        self.regen_btn.setEnabled(not self._busy and has_user)
        self.edit_btn.setEnabled(not self._busy and has_user)

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Escape leaves edit mode
        if obj is self.input and event.type() == QEvent.Type.KeyPress and \
                event.key() == Qt.Key.Key_Escape and self._editing:
            self.set_editing(False)
            self.input.clear()
            return True
        return super().eventFilter(obj, event)

    def _on_send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self._busy:
            return
        self.input.clear()
        self.send_requested.emit(text)

    # ------------------------------------------------------------------ transcript
    def clear(self) -> None:
        for b in self._bubbles:
            b.setParent(None)
            b.deleteLater()
        self._bubbles.clear()
        self._update_actions()

    def add_message(self, role: str, text: str, meta: dict | None = None,
                    message_id: int | None = None, *, at_top: bool = False) -> MessageWidget:
        """Append a bubble (or put it above the others: loading older messages)."""
        bubble = MessageWidget(role, text, meta, message_id)
        bubble.link_activated.connect(self.skill_link)
        bubble.feedback_requested.connect(
            lambda ref, query, b=bubble: self.skill_feedback.emit(b, ref, query))
        bubble.remember_requested.connect(lambda b=bubble: self.remember_requested.emit(b))
        if at_top:
            self.list_layout.insertWidget(0, bubble)
            self._bubbles.insert(0, bubble)
        else:
            self.list_layout.insertWidget(self.list_layout.count() - 1, bubble)
            self._bubbles.append(bubble)
            self._stick = True
            QTimer.singleShot(0, self.scroll_to_end)
        self._update_actions()
        return bubble

    def remove_from(self, index: int) -> None:
        """Drop bubbles ``index`` and later (regenerate / edit)."""
        for b in self._bubbles[index:]:
            b.setParent(None)
            b.deleteLater()
        del self._bubbles[index:]
        self._update_actions()

    @property
    def bubbles(self) -> list[MessageWidget]:
        return list(self._bubbles)

    def scroll_to_end(self) -> None:
        bar = self.scroll.verticalScrollBar()
        bar.setValue(bar.maximum())
