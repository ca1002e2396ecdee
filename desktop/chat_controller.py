"""What happens when the user chats: history in the ConversationStore, turns on the chat thread.

Send, Stop, Regenerate and edit-and-resend of the last user message. The transcript shown is
always what the store holds; an answer is stored when it finishes (a stopped answer keeps its
partial text), a failed one is shown with its error and not stored.
"""

from __future__ import annotations

import html
import time
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from engine.chat.conversations import ConversationStore

from .chat_worker import ChatThread
from .views.chat import ChatView
from .views.message import MessageWidget

LOAD_BATCH = 3  # bubbles rendered per event-loop turn when a chat is opened
DRAFT_PAUSE_MS = 600  # a pause in typing this long prepares the draft's turn


class ChatController(QObject):
    status = Signal(str)
    turn_started = Signal()
    turn_done = Signal(dict)  # the turn's info (model, decode_tps, injected...)
    live_speed = Signal(float)  # chunks/s while streaming
    conversation_changed = Signal(str)  # id ("" for a new, unsaved chat)
    loaded = Signal(str)  # every bubble of the opened conversation is shown

    def __init__(self, store: ConversationStore, thread: ChatThread, view: ChatView,
                 learn_default=lambda: True, parent: QObject | None = None):
        super().__init__(parent)
        self.store = store
        self.thread = thread
        self.view = view
        self.learn_default = learn_default  # () -> bool: settings.learning
        self.cid = ""
        self.rid = 0
        self.bubble: MessageWidget | None = None
        self._edit_id: int | None = None
        self._pending: list = []  # messages of the opened chat not shown yet
        self._turn_cid = ""  # the conversation the running turn belongs to
        self._partial = ""  # its text so far
        self._load_gen = 0
        self._t0 = 0.0
        self._chunks = 0
        w = thread.worker
        w.chunk.connect(self._on_chunk)
        w.finished.connect(self._on_finished)
        w.failed.connect(self._on_failed)
        view.send_requested.connect(self.send)
        view.stop_requested.connect(self.stop)
        view.regenerate_requested.connect(self.regenerate)
        view.edit_last_requested.connect(self.edit_last)
        view.learning_toggled.connect(self._learning_toggled)
        self._draft_timer = QTimer(self)
        self._draft_timer.setSingleShot(True)
        self._draft_timer.setInterval(DRAFT_PAUSE_MS)
        self._draft_timer.timeout.connect(self.prepare_draft)
        view.input.textChanged.connect(self._draft_timer.start)

    # ------------------------------------------------------------------ conversations
    @property
    def busy(self) -> bool:
        return self.rid != 0

    def _detach_turn(self) -> None:
        """Leaving the chat while it answers: stop it; what arrives is stored, not shown."""
        if self.busy:
            self.stop()
            self.bubble = None

    def new_conversation(self) -> None:
        self._detach_turn()
        self.cid = ""
        self._edit_id = None
        self._pending = []
        self._load_gen += 1
        self.view.clear()
        self.view.title.setText("New chat")
        self.view.set_editing(False)
        self.view.learn_box.blockSignals(True)
        self.view.learn_box.setChecked(True)
        self.view.learn_box.blockSignals(False)
        self.conversation_changed.emit("")
        self.view.input.setFocus()

    def open_conversation(self, cid: str, message_id: int = 0) -> None:
        self._detach_turn()
        conv = self.store.get(cid)
        self.cid = cid
        self._edit_id = None
        self.view.set_editing(False)
        self.view.clear()
        self.view.title.setText(conv.title)
        self.view.learn_box.blockSignals(True)
        self.view.learn_box.setChecked(not conv.learning_paused)
        self.view.learn_box.blockSignals(False)
        self._load_gen += 1
        self._pending = self.store.messages(cid)
        self._load_batch(self._load_gen, message_id)
        self.conversation_changed.emit(cid)

    def _load_batch(self, gen: int, message_id: int) -> None:
        """Bubbles newest first, a few per event-loop turn: a long chat never freezes the GUI."""
        if gen != self._load_gen:
            return  # another conversation was opened meanwhile
        for _ in range(LOAD_BATCH):
            if not self._pending:
                break
            m = self._pending.pop()
            b = self.view.add_message(m.role, m.content, m.meta, m.id, at_top=True)
            if m.id == message_id:
                QTimer.singleShot(50, lambda b=b: self.view.scroll.ensureWidgetVisible(b))
        if self._pending:
            QTimer.singleShot(0, lambda: self._pending and self._load_batch(gen, message_id))
        else:
            self.loaded.emit(self.cid)

    @property
    def loading(self) -> bool:
        return bool(self._pending)

    def _ensure_conversation(self) -> str:
        if not self.cid:
            self.cid = self.store.new().id
            if not self.view.learn_box.isChecked():
                self.store.set_learning_paused(self.cid, True)
        return self.cid

    def _learning_toggled(self, on: bool) -> None:
        if self.cid:
            self.store.set_learning_paused(self.cid, not on)
        self.status.emit("Learning from this chat is " + ("on" if on else "paused"))

    # ------------------------------------------------------------------ verbs
    def send(self, text: str) -> None:
        if self.busy or not text.strip():
            return
        self._finish_loading()
        cid = self._ensure_conversation()
        if self._edit_id is not None:
            index = next((i for i, b in enumerate(self.view.bubbles)
                          if b.message_id == self._edit_id), None)
            self.store.delete_messages_from(cid, self._edit_id)
            if index is not None:
                self.view.remove_from(index)
            self._edit_id = None
            self.view.set_editing(False)
        msg = self.store.add_message(cid, "user", text)
        self.view.add_message("user", text, None, msg.id)
        self.view.title.setText(self.store.get(cid).title)
        self.conversation_changed.emit(cid)
        self._start_turn()

    def draft_messages(self) -> list[dict[str, str]] | None:
        """The messages a send of the composer's text would answer (None: nothing to send)."""
        text = self.view.input.toPlainText().strip()
        if self.busy or not text or self.loading:
            return None
        msgs = self.store.messages(self.cid) if self.cid else []
        if self._edit_id is not None:  # an edit replaces the last user message and after
            msgs = [m for m in msgs if m.id < self._edit_id]
        return [*(m.openai() for m in msgs), {"role": "user", "content": text}]

    def messages_to_remember(self, bubble: MessageWidget) -> list[dict[str, str]] | None:
        """The conversation up to the user message of ``bubble`` and the answer to it (what
        "Remember this" learns from); None when it is not a saved message of this chat."""
        if not self.cid or bubble.role != "user" or bubble.message_id is None:
            return None
        msgs = self.store.messages(self.cid)
        at = next((i for i, m in enumerate(msgs) if m.id == bubble.message_id), None)
        if at is None:
            return None
        end = at + 2 if at + 1 < len(msgs) and msgs[at + 1].role == "assistant" else at + 1
        return [m.openai() for m in msgs[:end]]

    def prepare_draft(self) -> None:
        """The user paused typing: get the turn of their draft ready (skills and prompt)."""
        msgs = self.draft_messages()
        if msgs is not None:
            self.thread.worker.prepare(msgs)

    def _finish_loading(self) -> None:
        while self._pending:  # the user acts before a long chat is fully shown
            self._load_batch(self._load_gen, 0)

    def regenerate(self) -> None:
        if self.busy or not self.cid:
            return
        self._finish_loading()
        msgs = self.store.messages(self.cid)
        if not msgs or not any(m.role == "user" for m in msgs):
            return
        if msgs[-1].role == "assistant":
            self.store.delete_messages_from(self.cid, msgs[-1].id)
        last_user = max(i for i, b in enumerate(self.view.bubbles) if b.role == "user")
        self.view.remove_from(last_user + 1)
        self._start_turn()

    def edit_last(self) -> None:
        if self.busy or not self.cid:
            return
        users = [m for m in self.store.messages(self.cid) if m.role == "user"]
        if not users:
            return
        self._edit_id = users[-1].id
        self.view.input.setPlainText(users[-1].content)
        self.view.input.setFocus()
        self.view.set_editing(True)
        self.status.emit("Editing your last message: Enter resends it, Esc cancels")

    def stop(self) -> None:
        if self.rid:
            self.thread.cancel(self.rid)
            self.status.emit("Stopping…")

    # ------------------------------------------------------------------ turns
    def _learn(self) -> bool:
        return bool(self.learn_default()) and self.view.learn_box.isChecked()

    def _start_turn(self) -> None:
        history = self.store.openai_messages(self.cid)
        self.bubble = self.view.add_message("assistant", "", {})
        self.bubble.set_text("", streaming=True)
        self._t0 = time.perf_counter()
        self._chunks = 0
        self._turn_cid = self.cid
        self._partial = ""
        self.rid = self.thread.submit(history, learn=self._learn())
        self.view.set_busy(True)
        self.turn_started.emit()

    def _on_chunk(self, rid: int, text: str) -> None:
        if rid != self.rid:
            return
        self._partial += text
        if self.bubble is not None:
            self.bubble.append(text)
        self._chunks += 1
        if self._chunks % 8 == 0:
            dt = time.perf_counter() - self._t0
            if dt > 0:
                self.live_speed.emit(self._chunks / dt)

    def _on_finished(self, rid: int, info: dict[str, Any]) -> None:
        if rid != self.rid:
            return
        bubble, self.bubble, self.rid = self.bubble, None, 0
        text = info.get("text") or self._partial
        meta = {k: info.get(k) for k in ("injected", "model", "decode_tps", "ttft_s",
                                         "finish_reason", "usage", "query", "rewritten")}
        msg = None
        if text.strip():
            msg = self.store.add_message(self._turn_cid, "assistant", text, meta)
        if bubble is not None:  # still on screen (the user did not switch chats)
            bubble.set_text(text)
            bubble.set_meta(meta)
            bubble.message_id = msg.id if msg else None
        self.view.set_busy(False)
        self.view.banner.hide()
        self.turn_done.emit(info)
        if info.get("finish_reason") == "cancelled":
            self.status.emit("Stopped")

    def _on_failed(self, rid: int, message: str) -> None:
        if rid != self.rid:
            return
        bubble, self.bubble, self.rid = self.bubble, None, 0
        self.view.set_busy(False)
        if bubble is None:
            self.status.emit(message)
            return
        bubble.set_text(bubble.text or "*No answer.*")
        bubble.set_meta({"error": message})
        self.view.banner.show_text(f"<b>No answer:</b> {html.escape(message)}<br>"
                                   "Check <i>File → Settings → Model</i>, then Regenerate.")
        self.status.emit(message)
