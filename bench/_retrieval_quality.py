"""Retrieval quality on a real bank with held-out triggers (the protocol of issue 4).

Every skill with triggers is a query skill. Query skills are split into ``folds``; for each
fold, an in-memory index is built over the *whole* bank in which the fold's skills are indexed
without their triggers (``strict``: all of them; ``loo``: only the one used as the query, which
measures what indexing triggers is worth), and one trigger of each (chosen by a hash of the
skill's key, never by looking at results) is the query. A query is Chinese when it contains a
CJK character. Ranks come from the real :class:`SkillIndex` candidate pool (dense top-50 ∪
BM25 top-50) and the real fusion code, so MRR is MRR@50.

With ``absent=True`` each fold is also searched after removing its skills from the index: the
best fused score of such a query says how often a threshold lets an unrelated skill through.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.bank.skill import Skill
from engine.retrieval.document import LEXICAL_INSTRUCTIONS_CHARS, index_texts
from engine.retrieval.fusion import FusionParams, params_for, rank, select
from engine.retrieval.index import SkillIndex, skill_key
from engine.retrieval.relevance import segments
from engine.retrieval.tokenize import has_cjk


@dataclass
class Variant:
    """One ranking to evaluate: a name, the embedder whose pool it uses, fusion parameters."""

    name: str
    embedder: str
    params: FusionParams
    depth: int = 50  # how many selected hits count (50 = the ranking; 3 = what the chat sees)
    by_script: bool = False  # apply fusion.params_for (what SkillIndex.search does)


@dataclass
class Query:
    key: str
    text: str
    lang: str
    fold: int
    shared: int = 1  # how many skills of the bank have this very trigger


def _norm(trigger: str) -> str:
    return " ".join(trigger.lower().split())


@dataclass
class Outcome:
    lang: str
    rank: int | None          # 1-based rank of the target among the selected hits
    score: float              # the target's fused score (0 if not in the pool)
    n_hits: int = 0           # how many hits the selection returned
    absent_best: float = 0.0  # best fused score once the target is removed from the bank
    split: str = ""           # "tune" | "heldout" (split_of the query skill)
    shared: int = 1           # skills with the query's trigger (> 1: no ranking can tell)
    top: str = ""             # the key of the first selected hit ("" when none)
    key: str = ""             # the query skill's key


@dataclass
class QualityRun:
    queries: list[Query]
    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)


def _pick(key: str, salt: str, n: int) -> int:
    return int(hashlib.sha1(f"{salt}:{key}".encode()).hexdigest()[:8], 16) % n


SPLITS = ("tune", "heldout")  # the trigger benchmark has no "fresh" half


def split_of(key: str) -> str:
    """The benchmark's halves (issue 15): constants may be fitted on "tune" queries only."""
    return "tune" if _pick(key, "split", 2) == 0 else "heldout"


def make_queries(skills: list[Skill], folds: int) -> list[Query]:
    holders: dict[str, int] = {}
    for s in skills:
        for t in {_norm(t) for t in s.triggers if t and t.strip()}:
            holders[t] = holders.get(t, 0) + 1
    out = []
    for s in skills:
        triggers = [t.strip() for t in s.triggers if t and t.strip()]
        if not triggers:
            continue
        key = skill_key(s)
        q = triggers[_pick(key, "query", len(triggers))]
        out.append(Query(key, q, "zh" if has_cjk(q) else "en", _pick(key, "fold", folds),
                         holders.get(_norm(q), 1)))
    return out


def _text_fn(fields, instr_chars: int, lexical_chars: int, held: dict[str, str],
             protocol: str) -> Callable:
    def fn(s: Skill) -> tuple[str, str]:
        q = held.get(skill_key(s))
        if q is not None and protocol == "loo":
            s = s.copy(triggers=[t for t in s.triggers if t.strip() != q])
        return index_texts(s, fields, dense_chars=instr_chars, lexical_chars=lexical_chars,
                           exclude_triggers=q is not None and protocol == "strict")
    return fn


def run(skills: list[Skill], embedders: dict, variants: list, *, fields, instr_chars: int,
        lexical_chars: int = LEXICAL_INSTRUCTIONS_CHARS, folds: int = 5,
        protocol: str = "strict", absent: bool = True, cjk: str = "bigram",
        max_queries: int | None = None, log=sys.stderr) -> QualityRun:
    """``instr_chars``: body characters in the embedder's text; ``lexical_chars``: in BM25's."""
    queries = make_queries(skills, folds)
    if max_queries:
        queries = queries[:: max(1, len(queries) // max_queries)][:max_queries]
    res = QualityRun(queries, {v.name: [] for v in variants})
    by_emb: dict[str, list] = {}
    for v in variants:
        by_emb.setdefault(v.embedder, []).append(v)
    for f in range(folds):
        fold_q = [q for q in queries if q.fold == f]
        if not fold_q:
            continue
        held = {q.key: q.text for q in fold_q}
        for emb_name, vs in by_emb.items():
            emb = embedders[emb_name]
            print(f"  fold {f + 1}/{folds} {emb_name}: {len(fold_q)} queries", file=log,
                  flush=True)
            idx = SkillIndex(emb, None, FusionParams(), persist=False, cjk=cjk,
                             text_fn=_text_fn(fields, instr_chars, lexical_chars, held,
                                              protocol))
            idx.sync(skills)
            qvecs = emb.encode([q.text for q in fold_q])
            start = {v.name: len(res.outcomes[v.name]) for v in vs}
            for q, qv in zip(fold_q, qvecs, strict=True):
                plain = idx.candidates(q.text, qvec=qv, pool=50)
                seg = idx.candidates(q.text, qvec=qv, pool=50, segments=True) if segments(
                    q.text) else plain
                for v in vs:
                    c = seg if v.params.relevance else plain
                    p = params_for(v.params, q.text, emb.multilingual) if v.by_script else \
                        v.params
                    chosen = select(c, p, v.depth)
                    keys = [c.keys[i] for i, *_ in chosen]
                    r = keys.index(q.key) + 1 if q.key in keys else None
                    score = next((fz for i, fz, *_ in rank(c, p) if c.keys[i] == q.key), 0.0)
                    res.outcomes[v.name].append(Outcome(q.lang, r, score, len(chosen),
                                                        split=split_of(q.key),
                                                        shared=q.shared,
                                                        top=keys[0] if keys else "",
                                                        key=q.key))
            if absent:
                idx.update(removed=[q.key for q in fold_q])
                for j, (q, qv) in enumerate(zip(fold_q, qvecs, strict=True)):
                    plain = idx.candidates(q.text, qvec=qv, pool=50)
                    seg = idx.candidates(q.text, qvec=qv, pool=50, segments=True) if segments(
                        q.text) else plain
                    for v in vs:
                        c = seg if v.params.relevance else plain
                        ranked = rank(c, params_for(v.params, q.text, emb.multilingual)
                                      if v.by_script else v.params)
                        res.outcomes[v.name][start[v.name] + j].absent_best = (
                            ranked[0][1] if ranked else 0.0)
            flush = getattr(emb, "flush", None)
            if flush:
                flush()
    return res


def metrics(outcomes: list[Outcome], lang: str | None = None,
            split: str | None = None, unique: bool = False) -> dict[str, float]:
    """R@1/3/5 and MRR; ``unique``: only queries whose trigger no other skill has."""
    sel = [o for o in outcomes if (lang is None or o.lang == lang)
           and (split is None or o.split == split) and (not unique or o.shared == 1)]
    n = len(sel)
    if not n:
        return {"n": 0, "r1": 0.0, "r3": 0.0, "r5": 0.0, "mrr": 0.0}
    return {"n": n,
            "r1": sum(o.rank == 1 for o in sel) / n,
            "r3": sum(o.rank is not None and o.rank <= 3 for o in sel) / n,
            "r5": sum(o.rank is not None and o.rank <= 5 for o in sel) / n,
            "mrr": sum(1.0 / o.rank for o in sel if o.rank) / n}


def _same(a: str, b: str) -> bool:
    return bool(a.strip()) and " ".join(a.lower().split()) == " ".join(b.lower().split())


def copy_misses(outcomes: list[Outcome], skills: list[Skill], lang: str,
                split: str | None = None) -> dict[str, int]:
    """The R@1 misses whose first hit is another corpus skill with the target's very name or
    very description (the corpus holds the same skill saved more than once): no ranking can
    put the target above its copy. ``n``: queries, ``miss``: R@1 misses, ``name`` /
    ``description``: misses whose first hit has the same name / the same description,
    ``either``: one or the other."""
    by_key = {skill_key(s): s for s in skills}
    sel = [o for o in outcomes if o.lang == lang and (split is None or o.split == split)]
    out = {"n": len(sel), "miss": 0, "name": 0, "description": 0, "either": 0}
    for o in sel:
        if o.rank == 1:
            continue
        out["miss"] += 1
        t, h = by_key.get(o.key), by_key.get(o.top)
        if t is None or h is None:
            continue
        name = _same(t.display_name, h.display_name)
        desc = _same(t.description, h.description)
        out["name"] += name
        out["description"] += desc
        out["either"] += name or desc
    return out
