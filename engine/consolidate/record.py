"""Applying a consolidation plan, and undoing it in one step.

Every apply writes ``<bank>/.consolidations/<id>.json`` (rewritten atomically after each
cluster, so a crash leaves a record of exactly what was done) and ``<id>/``, which holds the
keepers' original SKILL.md bytes. Per cluster:

1. every member is re-read; a member changed since the plan (a hand edit) skips the cluster;
2. each original is stored in the bank history (``.history/<id>/<version>.md``) and the keeper's
   exact bytes in the record folder;
3. the keeper gets the merged content as a new version (``source: consolidated``, optimistic
   write: a concurrent edit skips the cluster), the other members move to ``.trash/``.

:func:`undo` puts back every original byte for byte: the keeper's file from the backup (the
merged version stays in the history) and the trashed folders by rename. A keeper edited after
the merge is left alone (reported as a conflict) unless ``force``, which first stores the edit
in the history. Nothing here deletes a file.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.bank.skill import now_iso
from engine.bank.store import SkillBank
from engine.errors import ConflictError, NotFoundError, SkillDeskError
from engine.fsutil import atomic_write, check_component, ensure_inside, file_hash, sha256_bytes

RECORDS = ".consolidations"


@dataclass
class Record:
    """What one apply did (see the module docstring); ``status``: applied | undone | partial."""

    id: str
    user: str
    created: str
    threshold: float
    status: str = "applied"
    clusters: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    undone: str = ""
    conflicts: list[str] = field(default_factory=list)

    @property
    def merged(self) -> int:
        return sum(len(c["trashed"]) for c in self.clusters)

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"merged": self.merged}


def _dir(bank: SkillBank) -> Path:
    return bank.root / RECORDS


def _save(bank: SkillBank, rec: Record) -> None:
    atomic_write(_dir(bank) / f"{rec.id}.json", json.dumps(asdict(rec), ensure_ascii=False,
                                                           indent=1))


def load_record(bank: SkillBank, record_id: str | None = None) -> Record:
    """Record ``record_id``, or the newest one that is not fully undone."""
    if record_id:
        path = _dir(bank) / f"{check_component(record_id, 'consolidation id')}.json"
        try:
            return _record_from(path.read_bytes())
        except FileNotFoundError:
            raise NotFoundError(f"no consolidation {record_id!r} in {bank.root}") from None
        except OSError as exc:
            raise SkillDeskError(f"consolidation record {path} is unreadable: "
                                 f"{exc.strerror or exc}") from None
        except ValueError as exc:
            raise SkillDeskError(f"consolidation record {path} is unreadable: {exc}") from None
    for rec in reversed(list_records(bank)):
        if rec.status != "undone":
            return rec
    raise NotFoundError(f"nothing to undo: no applied consolidation in {bank.root}")


def list_records(bank: SkillBank) -> list[Record]:
    """Every readable record, oldest first."""
    out = []
    for path in sorted(_dir(bank).glob("*.json")):
        if path.name.startswith("flags-"):
            continue
        try:
            out.append(_record_from(path.read_bytes()))
        except (OSError, ValueError):
            continue
    return out


_TEXT = (str,)
_RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "id": _TEXT, "user": _TEXT, "created": _TEXT, "threshold": (int, float), "status": _TEXT,
    "clusters": (list,), "skipped": (list,), "undone": _TEXT, "conflicts": (list,)}
_KEEPER_FIELDS = ("id", "path", "backup", "before_hash", "after_hash", "after_version")
_TRASHED_FIELDS = ("trash", "path", "hash")


def _record_from(data: bytes) -> Record:
    """A record file's bytes as a Record; ValueError (one line) when it is not one.

    Every field undo relies on is checked for its type here, so a hand-edited or torn record
    is refused up front instead of failing half-way through an undo.
    """
    try:
        raw = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    unknown = set(raw) - set(_RECORD_FIELDS) - {"merged"}
    if unknown:
        raise ValueError(f"unknown fields {', '.join(sorted(unknown))[:120]}")
    for key in ("id", "user", "created", "threshold"):
        if key not in raw:
            raise ValueError(f"no '{key}'")
    for key, types in _RECORD_FIELDS.items():
        if key in raw and (not isinstance(raw[key], types) or isinstance(raw[key], bool)):
            raise ValueError(f"'{key}' has the wrong type")
    for i, c in enumerate(raw.get("clusters", [])):
        keeper = c.get("keeper") if isinstance(c, dict) else None
        trashed = c.get("trashed") if isinstance(c, dict) else None
        if (not isinstance(keeper, dict) or not isinstance(trashed, list)
                or any(not isinstance(keeper.get(k), str) for k in _KEEPER_FIELDS)
                or any(not isinstance(t, dict) or any(not isinstance(t.get(k), str)
                                                      for k in _TRASHED_FIELDS)
                       for t in trashed)):
            raise ValueError(f"cluster {i} is not a consolidation entry")
    raw.pop("merged", None)
    return Record(**raw)


def _keep_in_history(bank: SkillBank, skill_id: str, version: str, data: bytes) -> None:
    try:
        bank.history.record(skill_id, version, data.decode("utf-8"))
    except (SkillDeskError, UnicodeDecodeError, OSError):
        pass  # the bytes are also kept in the trash / the record folder


def apply_plan(bank: SkillBank, plan: Any, *, merge: Callable | None = None,
               refresh: Callable[[], Any] | None = None,
               progress: Callable[[int, int], Any] | None = None) -> Record:
    """Merge every mergeable cluster of ``plan`` (an :class:`engine.consolidate.Plan`)."""
    from engine.consolidate.merge import union_merge

    merge = merge or union_merge
    stamp = now_iso().replace(":", "").replace("-", "")
    rec = Record(id=f"{stamp}-{uuid.uuid4().hex[:6]}", user=plan.user, created=now_iso(),
                 threshold=plan.threshold)
    backups = _dir(bank) / rec.id
    todo = [c for c in plan.clusters if not c.skipped]
    rec.skipped += [{"skills": [str(s.path) for s in c.skills], "reason": c.skipped}
                    for c in plan.clusters if c.skipped]
    _save(bank, rec)
    for n, c in enumerate(todo, 1):
        if progress is not None:
            progress(n - 1, len(todo))
        members = c.mergeable
        try:
            now = [bank.read(s.path) for s in members]
        except SkillDeskError as exc:
            rec.skipped.append({"skills": [str(s.path) for s in members], "reason": str(exc)})
            continue
        if any(a.content_hash != b.content_hash for a, b in zip(now, members, strict=True)):
            rec.skipped.append({"skills": [str(s.path) for s in members],
                                "reason": "changed since the plan was made; plan again"})
            continue
        k = next((i for i, s in enumerate(members) if s.path == c.keeper.path), 0)
        keeper, others = now[k], now[:k] + now[k + 1:]
        originals = {str(s.path): Path(s.path).read_bytes() for s in now}
        for s in now:
            _keep_in_history(bank, s.id, bank.effective_version(s), originals[str(s.path)])
        merged, notes = merge(keeper, others)
        backup = backups / f"{len(rec.clusters):04d}-{keeper.name}.md"
        atomic_write(backup, originals[str(keeper.path)])
        try:
            written = bank.write(merged, expected_hash=keeper.content_hash, source="consolidated")
        except ConflictError as exc:
            rec.skipped.append({"skills": [str(s.path) for s in now], "reason": str(exc)})
            continue
        entry: dict[str, Any] = {
            "similarity": c.similarity, "notes": notes,
            "keeper": {"path": str(keeper.path), "id": keeper.id, "title": keeper.title,
                       "before_version": keeper.version, "after_version": written.version,
                       "before_hash": keeper.content_hash, "after_hash": written.content_hash,
                       "backup": str(backup.relative_to(bank.root))},
            "trashed": []}
        rec.clusters.append(entry)
        for o in others:
            trash = bank.delete(o)
            entry["trashed"].append({"path": str(o.path), "id": o.id, "title": o.title,
                                     "version": o.version, "hash": o.content_hash,
                                     "trash": str(trash.relative_to(bank.root))})
            _save(bank, rec)
        _save(bank, rec)
    if progress is not None:
        progress(len(todo), len(todo))
    _save(bank, rec)
    if refresh is not None:
        refresh()
    return rec


def undo(bank: SkillBank, record_id: str | None = None, *, force: bool = False,
         refresh: Callable[[], Any] | None = None) -> Record:
    """Restore what consolidation ``record_id`` (default: the latest) changed, byte for byte."""
    rec = load_record(bank, record_id)
    rec.conflicts = []
    for entry in reversed(rec.clusters):
        if entry.get("undone"):
            continue
        kp = entry["keeper"]
        path = ensure_inside(bank.root, kp["path"])
        backup = ensure_inside(bank.root, bank.root / kp["backup"])
        try:
            data = backup.read_bytes()
        except OSError:
            data = b""
        if sha256_bytes(data) != kp["before_hash"]:
            rec.conflicts.append(f"{backup}: the backup is damaged; restore it from the history")
            continue
        with bank.locked(path.parent):
            current = file_hash(path)
            if current not in (kp["after_hash"], kp["before_hash"]):
                if not force:
                    rec.conflicts.append(f"{path} was edited after the merge; undo with force "
                                         "to restore the original (the edit stays in the history)")
                    continue
                if current is not None:
                    _keep_in_history(bank, kp["id"], kp["after_version"] + "-edited",
                                     path.read_bytes())
            atomic_write(path, data)
        for t in entry["trashed"]:
            src = bank.root / t["trash"]
            target = Path(t["path"]).parent
            if not src.is_dir():
                if file_hash(t["path"]) != t["hash"]:
                    rec.conflicts.append(f"{src} is no longer in the trash")
                continue
            ensure_inside(bank.trash_dir, src)
            ensure_inside(bank.root, target)
            if target.exists():
                target = target.with_name(bank.unique_slug(target.parent, target.name))
                t["restored_as"] = str(target / "SKILL.md")
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(src, target)
        entry["undone"] = now_iso()
        _save(bank, rec)
    rec.status = "partial" if rec.conflicts else "undone"
    rec.undone = now_iso()
    _save(bank, rec)
    if refresh is not None:
        refresh()
    return rec
