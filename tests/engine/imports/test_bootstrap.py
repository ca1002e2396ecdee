"""`skilldesk import`: a folder of mixed conversation files end to end, then again: no change."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).parents[2] / "data" / "imports"


def snapshot(bank: Path) -> dict[str, str]:
    return {str(p.relative_to(bank)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(bank.rglob("*")) if p.is_file() and "vectors" not in p.parts}


def run_import(bank: Path, *extra: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "cli.main", "import", "conversations", str(DATA),
                        "--bank", str(bank), "--model", "bundled", "--json", *extra],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ),
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.model
def test_import_mixed_folder_then_again_changes_nothing(tmp_path):
    bank = tmp_path / "bank"
    first = run_import(bank)
    assert first["read"] == 5 and first["processed"] == 5
    reasons = sorted(s["reason"] for s in first["skipped"])
    assert "not UTF-8 text" in reasons and "no user messages" in reasons
    assert any(r.startswith("invalid JSON") for r in reasons)
    assert first["added"] >= 1  # durable preferences in the files become skills
    titles = " ".join(s["title"] for s in first["skills"])
    assert "周报" in titles
    before = snapshot(bank)
    second = run_import(bank)
    assert second["processed"] == 0 and second["already_imported"] == 5
    assert snapshot(bank) == before


@pytest.mark.model
def test_interrupted_import_resumes_where_it_stopped(tmp_path):
    bank = tmp_path / "bank"
    part = run_import(bank, "--limit", "2")
    assert part["processed"] == 2
    rest = run_import(bank)
    assert rest["already_imported"] == 2 and rest["processed"] == 3
