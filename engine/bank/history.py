"""Every version of every skill, kept in ``<bank>/.history/<skill-id>/<version>.md``.

Each entry is the complete SKILL.md text of that version; its ``metadata.source`` and
``metadata.updated`` say who made it and when, so the history needs no separate log that a
crash could tear. Entries are written atomically *before* the SKILL.md they describe, so a crash
at any point loses no version that ever became current.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from engine.bank import skillfile
from engine.bank.skill import Skill, parse_version
from engine.errors import NotFoundError, SkillFormatError
from engine.fsutil import atomic_write, check_component, sha256_bytes


@dataclass(frozen=True)
class Version:
    version: str
    source: str
    updated: str
    path: Path
    content_hash: str


def _sort_key(name: str) -> tuple:
    ver, _, dup = name.partition("+")
    return (*parse_version(ver), int(dup) if dup.isdecimal() and len(dup) < 10 else 0)


class History:
    """The version store of one bank."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _dir(self, skill_id: str) -> Path:
        return self.root / check_component(skill_id, "skill id")

    def record(self, skill_id: str, version: str, text: str, *,
               note: dict[str, str] | None = None) -> Path:
        """Store ``text`` as ``version``; identical content already stored is not duplicated.

        ``note`` (``source``/``updated``) describes a version whose text SkillDesk did not
        write — a hand edit, recorded as the user saved it, whose front-matter still names the
        previous writer. It is kept beside the entry (``<version>.note.json``) and wins over
        the text's own ``metadata.source``/``updated`` in :meth:`versions`.
        """
        d = self._dir(skill_id)
        data = text.encode("utf-8")
        target = d / f"{check_component(version, 'version')}.md"
        n = 1
        while target.exists():
            if sha256_bytes(target.read_bytes()) == sha256_bytes(data):
                return target
            n += 1
            target = d / f"{version}+{n}.md"
        if note:
            atomic_write(target.with_suffix(".note.json"), json.dumps(note))
        atomic_write(target, data)
        return target

    def versions(self, skill_id: str) -> list[Version]:
        """Oldest first. Unreadable entries are skipped, never fatal."""
        d = self._dir(skill_id)
        try:
            names = [e.name for e in os.scandir(d) if e.name.endswith(".md") and e.is_file()]
        except FileNotFoundError:
            return []
        out = []
        for name in sorted(names, key=lambda n: _sort_key(n[:-3])):
            path = d / name
            try:
                data = path.read_bytes()
            except OSError:
                continue
            try:
                s = skillfile.parse(data, path)
                source, updated = s.source, s.updated
            except SkillFormatError:
                source, updated = "?", ""
            note = self._note(path)
            source, updated = note.get("source") or source, note.get("updated") or updated
            out.append(Version(name[:-3], source, updated, path, sha256_bytes(data)))
        return out

    @staticmethod
    def _note(path: Path) -> dict[str, str]:
        try:
            note = json.loads(path.with_suffix(".note.json").read_text("utf-8"))
        except (OSError, ValueError):
            return {}
        return note if isinstance(note, dict) else {}

    def version_of(self, skill_id: str, content_hash: str | None) -> str | None:
        """The version a hand edit with this content was recorded as (None: not a recorded hand
        edit). Reads only the small notes, so listing a big bank stays cheap."""
        if not content_hash:
            return None
        try:
            names = [e.name for e in os.scandir(self._dir(skill_id))
                     if e.name.endswith(".note.json")]
        except (FileNotFoundError, NotADirectoryError):
            return None
        found = None
        for name in sorted(names, key=lambda n: _sort_key(n[:-10])):
            if self._note(self._dir(skill_id) / f"{name[:-10]}.md").get(
                    "content_hash") == content_hash:
                found = name[:-10]
        return found.split("+")[0] if found else None

    def text(self, skill_id: str, version: str) -> str:
        for v in self.versions(skill_id):
            if v.version == version:
                try:
                    return skillfile.decode(v.path.read_bytes(), str(v.path))
                except OSError as exc:
                    raise SkillFormatError(f"cannot read: {exc.strerror or exc}",
                                           str(v.path)) from None
        raise NotFoundError(f"skill {skill_id} has no version {version}")

    def latest(self, skill_id: str) -> Version | None:
        vs = self.versions(skill_id)
        return vs[-1] if vs else None

    def has_content(self, skill_id: str, content_hash: str) -> bool:
        return any(v.content_hash == content_hash for v in self.versions(skill_id))

    def diff(self, skill_id: str, a: str, b: str) -> str:
        """A unified diff between two stored versions."""
        ta, tb = self.text(skill_id, a), self.text(skill_id, b)
        return "".join(difflib.unified_diff(
            ta.splitlines(keepends=True), tb.splitlines(keepends=True),
            fromfile=f"{a}/SKILL.md", tofile=f"{b}/SKILL.md"))

    def skill_at(self, skill_id: str, version: str) -> Skill:
        return skillfile.parse(self.text(skill_id, version))
