"""`skilldesk skills ...`, `--version`, `--help` and the no-display message, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SKILLDESK = [sys.executable, "-m", "cli.main"]
ROOT = Path(__file__).resolve().parents[2]


def run(*args, env=None, check=False):
    e = {**os.environ, **(env or {})}
    return subprocess.run([*SKILLDESK, *args], capture_output=True, text=True, cwd=ROOT, env=e,
                          check=check)


def test_version_and_help():
    assert run("--version").stdout.startswith("skilldesk 0.")
    out = run("--help").stdout
    for cmd in ("chat", "search", "index", "skills", "import", "consolidate", "serve", "bench"):
        assert cmd in out


def test_no_display_explains_how_to_run_headless():
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    r = subprocess.run(SKILLDESK, capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 1
    assert "skilldesk chat" in r.stderr and "Traceback" not in r.stderr


def test_import_list_validate_history_json(corpus, tmp_path):
    bank = tmp_path / "bank"
    src = corpus / "ConvSkill" / "chinese_gpt4_8"
    r = run("skills", "import", str(src), "--bank", str(bank), "--json")
    assert r.returncode == 0, r.stderr
    imported = json.loads(r.stdout)["imported"]
    assert len(imported) > 100
    listing = json.loads(run("skills", "list", "--bank", str(bank), "--json").stdout)
    assert {s["id"] for s in listing["skills"]} == {s["id"] for s in imported}
    first = listing["skills"][0]
    assert set(first) >= {"id", "name", "title", "version", "level", "scope", "path"}
    assert Path(first["path"]).name == "SKILL.md" and first["scope"] == "user"
    assert run("skills", "validate", "--bank", str(bank)).returncode == 0
    hist = json.loads(run("skills", "history", first["id"], "--bank", str(bank), "--json").stdout)
    assert hist[0]["source"] == "imported"


def test_list_reports_unreadable_files(tmp_path):
    bad = tmp_path / "bank" / "Users" / "default" / "broken"
    bad.mkdir(parents=True)
    (bad / "SKILL.md").write_bytes(b"---\nname: [x\n---\n")
    out = json.loads(run("skills", "list", "--bank", str(tmp_path / "bank"), "--json").stdout)
    assert out["skills"] == [] and "malformed YAML" in out["errors"][0]["reason"]


@pytest.mark.parametrize("args,needle", [
    (["--user", "../etc"], "must be a single name"),
    (["--user", "a\x01b"], "control characters"),
    (["--bank", "/definitely/not/here"], "does not exist"),
])
def test_bad_user_or_bank_is_one_line_error(tmp_path, args, needle):
    (tmp_path / "bank").mkdir()
    full = ["skills", "list", "--bank", str(tmp_path / "bank"), *args]
    r = run(*full)
    assert r.returncode != 0
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
