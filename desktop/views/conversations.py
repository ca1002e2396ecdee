"""The conversations pane: list, search across all chats, new / rename / delete / export."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.chat.conversations import Conversation, ConversationStore, SearchHit

from .. import theme

ID_ROLE = Qt.ItemDataRole.UserRole
MSG_ROLE = Qt.ItemDataRole.UserRole + 1


class ConversationsPanel(QWidget):
    """Emits ``opened(conversation_id, message_id or 0)`` and the verbs' requests."""

    opened = Signal(str, int)
    new_requested = Signal()
    deleted = Signal(str, str)  # id, title (the window offers Undo)
    export_requested = Signal(str, str)  # id, "md" | "json"

    def __init__(self, store: ConversationStore, parent=None):
        super().__init__(parent)
        self.store = store
        self._current = ""
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 4, 8)
        lay.setSpacing(6)

        head = QHBoxLayout()
        head.addWidget(QLabel("Chats", objectName="PanelTitle"), 1)
        self.new_btn = QToolButton(icon=theme.icon("plus"), toolTip="New chat (Ctrl+N)")
        self.new_btn.clicked.connect(self.new_requested)
        head.addWidget(self.new_btn)
        lay.addLayout(head)

        self.search = QLineEdit(placeholderText="Search all chats…")
        self.search.setClearButtonEnabled(True)
        self.search.addAction(theme.icon("search"), QLineEdit.ActionPosition.LeadingPosition)
        self.search.textChanged.connect(self.refresh)
        lay.addWidget(self.search)

        self.list = QListWidget()
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.itemActivated.connect(self._activate)
        self.list.itemClicked.connect(self._activate)
        self.list.setWordWrap(True)
        lay.addWidget(self.list, 1)

        self.count_label = QLabel(objectName="Hint")
        lay.addWidget(self.count_label)

    # ------------------------------------------------------------------ content
    def refresh(self) -> None:
        query = self.search.text().strip()
        self.list.clear()
        if query:
            hits = self.store.search(query)
            for h in hits:
                self._add_hit(h)
            self.count_label.setText(f"{len(hits)} match{'es' if len(hits) != 1 else ''}")
            return
        convs = self.store.list()
        for c in convs:
            self._add_conv(c)
        self.count_label.setText(f"{len(convs)} chat{'s' if len(convs) != 1 else ''}")
        self.select(self._current)

    def _add_conv(self, c: Conversation) -> None:
        item = QListWidgetItem(c.title)
        item.setData(ID_ROLE, c.id)
        item.setData(MSG_ROLE, 0)
        item.setToolTip(f"{c.title}\n{c.message_count} messages")
        self.list.addItem(item)

    def _add_hit(self, h: SearchHit) -> None:
        item = QListWidgetItem(f"{h.title}\n  {h.snippet}")
        item.setData(ID_ROLE, h.conversation_id)
        item.setData(MSG_ROLE, h.message_id)
        self.list.addItem(item)

    def select(self, conversation_id: str) -> None:
        self._current = conversation_id
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.data(ID_ROLE) == conversation_id and not item.data(MSG_ROLE):
                self.list.setCurrentItem(item)
                return

    def _activate(self, item: QListWidgetItem) -> None:
        cid = item.data(ID_ROLE)
        if cid:
            self._current = cid
            self.opened.emit(cid, int(item.data(MSG_ROLE) or 0))

    # ------------------------------------------------------------------ verbs
    def _menu(self, pos) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        cid = item.data(ID_ROLE)
        menu = QMenu(self)
        menu.addAction(theme.icon("edit"), "Rename…", lambda: self.rename(cid))
        menu.addAction(theme.icon("export"), "Export as Markdown…",
                       lambda: self.export_requested.emit(cid, "md"))
        menu.addAction(theme.icon("export"), "Export as JSON (OpenAI messages)…",
                       lambda: self.export_requested.emit(cid, "json"))
        menu.addSeparator()
        menu.addAction(theme.icon("trash"), "Delete", lambda: self.delete(cid))
        menu.exec(self.list.viewport().mapToGlobal(pos))

    def rename(self, conversation_id: str, title: str | None = None) -> None:
        if title is None:
            old = self.store.get(conversation_id).title
            title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=old)
            if not ok:
                return
        self.store.rename(conversation_id, title)
        self.refresh()

    def delete(self, conversation_id: str) -> None:
        title = self.store.get(conversation_id).title
        self.store.delete(conversation_id)
        self.refresh()
        self.deleted.emit(conversation_id, title)

    def undo_delete(self, conversation_id: str) -> None:
        self.store.undo_delete(conversation_id)
        self.refresh()
