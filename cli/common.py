"""Helpers shared by the subcommands: resolving the bank and user, printing tables and JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.bank.store import SkillBank
from engine.errors import NotFoundError, SkillDeskError
from engine.fsutil import check_component
from engine.settings import Settings


def resolve(args: argparse.Namespace, *, must_exist: bool = True) -> tuple[SkillBank, str]:
    """The bank and user named by ``--bank``/``--user``, the environment or the settings."""
    settings = Settings.load()
    user = check_component(getattr(args, "user", None) or settings.user or "default", "user")
    bank_dir = settings.bank_dir(getattr(args, "bank", None))
    if must_exist and not bank_dir.exists():
        raise NotFoundError(f"bank folder {bank_dir} does not exist")
    if bank_dir.exists() and not bank_dir.is_dir():
        raise SkillDeskError(f"bank {bank_dir} is not a folder")
    return SkillBank(bank_dir), user


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


def table(rows: list[list[Any]], headers: list[str]) -> str:
    """A plain-text table; wide CJK characters count as two columns."""
    import unicodedata

    def width(s: str) -> int:
        return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)

    cells = [[str(c) for c in r] for r in rows]
    widths = [max([width(h)] + [width(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(r: list[str]) -> str:
        return "  ".join(c + " " * (w - width(c)) for c, w in zip(r, widths, strict=False)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def short_path(p: Path | str | None, root: Path) -> str:
    if p is None:
        return ""
    try:
        return str(Path(p).relative_to(root))
    except ValueError:
        return str(p)
