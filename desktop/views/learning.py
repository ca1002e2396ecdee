"""Learning activity: the engine's evolution events as a log, a live state line, pause, and a
toast when a skill is added or merged (with Undo and Show).

``LearningBridge`` gives ``desk.learning`` its own QThreadPool (one thread: the queue runs
jobs one at a time, and a long or paused job never takes a thread from the pool that loads the
bank), subscribes to its events (callbacks arrive on that pool thread) and re-emits every event
as a Qt signal on the GUI thread.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QObject, Qt, QThreadPool, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from engine.text import clip

from .. import theme

MODEL_NOTE = ("Learning quality depends on the model: the bundled SmolLM2-135M is for trying "
              "SkillDesk and rarely writes useful skills; the recommended Qwen2.5-Coder-1.5B "
              "(Settings → Model) learns well.")
KIND_TEXT = {"queued": "queued", "running": "thinking about", "add": "learned",
             "merge": "updated", "discard": "nothing new in", "error": "error in",
             "done": "finished", "undo": "undid", "feedback": "you said didn't fit:"}
KIND_ICON = {"add": "new", "merge": "merged", "undo": "regenerate", "error": "stop",
             "queued": "learning", "running": "learning", "discard": "skill", "done": "skill",
             "feedback": "warning"}


class LearningBridge(QObject):
    """Engine evolution events → ``event(object)`` on the GUI thread."""

    event = Signal(object)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.queue: Any = None
        self._unsubscribe = None
        self.pool = QThreadPool(self)
        self.pool.setObjectName("learning")
        self.pool.setMaxThreadCount(1)

    def attach(self, desk: Any) -> bool:
        self.detach()
        self.queue = getattr(desk, "learning", None) if desk is not None else None
        if self.queue is None:
            return False
        self.queue.set_executor(self.pool.start)  # evolution jobs run in our QThreadPool
        self._unsubscribe = self.queue.subscribe(self.event.emit)
        return True

    def detach(self) -> None:
        if self._unsubscribe is not None:
            try:
                self._unsubscribe()
            except Exception:  # noqa: BLE001 - the queue may be closed already
                pass
        self._unsubscribe, self.queue = None, None

    def state(self) -> dict[str, Any]:
        if self.queue is None:
            return {"queued": 0, "running": 0, "done": 0, "paused": False, "available": False}
        return {**self.queue.state(), "available": True}


def replaced_text(ev: Any) -> str:
    """" — replaced “old rule”" for a merge that took rules out of the skill, else ""."""
    gone = list(getattr(ev, "replaced", None) or []) if ev.kind == "merge" else []
    if not gone:
        return ""
    more = f" and {len(gone) - 1} more" if len(gone) > 1 else ""
    return f" — replaced “{clip(gone[0], 48)}”{more}"


def describe(ev: Any) -> str:
    name = ev.title or ev.skill_name or ""
    verb = KIND_TEXT.get(ev.kind, ev.kind)
    when = time.strftime("%H:%M", time.localtime(ev.time))
    if ev.kind == "feedback" and name:
        request = (ev.reason or "").removeprefix("didn't fit: ")[:60]
        return f"{when}  {verb} “{name}” ({request})"
    if ev.kind in ("add", "merge", "undo") and name:
        ver = f" v{ev.version}" if ev.version else ""
        return f"{when}  {verb} “{name}”{ver}{replaced_text(ev)}"
    if ev.kind in ("discard", "error"):
        return f"{when}  {verb} this turn" + (f": {ev.reason}" if ev.reason else "")
    return f"{when}  {verb} a turn"


class LearningPanel(QWidget):
    """The log of learning events; ``show_skill(path)`` and ``undo(event)`` requests."""

    show_skill = Signal(str)
    undo_requested = Signal(object)
    pause_toggled = Signal(bool)

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        self.state_label = QLabel("Learning: idle", objectName="PanelTitle")
        self.pause_box = QCheckBox("Pause learning everywhere")
        self.pause_box.toggled.connect(self.pause_toggled)
        lay.addWidget(self.state_label)
        lay.addWidget(self.pause_box)
        note = QLabel(MODEL_NOTE, objectName="Hint")
        note.setWordWrap(True)
        lay.addWidget(note)
        self.log = QListWidget()
        self.log.setWordWrap(True)  # a merge's row names the rule it replaced: keep it readable
        self.log.currentItemChanged.connect(self._sync_buttons)
        self.log.itemActivated.connect(lambda _it: self._show())
        lay.addWidget(self.log, 1)
        row = QHBoxLayout()
        self.show_btn = QPushButton(theme.icon("open"), "Show skill")
        self.undo_btn = QPushButton(theme.icon("regenerate"), "Undo")
        self.show_btn.clicked.connect(self._show)
        self.undo_btn.clicked.connect(self._undo)
        row.addStretch(1)
        row.addWidget(self.show_btn)
        row.addWidget(self.undo_btn)
        lay.addLayout(row)
        self._sync_buttons()

    def add_event(self, ev: Any) -> None:
        if ev.kind in ("queued", "running", "done"):
            return  # shown by the state line, not worth a log row
        item = QListWidgetItem(theme.icon(KIND_ICON.get(ev.kind, "skill")), describe(ev))
        item.setData(Qt.ItemDataRole.UserRole, ev)
        item.setToolTip(ev.reason or "")
        self.log.insertItem(0, item)
        self._sync_buttons()

    def mark_undone(self, event_id: str) -> None:
        for i in range(self.log.count()):
            ev = self.log.item(i).data(Qt.ItemDataRole.UserRole)
            if ev is not None and ev.id == event_id:
                ev.undone = True
                self.log.item(i).setText(self.log.item(i).text() + "  (undone)")
        self._sync_buttons()

    def set_state(self, state: dict[str, Any]) -> str:
        if state.get("disabled"):
            text = "Learning: off (Settings)"
        elif not state.get("available"):
            text = "Learning: not available"
        elif state.get("paused"):
            text = "Learning: paused"
        elif state.get("running") or state.get("queued"):
            text = f"Learning: {state.get('running', 0)} running, {state.get('queued', 0)} queued"
        else:
            text = "Learning: idle"
        self.state_label.setText(text)
        self.pause_box.blockSignals(True)
        self.pause_box.setChecked(bool(state.get("paused")))
        self.pause_box.blockSignals(False)
        return text

    def _current(self) -> Any:
        item = self.log.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item else None

    def _sync_buttons(self, *_: Any) -> None:
        ev = self._current()
        self.show_btn.setEnabled(bool(ev and ev.path))
        self.undo_btn.setEnabled(bool(ev and ev.kind in ("add", "merge") and not ev.undone))

    def _show(self) -> None:
        ev = self._current()
        if ev is not None and ev.path:
            self.show_skill.emit(ev.path)

    def _undo(self) -> None:
        ev = self._current()
        if ev is not None:
            self.undo_requested.emit(ev)


class Toast(QFrame):
    """A transient note over the chat: text, optional Show / Undo, closes by itself."""

    show_clicked = Signal(object)
    undo_clicked = Signal(object)

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.setObjectName("Toast")
        self.payload: Any = None
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 8, 8, 8)
        self.icon = QLabel()
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.show_btn = QPushButton("Show")
        self.undo_btn = QPushButton("Undo")
        close = QPushButton("×")
        close.setFixedWidth(28)
        self.show_btn.clicked.connect(lambda: (self.show_clicked.emit(self.payload), self.hide()))
        self.undo_btn.clicked.connect(lambda: (self.undo_clicked.emit(self.payload), self.hide()))
        close.clicked.connect(self.hide)
        for w in (self.icon, self.label):
            lay.addWidget(w)
        lay.addStretch(1)
        for w in (self.show_btn, self.undo_btn, close):
            lay.addWidget(w)
        self._timer = QTimer(self, singleShot=True, interval=12000)
        self._timer.timeout.connect(self.hide)
        self.hide()

    def notify(self, text: str, payload: Any = None, *, show: bool = False, undo: bool = False,
               icon: str = "learning", show_text: str = "Show") -> None:
        self.payload = payload
        self.show_btn.setText(show_text)
        self.icon.setPixmap(theme.icon(icon).pixmap(18, 18))
        self.label.setText(text)
        self.show_btn.setVisible(show)
        self.undo_btn.setVisible(undo)
        self.place()
        self.show()
        self.raise_()
        self._timer.start()

    def place(self) -> None:
        parent = self.parentWidget()
        width = min(520, parent.width() - 24)
        self.setFixedWidth(max(260, width))
        self.adjustSize()
        self.move(parent.width() - self.width() - 12, parent.height() - self.height() - 150)
