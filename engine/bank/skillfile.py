"""Read and write SKILL.md files.

Written files follow the Agent Skills spec at the top level (``name``, ``description``,
optional ``license``, ``compatibility``, ``allowed-tools``, ``metadata``) so the reference
validator (``skills-ref``) accepts them; AutoSkill's fields live under ``metadata``::

    ---
    name: weekly-report-format
    description: Format weekly reports the way the user wants.
    metadata:
      id: 9f0c...
      title: Weekly report format
      version: 0.1.2
      level: functional
      tags:
      - reporting
      triggers:
      - write my weekly report
    ---
    # Goal
    ...

A skill about the user rather than a task (a diet, a fear, a dislike; see
:mod:`engine.learning.about`) also has ``about: user`` under ``metadata``; the self-filter
judges it as such.

The reader also accepts AutoSkill's legacy layout (top-level ``id``, ``version``, ``tags``,
``triggers``, ``examples`` and a ``## Prompt`` section in the body) and plain spec skills.
YAML is emitted in block style only: the validator parses with strictyaml, which rejects flow
collections (``[]``, ``{}``) and aliases.
"""

from __future__ import annotations

import datetime as _dt
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from engine.bank.skill import Skill, normalize_about, normalize_level
from engine.errors import SkillFormatError
from engine.fsutil import sha256_bytes

MAX_SKILL_BYTES = 1024 * 1024  # a SKILL.md is instructions, not a data dump
MAX_DESCRIPTION = 1024
# Front matter is a handful of fields: real SKILL.md files (2,167 in the AutoSkill corpus) nest
# at most 3 levels and hold at most a few hundred values. The bounds leave ample room for that
# and stop a hostile file before it reaches code that recurses: libyaml's C composer overflows
# the C stack (a segfault) on ~100,000 nested '[', and str() of a few thousand nested lists
# raises RecursionError.
MAX_DEPTH = 32
MAX_VALUES = 20_000  # scalars + collections, counted after aliases are expanded
MAX_NAME = 256  # name, title, id, version, level: one line each
MAX_ITEM = 1000  # one tag / trigger (the corpus's longest trigger: 162 characters)
MAX_DESCRIPTION_READ = 16_384  # longer is not a description (the corpus's longest: 1,130)
_SCALARS = (str, int, float, bool, _dt.date, _dt.datetime)

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FENCE = re.compile(r"^---[ \t]*\r?$", re.M)
_LEGACY_SECTION = re.compile(r"^## (Prompt|Triggers|Examples)[ \t]*\r?$", re.M)
# metadata keys we understand (everything else under metadata is preserved verbatim)
_META_KEYS = ("id", "title", "version", "level", "about", "tags", "triggers", "examples", "created",
              "updated", "source", "source_turns")


# ----------------------------------------------------------------------------------- reading
def decode(data: bytes, path: str | None = None) -> str:
    """Bytes → text, with the reasons a user needs when it is not a readable SKILL.md."""
    if len(data) > MAX_SKILL_BYTES:
        raise SkillFormatError(
            f"too large ({len(data) // 1024} KB; a SKILL.md may be {MAX_SKILL_BYTES // 1024} KB"
            " at most: move long material into references/)", path)
    nuls = data.count(b"\x00")
    if nuls and nuls * 100 > len(data):
        raise SkillFormatError("binary file (mostly NUL bytes), not a SKILL.md", path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillFormatError(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})", path) from None
    # A stray NUL in otherwise good text (seen in real banks: "clich\x00e9s") is dropped.
    return text.removeprefix("\ufeff").replace("\x00", "")


def split_front_matter(text: str, path: str | None = None) -> tuple[dict[str, Any], str]:
    """``(front-matter mapping, body)``; raises SkillFormatError with the line of a YAML error."""
    if not text.lstrip("\r\n").startswith("---"):
        raise SkillFormatError("missing front-matter (the file must start with a '---' line)",
                               path)
    text = text.lstrip("\r\n")
    fences = list(_FENCE.finditer(text))
    if len(fences) < 2 or fences[0].start() != 0:
        raise SkillFormatError("front-matter is not closed (no second '---' line)", path)
    raw = text[fences[0].end():fences[1].start()]
    body = text[fences[1].end():].lstrip("\r\n")
    try:
        _check_events(raw, path)  # before composing: libyaml's composer recurses in C
        data = yaml.load(raw, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["error"])[0]
        raise SkillFormatError(f"malformed YAML front-matter{where}: {problem}", path) from None
    except (RecursionError, MemoryError):
        raise SkillFormatError("front-matter is nested too deeply to read", path) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SkillFormatError("front-matter must be a YAML mapping of fields", path)
    check_shape(data, path)
    return data, body


def _check_events(raw: str, path: str | None) -> None:
    """Bound nesting and size on the parser's flat event stream (libyaml parses iteratively)."""
    depth = count = 0
    for event in yaml.parse(raw, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise SkillFormatError(f"front-matter nests more than {MAX_DEPTH} levels deep",
                                       path)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif not isinstance(event, yaml.NodeEvent):
            continue
        count += 1
        if count > MAX_VALUES:
            raise SkillFormatError(f"front-matter holds more than {MAX_VALUES} values", path)


def check_shape(value: Any, path: str | None = None) -> None:
    """Raise SkillFormatError unless ``value`` nests at most MAX_DEPTH deep and holds at most
    MAX_VALUES values. Iterative, so it is safe on recursive (``&a [*a]``) and alias-bombed data
    (aliases are counted every time they are reached)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    count = 0
    while stack:
        v, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise SkillFormatError(f"front-matter holds more than {MAX_VALUES} values "
                                   "(aliases expanded)", path)
        if isinstance(v, dict):
            children = [*v.keys(), *v.values()]
        elif isinstance(v, (list, tuple, set)):
            children = list(v)
        else:
            continue
        if depth >= MAX_DEPTH and children:
            raise SkillFormatError(f"front-matter nests more than {MAX_DEPTH} levels deep", path)
        stack.extend((c, depth + 1) for c in children)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple, set)):
        return "a list"
    return f"a {type(value).__name__}"


def _text(key: str, value: Any, path: str | None, limit: int | None = None) -> str:
    """A field that must be one piece of text (YAML numbers, booleans and dates are accepted)."""
    if value is None:
        return ""
    if not isinstance(value, _SCALARS):
        raise SkillFormatError(f"'{key}' must be text, not {_kind(value)}", path)
    text = str(value)
    if limit is not None and len(text) > limit:
        raise SkillFormatError(f"'{key}' is longer than {limit} characters", path)
    return text


def _str_list(value: Any, key: str = "", path: str | None = None) -> list[str]:
    """A field that holds a list of texts (one text alone is a list of one)."""
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            if v is None:
                continue
            if not isinstance(v, _SCALARS):
                raise SkillFormatError(f"'{key}' must be a list of texts, but holds "
                                       f"{_kind(v)}", path)
            if str(v).strip():
                out.append(_text(key, v, path, MAX_ITEM))
        return out
    if isinstance(value, _SCALARS):
        return [_text(key, value, path, MAX_ITEM)]
    raise SkillFormatError(f"'{key}' must be a list of texts, not {_kind(value)}", path)


def _legacy_instructions(body: str) -> str | None:
    """The ``## Prompt`` section of an AutoSkill body, or None if there is none."""
    sections = list(_LEGACY_SECTION.finditer(body))
    for i, m in enumerate(sections):
        if m.group(1) == "Prompt":
            end = sections[i + 1].start() if i + 1 < len(sections) else len(body)
            return body[m.end():end].strip("\r\n")
    return None


def parse(data: bytes | str, path: str | Path | None = None, *, scope: str = "user",
          owner: str = "") -> Skill:
    """Parse a SKILL.md (spec or AutoSkill layout). Raises :class:`SkillFormatError`."""
    spath = str(path) if path is not None else None
    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    text = decode(raw, spath)
    front, body = split_front_matter(text, spath)
    meta = front.get("metadata")
    if meta is None or meta == "":
        meta = {}
    if not isinstance(meta, dict):
        raise SkillFormatError(f"'metadata' must be a mapping of fields, not {_kind(meta)}",
                               spath)

    def field(key: str, default: Any = None) -> Any:
        # our layout keeps AutoSkill fields under metadata; the legacy one at the top level
        if key in meta and meta[key] not in (None, ""):
            return meta[key]
        return front.get(key, default)

    def text(key: str, limit: int | None = MAX_NAME) -> str:
        return _text(key, field(key), spath, limit)

    legacy = any(k in front for k in ("id", "triggers", "tags", "version", "examples"))
    instructions = _legacy_instructions(body) if legacy else None
    layout = "autoskill" if instructions is not None else "spec"
    if instructions is None:
        instructions = body.strip("\r\n")

    folder = Path(spath).parent.name if spath else ""
    name = _text("name", front.get("name"), spath, MAX_NAME).strip() or folder
    if not name:
        raise SkillFormatError("front-matter has no 'name'", spath)
    description = _text("description", front.get("description"), spath,
                        MAX_DESCRIPTION_READ).strip()
    if not description:
        first = next((ln.strip() for ln in instructions.splitlines()
                      if ln.strip() and not ln.lstrip().startswith("#")), "")
        description = first[:MAX_DESCRIPTION]
    examples = field("examples") or []
    extra = {k: v for k, v in meta.items() if k not in _META_KEYS}
    allowed_tools = front.get("allowed-tools")
    if allowed_tools is not None and not isinstance(allowed_tools, str):
        allowed_tools = _str_list(allowed_tools, "allowed-tools", spath)
    return Skill(
        name=name,
        title=text("title") or name,
        description=description,
        instructions=instructions,
        id=text("id") or _stable_id(spath, name),
        version=text("version") or "0.1.0",
        level=normalize_level(text("level")),
        about=normalize_about(text("about")),
        triggers=_str_list(field("triggers"), "triggers", spath),
        tags=_str_list(field("tags"), "tags", spath),
        examples=list(examples) if isinstance(examples, (list, tuple)) else [examples],
        created=text("created"),
        updated=text("updated"),
        source=text("source"),
        source_turns=_str_list(field("source_turns"), "source_turns", spath),
        license=_text("license", front.get("license"), spath),
        compatibility=_text("compatibility", front.get("compatibility"), spath),
        allowed_tools=allowed_tools,
        extra_metadata=extra,
        scope=scope,
        owner=owner,
        path=Path(spath) if spath else None,
        content_hash=sha256_bytes(raw),
        layout=layout,
    )


def _stable_id(path: str | None, name: str) -> str:
    """Skills without an ``id`` (plain spec skills) get one derived from where they live."""
    import uuid

    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"skilldesk:{path or name}"))


def read(path: str | Path, *, scope: str = "user", owner: str = "") -> Skill:
    path = Path(path)
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
            raise SkillFormatError("not a regular file", str(path))
        size = st.st_size
        if size > MAX_SKILL_BYTES:
            raise SkillFormatError(
                f"too large ({size // 1024} KB; a SKILL.md may be {MAX_SKILL_BYTES // 1024} KB"
                " at most: move long material into references/)", str(path))
        data = path.read_bytes()
    except OSError as exc:
        raise SkillFormatError(f"cannot read: {exc.strerror or exc}", str(path)) from None
    return parse(data, path, scope=scope, owner=owner)


# ----------------------------------------------------------------------------------- writing
class _BlockDumper(yaml.SafeDumper):
    """Block style only, no aliases, multi-line strings as ``|`` literals."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_presenter)


def _prune(value: Any) -> Any:
    """Drop empty containers (strictyaml rejects ``[]``/``{}``) and stringify scalars."""
    if isinstance(value, dict):
        out = {str(k): _prune(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, "", [], {})}
    if isinstance(value, (list, tuple)):
        return [v for v in (_prune(x) for x in value) if v not in (None, "", [], {})]
    if isinstance(value, bool) or value is None:
        return value
    return str(value)


def _dump(mapping: dict[str, Any]) -> str:
    return yaml.dump(_prune(mapping), Dumper=_BlockDumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=False, width=10_000)


def clamp_description(text: str, title: str = "") -> str:
    text = " ".join((text or "").split()) or title or "A SkillDesk skill."
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1].rstrip() + "…"


def render(skill: Skill) -> str:
    """The SKILL.md text for ``skill`` in the Agent Skills layout."""
    front: dict[str, Any] = {
        "name": skill.name,
        "description": clamp_description(skill.description, skill.title),
    }
    if skill.license:
        front["license"] = skill.license
    if skill.compatibility:
        front["compatibility"] = skill.compatibility[:500]
    if skill.allowed_tools:
        front["allowed-tools"] = skill.allowed_tools
    meta: dict[str, Any] = {
        "id": skill.id,
        "title": skill.title if skill.title != skill.name else "",
        "version": skill.version,
        "level": skill.level,
        "about": skill.about,
        "tags": skill.tags,
        "triggers": skill.triggers,
        "examples": skill.examples,
        "created": skill.created,
        "updated": skill.updated,
        "source": skill.source,
        "source_turns": skill.source_turns,
    }
    meta.update({k: v for k, v in skill.extra_metadata.items() if k not in meta})
    front["metadata"] = meta
    body = skill.instructions.strip("\n")
    return f"---\n{_dump(front)}---\n{body}\n"


def render_autoskill(skill: Skill) -> str:
    """The legacy AutoSkill layout, for exporting to AutoSkill itself."""
    front = {"id": skill.id, "name": skill.title or skill.name,
             "description": skill.description, "version": skill.version, "tags": skill.tags,
             "triggers": skill.triggers, "examples": skill.examples}
    triggers = "".join(f"- {t}\n" for t in skill.triggers)
    return (f"---\n{_dump(front)}---\n\n# {skill.title or skill.name}\n\n{skill.description}\n\n"
            f"## Prompt\n\n{skill.instructions.strip()}\n\n## Triggers\n\n{triggers}")
