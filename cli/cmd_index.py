"""``skilldesk index``: build or refresh a bank's search index and say what it did.

Only skills whose retrieval text changed are embedded; ``--rebuild`` ignores the vector cache
(``<bank>/vectors/<embedder-signature>.*``, a rebuildable cache, never user data).
"""

from __future__ import annotations

import argparse
import time

from .common import print_json, resolve
from .main import add_bank_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="build or refresh the search index, with counts and timings",
                       description=__doc__.split("\n\n")[0])
    add_bank_args(p)
    p.add_argument("--embedder", default=None,
                   help="'minilm', 'use' or a local sentence-transformers folder")
    p.add_argument("--rebuild", action="store_true", help="ignore the vector cache")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.desk import SkillDesk
    from engine.retrieval.embedders import make_embedder
    from engine.settings import Settings

    settings = Settings.load()
    bank, user = resolve(args)
    embedder = make_embedder(args.embedder or settings.embedder)
    if args.rebuild:
        for suffix in (".json", ".hnsw"):
            (bank.vectors_dir / f"{embedder.signature}.{user}{suffix}").unlink(missing_ok=True)
    t0 = time.perf_counter()
    desk = SkillDesk.open(bank.root, user, settings, embedder=embedder)
    open_s = time.perf_counter() - t0
    rep = desk.last_report
    t1 = time.perf_counter()
    desk.close()
    save_s = time.perf_counter() - t1
    skills = desk.skills
    info = {
        "bank": str(bank.root), "user": user, "embedder": embedder.signature,
        "skills": len(skills), "user_skills": sum(s.scope == "user" for s in skills),
        "common_skills": sum(s.scope == "common" for s in skills),
        "unreadable": [{"path": e.path, "reason": e.reason} for e in desk.load_errors],
        "cache": rep.dense.rebuilt or "reused",
        "embedded": rep.dense.embedded, "reused": rep.dense.reused,
        "removed": rep.dense.removed, "embed_s": round(rep.dense.embed_s, 3),
        "hnsw_s": round(rep.dense.index_s, 3), "bm25_s": round(rep.lexical_s, 3),
        "open_s": round(open_s, 3), "save_s": round(save_s, 3),
    }
    if args.json:
        print_json(info)
        return 0
    rate = f" ({info['embedded'] / info['embed_s']:.0f} skills/s)" if info["embed_s"] else ""
    print(f"bank {info['bank']} (user {user}): {info['skills']} skills "
          f"({info['user_skills']} user, {info['common_skills']} common)")
    print(f"embedder {info['embedder']}; vector cache: {info['cache']}")
    print(f"embedded {info['embedded']}{rate}, reused {info['reused']}, "
          f"removed {info['removed']}")
    print(f"timings: embed {info['embed_s']:.2f}s, hnsw {info['hnsw_s']:.2f}s, "
          f"bm25 {info['bm25_s']:.2f}s, open total {info['open_s']:.2f}s, "
          f"save {info['save_s']:.2f}s")
    for e in desk.load_errors:
        print(f"unreadable: {e.path}: {e.reason}")
    return 0
