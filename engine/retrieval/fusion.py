"""Hybrid fusion and SkillX's selection policy, as pure functions over a candidate pool.

1. Each ranker is normalised to [0, 1]: dense = cosine clipped at 0 (``"cos"``) or min-max over
   the pool; lexical = BM25 / the query's ceiling (``"ceiling"``, see lexical.py), / the best
   hit (``"max"``) or min-max.
2. ``fused = lam * dense + (1 - lam) * lexical``; a candidate with fused <= 0 is never a hit.
3. Threshold ``eta`` on the fused score, then the options: a relative window (keep hits within
   ``window`` of the best one), near-duplicate removal (cosine between two hits > ``dedup``
   keeps the better), MMR (greedy, ``mmr`` = weight of relevance against redundancy), top-K.

The defaults live in engine/retrieval/__init__.py with the measurements behind them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class FusionParams:
    lam: float = 0.5                 # weight of the dense ranker
    threshold: float = 0.0           # eta, on the fused score
    top_k: int = 3
    pool: int = 50                   # candidates taken from each ranker
    dense_norm: str = "cos"          # "cos" | "minmax"
    lex_norm: str = "ceiling"        # "ceiling" | "max" | "minmax"
    window: float | None = None      # keep hits with fused >= best - window
    dedup: float | None = 0.95       # drop a hit whose cosine to a better one exceeds this
    mmr: float | None = None         # MMR relevance weight in (0, 1]; None = off
    relevance: bool = False          # relevance.py: its ranker orders, η applies to P(related)

    def with_(self, **changes) -> FusionParams:
        return replace(self, **changes)


# An English-only embedder cannot read a Chinese query: its cosine is noise there, so such
# queries lean on BM25. all-MiniLM-L6-v2 on the dev set, ZH MRR by λ: 0.2 -> 0.947,
# 0.5 -> 0.929, 0.8 -> 0.651 (BM25 alone 0.945); its EN MRR peaks at λ 0.5 (0.900).
LAM_CJK_MONOLINGUAL = 0.2


def params_for(p: FusionParams, query: str, multilingual: bool) -> FusionParams:
    """``p`` adjusted to the query's script: CJK queries and an English-only embedder."""
    from engine.retrieval.tokenize import has_cjk

    if not multilingual and p.lam > LAM_CJK_MONOLINGUAL and has_cjk(query):
        return p.with_(lam=LAM_CJK_MONOLINGUAL)
    return p


@dataclass
class Candidates:
    """The pool for one query: exact cosine and raw BM25 for every candidate."""

    keys: list[str]
    cos: np.ndarray      # cosine(query, skill) from the stored vectors
    bm25: np.ndarray     # raw BM25 (0 = no lexical match)
    ceiling: float       # the query's BM25 ceiling (0 when no query term is known)
    vecs: np.ndarray     # the skills' unit vectors (rows align with keys)
    cover: np.ndarray | None = None  # IDF-weighted query coverage (lexical.coverage)
    segment_prob: np.ndarray | None = None  # best P(related) to one sentence of the request

    def __len__(self) -> int:
        return len(self.keys)


def _minmax(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else (x > 0).astype(np.float32)


def normalise(c: Candidates, p: FusionParams) -> tuple[np.ndarray, np.ndarray]:
    """``(dense01, lexical01)`` for the pool."""
    cos = np.clip(c.cos.astype(np.float32), 0.0, 1.0)
    dense = _minmax(cos) if p.dense_norm == "minmax" else cos
    raw = c.bm25.astype(np.float32)
    if p.lex_norm == "ceiling":
        lex = np.clip(raw / c.ceiling, 0.0, 1.0) if c.ceiling > 0 else np.zeros_like(raw)
    elif p.lex_norm == "max":
        top = float(raw.max(initial=0.0))
        lex = raw / top if top > 0 else np.zeros_like(raw)
    else:
        lex = _minmax(raw) * (raw > 0)
    return dense, lex


def rank(c: Candidates, p: FusionParams) -> list[tuple[int, float, float, float]]:
    """Every candidate with a positive fused score as ``(row, score, dense01, lexical01)``.

    ``score`` is the fused score, in fused order; with ``p.relevance`` it is the calibrated
    P(related) of :mod:`~engine.retrieval.relevance` (what the threshold and the window then
    apply to) and the order is that module's ranker's.
    """
    if not len(c):
        return []
    dense, lex = normalise(c, p)
    fused = p.lam * dense + (1.0 - p.lam) * lex
    score, key = fused, fused
    if p.relevance:
        from engine.retrieval.relevance import scores

        key, score = scores(c)
    order = np.lexsort((-fused, -key))  # by key, ties by the fused score
    return [(int(i), float(score[i]), float(dense[i]), float(lex[i]))
            for i in order if fused[i] > 0]


def select(c: Candidates, p: FusionParams, top_k: int | None = None) -> list[
        tuple[int, float, float, float]]:
    """The hits, after threshold, window, near-duplicate removal, MMR and top-K."""
    k = p.top_k if top_k is None else top_k
    ranked = [r for r in rank(c, p) if r[1] >= p.threshold]
    if not ranked or k <= 0:
        return []
    if p.window is not None:
        best = ranked[0][1]  # the first in order (with relevance: the ranker's first)
        ranked = [r for r in ranked if r[1] >= best - p.window]
    if p.dedup is not None:
        kept: list[tuple[int, float, float, float]] = []
        for r in ranked:
            v = c.vecs[r[0]]
            if all(float(v @ c.vecs[q[0]]) <= p.dedup for q in kept):
                kept.append(r)
            if len(kept) >= k and p.mmr is None:
                break
        ranked = kept
    if p.mmr is not None and len(ranked) > 1:
        chosen = [ranked[0]]
        rest = ranked[1:]
        while rest and len(chosen) < k:
            def gain(r):
                sim = max(float(c.vecs[r[0]] @ c.vecs[q[0]]) for q in chosen)
                return p.mmr * r[1] - (1.0 - p.mmr) * sim
            best_r = max(rest, key=gain)
            chosen.append(best_r)
            rest.remove(best_r)
        ranked = chosen
    return ranked[:k]
