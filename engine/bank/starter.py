"""The starter skills shipped in ``resources/starter/``, given to a new or empty bank.

The app, ``skilldesk chat`` and the proxy open a bank the same way, so a first conversation
behaves the same in each: a bank with no skill at all receives the starter skills under
``Common/starter/`` (shared, read-only to learning) and an empty ``Users/<user>/``. A bank that
holds any SKILL.md is never touched, and nothing is ever overwritten.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from engine.fsutil import check_component
from engine.settings import RESOURCES

STARTER_LIBRARY = "starter"


def bank_has_skills(bank_dir: str | os.PathLike) -> bool:
    bank_dir = Path(bank_dir)
    for sub in ("Users", "Common"):
        base = bank_dir / sub
        if base.is_dir() and any(base.rglob("SKILL.md")):
            return True
    return False


def seed_starter(bank_dir: str | os.PathLike, user: str,
                 source: str | os.PathLike | None = None) -> bool:
    """Give an empty or missing bank the starter skills; True when it did.

    ``source`` is a folder of skill folders (default: the shipped ``resources/starter``)."""
    bank_dir = Path(bank_dir).expanduser()
    if bank_has_skills(bank_dir):
        return False
    user = check_component(user, "user")
    (bank_dir / "Users" / user).mkdir(parents=True, exist_ok=True)
    src = Path(source) if source is not None else RESOURCES / STARTER_LIBRARY
    dst = bank_dir / "Common" / STARTER_LIBRARY
    if src.is_dir():
        for skill in sorted(src.iterdir()):
            if (skill / "SKILL.md").is_file() and not (dst / skill.name).exists():
                shutil.copytree(skill, dst / skill.name,
                                ignore=shutil.ignore_patterns("__pycache__"))
    return True
