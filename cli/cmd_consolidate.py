"""``skilldesk consolidate``: merge near-duplicate skills and flag junk (SkillX refinement).

    skilldesk consolidate --dry-run [--json]        the plan: clusters, similarity, flags
    skilldesk consolidate [--merge auto|llm|union]   apply it (prints the record id)
    skilldesk consolidate --undo [ID]                put every original back (default: latest)
    skilldesk consolidate --list                     past consolidations

Only the user's own skills are changed; shared (Common) skills are read-only. Flags never
delete anything: they are saved to <bank>/.consolidations/flags-<user>.json.
"""

from __future__ import annotations

import argparse
import sys

from engine.consolidate import (
    DEFAULT_MAX_SIZE,
    DEFAULT_THRESHOLD,
    list_records,
    llm_merge,
    make_plan,
    undo,
    union_merge,
)
from engine.consolidate.flags import save_report

from .common import print_json, resolve, short_path, table
from .main import add_bank_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consolidate", help="merge near-duplicate skills, flag junk (undoable)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bank_args(p)
    p.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help=f"cosine similarity that makes two skills duplicates "
                        f"(default {DEFAULT_THRESHOLD}, as SkillX)")
    p.add_argument("--max-size", type=int, default=DEFAULT_MAX_SIZE,
                   help=f"largest cluster merged into one skill (default {DEFAULT_MAX_SIZE})")
    p.add_argument("--scope", choices=["user", "common", "all"], default="user",
                   help="which skills to compare (only user skills are ever merged)")
    p.add_argument("--cross-level", action="store_true",
                   help="also group skills of different levels (planning/functional/atomic)")
    p.add_argument("--linkage", choices=["complete", "single"], default="complete",
                   help="complete: every pair in a cluster is similar (default); "
                        "single: connected components")
    p.add_argument("--merge", choices=["auto", "llm", "union"], default="auto",
                   help="llm: the merge prompt on the model; union: deterministic union of "
                        "fields; auto: llm unless the model is the tiny bundled one")
    p.add_argument("--model", default=None, help="model for --merge llm (name or .gguf path)")
    p.add_argument("--undo", nargs="?", const="", default=None, metavar="ID",
                   help="undo a consolidation (default: the latest)")
    p.add_argument("--force", action="store_true",
                   help="with --undo: also restore skills edited after the merge")
    p.add_argument("--list", action="store_true", help="list past consolidations")
    p.set_defaults(func=run)


def _client(args, settings):
    """An LLMClient for the merge prompt, or None for the deterministic union."""
    from engine.llm.registry import resolve as resolve_model

    ref = settings.model_ref(args.model)
    if args.merge == "union":
        return None
    if args.merge == "auto" and settings.model.backend == "local":
        from engine.llm import tiers

        if tiers.policy(resolve_model(ref)).consolidate_merge == "union":
            return None
    from engine.llm.client import LLMClient
    from engine.llm.factory import make_worker

    worker = make_worker(settings.model, args.model, n_threads=2)
    worker.wait_ready()
    return LLMClient(worker)


def run(args: argparse.Namespace) -> int:
    bank, user = resolve(args)
    if args.list:
        recs = list_records(bank)
        if args.json:
            print_json([r.to_json() for r in recs])
        else:
            print(table([[r.id, r.created, r.status, len(r.clusters), r.merged] for r in recs],
                        ["id", "created", "status", "clusters", "merged"]))
        return 0
    if args.undo is not None:
        rec = undo(bank, args.undo or None, force=args.force)
        if args.json:
            print_json(rec.to_json())
        else:
            print(f"undid consolidation {rec.id}: {len(rec.clusters)} merged skill(s) restored "
                  f"to their originals, {rec.merged} skill(s) back from the trash")
            for c in rec.conflicts:
                print(f"  not undone: {c}", file=sys.stderr)
        return 1 if rec.conflicts else 0

    from engine.desk import SkillDesk
    from engine.settings import Settings

    settings = Settings.load()
    desk = SkillDesk.open(bank.root, user, settings)
    try:
        plan = make_plan(desk, user=user, scope=args.scope, threshold=args.threshold,
                         max_size=args.max_size, cross_level=args.cross_level,
                         linkage=args.linkage)
        out = plan.to_json()
        record = None
        if not args.dry_run:
            save_report(bank.root, user, plan.flags)
            if plan.merges:
                client = _client(args, settings)
                merge = llm_merge(client) if client is not None else union_merge
                out["merge"] = "llm" if client is not None else "union"
                try:
                    record = desk.consolidate(plan, merge=merge)
                finally:
                    if client is not None:
                        client.target.close()
                out["applied"] = record.to_json()
    finally:
        desk.close()
    if args.json:
        print_json(out)
        return 0
    _print(plan, bank.root, record, args.dry_run)
    return 0


def _print(plan, root, record, dry_run: bool) -> None:
    rows = [[f"{c.similarity:.3f}", len(c.skills), c.level, c.keeper.title[:40],
             ", ".join(short_path(s.path, root).split("/")[-2][:30] for s in c.skills
                       if s is not c.keeper)[:70] + (f"  [{c.skipped}]" if c.skipped else "")]
            for c in plan.clusters]
    print(f"{plan.n_skills} skills, {len(plan.clusters)} cluster(s) at cosine >= "
          f"{plan.threshold} ({plan.embedder}); {plan.merges} skill(s) would be merged "
          f"into their cluster's keeper")
    if rows:
        print(table(rows, ["sim", "n", "level", "keeper", "merged into it"]))
    if plan.flags:
        print(f"\n{len(plan.flags)} skill(s) flagged for review (nothing is deleted):")
        for f in plan.flags[:30]:
            print(f"  {f.title[:40]}: {'; '.join(f.reasons)[:110]}")
        if len(plan.flags) > 30:
            print(f"  ... and {len(plan.flags) - 30} more (--json for all)")
    if record is not None:
        print(f"\nconsolidation {record.id}: {len(record.clusters)} cluster(s) merged, "
              f"{record.merged} skill(s) moved to the trash; undo with "
              f"`skilldesk consolidate --undo {record.id}`")
        for s in record.skipped:
            print(f"  skipped: {s['reason']}")
    elif not plan.clusters:
        print("nothing to merge")
    elif dry_run:
        print("\n(dry run: nothing changed)")
    else:
        print("\nnothing merged (every cluster was skipped)")
