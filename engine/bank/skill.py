"""The ``Skill`` model: one SKILL.md artifact and what SkillDesk knows about it.

Fields follow AutoSkill (id, name, description, instructions, triggers, tags, examples, version)
plus SkillX's ``level`` and SkillDesk's provenance. On disk the file follows the Agent Skills
spec at the top level; see :mod:`engine.bank.skillfile` for the format.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

LEVELS = ("planning", "functional", "atomic")
DEFAULT_LEVEL = "functional"
SCOPES = ("user", "common")

_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def new_id() -> str:
    return str(uuid.uuid4())


def parse_version(v: str | None) -> tuple[int, int, int]:
    m = _SEMVER.match(str(v or "").strip())
    return (int(m[1]), int(m[2]), int(m[3])) if m else (0, 1, 0)


def bump_version(v: str | None, part: str = "patch") -> str:
    """Semver bump: merge and hand edit → patch; ``minor``/``major`` on request."""
    major, minor, patch = parse_version(v)
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"


def normalize_about(value: Any) -> str:
    """``"user"`` for a skill about the user (a diet, a fear, a dislike: it applies in any
    area), ``""`` for one about a task (the default, and anything else written there)."""
    return "user" if str(value or "").strip().lower() == "user" else ""


def normalize_level(value: Any) -> str:
    v = str(value or "").strip().lower()
    return v if v in LEVELS else DEFAULT_LEVEL


@dataclass
class Skill:
    """A skill. ``name`` is the spec name (the folder's slug); ``title`` the display name."""

    name: str
    description: str
    instructions: str = ""
    title: str = ""
    id: str = field(default_factory=new_id)
    version: str = "0.1.0"
    level: str = DEFAULT_LEVEL
    about: str = ""  # "user": the skill says something about the user, not about a task
    triggers: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    examples: list[Any] = field(default_factory=list)
    # provenance
    created: str = ""
    updated: str = ""
    source: str = ""  # "extracted" | "merged" | "user-edit" | "imported" | "revert" | ...
    source_turns: list[str] = field(default_factory=list)
    # spec fields kept as they were
    license: str = ""
    compatibility: str = ""
    allowed_tools: Any = None
    extra_metadata: dict[str, Any] = field(default_factory=dict)  # unknown metadata, preserved
    # where it lives (not written into the file)
    scope: str = "user"  # "user" | "common"
    owner: str = ""  # the user id, or the Common library name
    path: Path | None = None  # the SKILL.md file
    content_hash: str | None = None  # sha256 of the file bytes when read
    resources: list[str] = field(default_factory=list)  # files beside SKILL.md, relative
    layout: str = "spec"  # how it was read: "spec" | "autoskill" (legacy)

    def __post_init__(self) -> None:
        self.level = normalize_level(self.level)
        self.about = normalize_about(self.about)
        if not self.title:
            self.title = self.name

    @property
    def display_name(self) -> str:
        return self.title or self.name

    @property
    def about_user(self) -> bool:
        """The skill says something about the user (a diet, a fear, a dislike), not about a
        task: the chat renders it apart and the self-filter judges it with its own prompt."""
        return self.about == "user"

    @property
    def dir(self) -> Path | None:
        return self.path.parent if self.path else None

    @property
    def key(self) -> str:
        """Stable identity inside a bank: ``<scope>/<owner>/<name>`` (unique by folder)."""
        return f"{self.scope}/{self.owner}/{self.name}"

    def copy(self, **changes: Any) -> Skill:
        return replace(self, **changes)
