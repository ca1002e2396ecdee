"""``skilldesk import conversations|documents|trajectories PATH``: bootstrap a bank."""

from __future__ import annotations

import argparse
import sys

from engine.settings import Settings

from .common import print_json
from .main import add_bank_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="learn skills from old conversations, documents or "
                                      "agent trajectories (resumable)")
    p.add_argument("kind", choices=["conversations", "documents", "trajectories"])
    p.add_argument("path", help="a file or a folder")
    add_bank_args(p)
    p.add_argument("--model", help="registry key or .gguf path (default: the settings)")
    p.add_argument("--limit", type=int, help="process at most N new items")
    p.add_argument("--include-failed", action="store_true",
                   help="trajectories: also learn from runs marked as failed")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--dry-run", action="store_true",
                   help="only read: report what would be imported and what is skipped, learn "
                        "nothing (no model, no bank needed)")
    p.set_defaults(func=run)


def _bar(done: int, total: int, what: str) -> None:
    if not sys.stderr.isatty():
        return
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                     f"{what[-40:]:<40}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def run(args) -> int:
    from engine import SkillDesk
    from engine.imports.bootstrap import preview, run_import

    if args.dry_run:
        out = preview(args.kind, args.path)
        if args.json:
            print_json({k: v for k, v in out.items() if k != "items"})
            return 0
        extra = f", {out['messages']} messages" if "messages" in out else ""
        print(f"{args.kind}: {out[args.kind]} would be read{extra} (dry run: nothing learned)")
        for sk in out["skipped"]:
            print(f"  skipped {sk['source']}: {sk['reason']}", file=sys.stderr)
        return 0

    settings = Settings.load()
    if args.model:
        settings.model.model = args.model
    desk = SkillDesk.open(args.bank, user=args.user or settings.user, config=settings,
                          create=True)
    try:
        s = run_import(desk, args.kind, args.path, progress=_bar, limit=args.limit,
                       require_success=not args.include_failed)
    finally:
        desk.close()
    if args.json:
        print_json(s.to_dict())
        return 0
    print(f"{s.kind}: {s.read} read, {s.processed} processed, {s.already} already imported "
          f"({s.seconds:.1f} s)")
    print(f"skills: {s.counts['add']} added, {s.counts['merge']} merged, "
          f"{s.counts['discard']} discarded, {s.counts['error']} errors")
    for src, a in s.actions:
        if a.kind in ("add", "merge") and a.skill is not None:
            print(f"  {a.kind:5} {a.skill.title}  ({src})")
    for sk in s.skipped:
        print(f"  skipped {sk.source}: {sk.reason}", file=sys.stderr)
    return 0
