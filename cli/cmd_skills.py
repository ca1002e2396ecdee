"""``skilldesk skills list|show|history|diff|revert|validate|export|import``."""

from __future__ import annotations

import argparse
import sys

from engine.bank.transfer import export_skills, import_skills
from engine.errors import SkillDeskError

from .common import print_json, resolve, short_path, table
from .main import add_bank_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("skills", help="list, show, diff, revert, validate, export, import skills")
    ss = p.add_subparsers(dest="skills_cmd", metavar="ACTION", required=True)

    def action(name: str, help: str, func, json_flag: bool = True) -> argparse.ArgumentParser:
        a = ss.add_parser(name, help=help)
        add_bank_args(a)
        if json_flag:
            a.add_argument("--json", action="store_true", help="machine-readable output")
        a.set_defaults(func=func)
        return a

    a = action("list", "one line per skill, plus files that could not be read", cmd_list)
    a.add_argument("--scope", choices=["user", "common", "all"], default="all")
    a = action("show", "print a skill (id, name, title or path)", cmd_show)
    a.add_argument("ref")
    a = action("history", "the versions of a skill", cmd_history)
    a.add_argument("ref")
    a = action("diff", "unified diff between two versions", cmd_diff, json_flag=False)
    a.add_argument("ref")
    a.add_argument("a", help="older version (e.g. 0.1.0)")
    a.add_argument("b", nargs="?", help="newer version (default: the latest)")
    a = action("revert", "make a new version equal to an old one", cmd_revert)
    a.add_argument("ref")
    a.add_argument("version")
    a = action("validate", "check SKILL.md files against the Agent Skills spec", cmd_validate)
    a.add_argument("paths", nargs="*", help="SKILL.md files or folders (default: the user's)")
    a = action("export", "write skills to a folder or .zip", cmd_export, json_flag=False)
    a.add_argument("dest")
    a.add_argument("refs", nargs="*", help="skills to export (default: all of the user's)")
    a.add_argument("--layout", choices=["spec", "autoskill"], default="spec")
    a = action("import", "import an Agent Skills folder, an AutoSkill bank or a .zip", cmd_import)
    a.add_argument("src")


def _row(s, root) -> dict:
    return {"id": s.id, "name": s.name, "title": s.title, "version": s.version,
            "level": s.level, "scope": s.scope, "owner": s.owner, "path": str(s.path)}


def cmd_list(args) -> int:
    bank, user = resolve(args)
    if args.scope in ("user", "all"):
        bank.user_dir(user)  # validates the user id even when the folder is empty
    res = bank.load(user, args.scope)
    if args.json:
        print_json({"skills": [_row(s, bank.root) for s in res.skills],
                    "errors": [{"path": e.path, "reason": e.reason} for e in res.errors]})
        return 0
    rows = [[s.title[:48], s.version, s.level, f"{s.scope}:{s.owner}",
             short_path(s.path, bank.root)] for s in res.skills]
    print(table(rows, ["TITLE", "VERSION", "LEVEL", "SCOPE", "PATH"]))
    print(f"\n{len(res.skills)} skills in {bank.root} (user {user})")
    for e in res.errors:
        print(f"  unreadable: {short_path(e.path, bank.root)}: {e.reason}", file=sys.stderr)
    return 0


def cmd_show(args) -> int:
    bank, user = resolve(args)
    s = bank.find(args.ref, user)
    if args.json:
        print_json({**_row(s, bank.root), "description": s.description, "tags": s.tags,
                    "triggers": s.triggers, "instructions": s.instructions,
                    "resources": s.resources, "source": s.source, "updated": s.updated})
    else:
        print(s.path.read_text(encoding="utf-8"))
    return 0


def cmd_history(args) -> int:
    bank, user = resolve(args)
    s = bank.find(args.ref, user)
    versions = bank.history.versions(s.id)
    if args.json:
        print_json([{"version": v.version, "source": v.source, "updated": v.updated,
                     "path": str(v.path)} for v in versions])
        return 0
    print(f"{s.title} ({s.id})")
    print(table([[v.version, v.source, v.updated] for v in versions],
                ["VERSION", "SOURCE", "WHEN"]))
    return 0


def cmd_diff(args) -> int:
    bank, user = resolve(args)
    s = bank.find(args.ref, user)
    b = args.b or bank.history.latest(s.id).version
    sys.stdout.write(bank.history.diff(s.id, args.a, b) or "(no difference)\n")
    return 0


def cmd_revert(args) -> int:
    bank, user = resolve(args)
    s = bank.find(args.ref, user)
    new = bank.revert(s, args.version)
    if args.json:
        print_json(_row(new, bank.root))
    else:
        print(f"{new.title}: version {new.version} now equals {args.version}")
    return 0


def cmd_validate(args) -> int:
    bank, user = resolve(args)
    from pathlib import Path

    files = []
    for p in args.paths or [str(bank.user_dir(user))]:
        p = Path(p)
        files += [p] if p.is_file() else sorted(p.rglob("SKILL.md"))
    results = {str(f): bank.validate(f) for f in files}
    bad = {k: v for k, v in results.items() if v}
    if args.json:
        print_json({"checked": len(results), "invalid": bad})
    else:
        for path, problems in bad.items():
            for problem in problems:
                print(f"{path}: {problem}")
        print(f"{len(results)} checked, {len(bad)} invalid")
    return 1 if bad else 0


def cmd_export(args) -> int:
    bank, user = resolve(args)
    skills = [bank.find(r, user) for r in args.refs] if args.refs else bank.load(
        user, "user").skills
    if not skills:
        raise SkillDeskError(f"user {user!r} has no skills to export")
    out = export_skills(skills, args.dest, layout=args.layout)
    print(f"exported {len(skills)} skills to {out}")
    return 0


def cmd_import(args) -> int:
    bank, user = resolve(args, must_exist=False)
    rep = import_skills(bank, args.src, user)
    if args.json:
        print_json({"imported": [_row(s, bank.root) for s in rep.imported],
                    "skipped": [{"path": p, "reason": r} for p, r in rep.skipped]})
    else:
        print(f"imported {len(rep.imported)} skills into {bank.user_dir(user)}")
        for p, r in rep.skipped:
            print(f"  skipped {p}: {r}", file=sys.stderr)
    return 0


