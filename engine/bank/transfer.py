"""Import and export Agent Skills folders and zip files.

Import accepts a folder holding one skill (``SKILL.md`` at its top), a folder of skill folders
(any depth, e.g. a whole AutoSkill bank), or a ``.zip`` of either. Every SKILL.md is parsed
(legacy AutoSkill layout included) and re-written in the spec layout under ``Users/<user>/``;
resource files (``scripts/``, ``references/``, ``assets/``) are copied along. Zip members are
checked before anything is extracted: no absolute paths, no ``..``, no symlinks, size caps.
Export writes the chosen skills as spec folders into a folder or a zip.
"""

from __future__ import annotations

import lzma
import os
import shutil
import stat
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.bank import skillfile
from engine.bank.skill import Skill, new_id
from engine.bank.store import RESOURCE_DIRS, SKILL_FILES, SkillBank
from engine.errors import SkillDeskError, SkillFormatError, UnsafePathError
from engine.fsutil import atomic_write, check_component, is_temp_name, slugify

MAX_ZIP_BYTES = 512 * 1024 * 1024
MAX_ZIP_MEMBERS = 200_000


@dataclass
class ImportReport:
    imported: list[Skill] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)


# What a damaged or hostile zip raises while being read: bad headers and CRCs (BadZipFile),
# truncated members (EOFError), broken deflate/bzip2/lzma streams (zlib.error, OSError,
# lzma.LZMAError), unsupported compression or encryption (NotImplementedError, RuntimeError),
# member names that are not valid for the file system (ValueError, UnicodeError).
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, zlib.error,
               lzma.LZMAError, NotImplementedError, RuntimeError, ValueError)


def _safe_extract(zip_path: Path, dest: Path) -> None:
    try:
        _extract_checked(zip_path, dest)
    except SkillDeskError:
        raise
    except _ZIP_ERRORS as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise SkillDeskError(f"{zip_path}: not a readable zip file ({reason})") from None


def _extract_checked(zip_path: Path, dest: Path) -> None:
    zf = zipfile.ZipFile(zip_path)
    with zf:
        members = zf.infolist()
        if len(members) > MAX_ZIP_MEMBERS:
            raise SkillDeskError(f"{zip_path}: too many files ({len(members)})")
        if sum(m.file_size for m in members) > MAX_ZIP_BYTES:
            raise SkillDeskError(f"{zip_path}: expands to more than "
                                 f"{MAX_ZIP_BYTES // 2**20} MB")
        root = dest.resolve()
        for m in members:
            name = m.filename.replace("\\", "/")
            if name.startswith("/") or ".." in name.split("/") or "\x00" in name:
                raise UnsafePathError(f"{zip_path}: member {m.filename!r} escapes the folder")
            if stat.S_ISLNK(m.external_attr >> 16):
                raise UnsafePathError(f"{zip_path}: member {m.filename!r} is a symlink")
            target = (root / name).resolve()
            if root not in target.parents and target != root:
                raise UnsafePathError(f"{zip_path}: member {m.filename!r} escapes the folder")
        zf.extractall(dest)


def _find_skill_files(src: Path) -> list[Path]:
    out = []
    for dirpath, dirs, files in os.walk(src, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in RESOURCE_DIRS)
        for name in SKILL_FILES:
            if name in files:
                out.append(Path(dirpath) / name)
                break
    return out


def import_skills(bank: SkillBank, src: str | os.PathLike, user: str = "default") -> ImportReport:
    """Import every skill under ``src`` (folder or zip) into ``Users/<user>/``."""
    src = Path(src).expanduser()
    if not src.exists():
        raise SkillDeskError(f"{src} does not exist")
    report = ImportReport()
    with tempfile.TemporaryDirectory(prefix="skilldesk-import-") as tmp:
        if src.is_file():
            if not zipfile.is_zipfile(src):
                raise SkillDeskError(f"{src}: expected a folder or a .zip of skills")
            _safe_extract(src, Path(tmp))
            src = Path(tmp)
        for f in _find_skill_files(src):
            try:
                skill = skillfile.read(f)
            except SkillFormatError as exc:
                report.skipped.append((str(f), exc.reason))
                continue
            skill.title = skill.title or skill.name
            try:
                check_component(skill.id, "skill id")
            except UnsafePathError:  # the history folder is named by id: give it a fresh one
                skill.id = new_id()
            try:
                new = bank.create(skill.copy(source="imported"), user, source="imported")
            except SkillDeskError as exc:  # e.g. an id that is not a safe folder name
                report.skipped.append((str(f), str(exc)))
                continue
            _copy_resources(f.parent, new.path.parent, report)
            new.resources = bank.resources_of(new.path.parent)
            report.imported.append(new)
    return report


def _copy_resources(src_dir: Path, dest_dir: Path, report: ImportReport) -> None:
    for sub in RESOURCE_DIRS:
        base = src_dir / sub
        if not base.is_dir() or base.is_symlink():
            continue
        for dirpath, _dirs, files in os.walk(base, followlinks=False):
            for name in files:
                p = Path(dirpath) / name
                if p.is_symlink() or is_temp_name(name):
                    report.skipped.append((str(p), "symlink or temporary file not copied"))
                    continue
                rel = p.relative_to(src_dir)
                target = dest_dir / rel
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(p, target)
                except OSError as exc:
                    report.skipped.append((str(p), f"not copied: {exc.strerror or exc}"))


def export_skills(skills: list[Skill], dest: str | os.PathLike, *,
                  layout: str = "spec") -> Path:
    """Write ``skills`` as spec folders into ``dest`` (a folder, or a path ending in .zip).

    An existing destination folder is added to, never overwritten: a skill whose folder already
    exists there is written as ``<name>-2`` and so on. In the spec layout a skill that keeps
    its folder name is written as the user's own bytes (comments, key order and wording of a
    hand edit survive an export or a move out); a renamed one is rendered with its new name.
    """
    dest = Path(dest).expanduser()
    render = skillfile.render_autoskill if layout == "autoskill" else skillfile.render
    if dest.suffix.lower() == ".zip":
        if dest.exists():
            raise SkillDeskError(f"{dest} already exists; choose another file name")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp")
        used: set[str] = set()
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for s in skills:
                folder = _unique(s.name, used)
                zf.writestr(f"{folder}/SKILL.md", _text(s, folder, render, layout))
                for rel in s.resources:
                    zf.write(s.path.parent / rel, f"{folder}/{rel}")
        os.replace(tmp, dest)
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    used = {p.name for p in dest.iterdir()}
    for s in skills:
        folder = _unique(s.name, used)
        atomic_write(dest / folder / "SKILL.md", _text(s, folder, render, layout))
        for rel in s.resources:
            target = dest / folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(s.path.parent / rel, target)
    return dest


def _text(s: Skill, folder: str, render: Any, layout: str) -> bytes | str:
    """The SKILL.md to write for ``s`` in ``folder``: the file as it is on disk when nothing
    about it changes, else rendered."""
    if layout == "spec" and folder == s.name and s.path is not None:
        try:
            return Path(s.path).read_bytes()
        except OSError:
            pass  # gone or unreadable since it was loaded: the loaded skill is what we have
    return render(s.copy(name=folder))


def _unique(name: str, used: set[str]) -> str:
    """A free folder name for a skill: its (slugified: a hand-edited ``name: ../x`` never
    leaves the destination) name, numbered when taken; never an existing folder."""
    name = slugify(name)
    folder, n = name, 2
    while folder in used:
        folder = f"{name}-{n}"
        n += 1
    used.add(folder)
    return folder
