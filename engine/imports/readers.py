"""Read old conversations, documents and agent trajectories for bootstrapping a bank.

Liberal in what it accepts, explicit about what it skipped:

- conversations (``.json`` / ``.jsonl``, a file or a folder): a list of messages, a
  ``{"messages": [...]}`` wrapper, a list of either, ShareGPT (``{"conversations": [{"from",
  "value"}]}``), ChatGPT's ``conversations.json`` export (``mapping`` trees), Claude's export
  (``chat_messages`` with ``sender``), Open WebUI's export (``chat.messages`` or the
  ``chat.history`` tree), the AutoSkill web UI's session export (``{"sessions": [{"state":
  {"messages": [...]}}]}``), content given as a string or as a list of ``{"type": "text",
  "text": ...}`` parts;
- documents (``.md`` / ``.markdown`` / ``.txt``): split into heading-aware sections;
- trajectories (``.json`` / ``.jsonl``): handed to :mod:`engine.imports.trajectories`.

Each item carries a stable key (file + position + content hash) so an interrupted import can
continue where it stopped and a repeated import changes nothing (see :class:`Ledger`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.fsutil import atomic_write, check_component, sha256_bytes

MAX_FILE_BYTES = 256 * 1024 * 1024
ROLE_ALIASES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                "bot": "assistant", "model": "assistant", "chatgpt": "assistant",
                "system": "system", "tool": "tool", "function": "tool"}


@dataclass
class Item:
    key: str  # stable identity: "<file>#<index>@<content-hash>"
    source: str  # file path + position, for messages
    messages: list[dict[str, str]] = field(default_factory=list)
    title: str = ""
    text: str = ""  # documents: the section text
    raw: Any = None  # trajectories: the parsed object


@dataclass
class Skipped:
    source: str
    reason: str


def _files(path: Path, suffixes: tuple[str, ...]) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in suffixes
                  and not any(part.startswith(".") for part in p.relative_to(path).parts))


def _read_text(path: Path, skipped: list[Skipped]) -> str | None:
    """The file as UTF-8 text, or None with the reason added to ``skipped``."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            skipped.append(Skipped(str(path), "file larger than 256 MB"))
            return None
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        skipped.append(Skipped(str(path), "not UTF-8 text"))
    except OSError as exc:
        skipped.append(Skipped(str(path), f"cannot read: {exc.strerror or exc}"))
    return None


def _load_json_values(path: Path, skipped: list[Skipped]) -> Iterator[tuple[str, Any]]:
    """``(position, value)`` for a .json file (one value) or a .jsonl file (one per line)."""
    text = _read_text(path, skipped)
    if text is None:
        return
    if path.suffix.lower() == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            value, why = _parse_json(line)
            if why:
                skipped.append(Skipped(f"{path}:{n}", why))
            else:
                yield f"line {n}", value
        return
    value, why = _parse_json(text)
    if why:
        skipped.append(Skipped(str(path), why))
    else:
        yield "", value


MAX_JSON_DEPTH = 64  # real exports nest < 20 deep (ChatGPT's mapping trees are flat dicts)


def _parse_json(text: str) -> tuple[Any, str]:
    """``(value, "")`` or ``(None, one-line reason)``; never raises.

    ``json.loads`` recurses: a value nested deeper than the interpreter's recursion limit
    raises RecursionError, so it is caught here, and anything deeper than MAX_JSON_DEPTH is
    refused so that no reader after this one needs its own bound.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON at line {exc.lineno} ({exc.msg})"
    except RecursionError:
        return None, f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)"
    except ValueError as exc:  # e.g. an integer longer than Python's 4,300-digit limit
        return None, f"invalid JSON ({str(exc).splitlines()[0][:120]})"
    if json_depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        return None, f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)"
    return value, ""


def json_depth(value: Any, stop: int) -> int:
    """How deep ``value`` nests (1 for a scalar), counting no further than ``stop + 1``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > stop:
            break
        if isinstance(v, dict):
            stack.extend((c, d + 1) for c in v.values())
        elif isinstance(v, list):
            stack.extend((c, d + 1) for c in v)
    return deepest


def _json_values_under(path: str | os.PathLike, skipped: list[Skipped]) -> Iterator[
        tuple[Path, str, Any]]:
    """``(file, position, value)`` for every JSON value in the .json/.jsonl files under path."""
    path = Path(path).expanduser()
    files = _files(path, (".json", ".jsonl"))
    if not files:
        skipped.append(Skipped(str(path), "no .json or .jsonl files found"))
    for f in files:
        for pos, value in _load_json_values(f, skipped):
            yield f, pos, value


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
        return "\n".join(parts)
    if isinstance(content, dict):
        if isinstance(content.get("parts"), list):  # ChatGPT export
            return _content_text(content["parts"])
        if isinstance(content.get("text"), str):
            return content["text"]
    return ""


def _message(obj: Any) -> dict[str, str] | None:
    if not isinstance(obj, dict):
        return None
    author = obj.get("author") if isinstance(obj.get("author"), dict) else {}
    role = obj.get("role") or obj.get("from") or author.get("role") or obj.get("sender")
    role = ROLE_ALIASES.get(str(role or "").lower())
    text = _content_text(obj.get("content", obj.get("value", obj.get("text"))))
    if not text.strip() and isinstance(obj.get("text"), str):  # Claude: content [] + text
        text = obj["text"]
    if role is None or not text.strip():
        return None
    return {"role": role, "content": text}


def _messages(value: Any) -> list[dict[str, str]] | None:
    """The messages of one conversation in any accepted shape, or None if it is not one."""
    if isinstance(value, dict):
        for key in ("messages", "conversations", "conversation", "chat", "turns",
                    "chat_messages"):  # the last: Claude's export
            if isinstance(value.get(key), list) and (found := _messages(value[key])):
                return found
        if isinstance(value.get("mapping"), dict):
            return _chatgpt_mapping(value)
        for key in ("state", "chat"):  # AutoSkill web-UI session; Open WebUI export
            if isinstance(value.get(key), dict) and (found := _messages(value[key])):
                return found
        history = value.get("history")
        if isinstance(history, dict) and isinstance(history.get("messages"), dict):
            return _tree_messages(history)  # Open WebUI keeps the branches as a tree
        trace = value.get("trace")  # an AutoSkill session whose state lost its messages
        if isinstance(trace, dict) and isinstance(trace.get("turns"), list):
            appended = [m for t in trace["turns"] if isinstance(t, dict)
                        and isinstance(t.get("chat_append"), list) for m in t["chat_append"]]
            return _messages(appended) if appended else None
        return None
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        msgs = [m for m in (_message(x) for x in value) if m]
        if msgs and len(msgs) * 2 >= len(value):  # mostly messages: a conversation
            return msgs
    return None


def _tree_messages(history: dict) -> list[dict[str, str]] | None:
    """Open WebUI's ``history``: ``{"messages": {id: {parentId, role, content}}, "currentId"}``;
    the branch that ends at ``currentId`` (the one the user last saw)."""
    nodes = history["messages"]
    node = history.get("currentId")
    if node not in nodes:
        node = next((k for k, v in nodes.items()
                     if isinstance(v, dict) and not v.get("childrenIds")), None)
    chain, seen = [], set()
    while node in nodes and node not in seen and isinstance(nodes[node], dict):
        seen.add(node)
        chain.append(nodes[node])
        node = nodes[node].get("parentId")
    msgs = [m for m in (_message(n) for n in reversed(chain)) if m]
    return msgs or None


def _empty_reason(conv: Any) -> str:
    """Why a conversation-shaped value holds nothing to learn from."""
    if isinstance(conv, dict):
        state = conv.get("state") if isinstance(conv.get("state"), dict) else conv
        for key in ("messages", "chat_messages"):
            if isinstance(state.get(key), list) and not state[key]:
                return "empty conversation (no messages)"
    return "not a conversation (no role/content messages)"


def _chatgpt_mapping(conv: dict) -> list[dict[str, str]]:
    mapping = {k: v for k, v in conv["mapping"].items() if isinstance(v, dict)}
    node = conv.get("current_node")
    if not isinstance(node, str) or node not in mapping:  # fall back to the deepest leaf
        node = next((k for k, v in mapping.items() if not v.get("children")), None)
    chain = []
    seen = set()
    while isinstance(node, str) and node in mapping and node not in seen:
        seen.add(node)
        chain.append(mapping[node])
        node = mapping[node].get("parent")
    out = []
    for n in reversed(chain):
        m = _message(n.get("message") or {})
        if m:
            out.append(m)
    return out


def read_conversations(path: str | os.PathLike) -> tuple[list[Item], list[Skipped]]:
    """Every conversation under ``path``; what could not be used is listed with a reason."""
    skipped: list[Skipped] = []
    items: list[Item] = []
    for f, pos, value in _json_values_under(path, skipped):
        convs: list[tuple[str, Any]]
        single = _messages(value)
        if single is not None:
            convs = [(pos, value)]
        elif isinstance(value, dict) and isinstance(value.get("sessions"), list):
            # the AutoSkill web UI's export: {"sessions": [{"id", "meta", "state": {...}}]}
            convs = [(f"{pos} session {i}".strip(), v) for i, v in enumerate(value["sessions"])]
        elif isinstance(value, list):
            convs = [(f"{pos} item {i}".strip(), v) for i, v in enumerate(value)]
        else:
            convs = [(pos, value)]
        for where, conv in convs:
            msgs = _messages(conv)
            src = f"{f}{' ' + where if where else ''}"
            if not msgs:
                skipped.append(Skipped(src, _empty_reason(conv)))
                continue
            if not any(m["role"] == "user" for m in msgs):
                skipped.append(Skipped(src, "no user messages"))
                continue
            digest = sha256_bytes(json.dumps(msgs, ensure_ascii=False).encode())[:16]
            title = _title(conv)
            items.append(Item(key=f"conv:{digest}", source=src, messages=msgs,
                              title=str(title or "")))
    return items, skipped


def _title(conv: Any) -> str:
    if not isinstance(conv, dict):
        return ""
    meta = conv.get("meta") if isinstance(conv.get("meta"), dict) else {}
    return str(conv.get("title") or conv.get("name") or meta.get("title") or "")


_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def split_sections(text: str, min_chars: int = 40) -> list[tuple[str, str]]:
    """``(heading path, body)`` for each section of a Markdown/text document.

    A section is the text under a heading up to the next heading of the same or higher level;
    sub-sections stay with their parent when the parent has no text of its own. Plain text with
    no headings is split on blank-line-separated blocks of ~1,500 characters.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    if not any(_HEADING.match(ln) for ln in lines):
        blocks, cur = [], ""
        for para in re.split(r"\n\s*\n", text):
            if len(cur) + len(para) > 1500 and cur:
                blocks.append(cur)
                cur = ""
            cur = f"{cur}\n\n{para}".strip()
        if cur:
            blocks.append(cur)
        return [("", b) for b in blocks if len(b) >= min_chars]
    sections: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    body: list[str] = []

    def flush() -> None:
        content = "\n".join(body).strip()
        if len(content) >= min_chars:
            sections.append((" / ".join(t for _, t in stack), content))
        body.clear()

    in_code = False
    for ln in lines:
        if ln.lstrip().startswith("```"):
            in_code = not in_code
        m = None if in_code else _HEADING.match(ln)
        if m:
            flush()
            level = len(m.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, m.group(2)))
        else:
            body.append(ln)
    flush()
    return sections


def read_documents(path: str | os.PathLike) -> tuple[list[Item], list[Skipped]]:
    path = Path(path).expanduser()
    skipped: list[Skipped] = []
    items: list[Item] = []
    files = _files(path, (".md", ".markdown", ".txt"))
    if not files:
        skipped.append(Skipped(str(path), "no .md or .txt files found"))
    for f in files:
        text = _read_text(f, skipped)
        if text is None:
            continue
        if "\x00" in text:
            skipped.append(Skipped(str(f), "binary file"))
            continue
        sections = split_sections(text)
        if not sections:
            skipped.append(Skipped(str(f), "no section long enough to hold a rule"))
        for i, (heading, body) in enumerate(sections):
            digest = sha256_bytes(f"{heading}\n{body}".encode())[:16]
            items.append(Item(key=f"doc:{digest}", source=f"{f} §{i + 1}",
                              title=heading or f.stem, text=body))
    return items, skipped


def read_trajectories(path: str | os.PathLike) -> tuple[list[Item], list[Skipped]]:
    skipped: list[Skipped] = []
    items: list[Item] = []
    for f, pos, value in _json_values_under(path, skipped):
        runs = value if isinstance(value, list) and value and all(
            isinstance(v, dict) and ("steps" in v or "messages" in v) for v in value) else [
            value]
        for i, run in enumerate(runs):
            src = f"{f}{' ' + pos if pos else ''}{f' run {i}' if len(runs) > 1 else ''}"
            digest = sha256_bytes(json.dumps(run, ensure_ascii=False, sort_keys=True,
                                             default=str).encode())[:16]
            items.append(Item(key=f"traj:{digest}", source=src, raw=run,
                              title=str(run.get("task", run.get("title", "")))
                              if isinstance(run, dict) else ""))
    return items, skipped


class Ledger:
    """What an import already absorbed into a bank, per user: ``<bank>/.imports/<user>.json``.

    Written atomically after every item, so an interrupted import resumes where it stopped and
    running the same import again changes nothing.
    """

    def __init__(self, bank_root: Path, user: str):
        self.path = Path(bank_root) / ".imports" / f"{check_component(user, 'user')}.json"
        try:
            done = json.loads(self.path.read_text("utf-8"))
        except (OSError, ValueError, RecursionError):
            done = {}
        self.done: dict[str, dict] = done if isinstance(done, dict) else {}

    def __contains__(self, key: str) -> bool:
        return key in self.done

    def mark(self, key: str, record: dict) -> None:
        self.done[key] = record
        atomic_write(self.path, json.dumps(self.done, ensure_ascii=False, indent=0))
