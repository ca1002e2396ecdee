"""``skilldesk bench retrieval``: quality and speed of hybrid skill retrieval, as plain tables.

Quality (see _retrieval_quality.py for the protocol): the corpus is copied into a temporary bank;
each query skill's triggers are held out of its indexed text and one trigger is the query;
Recall@1, Recall@5 and MRR for English and Chinese queries, for BM25 alone, each embedder alone
and fused. ``--sweep`` adds the λ / normalisation grid, ``--fields`` the retrieval-text
ablation. Speed (see _retrieval_speed.py): search latency at ``--sizes``, query embedding, cold
build, one-skill update and edit-to-searchable through the watcher.

Timings on a shared 2-core machine are noisy; the tables say what was measured, not a promise.
Computed vectors are cached (``--cache``, default $TMPDIR/skilldesk-bench-cache) between runs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import _retrieval_quality as Q
from bench import _retrieval_sets as D
from bench import _retrieval_speed as S
from bench._retrieval_data import (
    DEFAULT_CACHE,
    DEFAULT_CORPUS,
    USER,
    CachedEmbedder,
    corpus_bank,
    table,
)
from engine.bank.store import SkillBank
from engine.retrieval import DEFAULT_PARAMS
from engine.retrieval.document import (
    DEFAULT_FIELDS,
    DENSE_INSTRUCTIONS_CHARS,
    LEXICAL_INSTRUCTIONS_CHARS,
)
from engine.retrieval.embedders import DEFAULT_EMBEDDER, make_embedder
from engine.retrieval.index import SkillIndex

# What the chat served before issue 15: η 0.2 on the fused score, no relevance model.
BEFORE_PARAMS = DEFAULT_PARAMS.with_(relevance=False, threshold=0.2)
LAMBDAS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0)
NORMS = (("cos", "ceiling"), ("cos", "max"), ("minmax", "minmax"))
_NO_BODY = ("title", "description", "tags", "triggers")
FIELD_SETS = {  # label: (fields, body chars for the embedder, body chars for BM25)
    "title+desc": (("title", "description"), 0, 0),
    "+tags": (("title", "description", "tags"), 0, 0),
    "+tags+triggers": (_NO_BODY, 0, 0),
    "+body 300/300": (DEFAULT_FIELDS, 300, 300),
    "+body 600/600": (DEFAULT_FIELDS, 600, 600),
    "+body 1500/1500": (DEFAULT_FIELDS, 1500, 1500),
    "+body 300/1500": (DEFAULT_FIELDS, 300, 1500),
    "+body 300/4000": (DEFAULT_FIELDS, 300, 4000),
    "+body 0/1500": (DEFAULT_FIELDS, 0, 1500),
}


def _args(argv):
    p = argparse.ArgumentParser(prog="skilldesk bench retrieval", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--corpus", type=Path, default=None, help="folder of SKILL.md files "
                   f"(default {DEFAULT_CORPUS})")
    p.add_argument("--bank", type=Path, default=None, help="use this bank's skills as corpus")
    p.add_argument("--user", default=None, help="(accepted; the bench uses its own user)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="vector cache folder")
    p.add_argument("--no-cache", action="store_true", help="embed everything again")
    p.add_argument("--embedders", default="minilm,use", help="comma list: minilm,use,<path>")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--max-queries", type=int, default=0, help="subsample queries (0 = all)")
    p.add_argument("--sections", default="offtopic,paraphrase,quality,speed,build,watch",
                   help="comma list of offtopic, paraphrase, constraints, twotask, quality, "
                        "speed, build, watch (constraints needs --learned-bank)")
    p.add_argument("--splits", default="tune,heldout", type=lambda v: tuple(v.split(",")),
                   help="dev-set halves to print: tune, heldout (printed as 'seen'), fresh, "
                   "fresh2, fresh3, fresh4 (tune while tuning; all to report)")
    p.add_argument("--filter-model", default="", metavar="MODEL",
                   help="also serve the off-topic and paraphrase sets through the self-filter "
                   "(engine/chat/skill_filter.py) on this model (e.g. recommended); one model "
                   "call per request where a skill passed η, on the --splits rows only")
    p.add_argument("--learned-bank", type=Path, default=None, metavar="DIR",
                   help="constraints: the bank the real pipeline learned the statements into "
                        "(a new folder is learned with --learn-model and kept for later runs)")
    p.add_argument("--learn-model", default="recommended", metavar="MODEL",
                   help="constraints: the model that learns a new --learned-bank")
    p.add_argument("--fit", action="store_true", help="refit the relevance models on the tune "
                   "halves and write engine/retrieval/relevance.json (then measure)")
    p.add_argument("--sweep", action="store_true", help="λ and normalisation grid")
    p.add_argument("--fields", action="store_true", help="retrieval-text field ablation")
    p.add_argument("--cjk", default="bigram", choices=("bigram", "unibigram"))
    p.add_argument("--dense-chars", type=int, default=DENSE_INSTRUCTIONS_CHARS,
                   help="instruction characters in the embedder's text")
    p.add_argument("--lexical-chars", type=int, default=LEXICAL_INSTRUCTIONS_CHARS,
                   help="instruction characters in BM25's text")
    p.add_argument("--sizes", default="3000,10000,100000")
    p.add_argument("--edits", type=int, default=50, help="edits for edit-to-searchable")
    p.add_argument("--ef", type=int, default=0, help="hnswlib ef for the latency runs "
                   "(0 = the default)")
    p.add_argument("--build-n", type=int, default=0, help="skills in the cold build (0 = all)")
    p.add_argument("--build-embedders", default=DEFAULT_EMBEDDER,
                   help="embedders timed in the cold build (comma list)")
    p.add_argument("--quick", action="store_true",
                   help="small run: 150 queries, 3k only, 10 edits, cold build of 100")
    a = p.parse_args(argv)
    if a.quick:
        a.max_queries = a.max_queries or 150
        a.sizes = "3000" if a.sizes == p.get_default("sizes") else a.sizes
        a.edits = min(a.edits, 10)
        a.build_n = a.build_n or 100
    return a


def _variants(embs: list[str], sweep: bool) -> list[Q.Variant]:
    flat = dict(dedup=None, window=None, mmr=None, threshold=0.0, relevance=False)
    vs = [Q.Variant("BM25", embs[0], DEFAULT_PARAMS.with_(lam=0.0, **flat))]
    for e in embs:
        vs.append(Q.Variant(f"dense {e}", e, DEFAULT_PARAMS.with_(lam=1.0, **flat)))
        vs.append(Q.Variant(f"fused {e}", e, DEFAULT_PARAMS.with_(**flat), by_script=True))
        vs.append(Q.Variant(f"ranker {e}", e, DEFAULT_PARAMS.with_(
            **{**flat, "relevance": True}), by_script=True))
        vs.append(Q.Variant(f"served {e}", e, DEFAULT_PARAMS, DEFAULT_PARAMS.top_k,
                            by_script=True))
        vs.append(Q.Variant(f"served-before {e}", e, BEFORE_PARAMS, BEFORE_PARAMS.top_k,
                            by_script=True))
        if sweep:
            for lam in LAMBDAS[1:-1]:
                for dn, ln in NORMS:
                    vs.append(Q.Variant(f"sweep {e} {lam} {dn}/{ln}", e, DEFAULT_PARAMS.with_(
                        lam=lam, dense_norm=dn, lex_norm=ln, **flat)))
        plain = DEFAULT_PARAMS.with_(threshold=0.0, window=None, dedup=None, mmr=None, top_k=3)
        # (relevance on: the ranker orders, the window applies to P(related))
        for name, extra in (("top-3 plain", {}), ("top-3 dedup0.95", dict(dedup=0.95)),
                            ("top-3 window0.1", dict(window=0.1)),
                            ("top-3 window0.15", dict(window=0.15)),
                            ("top-3 window0.25", dict(window=0.25)),
                            ("top-3 mmr0.85", dict(mmr=0.85)),
                            ("top-3 mmr0.7", dict(mmr=0.7))):
            vs.append(Q.Variant(f"{name} {e}", e, plain.with_(**extra), 3, by_script=True))
        vs.append(Q.Variant(f"top-3 default(η=0) {e}", e, DEFAULT_PARAMS.with_(
            threshold=0.0, top_k=3), 3, by_script=True))
    return vs


def _qrow(name, outs, split=None):
    row = [name]
    for lang in ("en", "zh", None):
        m = Q.metrics(outs, lang, split)
        row += [m["r1"], m["r5"], m["mrr"]]
    return row


def quality(skills, embedders, a, out) -> dict:
    names = list(embedders)
    t0 = time.perf_counter()
    res = Q.run(skills, embedders, _variants(names, a.sweep), fields=DEFAULT_FIELDS,
                instr_chars=a.dense_chars, lexical_chars=a.lexical_chars,
                folds=a.folds, cjk=a.cjk,
                max_queries=a.max_queries or None)
    n_en = sum(q.lang == "en" for q in res.queries)
    hdr = ["ranker", "EN R@1", "EN R@5", "EN MRR", "ZH R@1", "ZH R@5", "ZH MRR", "ALL R@1",
           "ALL R@5", "ALL MRR"]
    p = DEFAULT_PARAMS
    for split in [s for s in a.splits if s in Q.SPLITS]:  # triggers: no "fresh" half
        rows = [_qrow(v, res.outcomes[v], split) for v in ["BM25"] + [
            f"{k} {e}" for e in names for k in ("dense", "fused", "ranker", "served",
                                                "served-before")]]
        n = sum(o.split == split for o in res.outcomes["BM25"])
        print(table(hdr, rows, f"\nHeld-out triggers, {split} half ({n} of {n_en} EN + "
                    f"{len(res.queries) - n_en} ZH queries, {len(skills)} skills, {a.folds} "
                    f"folds; fused = λ {p.lam}, {p.dense_norm}/{p.lex_norm}; ranker = "
                    "relevance.py's order, no cut; served = what the chat injects (η "
                    f"{p.threshold} on P(related), window, top-{p.top_k}); served-before = "
                    "the pre-issue-15 selection (η 0.2 on fused); MRR@50; "
                    f"{time.perf_counter() - t0:.0f}s; targets: ranker/served R@1 >= BM25 and "
                    ">= 0.93 per language)"), file=out)
    rows = []
    for split in [s for s in a.splits if s in Q.SPLITS]:
        for v in ["BM25"] + [f"ranker {e}" for e in names]:
            o = res.outcomes[v]
            row = [f"{split}: {v}"]
            for lang in ("en", "zh"):
                amb = [x for x in o if x.lang == lang and x.split == split and x.shared > 1]
                row += [f"{len(amb)}/{Q.metrics(o, lang, split)['n']}",
                        Q.metrics(o, lang, split, unique=True)["r1"]]
            rows.append(row)
    print(table(["half: ranker", "EN shared", "EN R@1 unique", "ZH shared", "ZH R@1 unique"],
                rows, "\nThe same, without the queries whose trigger other skills have too "
                "(the corpus's boilerplate 'Use when the user asks for a process or checklist.':"
                " no ranking can tell those skills apart by it)"), file=out)
    rows = []
    for split in [s for s in a.splits if s in Q.SPLITS]:
        for v in [f"ranker {e}" for e in names] + [f"served {e}" for e in names]:
            for lang in ("en", "zh"):
                c = Q.copy_misses(res.outcomes[v], skills, lang, split)
                n = max(c["n"], 1)
                rows.append([f"{split}: {v}", lang.upper(), c["n"], c["miss"], c["name"],
                             c["description"], (c["n"] - c["miss"]) / n,
                             (c["n"] - c["miss"] + c["either"]) / n])
    print(table(["half: ranker", "lang", "queries", "R@1 misses", "top-1 same name",
                 "top-1 same description", "R@1", "R@1 if a copy counts"], rows,
                "\nR@1 misses whose first hit is a copy of the target (another corpus skill "
                "with its very name or description; no ranking can tell them apart)"),
          file=out)
    verdict = {}
    for e in names:
        f_, b, d = (Q.metrics(res.outcomes[n]) for n in ("ranker " + e, "BM25", "dense " + e))
        ok = all(Q.metrics(res.outcomes["ranker " + e], lg)[m] >= Q.metrics(
            res.outcomes["BM25"], lg)[m] for lg in ("en", "zh") for m in ("r1", "r5", "mrr"))
        verdict[e] = (ok, f_["mrr"])
        print(f"ranker {e} >= BM25 on R@1, R@5 and MRR in both languages (both halves): "
              f"{'yes' if ok else 'NO'} (mixed MRR ranker {f_['mrr']:.3f}, BM25 {b['mrr']:.3f},"
              f" dense {d['mrr']:.3f})", file=out)
    if a.sweep:
        for e in names:
            rows = []
            for lam in LAMBDAS[1:-1]:
                row = [lam]
                for dn, ln in NORMS:
                    o = res.outcomes[f"sweep {e} {lam} {dn}/{ln}"]
                    row += [Q.metrics(o, "en")["mrr"], Q.metrics(o, "zh")["mrr"],
                            Q.metrics(o)["mrr"]]
                rows.append(row)
            hdr2 = ["λ"] + [f"{dn[:3]}/{ln[:4]} {lg}" for dn, ln in NORMS
                            for lg in ("EN", "ZH", "ALL")]
            print(table(hdr2, rows, f"\nFusion sweep, {e}: MRR by λ and normalisation"),
                  file=out)
    rows = []
    for e in names:
        for v in [k for k in res.outcomes if k.startswith("top-3") and k.endswith(" " + e)]:
            o = res.outcomes[v]
            rows.append([v, Q.metrics(o, "en")["r1"], Q.metrics(o, "en")["r3"],
                         Q.metrics(o, "zh")["r1"], Q.metrics(o, "zh")["r3"],
                         sum(x.n_hits for x in o) / max(1, len(o))])
    print(table(["selection (top_k=3)", "EN R@1", "EN R@3", "ZH R@1", "ZH R@3", "hits/query"],
                rows, "\nSelection options (what the chat sees)"), file=out)
    rows = []
    base = f"top-3 default(η=0) {DEFAULT_EMBEDDER if DEFAULT_EMBEDDER in names else names[0]}"
    o = res.outcomes[base]
    for eta in sorted({0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, DEFAULT_PARAMS.threshold}):
        row = [eta]
        for lang in ("en", "zh"):
            sel = [x for x in o if x.lang == lang]
            n = max(1, len(sel))
            row += [sum(x.rank is not None and x.score >= eta for x in sel) / n,
                    sum(x.absent_best >= eta for x in sel) / n]
        rows.append(row)
    print(table(["η", "EN R@3", "EN absent→hit", "ZH R@3", "ZH absent→hit"], rows,
                f"\nThreshold η on P(related) ({base}, both halves; absent→hit = the query's "
                "own skill removed from the bank, yet something scored ≥ η (often a "
                f"near-duplicate of it); default η = {DEFAULT_PARAMS.threshold})"),
          file=out)
    return verdict


def fields(skills, embedders, a, out) -> None:
    rows = []
    for protocol in ("strict", "loo"):
        for label, (flds, chars, lchars) in FIELD_SETS.items():
            vs = [Q.Variant("BM25", next(iter(embedders)), DEFAULT_PARAMS.with_(
                lam=0.0, dedup=None))]
            for e in embedders:
                vs += [Q.Variant(f"dense {e}", e, DEFAULT_PARAMS.with_(lam=1.0, dedup=None)),
                       Q.Variant(f"fused {e}", e, DEFAULT_PARAMS.with_(dedup=None))]
            print(f" fields {protocol} {label}", file=sys.stderr, flush=True)
            res = Q.run(skills, embedders, vs, fields=flds, instr_chars=chars,
                        lexical_chars=lchars, folds=a.folds,
                        protocol=protocol, absent=False, cjk=a.cjk,
                        max_queries=a.max_queries or None)
            row = [f"{protocol} {label}"]
            for v in vs:
                row += [Q.metrics(res.outcomes[v.name], "en")["mrr"],
                        Q.metrics(res.outcomes[v.name], "zh")["mrr"]]
            rows.append(row)
    hdr = ["protocol / fields"] + [f"{n} {lg}" for n in ["BM25"] + [
        f"{k} {e}" for e in embedders for k in ("dense", "fused")] for lg in ("EN", "ZH")]
    print(table(hdr, rows, "\nRetrieval text fields: MRR (strict = all triggers of the query "
                "skill held out; loo = only the query trigger held out; body N/M = characters "
                "of the instructions in the embedder's / BM25's text)"), file=out)


def speed(skills, embedders, a, bank_root, out) -> None:
    sections = set(a.sections.split(","))
    queries = [q.text for q in Q.make_queries(skills, 1)][:: 7][:200]
    default = embedders.get(DEFAULT_EMBEDDER) or next(iter(embedders.values()))
    if "speed" in sections:
        rows = [[name, *S.query_embedding(e.base if hasattr(e, "base") else e, queries[:100])]
                for name, e in embedders.items()]
        print(table(["embedder", "query embed p50 ms", "p95 ms"], rows,
                    "\nQuery embedding (one query, CPU, 1 thread)"), file=out)
        qvecs = default.encode(queries)
        rows = []
        with tempfile.TemporaryDirectory(prefix="skilldesk-speed-") as tmp:
            for n in [int(x) for x in a.sizes.split(",") if x.strip()]:
                r = S.latency_at(skills, default, n, queries, qvecs, Path(tmp), ef=a.ef or None)
                rows.append([r["n"], r["e2e_p50"], r["e2e_p95"], r["p50"], r["p95"], r["ef"],
                             r["recall10"],
                             r["skill_recall10"], r["upd_p50"], r["upd_p95"], r["save_ms"],
                             r["build_s"], r["lex_build_s"]])
                shutil.rmtree(Path(tmp) / f"vectors-{n}", ignore_errors=True)
        print(table(["skills", "search+embed p50 ms", "p95 ms", "search p50 ms", "p95 ms",
                     "ef", "ANN recall@10",
                     "skill recall@10", "update p50 ms", "update p95 ms", "save ms",
                     "index build s", "BM25 build s"], rows,
                    f"\nSearch latency with and without the query embedding ({DEFAULT_EMBEDDER}; "
                    "target search+embed p50 <= 20 ms at 3k; corpus "
                    "replicated, replica vectors = original + noise of norm 0.1, not "
                    "re-embedded; update = one edited skill, real embedding)"), file=out)
    if "build" in sections:
        rows = []
        for name in [n.strip() for n in a.build_embedders.split(",") if n.strip()]:
            with tempfile.TemporaryDirectory(prefix="skilldesk-cold-") as tmp:
                root = corpus_bank(a.corpus, Path(tmp) / "bank", a.build_n or None)
                r = S.cold_build(root, make_embedder(name), USER)
            rows.append([name, r["n"], r["total_s"], r["per_s"], r["save_s"], r["reopen_s"],
                         "yes" if r["cache_ok"] else "NO"])
        print(table(["embedder", "skills", "cold build s", "skills/s", "close s", "reopen s",
                     "cache reused"], rows, "\nCold bank: open a desk with no vector cache "
                    "(real embedding of every skill), then reopen"), file=out)
    if "watch" in sections:
        r = S.edit_to_searchable(bank_root, default, USER, a.edits)
        print(table(["edits", "seen", "missed", "p50 s", "p95 s", "max s"],
                    [[r["edits"], r["seen"], r["missed"], r["p50"], r["p95"], r["max"]]],
                    f"\nEdit-to-searchable through the watcher ({len(skills)} skills, "
                    "atomic-rename saves; target p95 < 1 s)"), file=out)


_CLIENT: dict[str, object] = {}
# what the chat would serve if a hit with P(related) >= the band were kept without the
# self-filter's call (a way to save the call's time; measured, not kept: skill_filter.py)
BANDS = (None, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6)
FIT_BARS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # P(fits) a judged skill must reach (FIT_MIN_P)


def filter_client(a):
    """The self-filter's model (one backend for the whole run), or None without
    ``--filter-model``."""
    if not a.filter_model:
        return None
    if a.filter_model not in _CLIENT:
        from engine.llm.client import LLMClient
        from engine.llm.factory import make_backend

        t0 = time.perf_counter()
        backend = make_backend(model=a.filter_model)
        print(f"self-filter model {getattr(backend, 'name', a.filter_model)} loaded in "
              f"{time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
        _CLIENT[a.filter_model] = LLMClient(backend)
    return _CLIENT[a.filter_model]


def _calls(res: list[D.Served], splits, above: float | None) -> float:
    sel = [s for s in res if s.row["split"] in splits]
    return sum(s.calls(above) for s in sel) / max(1, len(sel))


def _filter_stats(res: list[D.Served], a, what: str, out) -> None:
    import numpy as np

    asked = [s for s in res if s.asked]
    secs = [s.filter_s for s in asked]
    n = sum(s.row["split"] in a.splits for s in res)
    if secs:
        print(f"self-filter on {what}: called for {len(asked)} of {n} requests (the rest had "
              f"no skill passing η: no call); call p50 {np.percentile(secs, 50):.2f} s, p95 "
              f"{np.percentile(secs, 95):.2f} s (model {a.filter_model}, shared 2-core box)",
              file=out)


REFIT_BARS = tuple(round(0.3 + 0.05 * i, 2) for i in range(12))  # 0.3 .. 0.85


def refit_table(splits, offtopic: dict[str, list[D.Served]], paraphrase: list[D.Served],
                targets: dict[str, str | None]) -> str:
    """The self-filter's bar, refitted per language over every row of ``splits`` pooled: at
    each bar, the off-topic rate on each bank (``offtopic``: bank -> served rows), paraphrase
    served R@1, and R@1 less the mean off-topic rate of the two banks (a missed skill weighed
    as one wrong injection); ``*`` marks the bar that maximises it (FIT_MIN_P is set from this
    on the read splits: one bar while both languages' best is the same)."""
    lines = [f"\nSelf-filter bar refit, pooled over {', '.join(D.label(s) for s in splits)} "
             "(* = the best R@1 - mean off-topic, per language; FIT_MIN_P)",
             "language  bar   off-topic starter  off-topic user  served R@1  R@1 - off-topic",
             "--------  ----  -----------------  --------------  ----------  ---------------"]

    def share(rows: list[D.Served], hit) -> float:
        return sum(map(hit, rows)) / max(1, len(rows))

    for lang in D.LANGS:
        def mine(res: list[D.Served], lang: str = lang) -> list[D.Served]:
            return [x for x in res if x.row["split"] in splits and x.row["lang"] == lang]
        banks = [mine(offtopic["starter"]), mine(offtopic["user"])]
        para = mine(paraphrase)
        cells = []
        for bar in REFIT_BARS:
            off = [share(rows, lambda x, bar=bar: bool(x.with_band(None, bar))) for rows in banks]
            r1 = share(para, lambda x, bar=bar: x.with_band(None, bar)[:1]
                       == [targets[x.row["id"]]])
            cells.append((bar, off, r1, r1 - sum(off) / 2))
        best = max(cells, key=lambda c: c[3])[0]
        for bar, off, r1, obj in cells:
            lines.append(f"{lang.upper():<8}  {bar:<4}  {off[0]:<17.3f}  {off[1]:<14.3f}  "
                         f"{r1:<10.3f}  {obj:.3f}{' *' if bar == best else ''}")
    return "\n".join(lines)


def offtopic(embedders, a, out, params=None) -> dict[str, list[D.Served]]:
    """Injection rate of the off-topic set on the starter bank and the 120-skill user bank;
    returns each bank's served rows."""
    emb = embedders.get(DEFAULT_EMBEDDER) or next(iter(embedders.values()))
    rows_in = D.load("offtopic.jsonl")
    client = filter_client(a)
    rows, frows, bad, fbad, band, bars, allres = [], [], [], [], [], [], []
    served: dict[str, list[D.Served]] = {}
    with tempfile.TemporaryDirectory(prefix="skilldesk-offtopic-") as tmp:
        for bank in ("starter", "user"):
            root = D.build_bank(bank, a.corpus, Path(tmp) / bank)
            idx = D.open_index(root, emb, params)
            res = D.serve(idx, rows_in, client=client, splits=a.splits)
            allres += res
            served[bank] = res
            name = f"{bank} ({len(idx)})"
            rows += D.injection_rows(res, name, a.splits)
            bad += [f"  [{bank}] {x}" for x in D.offenders(res, 6, a.splits)]
            if client is not None:
                frows += D.injection_rows(res, name, a.splits, "filtered")
                fbad += [f"  [{bank}] {x}" for x in D.offenders(res, 6, a.splits, "filtered")]
                for above in BANDS:
                    band.append([f"{name} sure >= {above or '-'}"] + [
                        r[3] for r in D.injection_rows(res, name, a.splits, "filtered", above)]
                        + [_calls(res, a.splits, above)])
                for bar in FIT_BARS:
                    bars.append([f"{name} P(fits) >= {bar}"] + [
                        r[3] for r in D.injection_rows(res, name, a.splits, "filtered",
                                                       bar=bar)])
    hdr = ["bank / split / language", "n", "injected", "rate", "skills/request"]
    print(table(hdr, rows, "\nOff-topic requests (bench/data/offtopic.jsonl): share that got "
                "a skill injected (as served without the self-filter; target <= 0.05)"),
          file=out)
    if bad:
        print("first offenders:\n" + "\n".join(bad), file=out)
    if client is not None:
        print(table(hdr, frows, "\nOff-topic requests, served WITH the self-filter "
                    f"({a.filter_model}; target <= 0.05)"), file=out)
        if fbad:
            print("offenders left:\n" + "\n".join(fbad), file=out)
        cols = [f"{D.label(sp)} {lg.upper()}" for sp in a.splits for lg in D.LANGS]
        print(table(["self-filter band"] + cols + ["calls/request"], band, "\nOff-topic rate "
                    "when a hit with P(related) >= the band is kept without the self-filter's "
                    "call (calls: the filter's model calls per request, these splits)"), file=out)
        print(table(["self-filter bar"] + cols, bars, "\nOff-topic rate when a judged skill "
                    "must reach P(fits) >= the bar (the filter's FIT_MIN_P; "
                    "refit it on the read splits pooled)"), file=out)
        _filter_stats(allres, a, "the off-topic sets (both banks)", out)
    return served


def paraphrase(skills, embedders, a, root, out, params=None
               ) -> tuple[list[D.Served], dict[str, str | None]]:
    """Paraphrased requests on the whole corpus: served R@1 and the uncut ranking; returns
    the served rows and each row's target key."""
    emb = embedders.get(DEFAULT_EMBEDDER) or next(iter(embedders.values()))
    rows_in = D.load("paraphrase.jsonl")
    idx = SkillIndex(emb, None, params or DEFAULT_PARAMS, persist=False)
    idx.sync(skills)
    if hasattr(emb, "base"):  # time real query embeddings, not the bench's vector cache
        idx.embedder = idx.dense.embedder = emb.base
    targets = {r["id"]: D.target_key(idx, root, r["target"]) for r in rows_in}
    client = filter_client(a)
    res = D.serve(idx, rows_in, client=client, splits=a.splits)
    rows = D.paraphrase_rows(res, targets, a.splits)
    hdr = ["split / language", "n", "served R@1", "served R@3", "any skill", "R@1 no cut",
           "R@5 no cut", "MRR no cut"]
    print(table(hdr, rows, f"\nParaphrased requests (bench/data/paraphrase.jsonl; {len(idx)} "
                "skills; served = what the chat injects without the self-filter; target served "
                "R@1 >= 0.50)"), file=out)
    if client is not None:
        frows = D.paraphrase_rows(res, targets, a.splits, "filtered")
        print(table(hdr, frows, "\nParaphrased requests, served WITH the self-filter "
                    f"({a.filter_model}; 'no cut' columns: the ranking, unchanged)"), file=out)
        band = []
        for above in BANDS:
            band.append([f"sure >= {above or '-'}"] + [r[2] for r in D.paraphrase_rows(
                res, targets, a.splits, "filtered", above)] + [_calls(res, a.splits, above)])
        cols = [f"{D.label(sp)} {lg.upper()}" for sp in a.splits for lg in D.LANGS]
        print(table(["self-filter band"] + cols + ["calls/request"], band, "\nParaphrase "
                    "served R@1 when a hit with P(related) >= the band is kept without the "
                    "self-filter's call (calls: model calls per request, these splits)"),
              file=out)
        bars = [[f"P(fits) >= {bar}"] + [r[2] for r in D.paraphrase_rows(
            res, targets, a.splits, "filtered", bar=bar)] for bar in FIT_BARS]
        print(table(["self-filter bar"] + cols, bars, "\nParaphrase served R@1 when a judged "
                    "skill must reach P(fits) >= the bar (the filter's FIT_MIN_P)"), file=out)
        _filter_stats(res, a, "the paraphrase set", out)
    import numpy as np

    from engine.retrieval.relevance import segments

    for label, sel in (("all", res), ("several sentences", [
            x for x in res if segments(x.row["query"])])):
        ms = [x.ms for x in sel]
        if ms:
            print(f"search + embedding, {label} ({len(ms)} requests, {len(idx)} skills): p50 "
                  f"{np.percentile(ms, 50):.1f} ms, p95 {np.percentile(ms, 95):.1f} ms "
                  "(a request of several sentences embeds each, at most 4)", file=out)
    return res, targets


def twotask(embedders, a, out, params=None) -> None:
    """Requests that need two skills at once (bench/data/twotask.jsonl) on one bank holding
    the starter skills and the 120-skill user bank: how often both targets pass η (retrieved)
    and how often the chat injects both (served, with ``--filter-model`` through the
    self-filter, at its bar and at other bars)."""
    emb = embedders.get(DEFAULT_EMBEDDER) or next(iter(embedders.values()))
    rows_in = [r for r in D.load("twotask.jsonl") if r["split"] in a.splits]
    if not rows_in:
        print(f"\nTwo-task requests: no rows in the splits {', '.join(a.splits)}", file=out)
        return
    client = filter_client(a)
    with tempfile.TemporaryDirectory(prefix="skilldesk-twotask-") as tmp:
        root = D.build_bank("user", a.corpus, D.build_bank("starter", a.corpus, Path(tmp)))
        idx = D.open_index(root, emb, params)

        def key(target: str) -> str | None:
            if target.startswith("starter:"):
                name = target.split(":", 1)[1]
                return idx.key_for_path(root / "Common" / "starter" / name / "SKILL.md")
            return D.target_key(idx, root, target)

        res = D.serve(idx, rows_in, client=client, splits=a.splits)
        targets = {r["id"]: [key(t) for t in r["targets"]] for r in rows_in}
    bars = [None] if client is None else [None, *FIT_BARS]
    rows = []
    for lang in D.LANGS:
        sel = [x for x in res if x.row["lang"] == lang]
        if not sel:
            continue

        def share(ok, sel: list[D.Served] = sel) -> float:
            return sum(1 for x in sel if ok(x, targets[x.row["id"]])) / len(sel)

        row = [lang.upper(), len(sel), share(lambda x, t: all(k in x.hits for k in t)),
               share(lambda x, t: any(k in x.hits for k in t))]
        if client is not None:
            row += [share(lambda x, t: all(k in x.with_band(None) for k in t))]
            row += [share(lambda x, t, b=b: all(k in x.with_band(None, b) for k in t))
                    for b in bars[1:]]
        rows.append(row)
    hdr = ["language", "n", "both pass η", "one passes η"]
    if client is not None:
        hdr += ["both served"] + [f"both at {b}" for b in bars[1:]]
    print(table(hdr, rows, "\nTwo-task requests (bench/data/twotask.jsonl, "
                f"{', '.join(a.splits)}; {len(idx)} skills: starter + user bank): both targets "
                "retrieved, and injected" + (f" through the self-filter ({a.filter_model}; "
                                             "'both at B': a judged skill must reach P(fits) "
                                             ">= B)" if client is not None else "")), file=out)


def constraints(embedders, a, out, params=None) -> None:
    """Lasting user facts learned by the real pipeline, and the requests they govern
    (bench/_retrieval_constraints.py)."""
    from bench import _retrieval_constraints as C

    if a.learned_bank is None:
        print("\nConstraints skipped: give --learned-bank DIR (learned once, then reused)",
              file=out)
        return
    emb = embedders.get(DEFAULT_EMBEDDER) or next(iter(embedders.values()))
    root = a.learned_bank.resolve()

    def worker():
        from engine.llm import registry
        from engine.llm.llama_backend import LlamaCppBackend
        from engine.llm.worker import ModelWorker

        return ModelWorker(LlamaCppBackend(registry.resolve(a.learn_model)))

    from engine.errors import SkillDeskError

    try:
        own = C.learn_bank(root, emb, worker)
    except (ValueError, SkillDeskError) as exc:  # a used folder, an unknown --learn-model
        print(f"\nConstraints skipped: {exc}", file=out)
        return
    C.report(C.measure(root, own, emb, a.splits, filter_client(a), params), a.splits,
             a.filter_model, out)


def fit_relevance(skills, embedders, a, root, out) -> None:
    """``--fit``: the relevance models from the tune halves (bench/_retrieval_fit.py)."""
    from bench import _retrieval_fit as F

    if D.missing(a.corpus):
        print("--fit needs the full autoskill-dev corpus (the dev sets' skills)", file=out)
        return
    emb = embedders.get(DEFAULT_EMBEDDER) or next(iter(embedders.values()))
    with tempfile.TemporaryDirectory(prefix="skilldesk-fit-") as tmp:
        model = F.fit(F.collect(skills, emb, a.corpus, root, Path(tmp)))
    F.write(model)
    print(f"\nRelevance models refitted on the tune halves -> {F.R.MODEL_FILE}:\n"
          f"  ranker {model['ranker']}\n  decision {model['decision']}\n"
          f"  examples {model['fitted']['requests']}", file=out)


def main(argv: list[str] | None = None) -> int:
    a = _args(list(argv or []))
    a.corpus = a.bank or a.corpus or DEFAULT_CORPUS
    out = sys.stdout
    names = [n.strip() for n in a.embedders.split(",") if n.strip()]
    with tempfile.TemporaryDirectory(prefix="skilldesk-bench-") as tmp:
        root = corpus_bank(a.corpus, Path(tmp) / "bank")
        loaded = SkillBank(root).load(USER, "all")
        skills = loaded.skills
        print(f"corpus {a.corpus}: {len(skills)} skills loaded, {len(loaded.errors)} "
              "unreadable (reported, skipped)", file=out)
        if not skills:
            print("no skills: nothing to measure", file=out)
            return 1
        cache = None if a.no_cache else a.cache
        embedders = {n: CachedEmbedder(make_embedder(n), cache) for n in names}
        try:
            sections = set(a.sections.split(","))
            if a.fit:
                fit_relevance(skills, embedders, a, root, out)
            missing = D.missing(a.corpus) if sections & {"offtopic", "paraphrase"} else []
            if missing:
                print(f"\nOff-topic and paraphrase sets skipped: {len(missing)} of their skills "
                      f"are not in {a.corpus} (e.g. {missing[0]}); they need the full "
                      "autoskill-dev corpus", file=out)
            else:
                off = offtopic(embedders, a, out) if "offtopic" in sections else None
                para = paraphrase(skills, embedders, a, root, out) \
                    if "paraphrase" in sections else None
                if a.filter_model and off and para:
                    print(refit_table(a.splits, off, *para), file=out)
            if "constraints" in sections:
                constraints(embedders, a, out)
            if "twotask" in sections:
                twotask(embedders, a, out)
            if "quality" in sections:
                quality(skills, embedders, a, out)
            if a.fields:
                fields(skills, embedders, a, out)
            if sections & {"speed", "build", "watch"}:
                speed(skills, embedders, a, root, out)
        finally:
            for e in embedders.values():
                e.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
