"""``skilldesk search``: hybrid skill retrieval from the command line.

``skilldesk search QUERY [--top-k K] [--json]`` prints the skills that apply to one query.
``skilldesk search --queries FILE.jsonl --json`` runs many queries in one process: input lines
are ``{"query": ...}`` (``-`` reads stdin); output is one JSON line per query, in order:
``{"query", "latency_ms", "hits": [{"id", "name", "title", "path", "score", "dense",
"lexical"}]}``. ``path`` is the SKILL.md file; ``latency_ms`` is the whole search, query
embedding included (the embedding model is loaded before the first query is timed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from engine.errors import SkillDeskError

from .common import print_json, resolve, short_path, table
from .main import add_bank_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="find the skills that apply to a query",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("query", nargs="?", help="the query text")
    add_bank_args(p)
    p.add_argument("--queries", metavar="FILE.jsonl",
                   help='many queries, one {"query": ...} per line ("-" = stdin); JSON lines out')
    p.add_argument("--top-k", type=int, default=None, metavar="K",
                   help="at most K skills (default: the settings, 3)")
    p.add_argument("--scope", choices=["user", "common", "all"], default=None,
                   help="search the user's skills, the common ones, or both (default: settings)")
    p.add_argument("--threshold", type=float, default=None, metavar="ETA",
                   help="minimum fused score in [0,1] (default: the settings)")
    p.add_argument("--embedder", default=None,
                   help="'minilm', 'use' or a local sentence-transformers folder")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _read_queries(path: str) -> list[str]:
    try:
        fh = sys.stdin if path == "-" else open(path, encoding="utf-8")
    except OSError as exc:
        raise SkillDeskError(f"cannot read {path}: {exc.strerror or exc}") from None
    out = []
    with fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise SkillDeskError(f"{path}:{n}: not a JSON line") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("query"), str):
                raise SkillDeskError(f'{path}:{n}: expected {{"query": "..."}}')
            out.append(obj["query"])
    return out


def _hit(h) -> dict:
    s = h.skill
    return {"id": s.id, "name": s.name, "title": s.title, "path": str(s.path),
            "score": h.score, "dense": h.dense, "lexical": h.lexical}


def run(args: argparse.Namespace) -> int:
    from engine.desk import SkillDesk
    from engine.settings import Settings

    if args.queries is None and not (args.query or "").strip():
        raise SkillDeskError("give a QUERY, or --queries FILE.jsonl")
    if args.top_k is not None and args.top_k < 1:
        raise SkillDeskError("--top-k must be 1 or more")
    queries = _read_queries(args.queries) if args.queries is not None else [args.query]
    bank, user = resolve(args)
    desk = SkillDesk.open(bank.root, user, Settings.load(), embedder=args.embedder)
    try:
        desk.index.embedder.encode_query("warm up")  # load the model before timing
        results = []
        for q in queries:
            t0 = time.perf_counter()
            hits = desk.search(q, args.top_k, scope=args.scope, threshold=args.threshold)
            ms = (time.perf_counter() - t0) * 1000
            results.append({"query": q, "latency_ms": round(ms, 2),
                            "hits": [_hit(h) for h in hits]})
            if args.queries is not None or args.json:
                print_json(results[-1])
                sys.stdout.flush()
        if args.queries is None and not args.json:
            r = results[0]
            if not r["hits"]:
                print(f"no skill applies (searched {len(desk.skills)} skills, "
                      f"{r['latency_ms']:.0f} ms)")
            else:
                rows = [[i, f"{h['score']:.3f}", f"{h['dense']:.3f}", f"{h['lexical']:.3f}",
                         h["title"], short_path(h["path"], bank.root)]
                        for i, h in enumerate(r["hits"], 1)]
                print(table(rows, ["#", "score", "dense", "lexical", "title", "path"]))
                print(f"({len(desk.skills)} skills, {r['latency_ms']:.0f} ms)")
    finally:
        desk.close()
    return 0
