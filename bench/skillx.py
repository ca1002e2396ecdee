"""``skilldesk bench skillx``: consolidation and plan-aware retrieval, measured (issue 9).

Consolidation (``--part consolidate``): the corpus (default ``autoskill-dev``) is copied into a
temporary bank; the plan (embed with the default embedder, vectors cached between runs in
``--cache``; cluster at ``--threshold``) is applied with the deterministic union merge (an LLM
merge on hundreds of clusters takes hours on a laptop: ``--llm-sample N`` times the merge
prompt on N clusters instead, in memory); retrieval quality is measured before and after with
the retrieval bench's protocol (``_retrieval_quality``: triggers held out, one trigger is the
query, same folds). After the merge, a query whose skill was merged away counts as a hit when
its keeper is returned; "before, cluster-aware" counts a hit for any member of the query's
cluster, which is the fair baseline. Finally the undo is checked byte for byte.

Plan-aware retrieval (``--part plan``): the scenario bank and requests of
``scenarios/skillx_plan.json``; recall of the expected skills in the injected set (same cap
for every method), plain vs. plan-aware with the hand-written (scripted) plan vs. plan-aware
with the model's plan (``--model``, default the bundled model), and the latency each adds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from bench import _retrieval_quality as Q
from bench._retrieval_data import (
    DEFAULT_CACHE,
    DEFAULT_CORPUS,
    USER,
    CachedEmbedder,
    corpus_bank,
    table,
)
from engine.bank.store import SkillBank
from engine.fsutil import file_hash
from engine.retrieval import DEFAULT_PARAMS
from engine.retrieval.document import DEFAULT_FIELDS, DEFAULT_INSTRUCTIONS_CHARS
from engine.retrieval.embedders import DEFAULT_EMBEDDER, make_embedder
from engine.retrieval.index import skill_key

SCENARIOS = Path(__file__).parent / "scenarios" / "skillx_plan.json"


def _args(argv):
    p = argparse.ArgumentParser(prog="skilldesk bench skillx",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--part", default="consolidate,plan", help="comma list: consolidate, plan")
    p.add_argument("--bank", type=Path, default=None, help="(consolidate) use this bank's "
                   "skills instead of the corpus (copied; never changed)")
    p.add_argument("--user", default=None, help="(accepted; the bench uses its own user)")
    p.add_argument("--corpus", type=Path, default=None)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="vector cache folder")
    p.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--sweep", default="0.8,0.85,0.9,0.95", help="thresholds to count clusters at")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--max-queries", type=int, default=0, help="subsample queries (0 = all)")
    p.add_argument("--limit", type=int, default=0, help="copy only this many corpus skills")
    p.add_argument("--llm-sample", type=int, default=0,
                   help="time the LLM merge prompt on this many clusters (in memory)")
    p.add_argument("--model", default="bundled", help="model for the plan / LLM merge")
    p.add_argument("--no-model", action="store_true", help="plan part: scripted plans only")
    p.add_argument("--cap", type=int, default=4, help="skills injected per request")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


# ------------------------------------------------------------------------------ consolidation
def _quality(skills, emb, a, queries=None) -> dict:
    """The retrieval bench's quality run (fused ranking); also keeps each query's ranked keys."""
    flat = DEFAULT_PARAMS.with_(dedup=None, window=None, mmr=None, threshold=0.0)
    variants = [Q.Variant("fused", "e", flat)]
    ranked: list[list[str]] = []
    real_select = Q.select

    def select(c, params, depth):  # the run's own selection, recorded in outcome order
        chosen = real_select(c, params, depth)
        ranked.append([c.keys[i] for i, *_ in chosen])
        return chosen

    with tempfile.TemporaryFile("w") as log, mock.patch.object(Q, "select", select):
        kw = dict(fields=DEFAULT_FIELDS, instr_chars=DEFAULT_INSTRUCTIONS_CHARS,
                  folds=a.folds, absent=False, log=log,
                  max_queries=None if queries else (a.max_queries or None))
        if queries is None:
            res = Q.run(skills, {"e": emb}, variants, **kw)
        else:  # the same queries as before, re-targeted (the bench otherwise picks its own)
            with mock.patch.object(Q, "make_queries", lambda _s, _f: list(queries)):
                res = Q.run(skills, {"e": emb}, variants, **kw)
    order = [q for f in range(a.folds) for q in res.queries if q.fold == f]
    return {"queries": res.queries, "order": order, "out": res.outcomes["fused"],
            "ranked": ranked}


def consolidation(a, out) -> dict:
    from engine.consolidate import apply_plan, make_plan, undo
    from engine.consolidate.cluster import cluster

    src = a.bank or a.corpus or DEFAULT_CORPUS
    emb = CachedEmbedder(make_embedder(a.embedder), a.cache)
    rep: dict = {}
    with tempfile.TemporaryDirectory(prefix="skilldesk-skillx-") as tmp:
        if a.bank:  # a bank: copy its user skills as the bench user
            root = Path(tmp) / "bank"
            corpus_bank(Path(a.bank) / "Users", root, a.limit or None)
        else:
            root = corpus_bank(src, Path(tmp) / "bank", a.limit or None)
        bank = SkillBank(root)
        originals = {str(p): file_hash(p) for p in root.rglob("SKILL.md")}
        skills = bank.load(USER, "all").skills
        t0 = time.perf_counter()
        plan = make_plan(bank=bank, user=USER, scope="user", threshold=a.threshold,
                         embedder=emb)
        plan_s = time.perf_counter() - t0
        emb.flush()
        from engine.consolidate import skill_vectors

        users = bank.load(USER, "user").skills
        vecs, _r, _sig = skill_vectors(users, embedder=emb)
        sweep = []
        for th in [float(x) for x in a.sweep.split(",") if x.strip()]:
            gs = cluster(vecs, th, groups=[s.level for s in users])
            sweep.append([th, len(gs), sum(len(g.members) - 1 for g in gs),
                          max((len(g.members) for g in gs), default=0)])
        print(table(["threshold", "clusters", "skills merged", "largest"], sweep,
                    f"Clusters in {src} ({len(users)} user skills, {plan.embedder}, complete "
                    "linkage, max size 8, same level)"), file=out)
        t0 = time.perf_counter()
        before = _quality(skills, emb, a)
        q_before_s = time.perf_counter() - t0
        member_of = {}
        for c in plan.clusters:
            keys = {skill_key(s) for s in c.skills}
            for s in c.skills:
                member_of[skill_key(s)] = keys
        llm_rows = _llm_sample(plan, a) if a.llm_sample else None
        t0 = time.perf_counter()
        rec = apply_plan(bank, plan)
        apply_s = time.perf_counter() - t0
        keeper_of = {}
        for c in rec.clusters:
            kpath = c["keeper"]["path"]
            kkey = next(skill_key(s) for s in skills if str(s.path) == kpath)
            for t in c["trashed"]:
                keeper_of[next(skill_key(s) for s in skills if str(s.path) == t["path"])] = kkey
        after_skills = bank.load(USER, "all").skills
        queries = [Q.Query(keeper_of.get(q.key, q.key), q.text, q.lang, q.fold)
                   for q in before["queries"]]
        after = _quality(after_skills, emb, a, queries)
        emb.flush()
        t0 = time.perf_counter()
        undone = undo(bank, rec.id)
        undo_s = time.perf_counter() - t0
        same = sum(file_hash(p) == h for p, h in originals.items())
        lenient = _cluster_aware(before, member_of)
        rows = []
        for name, outs in (("before", before["out"]), ("before, cluster-aware", lenient),
                           ("after consolidation", after["out"])):
            row = [name]
            for lang in ("en", "zh", None):
                m = Q.metrics(outs, lang)
                row += [m["r1"], m["mrr"]]
            rows.append(row)
        n_en = sum(q.lang == "en" for q in before["queries"])
        print(table(["retrieval", "EN R@1", "EN MRR", "ZH R@1", "ZH MRR", "ALL R@1", "ALL MRR"],
                    rows, f"\nRetrieval before/after consolidation at {a.threshold} (fused, "
                    f"triggers held out; {n_en} EN + {len(before['queries']) - n_en} ZH queries,"
                    f" {len(skills)} -> {len(after_skills)} skills)"), file=out)
        moved = sum(1 for q in before["queries"] if q.key in keeper_of)
        print(f"queries whose skill was merged into a keeper: {moved}", file=out)
        print(table(["step", "seconds"], [
            ["plan (embed + cluster + flags)", plan_s],
            ["  of which embedding (cached vectors reused when present)", plan.embed_s],
            ["apply (deterministic union merge, write, trash)", apply_s],
            ["undo", undo_s], ["quality eval (before)", q_before_s]],
            f"\nTime ({len(plan.clusters)} clusters, {rec.merged} skills merged, "
            f"{len(plan.flags)} flagged; 2 shared cores, noisy)"), file=out)
        print(f"undo: {same}/{len(originals)} SKILL.md files byte-identical to the originals "
              f"(status {undone.status})", file=out)
        kinds: dict[str, int] = {}
        for f in plan.flags:
            for k in f.kinds:
                kinds[k] = kinds.get(k, 0) + 1
        print("flags (never deleted): " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())),
              file=out)
        if llm_rows:
            print(table(["cluster", "members", "seconds", "fallbacks", "rules before", "after"],
                        llm_rows, f"\nLLM merge prompt on {len(llm_rows)} clusters "
                        f"(model {a.model}, in memory)"), file=out)
        rep = {"clusters": len(plan.clusters), "merged": rec.merged, "sweep": sweep,
               "before": Q.metrics(before["out"]), "before_cluster_aware": Q.metrics(lenient),
               "after": Q.metrics(after["out"]), "plan_s": plan_s, "apply_s": apply_s,
               "undo_identical": [same, len(originals)], "flags": kinds}
    return rep


def _cluster_aware(before, member_of) -> list:
    """Before-outcomes where returning any member of the query skill's cluster is a hit."""
    out = []
    for q, o, keys in zip(before["order"], before["out"], before["ranked"], strict=True):
        group = member_of.get(q.key, {q.key})
        r = next((i + 1 for i, k in enumerate(keys) if k in group), None)
        out.append(Q.Outcome(o.lang, r, o.score))
    return out


def _llm_sample(plan, a) -> list:
    from engine.consolidate.merge import llm_merge
    from engine.learning.candidate import Candidate
    from engine.llm.client import LLMClient
    from engine.llm.factory import make_backend

    backend = make_backend(model=a.model, n_threads=2)
    client = LLMClient(backend)
    merge = llm_merge(client)
    rows = []
    try:
        for i, c in enumerate([c for c in plan.clusters if not c.skipped][:a.llm_sample]):
            keeper = c.keeper
            others = [s for s in c.mergeable if s.path != keeper.path]
            t0 = time.perf_counter()
            merged, notes = merge(keeper, others)
            rules = sum(len(Candidate.from_skill(s).constraints) for s in c.mergeable)
            rows.append([i + 1, len(c.mergeable), time.perf_counter() - t0,
                         sum("unusable" in n for n in notes), rules,
                         len(Candidate.from_skill(merged).constraints)])
    finally:
        backend.close()
    return rows


# ------------------------------------------------------------------------------ entry point
def plan_part(a, out) -> dict:
    from bench import skillx_scenarios

    emb = CachedEmbedder(make_embedder(a.embedder), a.cache)
    backend = None
    if not a.no_model:
        from engine.llm.factory import make_backend

        backend = make_backend(model=a.model, n_threads=2)
    try:
        return skillx_scenarios.run(SCENARIOS, emb, cap=a.cap, llm=backend, out=out)
    finally:
        emb.flush()
        if backend is not None:
            backend.close()


def main(argv: list[str] | None = None) -> int:
    a = _args(list(argv or []))
    parts = {x.strip() for x in a.part.split(",") if x.strip()}
    out = sys.stdout
    report = {}
    if "consolidate" in parts:
        report["consolidate"] = consolidation(a, out)
    if "plan" in parts:
        if report:
            print(file=out)
        report["plan"] = plan_part(a, out)
    if a.json:
        print(json.dumps(report, default=str, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
