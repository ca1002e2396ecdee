"""Filesystem primitives that never lose data: atomic writes, safe names, content hashes."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import threading
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from engine.errors import UnsafePathError

# Names Windows refuses (a bank folder may be synced to a Windows machine).
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)),
             *(f"lpt{i}" for i in range(1, 10))}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_hash(path: str | os.PathLike) -> str | None:
    """The sha256 of a file's bytes, or None when it does not exist."""
    try:
        with open(path, "rb") as fh:
            return sha256_bytes(fh.read())
    except FileNotFoundError:
        return None


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename inside ``path`` durable (no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: str | os.PathLike, data: bytes | str, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    Temp file in the same directory, fsync, rename over the target, fsync the directory.
    On any error (disk full included) the temp file is removed and the target is untouched.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def is_temp_name(name: str) -> bool:
    """Our own temp files and editors' swap/backup files (ignored by loaders and the watcher)."""
    return (name.endswith((".tmp", ".swp", ".swo", ".swx", "~", ".bak", ".orig"))
            or name.startswith((".#", "#"))
            or (name.startswith(".") and ".SKILL.md." in f".{name}"))


def check_component(name: str, what: str = "name") -> str:
    """Validate one path component supplied by a user, a request or a file (user id, slug...).

    Rejects empty names, ``.``/``..``, separators, NUL and control characters, absolute paths,
    reserved device names and over-long names, with a message that names the problem.
    """
    if not isinstance(name, str) or not name.strip():
        raise UnsafePathError(f"{what} must not be empty")
    if "\x00" in name:
        raise UnsafePathError(f"{what} {name!r} contains a NUL byte")
    if any(ord(c) < 32 for c in name):
        raise UnsafePathError(f"{what} {name!r} contains control characters")
    if "/" in name or "\\" in name or name in (".", ".."):
        raise UnsafePathError(f"{what} {name!r} must be a single name, not a path")
    if name.startswith("."):
        raise UnsafePathError(f"{what} {name!r} must not start with a dot")
    if name.split(".")[0].strip().lower() in _RESERVED:
        raise UnsafePathError(f"{what} {name!r} is a reserved device name")
    if len(name.encode("utf-8")) > 200:
        raise UnsafePathError(f"{what} {name[:40]!r}... is too long (200 bytes at most)")
    return name


def safe_join(root: str | os.PathLike, *parts: str) -> Path:
    """Join validated components under ``root`` and prove the result stays inside it.

    Symlinks are resolved: a link that points outside the root is rejected.
    """
    root_real = Path(root).resolve()
    for p in parts:
        check_component(p)
    candidate = Path(root_real, *parts)
    real = candidate.resolve()
    if real != root_real and root_real not in real.parents:
        raise UnsafePathError(f"{candidate} resolves outside {root_real}")
    return candidate


def ensure_inside(root: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Raise unless ``path`` (after resolving symlinks) lies inside ``root``."""
    root_real = Path(root).resolve()
    real = Path(path).resolve()
    if real != root_real and root_real not in real.parents:
        raise UnsafePathError(f"{path} resolves outside {root_real}")
    return real


def slugify(name: str, *, max_len: int = 64) -> str:
    """An Agent Skills ``name`` from any display name: lowercase letters, digits, single hyphens.

    Unicode letters are kept (the reference validator accepts them, and a Chinese user should see
    ``周报生成`` in their file browser, not a hash); Latin accents are folded (``Café`` → ``cafe``);
    everything else becomes a hyphen. A name with no letter or digit at all becomes
    ``skill-<8 hex of sha1(name)>``: stable, and distinct for distinct names. The caller makes it
    unique in its folder; the display title always keeps the original.
    """
    text = unicodedata.normalize("NFKC", name or "").strip()
    out = []
    for ch in text:
        if ch.isascii():
            out.append(ch.lower() if ch.isalnum() else "-")
            continue
        base = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
        if base and base.isalnum():  # é -> e
            out.append(base.lower())
        elif ch.isalnum():           # 周, д (already NFKC; lower() for Cyrillic/Greek)
            out.append(ch.lower())
        else:
            out.append("-")
    slug = re.sub(r"-{2,}", "-", "".join(out)).strip("-")
    if not slug:
        digest = hashlib.sha1((name or "").strip().encode("utf-8")).hexdigest()[:8]
        slug = f"skill-{digest}"
    slug = slug[:max_len].strip("-")
    return slug


_locks_guard = threading.Lock()
_locks: dict[str, threading.RLock] = {}


@contextlib.contextmanager
def path_lock(path: str | os.PathLike) -> Iterator[None]:
    """One in-process lock per path: serialises writers of one skill directory."""
    key = os.path.realpath(path)
    with _locks_guard:
        lock = _locks.setdefault(key, threading.RLock())
    with lock:
        yield


@contextlib.contextmanager
def file_lock(lock_file: str | os.PathLike) -> Iterator[None]:
    """Exclusive lock across threads *and* processes, held on ``lock_file`` (created if missing).

    The in-process part (:func:`path_lock` on the lock file) makes it re-entrant for one thread;
    ``flock`` keeps a second process (the CLI beside the app) out. The one place both are taken:
    skill folders, the per-user state sidecar and the dense index files all lock through here.
    """
    import fcntl  # POSIX only; imported here so importing fsutil never needs it

    with path_lock(lock_file), open(lock_file, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
