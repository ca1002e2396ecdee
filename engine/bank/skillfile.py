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

The reader also accepts AutoSkill's legacy layout (top-level ``id``, ``version``, ``tags``,
``triggers``, ``examples`` and a ``## Prompt`` section in the body) and plain spec skills.
YAML is emitted in block style only: the validator parses with strictyaml, which rejects flow
collections (``[]``, ``{}``) and aliases.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from engine.bank.skill import Skill, normalize_level
from engine.errors import SkillFormatError
from engine.fsutil import sha256_bytes

MAX_SKILL_BYTES = 1024 * 1024  # a SKILL.md is instructions, not a data dump
MAX_DESCRIPTION = 1024

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FENCE = re.compile(r"^---[ \t]*\r?$", re.M)
_LEGACY_SECTION = re.compile(r"^## (Prompt|Triggers|Examples)[ \t]*\r?$", re.M)
# metadata keys we understand (everything else under metadata is preserved verbatim)
_META_KEYS = ("id", "title", "version", "level", "tags", "triggers", "examples", "created",
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
        data = yaml.load(raw, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SkillFormatError(f"malformed YAML front-matter{where}: {problem}", path) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SkillFormatError("front-matter must be a YAML mapping of fields", path)
    return data, body


def _str_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None and str(v).strip()]
    return [str(value)]


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
    meta = front.get("metadata") if isinstance(front.get("metadata"), dict) else {}

    def field(key: str, default: Any = None) -> Any:
        # our layout keeps AutoSkill fields under metadata; the legacy one at the top level
        if key in meta and meta[key] not in (None, ""):
            return meta[key]
        return front.get(key, default)

    legacy = any(k in front for k in ("id", "triggers", "tags", "version", "examples"))
    instructions = _legacy_instructions(body) if legacy else None
    layout = "autoskill" if instructions is not None else "spec"
    if instructions is None:
        instructions = body.strip("\r\n")

    folder = Path(spath).parent.name if spath else ""
    raw_name = front.get("name")
    name = str(raw_name).strip() if raw_name not in (None, "") else folder
    if not name:
        raise SkillFormatError("front-matter has no 'name'", spath)
    description = front.get("description")
    description = str(description).strip() if description not in (None, "") else ""
    if not description:
        first = next((ln.strip() for ln in instructions.splitlines()
                      if ln.strip() and not ln.lstrip().startswith("#")), "")
        description = first[:MAX_DESCRIPTION]
    examples = field("examples") or []
    extra = {k: v for k, v in meta.items() if k not in _META_KEYS}
    return Skill(
        name=name,
        title=str(field("title") or name),
        description=description,
        instructions=instructions,
        id=str(field("id") or "") or _stable_id(spath, name),
        version=str(field("version") or "0.1.0"),
        level=normalize_level(field("level")),
        triggers=_str_list(field("triggers")),
        tags=_str_list(field("tags")),
        examples=list(examples) if isinstance(examples, (list, tuple)) else [examples],
        created=str(field("created") or ""),
        updated=str(field("updated") or ""),
        source=str(field("source") or ""),
        source_turns=_str_list(field("source_turns")),
        license=str(front.get("license") or ""),
        compatibility=str(front.get("compatibility") or ""),
        allowed_tools=front.get("allowed-tools"),
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
        size = path.stat().st_size
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
