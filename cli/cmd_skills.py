"""``skilldesk skills list|show|new|history|diff|revert|delete|restore|disable|enable|always-on|
level|move-out|move-in|validate|export|import``.

Reads use the bank alone (fast: no embedder). Writes go through :class:`engine.desk.SkillDesk`,
which reindexes what it changed, and keeps bookkeeping (disabled, always-on, usage) in the
bank's sidecar, never in the SKILL.md.
"""

from __future__ import annotations

import argparse
import sys

from engine.bank.skill import LEVELS
from engine.bank.state import SkillState
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
    a = action("new", "create a skill from the template (then edit it)", cmd_new)
    a.add_argument("title")
    a.add_argument("--description", default="")
    a.add_argument("--level", choices=list(LEVELS), default="functional")
    a.add_argument("--rule", action="append", default=[], help="a rule (repeatable)")
    a.add_argument("--edit", action="store_true", help="open it in $VISUAL / $EDITOR")
    a = action("delete", "move a skill to the bank's trash (restorable)", cmd_delete)
    a.add_argument("ref")
    a = action("restore", "bring a deleted skill back (no REF: list the trash)", cmd_restore)
    a.add_argument("ref", nargs="?")
    a = action("disable", "keep a skill on disk but never use or merge into it", cmd_disable)
    a.add_argument("ref")
    a = action("enable", "use a disabled skill again", cmd_enable)
    a.add_argument("ref")
    a = action("always-on", "inject a skill in every chat (--off to stop)", cmd_always_on)
    a.add_argument("ref")
    a.add_argument("--off", action="store_true")
    a = action("level", "move a skill to another level", cmd_level)
    a.add_argument("ref")
    a.add_argument("level", choices=list(LEVELS))
    a = action("move-out", "move a skill into a folder outside the bank (the bank's copy goes "
                           "to the trash)", cmd_move_out)
    a.add_argument("ref")
    a.add_argument("folder")
    a = action("move-in", "bring the skills of a folder or .zip into yours (copied)", cmd_move_in)
    a.add_argument("src")


def _row(s, root) -> dict:
    return {"id": s.id, "name": s.name, "title": s.title, "version": s.version,
            "level": s.level, "scope": s.scope, "owner": s.owner, "path": str(s.path)}


def _state_text(e: dict) -> str:
    flags = [f for f, on in (("disabled", e.get("disabled")), ("always-on", e.get("always_on")))
             if on]
    return ",".join(flags)


def _desk(args):
    """A SkillDesk on the resolved bank (writes go through it: it reindexes)."""
    from engine.desk import SkillDesk
    from engine.settings import Settings

    bank, user = resolve(args)
    return SkillDesk.open(bank.root, user=user, config=Settings.load())


def _done(args, skill, text: str) -> int:
    if args.json:
        print_json(_row(skill, None))
    else:
        print(text)
    return 0


def cmd_list(args) -> int:
    bank, user = resolve(args)
    if args.scope in ("user", "all"):
        bank.user_dir(user)  # validates the user id even when the folder is empty
    res = bank.load(user, args.scope)
    state = SkillState(bank.root, user).all()
    for s in res.skills:
        s.version = bank.effective_version(s)  # a hand edit's recorded version
    if args.json:
        print_json({"skills": [{**_row(s, bank.root),
                                "disabled": bool(state.get(s.id, {}).get("disabled")),
                                "always_on": bool(state.get(s.id, {}).get("always_on")),
                                "uses": int(state.get(s.id, {}).get("uses") or 0),
                                "last_used": state.get(s.id, {}).get("last_used") or ""}
                               for s in res.skills],
                    "errors": [{"path": e.path, "reason": e.reason} for e in res.errors]})
        return 0
    rows = [[s.title[:48], s.version, s.level, f"{s.scope}:{s.owner}",
             state.get(s.id, {}).get("uses") or 0,
             (state.get(s.id, {}).get("last_used") or "never")[:10],
             _state_text(state.get(s.id, {})), short_path(s.path, bank.root)]
            for s in res.skills]
    print(table(rows, ["TITLE", "VERSION", "LEVEL", "SCOPE", "USES", "LAST USED", "STATE",
                       "PATH"]))
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
    with _desk(args) as desk:
        new = desk.revert(desk.find(args.ref), args.version)
    return _done(args, new, f"{new.title}: version {new.version} now equals {args.version}")


def cmd_new(args) -> int:
    with _desk(args) as desk:
        s = desk.new_skill(args.title, description=args.description, level=args.level,
                           rules=args.rule or None)
    if args.edit:
        import os
        import shlex
        import subprocess

        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        subprocess.call([*shlex.split(editor), str(s.path)])
    return _done(args, s, f"created {s.title}: {s.path}")


def cmd_delete(args) -> int:
    with _desk(args) as desk:
        s = desk.find(args.ref)
        where = desk.delete(s)
    if args.json:
        print_json({**_row(s, None), "trash": str(where)})
    else:
        print(f"moved {s.title} to the trash: {where}\n"
              f"  undo: skilldesk skills restore {where.name!r}")
    return 0


def cmd_restore(args) -> int:
    with _desk(args) as desk:
        if not args.ref:
            entries = desk.trash()
            if args.json:
                print_json([{"path": str(t.path), "name": t.name, "title": t.title,
                             "deleted": t.deleted} for t in entries])
            else:
                print(table([[t.title[:48], t.deleted, t.path.name] for t in entries],
                            ["TITLE", "DELETED", "TRASH FOLDER"]))
            return 0
        s = desk.restore(desk.find_trashed(args.ref).path)
    return _done(args, s, f"restored {s.title}: {s.path}")


def cmd_disable(args) -> int:
    with _desk(args) as desk:
        s = desk.disable(desk.find(args.ref))
    return _done(args, s, f"disabled {s.title} (kept on disk; `skills enable` to use it again)")


def cmd_enable(args) -> int:
    with _desk(args) as desk:
        s = desk.enable(desk.find(args.ref))
    return _done(args, s, f"enabled {s.title}")


def cmd_always_on(args) -> int:
    with _desk(args) as desk:
        s = desk.set_always_on(desk.find(args.ref), not args.off)
    return _done(args, s, f"{s.title}: {'no longer ' if args.off else ''}applied in every chat")


def cmd_level(args) -> int:
    with _desk(args) as desk:
        s = desk.set_level(desk.find(args.ref), args.level)
    return _done(args, s, f"{s.title} is now {s.level} (v{s.version})")


def cmd_move_out(args) -> int:
    with _desk(args) as desk:
        s = desk.find(args.ref)
        where = desk.move_out(s, args.folder)
    if args.json:
        print_json({**_row(s, None), "moved_to": str(where)})
    else:
        print(f"moved {s.title} to {where} (the bank's copy is in the trash)")
    return 0


def cmd_move_in(args) -> int:
    with _desk(args) as desk:
        rep = desk.move_in(args.src)
    if args.json:
        print_json({"imported": [_row(s, None) for s in rep.imported],
                    "skipped": [{"path": p, "reason": r} for p, r in rep.skipped]})
    else:
        print(f"brought in {len(rep.imported)} skills")
        for p, r in rep.skipped:
            print(f"  skipped {p}: {r}", file=sys.stderr)
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


