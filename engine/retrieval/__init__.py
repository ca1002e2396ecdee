"""Hybrid skill retrieval: hnswlib (dense) + bm25s (lexical), fused, then SkillX's selection.

Modules: ``text`` (what is indexed), ``tokenize`` (BM25 tokens), ``embedders``, ``dense``
(hnswlib owner + cache files), ``lexical`` (bm25s), ``fusion`` (normalise, fuse, select),
``index`` (:class:`SkillIndex`, :class:`SkillHit`).

Defaults and the measurements behind them: ``skilldesk bench retrieval --sweep`` on
autoskill-dev (2,167 skills; 2,090 queries = one held-out trigger of every skill that has
triggers, 1,499 EN + 591 ZH; the query skill's triggers removed from its indexed text; 5 folds).
MRR@50, strict hold-out:

==========================  ======  ======  ======
ranker                      EN      ZH      all
==========================  ======  ======  ======
BM25                        0.862   0.941   0.884
dense all-MiniLM-L6-v2      0.846   0.297   0.691
dense USE multilingual v3   0.769   0.727   0.757
fused USE, λ 0.5 (default)  0.883   0.946   0.901
==========================  ======  ======  ======

- Embedder: USE wins the mixed-language set (dense 0.757 vs 0.691; MiniLM cannot read Chinese).
- Normalisation: cosine clipped at 0, BM25 / the query's ceiling (absolute, so a threshold
  means the same for every query). Over λ 0.2-0.8 the three normalisations tried were within
  0.003 MRR of each other at their best (cos/ceiling 0.901 at λ 0.5, min-max 0.903 at λ 0.4,
  cos/max-hit 0.903 at λ 0.7): noise at n=2,090, so the absolute one wins.
- λ = 0.5: the best cos/ceiling λ on the mixed set; λ 0.4 gives 0.900, 0.6 gives 0.899.
- Relative window 0.15 below the best hit: 3.0 -> 1.6 skills per query with R@3 unchanged
  within 0.001, so the chat prompt carries fewer unrelated skills.
- Near-duplicate removal (cos > 0.95): no measurable change in R@1/R@3 here; kept (SkillX).
- MMR: off; at 0.85 it cost 0.7 pt EN R@3, at 0.7 it cost 2.6 pt.
- η = 0.2: the largest threshold that costs at most 1 pt of R@3 in either language (0.25 costs
  3.7 pt ZH). It is not an off-topic filter: greetings still score ~0.3 through BM25.
"""

from __future__ import annotations

from .fusion import Candidates, FusionParams
from .index import SkillHit, SkillIndex, SyncReport

DEFAULT_PARAMS = FusionParams(
    lam=0.4,
    threshold=0.2,
    top_k=3,
    pool=50,
    dense_norm="cos",
    lex_norm="ceiling",
    window=0.15,
    dedup=0.95,
    mmr=None,
)

__all__ = ["DEFAULT_PARAMS", "Candidates", "FusionParams", "SkillHit", "SkillIndex",
           "SyncReport"]
