"""Issue 18, the CLI: `skilldesk skills new|delete|restore|disable|enable|always-on|level`
as a user runs them, on a real bank on disk (each write goes through SkillDesk and reindexes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SKILLDESK = [sys.executable, "-m", "cli.main"]
ROOT = Path(__file__).resolve().parents[2]


def sd(bank: Path, *args: str) -> dict | list:
    r = subprocess.run([*SKILLDESK, *args, "--bank", str(bank), "--json"], capture_output=True,
                       text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       timeout=180)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def listed(bank: Path) -> dict[str, dict]:
    return {s["title"]: s for s in sd(bank, "skills", "list", "--scope", "user")["skills"]}


def test_cli_manage_a_skill_from_new_to_restore(tmp_path):
    bank = tmp_path / "bank"
    (bank / "Users" / "default").mkdir(parents=True)
    new = sd(bank, "skills", "new", "Metric units", "--description",
             "Use metric units in every answer.", "--rule", "Give distances in km")
    path = Path(new["path"])
    assert path.is_file() and "- Give distances in km" in path.read_text()
    assert listed(bank)["Metric units"]["disabled"] is False

    sd(bank, "skills", "disable", "Metric units")
    assert listed(bank)["Metric units"]["disabled"] is True
    hits = sd(bank, "search", "how far is it in km?")
    assert "Metric units" not in json.dumps(hits, ensure_ascii=False)
    assert path.is_file()  # kept on disk
    sd(bank, "skills", "enable", "Metric units")
    assert "Metric units" in json.dumps(sd(bank, "search", "how far is it in km?"),
                                        ensure_ascii=False)
    sd(bank, "skills", "always-on", "Metric units")
    row = listed(bank)["Metric units"]
    assert row["disabled"] is False and row["always_on"] is True

    moved = sd(bank, "skills", "level", "Metric units", "atomic")
    assert moved["level"] == "atomic" and moved["version"] == "0.1.1"
    back = sd(bank, "skills", "revert", "Metric units", "0.1.0")
    assert back["level"] == "functional" and back["version"] == "0.1.2"

    gone = sd(bank, "skills", "delete", "Metric units")
    assert Path(gone["trash"]).is_dir() and not path.exists()
    assert "Metric units" not in listed(bank)
    trash = sd(bank, "skills", "restore")
    assert [t["title"] for t in trash] == ["Metric units"]
    restored = sd(bank, "skills", "restore", "Metric units")
    assert Path(restored["path"]).is_file()
    assert listed(bank)["Metric units"]["always_on"] is True  # bookkeeping survived
