"""The SkillBank folder: the user's skills on disk, safely.

Layout (see ARCHITECTURE.md)::

    <bank>/Users/<user>/<slug>/SKILL.md        read-write, one folder per skill
    <bank>/Common/<library>/<slug>/SKILL.md    shared, read-only to learning
    <bank>/vectors/                            rebuildable caches
    <bank>/.history/<skill-id>/<version>.md    every version (engine.bank.history)
    <bank>/.trash/<stamp>-<user>-<slug>/       deleted skills (never rmtree'd)

Guarantees: every write is atomic and serialised per skill (a thread lock plus an ``fcntl``
lock file, so two processes cannot interleave); every write names the content hash it started
from and is refused with :class:`ConflictError` if the file changed meanwhile (a hand edit);
every version is kept in the history before it becomes current.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.bank import skillfile
from engine.bank.history import History
from engine.bank.skill import Skill, bump_version, now_iso, parse_version
from engine.errors import (
    ConflictError,
    NotFoundError,
    ReadOnlyError,
    SkillDeskError,
    SkillFormatError,
    UnsafePathError,
)
from engine.fsutil import (
    atomic_write,
    check_component,
    ensure_inside,
    file_hash,
    file_lock,
    path_lock,
    safe_join,
    sha256_bytes,
    slugify,
)

log = logging.getLogger(__name__)

RESOURCE_DIRS = ("scripts", "references", "assets")
SKILL_FILES = ("SKILL.md", "skill.md")


@dataclass(frozen=True)
class LoadError:
    path: str
    reason: str


@dataclass
class LoadResult:
    skills: list[Skill] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)


def _best_match(skills: Iterable[Skill], ref: str, user: str) -> Skill | None:
    hits = [s for s in skills if ref in (s.id, s.name, s.title, s.key)
            and (s.scope == "common" or s.owner == user)]
    hits.sort(key=lambda s: (s.scope != "user", s.id != ref))  # own skills, then exact ids
    return hits[0] if hits else None


def _semver(v: str) -> str:
    major, minor, patch = parse_version(v)
    return f"{major}.{minor}.{patch}"


class SkillBank:
    """One bank folder. Cheap to construct; nothing is cached here (the index caches)."""

    def __init__(self, root: str | os.PathLike, *, create: bool = True):
        root = Path(root).expanduser()
        if root.exists() and not root.is_dir():
            raise UnsafePathError(f"bank {root} is not a folder")
        if not root.exists():
            if not create:
                raise NotFoundError(f"bank folder {root} does not exist")
            root.mkdir(parents=True)
        self.root = root.resolve()
        self.users_dir = self.root / "Users"
        self.common_dir = self.root / "Common"
        self.vectors_dir = self.root / "vectors"
        self.trash_dir = self.root / ".trash"
        self.history = History(self.root / ".history")

    # ---------------------------------------------------------------- paths
    def user_dir(self, user: str, *, create: bool = False) -> Path:
        d = safe_join(self.root, "Users", check_component(user, "user"))
        if create:
            d.mkdir(parents=True, exist_ok=True)
            ensure_inside(self.root, d)
        return d

    def _scope_of(self, path: Path) -> tuple[str, str]:
        rel = path.resolve().relative_to(self.root).parts
        if len(rel) >= 3 and rel[0] in ("Users", "Common"):
            return ("user" if rel[0] == "Users" else "common"), rel[1]
        raise UnsafePathError(f"{path} is not a skill folder of bank {self.root}")

    # ---------------------------------------------------------------- loading
    def skill_dirs(self, user: str | None = "default", scope: str = "all") -> Iterator[
            tuple[Path, str, str]]:
        """``(skill dir, scope, owner)`` for every folder that holds a SKILL.md."""
        groups: list[tuple[Path, str, str]] = []
        if scope in ("user", "all") and user is not None:
            groups.append((self.user_dir(user), "user", user))
        if scope in ("common", "all") and self.common_dir.is_dir():
            for lib in sorted(os.scandir(self.common_dir), key=lambda e: e.name):
                if lib.is_dir() and not lib.name.startswith("."):
                    groups.append((Path(lib.path), "common", lib.name))
        for base, sc, owner in groups:
            try:
                entries = sorted(os.scandir(base), key=lambda e: e.name)
            except OSError:  # missing, not a folder, no permission: nothing to list there
                continue
            for e in entries:
                if e.name.startswith(".") or not e.is_dir(follow_symlinks=False):
                    continue
                yield Path(e.path), sc, owner

    @staticmethod
    def skill_file(d: Path) -> Path | None:
        for name in SKILL_FILES:
            p = d / name
            if p.is_file():
                return p
        return None

    def load(self, user: str | None = "default", scope: str = "all") -> LoadResult:
        """Every readable skill; each unreadable file is reported with its reason."""
        result = LoadResult()
        for d, sc, owner in self.skill_dirs(user, scope):
            f = self.skill_file(d)
            if f is None:
                continue
            try:
                ensure_inside(self.root, f)
                skill = skillfile.read(f, scope=sc, owner=owner)
            except SkillDeskError as exc:
                result.errors.append(LoadError(str(f), getattr(exc, "reason", str(exc))))
                continue
            except Exception as exc:  # a reader bug must cost one file, never the bank
                log.exception("reading %s failed", f)
                result.errors.append(LoadError(str(f), f"cannot be read ({type(exc).__name__}: "
                                                       f"{str(exc)[:200]})"))
                continue
            skill.resources = self.resources_of(d)
            result.skills.append(skill)
        return result

    def read(self, path: str | os.PathLike) -> Skill:
        path = Path(path)
        if path.is_dir():
            path = self.skill_file(path) or path / "SKILL.md"
        ensure_inside(self.root, path)
        sc, owner = self._scope_of(path.parent)
        skill = skillfile.read(path, scope=sc, owner=owner)
        skill.resources = self.resources_of(path.parent)
        return skill

    def find(self, ref: str, user: str = "default", *,
             among: Iterable[Skill] | None = None) -> Skill:
        """A skill of ``user`` (or Common) by id, name (slug), title, or SKILL.md path.

        The user's own skills win ties, then exact ids. ``among`` (an index's skills) is the
        fast path: a hit there is read fresh from disk; otherwise the bank is read."""
        if os.sep in ref or ref.endswith(".md"):
            return self.read(ref)
        if among is not None:
            hit = _best_match(among, ref, user)
            if hit is not None and hit.path is not None and Path(hit.path).is_file():
                with contextlib.suppress(SkillFormatError, UnsafePathError, OSError):
                    return self.read(hit.path)
        hit = _best_match(self.load(user).skills, ref, user)
        if hit is None:
            raise NotFoundError(f"no skill {ref!r} in {self.root} for user {user!r}")
        return hit

    @staticmethod
    def resources_of(d: Path) -> list[str]:
        """The resource files (scripts/, references/, assets/) of one skill folder."""
        out = []
        for sub in RESOURCE_DIRS:
            base = d / sub
            if not base.is_dir() or base.is_symlink():
                continue
            for dirpath, _dirs, files in os.walk(base):
                out += [os.path.relpath(os.path.join(dirpath, f), d) for f in sorted(files)]
        return out

    # ---------------------------------------------------------------- writing
    @contextlib.contextmanager
    def locked(self, d: Path) -> Iterator[None]:
        """Serialise writers of one skill folder across threads and processes."""
        lock_dir = self.root / ".locks"
        lock_dir.mkdir(exist_ok=True)
        lock_name = sha256_bytes(str(d).encode())[:32] + ".lock"
        with path_lock(d), file_lock(lock_dir / lock_name):
            yield

    def unique_slug(self, parent: Path, name: str) -> str:
        base = slugify(name)
        slug, n = base, 2
        while (parent / slug).exists():
            suffix = f"-{n}"
            slug = base[: 64 - len(suffix)].rstrip("-") + suffix
            n += 1
        return slug

    def create(self, skill: Skill, user: str = "default", *, source: str = "extracted") -> Skill:
        """Write a new skill into ``Users/<user>/`` under a fresh unique slug."""
        parent = self.user_dir(user, create=True)
        with path_lock(parent):
            slug = self.unique_slug(parent, skill.title or skill.name)
            d = safe_join(parent, slug)
            now = now_iso()
            new = skill.copy(name=slug, title=skill.title or skill.name, scope="user",
                             owner=user, version=_semver(skill.version or "0.1.0"),
                             created=skill.created or now, updated=now,
                             source=skill.source or source, path=d / "SKILL.md")
            with self.locked(d):
                d.mkdir(parents=True, exist_ok=False)
                return self._commit(new, d / "SKILL.md")

    def write(self, skill: Skill, *, expected_hash: str | None, source: str = "merged",
              bump: str | None = "patch") -> Skill:
        """Replace an existing skill's file, if it is still what the caller read.

        ``expected_hash`` is the ``content_hash`` of the version the change was computed from;
        if the file changed since (a hand edit), :class:`ConflictError` is raised and nothing
        is written: re-read and redo. ``bump`` is the semver part to increase (None keeps it).
        """
        if skill.path is None:
            raise NotFoundError("skill has no path; use create()")
        path = Path(skill.path)
        ensure_inside(self.root, path)
        scope, owner = self._scope_of(path.parent)
        if scope == "common":
            raise ReadOnlyError(f"{path} is a shared (Common) skill; learning never changes it")
        with self.locked(path.parent):
            actual = file_hash(path)
            if actual != expected_hash:
                raise ConflictError(str(path), expected_hash, actual)
            # a hand edit made while nothing watched (the app closed, the CLI, the debounce
            # window) is kept as a version of its own before we replace it
            current = self.read(path)
            if not self.history.has_content(current.id, actual or ""):
                self._record_user_edit(path, current)
            new = skill.copy(scope=scope, owner=owner, name=path.parent.name,
                             version=self.next_version(skill, bump) if bump else skill.version,
                             updated=now_iso(), source=source)
            return self._commit(new, path, expected_hash=expected_hash)

    def _commit(self, skill: Skill, path: Path, expected_hash: str | None = None) -> Skill:
        """History first, then the file. Caller holds the skill's lock."""
        skill.version = _semver(skill.version)
        skill.instructions = skill.instructions.strip("\r\n")  # as a re-read returns it
        text = skillfile.render(skill)
        self.history.record(skill.id, skill.version, text)
        if file_hash(path) != expected_hash:  # last look, just before the rename
            raise ConflictError(str(path), expected_hash, file_hash(path))
        atomic_write(path, text)
        skill.path = path
        skill.content_hash = sha256_bytes(text.encode("utf-8"))
        skill.resources = self.resources_of(path.parent)
        return skill

    def record_hand_edit(self, path: str | os.PathLike) -> Skill | None:
        """A SKILL.md changed outside SkillDesk: keep it as a new version marked as the user's.

        The file itself is never touched (issue 18: rewriting it right after a save made every
        editor that checks the file's time warn "changed since reading it" on the next save).
        The exact bytes the user saved go into the history under the next free version — the
        user's own ``version:`` when they raised it, else the latest recorded one + 1 patch —
        with a note saying it is a user edit. The id, the version and the provenance in the
        file catch up only when SkillDesk itself next writes the skill (see :meth:`write`).
        If the content is already in the history (our own write, or a revert to a known
        version) nothing happens. Returns the recorded skill, or None when nothing was new.
        """
        path = Path(path)
        skill = self.read(path)
        if skill.scope != "user" or self.history.has_content(skill.id, skill.content_hash or ""):
            return None
        with self.locked(path.parent):
            return self._record_user_edit(path, skill)

    def _record_user_edit(self, path: Path, skill: Skill) -> Skill | None:
        """Keep the file's bytes (``skill`` as read) in the history as the user's version;
        None when the file changed since it was read. Caller holds the skill's lock."""
        version = _semver(skill.version)
        latest = self.history.latest(skill.id)
        if latest is not None:
            recorded = latest.version.split("+")[0]
            if parse_version(version) <= parse_version(recorded):
                version = bump_version(recorded)
        data = path.read_bytes()
        if sha256_bytes(data) != skill.content_hash:
            return None  # changed again; the next event records it
        self.history.record(skill.id, version, data.decode("utf-8"),
                            note={"source": "user-edit", "updated": now_iso(),
                                  "content_hash": skill.content_hash or ""})
        return skill.copy(version=version, source="user-edit")

    def effective_version(self, skill: Skill) -> str:
        """The version to show for ``skill``: a hand edit's recorded version (the file still
        names the one before it, see :meth:`record_hand_edit`), else the file's."""
        return self.history.version_of(skill.id, skill.content_hash) or skill.version

    def next_version(self, skill: Skill, bump: str | None = "patch") -> str:
        """The version a write of ``skill`` gets: past the file's and the history's newest.

        A hand edit is recorded in the history without touching the file, so the file may
        name an older version than the history holds; a write continues from the newer one.
        """
        base = _semver(skill.version)
        latest = self.history.latest(skill.id)
        if latest is not None:
            base = max(base, latest.version.split("+")[0], key=parse_version)
        return bump_version(base, bump) if bump else base

    def revert(self, skill: Skill, to_version: str) -> Skill:
        """A new version whose content equals ``to_version`` (nothing is ever rewound)."""
        old = self.history.skill_at(skill.id, to_version)
        latest = self.history.latest(skill.id)
        current = latest.version.split("+")[0] if latest else skill.version
        restored = old.copy(path=skill.path, version=max(current, skill.version,
                                                        key=parse_version),
                            created=skill.created or old.created)
        restored.extra_metadata = {**old.extra_metadata, "reverted_from": to_version}
        return self.write(restored, expected_hash=skill.content_hash, source="revert")

    def delete(self, skill: Skill) -> Path:
        """Move the skill's folder into ``.trash/`` (recoverable); returns where it went."""
        if skill.path is None:
            raise NotFoundError("skill has no path")
        d = Path(skill.path).parent
        ensure_inside(self.root, d)
        scope, owner = self._scope_of(d)
        if scope == "common":
            raise ReadOnlyError(f"{d} is a shared (Common) skill")
        with self.locked(d):
            # one folder per owner: a user's trash is never mixed up with another's (an owner
            # inside the entry's name was ambiguous: "a" and "a-b" share the prefix "a-")
            where = safe_join(self.trash_dir, owner)
            where.mkdir(parents=True, exist_ok=True)
            target = where / f"{now_iso().replace(':', '')}-{d.name}"
            n = 2
            while target.exists():
                target = target.with_name(f"{target.name}-{n}")
                n += 1
            os.rename(d, target)
        return target

    def restore(self, trashed: str | os.PathLike, user: str = "default") -> Skill:
        """Undo a delete: move a trashed folder back under ``Users/<user>/``."""
        src = ensure_inside(self.trash_dir, trashed)
        f = self.skill_file(src)
        if f is None:
            raise NotFoundError(f"{src} holds no SKILL.md")
        skill = skillfile.read(f)
        # the file's name may have been edited to anything: the folder gets a safe, free slug
        name = slugify(skill.name or skill.title or src.name)
        parent = self.user_dir(user, create=True)
        with path_lock(parent):
            slug = name if not (parent / name).exists() else self.unique_slug(parent, name)
            os.rename(src, safe_join(parent, slug))
        return self.read(parent / slug / f.name)

    def validate(self, path: str | os.PathLike) -> list[str]:
        """Problems with one SKILL.md as the Agent Skills spec sees them (empty = valid)."""
        problems: list[str] = []
        path = Path(path)
        try:
            skill = skillfile.read(path)
        except SkillFormatError as exc:
            return [exc.reason]
        front, _ = skillfile.split_front_matter(skillfile.decode(path.read_bytes()))
        extra = set(front) - {"name", "description", "license", "compatibility",
                              "allowed-tools", "metadata"}
        if extra:
            problems.append(f"top-level fields outside the spec: {', '.join(sorted(extra))} "
                            "(AutoSkill layout; `skilldesk skills import` converts it)")
        if skill.name != path.parent.name:
            problems.append(f"name {skill.name!r} does not match folder {path.parent.name!r}")
        if skill.name != slugify(skill.name):
            problems.append(f"name {skill.name!r} is not lowercase letters, digits and hyphens")
        if len(str(front.get("description") or "")) > skillfile.MAX_DESCRIPTION:
            problems.append("description is longer than 1024 characters")
        return problems
