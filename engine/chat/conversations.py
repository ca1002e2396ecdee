"""Chat history: conversations and their messages in one SQLite file in ``SKILLDESK_HOME``.

Qt-free, so the desktop app, ``skilldesk chat`` and the proxy can share it. Deleting a
conversation is a soft delete (``deleted_at`` is set) so it can be undone; :meth:`purge`
removes conversations deleted long ago. Search is a substring match over every message of
every live conversation (works for Chinese, which word tokenizers split badly). Exports:
Markdown for people and JSON in the OpenAI message format for tools.

One connection per store, guarded by a lock, so a store may be used from several threads.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ChatHistoryError, NotFoundError, SkillDeskError
from engine.fsutil import atomic_write
from engine.settings import home_dir

log = logging.getLogger(__name__)

DB_NAME = "conversations.sqlite3"
# integrity_check (pages, and indexes against their tables) reads the whole file: ~0.2 s per
# 10 MB here. A larger history is checked by use: damage found later raises ChatHistoryError.
CHECK_MAX_BYTES = 32 * 1024 * 1024
ROLES = ("system", "user", "assistant")
DEFAULT_TITLE = "New chat"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    deleted_at REAL,
    learning_paused INTEGER NOT NULL DEFAULT 0,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    created REAL NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""


@dataclass
class Message:
    id: int
    conversation_id: str
    role: str
    content: str
    created: float
    meta: dict[str, Any] = field(default_factory=dict)

    def openai(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass
class Conversation:
    id: str
    title: str
    created: float
    updated: float
    deleted_at: float | None = None
    learning_paused: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    message_count: int = 0


@dataclass
class SearchHit:
    conversation_id: str
    title: str
    message_id: int
    role: str
    snippet: str


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _guarded(fn: Callable) -> Callable:
    """Damage SQLite finds while reading (a bad page the check at open missed, a full disk)
    becomes ChatHistoryError, one line; the caller shows it instead of crashing."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            if isinstance(exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError)):
                raise
            raise ChatHistoryError(f"the chat history cannot be read or written "
                                   f"({str(exc).splitlines()[0][:120] if str(exc) else 'error'})"
                                   ) from None

    return wrapper


def _meta(text: Any) -> dict[str, Any]:
    """A row's ``meta`` column; a damaged value reads as empty (the message itself is kept)."""
    try:
        value = json.loads(text or "{}")
    except (ValueError, TypeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def default_path() -> Path:
    return home_dir() / DB_NAME


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _snippet(text: str, query: str, width: int = 80) -> str:
    at = text.lower().find(query.lower())
    if at < 0:
        return text[:width]
    start = max(0, at - width // 3)
    end = min(len(text), start + width)
    return ("…" if start else "") + text[start:end].replace("\n", " ") + (
        "…" if end < len(text) else "")


def title_from(text: str, limit: int = 48) -> str:
    """A conversation title from its first user message: the first line, shortened."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "").lstrip("#> ").strip()
    if not line:
        return DEFAULT_TITLE
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


# sqlite3 errors about the situation, not the file: the file is never moved aside for them
_NOT_DAMAGE = ("locked", "busy", "readonly", "read-only", "disk is full", "disk i/o",
               "unable to open", "out of memory", "permission")


class ConversationStore:
    """The chat history of one SKILLDESK_HOME (or of ``path``)."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.notice = ""  # set when a damaged file was kept aside; the app shows it once
        try:
            self._db = self._open()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            # (sqlite3 raises UnicodeDecodeError when a damaged schema is in its own message)
            text = str(exc).lower()
            if isinstance(exc, sqlite3.OperationalError) and any(w in text for w in _NOT_DAMAGE):
                # in use, read-only, full disk, I/O: the file may be fine; never move it aside
                raise ChatHistoryError(f"the chat history {self.path} cannot be used now "
                                       f"({' '.join(str(exc).split())[:80]})") from None
            kept = self._keep_aside()
            try:
                self._db = self._open()
            except (sqlite3.Error, OSError) as again:
                raise ChatHistoryError(f"a new chat history cannot be started at {self.path} "
                                       f"({' '.join(str(again).split())[:80]})") from None
            why = " ".join(str(exc).split())[:100]
            self.notice = (f"The chat history could not be read ({why}); it was kept "
                           f"as {kept.name} and a new, empty history was started.")
            log.warning("%s", self.notice)

    def _open(self) -> sqlite3.Connection:
        """Connect, set up and check the file: a damaged one raises sqlite3.DatabaseError (or
        UnicodeDecodeError)."""
        db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None,
                             timeout=10)
        try:
            db.row_factory = sqlite3.Row
            db.text_factory = _text  # a damaged text cell reads with U+FFFD, never raises
            db.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: never corrupt, no fsync per message (the app writes on its GUI
            # thread); only an OS crash can lose the newest messages, never the file.
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.executescript(_SCHEMA)
            # the columns we read, and (for files of ordinary size: ~0.1 s per 10 MB) every page
            db.execute("SELECT id, title, created, updated, deleted_at, learning_paused, meta "
                       "FROM conversations LIMIT 1").fetchall()
            db.execute("SELECT id, conversation_id, role, content, created, meta FROM messages "
                       "LIMIT 1").fetchall()
            # a write probe, rolled back: a header saying "newer format, read-only" or a
            # damaged index would otherwise let every chat open and no new message be saved
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("INSERT INTO conversations (id, title, created, updated) "
                           "VALUES ('~probe', '', 0, 0)")
                db.execute("INSERT INTO messages (conversation_id, role, content, created) "
                           "VALUES ('~probe', 'user', '', 0)")
            finally:
                db.execute("ROLLBACK")
            if self.path.stat().st_size <= CHECK_MAX_BYTES:
                ok = db.execute("PRAGMA integrity_check(1)").fetchone()
                if ok is None or ok[0] != "ok":
                    raise sqlite3.DatabaseError(f"integrity check: {ok[0] if ok else 'failed'}")
        except BaseException:
            db.close()
            raise
        return db

    def _keep_aside(self) -> Path:
        """Rename the damaged file (and its -wal/-shm companions) beside itself; never delete."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kept = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        n = 2
        while kept.exists():
            kept = self.path.with_name(f"{self.path.name}.damaged-{stamp}-{n}")
            n += 1
        try:
            os.rename(self.path, kept)
            for suffix in ("-wal", "-shm"):
                side = self.path.with_name(self.path.name + suffix)
                if side.exists():
                    os.rename(side, kept.with_name(kept.name + suffix))
        except OSError as exc:
            raise SkillDeskError(f"the chat history {self.path} is damaged and cannot be moved "
                                 f"aside ({exc.strerror or exc})") from None
        return kept

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> ConversationStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ helpers
    def _exec(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, args)

    @staticmethod
    def _conv(row: sqlite3.Row) -> Conversation:
        keys = row.keys()
        return Conversation(
            id=row["id"], title=row["title"], created=row["created"], updated=row["updated"],
            deleted_at=row["deleted_at"], learning_paused=bool(row["learning_paused"]),
            meta=_meta(row["meta"]),
            message_count=row["n"] if "n" in keys else 0)

    @staticmethod
    def _msg(row: sqlite3.Row) -> Message:
        return Message(id=row["id"], conversation_id=row["conversation_id"], role=row["role"],
                       content=row["content"], created=row["created"],
                       meta=_meta(row["meta"]))

    def _touch(self, conversation_id: str) -> None:
        self._exec("UPDATE conversations SET updated=? WHERE id=?", (time.time(), conversation_id))

    # ------------------------------------------------------------------ conversations
    def new(self, title: str = DEFAULT_TITLE, meta: dict[str, Any] | None = None) -> Conversation:
        now = time.time()
        cid = uuid.uuid4().hex
        self._exec("INSERT INTO conversations(id, title, created, updated, meta) VALUES(?,?,?,?,?)",
                   (cid, title.strip() or DEFAULT_TITLE, now, now,
                    json.dumps(meta or {}, ensure_ascii=False)))
        return self.get(cid)

    def get(self, conversation_id: str) -> Conversation:
        row = self._exec(
            "SELECT c.*, (SELECT COUNT(*) FROM messages m WHERE m.conversation_id=c.id) AS n "
            "FROM conversations c WHERE c.id=?", (conversation_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no conversation {conversation_id}")
        return self._conv(row)

    def list(self, include_deleted: bool = False) -> list[Conversation]:
        """Live conversations, most recently updated first."""
        where = "" if include_deleted else "WHERE c.deleted_at IS NULL"
        rows = self._exec(
            "SELECT c.*, (SELECT COUNT(*) FROM messages m WHERE m.conversation_id=c.id) AS n "
            f"FROM conversations c {where} ORDER BY c.updated DESC, c.created DESC").fetchall()
        return [self._conv(r) for r in rows]

    def rename(self, conversation_id: str, title: str) -> Conversation:
        self.get(conversation_id)
        self._exec("UPDATE conversations SET title=?, updated=? WHERE id=?",
                   (title.strip() or DEFAULT_TITLE, time.time(), conversation_id))
        return self.get(conversation_id)

    def delete(self, conversation_id: str) -> None:
        """Soft delete: hidden from :meth:`list` and :meth:`search` until :meth:`undo_delete`."""
        self.get(conversation_id)
        self._exec("UPDATE conversations SET deleted_at=? WHERE id=?",
                   (time.time(), conversation_id))

    def undo_delete(self, conversation_id: str) -> Conversation:
        self.get(conversation_id)
        self._exec("UPDATE conversations SET deleted_at=NULL WHERE id=?", (conversation_id,))
        return self.get(conversation_id)

    def purge(self, older_than_s: float = 30 * 86400) -> int:
        """Remove conversations soft-deleted more than ``older_than_s`` ago; returns how many."""
        cutoff = time.time() - older_than_s
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM conversations WHERE deleted_at IS NOT NULL AND deleted_at<=?",
                (cutoff,))
            return cur.rowcount

    def set_learning_paused(self, conversation_id: str, paused: bool) -> None:
        self.get(conversation_id)
        self._exec("UPDATE conversations SET learning_paused=? WHERE id=?",
                   (int(bool(paused)), conversation_id))

    def set_meta(self, conversation_id: str, **values: Any) -> None:
        conv = self.get(conversation_id)
        conv.meta.update(values)
        self._exec("UPDATE conversations SET meta=? WHERE id=?",
                   (json.dumps(conv.meta, ensure_ascii=False), conversation_id))

    # ------------------------------------------------------------------ messages
    def add_message(self, conversation_id: str, role: str, content: str,
                    meta: dict[str, Any] | None = None) -> Message:
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        conv = self.get(conversation_id)
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO messages(conversation_id, role, content, created, meta) "
                "VALUES(?,?,?,?,?)",
                (conversation_id, role, content, time.time(),
                 json.dumps(meta or {}, ensure_ascii=False)))
            mid = cur.lastrowid
        if role == "user" and conv.title == DEFAULT_TITLE and conv.message_count == 0:
            self._exec("UPDATE conversations SET title=? WHERE id=?",
                       (title_from(content), conversation_id))
        self._touch(conversation_id)
        return self.message(mid)

    def message(self, message_id: int) -> Message:
        row = self._exec("SELECT * FROM messages WHERE id=?", (message_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no message {message_id}")
        return self._msg(row)

    def update_message(self, message_id: int, content: str | None = None,
                       meta: dict[str, Any] | None = None, touch: bool = True) -> Message:
        """Change a message's text and/or meta; ``touch=False`` leaves the chat's place in the
        list (a note the app adds later, such as what a "Remember this" came to, is no new
        activity in the chat)."""
        old = self.message(message_id)
        self._exec("UPDATE messages SET content=?, meta=? WHERE id=?",
                   (old.content if content is None else content,
                    json.dumps(old.meta if meta is None else meta, ensure_ascii=False),
                    message_id))
        if touch:
            self._touch(old.conversation_id)
        return self.message(message_id)

    def messages(self, conversation_id: str) -> list[Message]:
        rows = self._exec("SELECT * FROM messages WHERE conversation_id=? ORDER BY id",
                          (conversation_id,)).fetchall()
        return [self._msg(r) for r in rows]

    def openai_messages(self, conversation_id: str) -> list[dict[str, str]]:
        return [m.openai() for m in self.messages(conversation_id)]

    def delete_messages_from(self, conversation_id: str, message_id: int) -> int:
        """Drop ``message_id`` and every later message of the conversation (regenerate, edit)."""
        with self._lock:
            cur = self._db.execute("DELETE FROM messages WHERE conversation_id=? AND id>=?",
                                   (conversation_id, message_id))
            n = cur.rowcount
        self._touch(conversation_id)
        return n

    # ------------------------------------------------------------------ search & export
    def search(self, query: str, limit: int = 50) -> list[SearchHit]:
        """Messages (and titles) of live conversations containing ``query``, newest first."""
        query = query.strip()
        if not query:
            return []
        pattern = f"%{_escape_like(query)}%"
        rows = self._exec(
            "SELECT m.id AS mid, m.role, m.content, c.id AS cid, c.title FROM messages m "
            "JOIN conversations c ON c.id=m.conversation_id "
            "WHERE c.deleted_at IS NULL AND (m.content LIKE ? ESCAPE '\\' "
            "OR c.title LIKE ? ESCAPE '\\') ORDER BY m.id DESC LIMIT ?",
            (pattern, pattern, limit)).fetchall()
        return [SearchHit(r["cid"], r["title"], r["mid"], r["role"],
                          _snippet(r["content"], query)) for r in rows]

    def export_json(self, conversation_id: str) -> dict[str, Any]:
        """``{"title", "created", "messages": [{"role", "content"}, ...]}`` (OpenAI format)."""
        conv = self.get(conversation_id)
        return {"id": conv.id, "title": conv.title,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(conv.created)),
                "messages": self.openai_messages(conversation_id)}

    def export_markdown(self, conversation_id: str) -> str:
        conv = self.get(conversation_id)
        out = [f"# {conv.title}", ""]
        names = {"user": "You", "assistant": "Assistant", "system": "System"}
        for m in self.messages(conversation_id):
            out += [f"## {names.get(m.role, m.role)}", "", m.content.rstrip(), ""]
            injected = m.meta.get("injected")
            skills = [x for x in injected if isinstance(x, dict)] if isinstance(
                injected, list) else []
            if skills:
                used = ", ".join(f"{s.get('name')} v{s.get('version')}" for s in skills)
                out += [f"*Skills used: {used}*", ""]
        return "\n".join(out).rstrip() + "\n"

    def export(self, conversation_id: str, path: str | os.PathLike) -> Path:
        """Write the conversation to ``path``: ``.json`` → OpenAI JSON, anything else Markdown."""
        p = Path(path)
        if p.suffix.lower() == ".json":
            text = json.dumps(self.export_json(conversation_id), indent=2, ensure_ascii=False)
        else:
            text = self.export_markdown(conversation_id)
        atomic_write(p, text)
        return p


for _name, _fn in list(vars(ConversationStore).items()):
    if callable(_fn) and not _name.startswith("_") and _name != "close":
        setattr(ConversationStore, _name, _guarded(_fn))
