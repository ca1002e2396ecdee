"""The built wheel works outside the checkout: resources (prompts, registry, starter skills,
themes, icons) load with importlib.resources from wherever the package is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(ROOT)], check=True, capture_output=True, timeout=300)
    (whl,) = out.glob("skilldesk-*.whl")
    return whl


def test_wheel_ships_the_resources(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for must in ("resources/prompts/extract.md", "resources/prompts/extract.schema.json",
                 "resources/registry.json", "resources/themes/light.qss",
                 "resources/icons/app.svg", "resources/starter/tldr-summaries/SKILL.md",
                 "engine/desk.py", "server/app.py", "bench/scenarios/evolution.jsonl"):
        assert must in names, must
    assert not any(n.startswith("tests/") for n in names)


def test_installed_wheel_runs_from_another_folder(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(site), str(wheel)], check=True, capture_output=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(site), "SKILLDESK_HOME": str(tmp_path / "home")}
    env.pop("SKILLDESK_BANK", None)

    def run(*args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return res.stdout

    where = subprocess.run([sys.executable, "-c", "import engine, resources; "
                            "print(engine.__file__); print(resources.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert all(line.startswith(str(site)) for line in where.stdout.split())  # not the checkout
    assert "skilldesk" in run("--version")
    bank = tmp_path / "bank"
    from engine.bank.starter import seed_starter

    seed_starter(bank, "default")
    out = json.loads(run("search", "please summarize this article", "--bank", str(bank),
                         "--json"))
    assert out["hits"][0]["path"].endswith("tldr-summaries/SKILL.md")
