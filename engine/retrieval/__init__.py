"""Hybrid skill retrieval: hnswlib (dense) + bm25s (lexical), fused, then SkillX's selection.

Modules: ``text`` (what is indexed), ``tokenize`` (BM25 tokens), ``embedders``, ``dense``
(hnswlib owner + cache files), ``lexical`` (bm25s), ``fusion`` (normalise, fuse, select),
``index`` (:class:`SkillIndex`, :class:`SkillHit`).

Defaults and the measurements behind them: ``skilldesk bench retrieval --sweep`` on
autoskill-dev (2,167 skills; 2,090 queries = one held-out trigger of every skill that has
triggers, 1,499 EN + 591 ZH; the query skill's triggers removed from its indexed text; 5 folds;
MRR@50). Standard error of an MRR here is roughly 0.006 (all) and 0.01 (ZH): differences below
~0.01 are noise.

==============================  =====================  =====================  =====
ranker                          EN R@1 / R@5 / MRR     ZH R@1 / R@5 / MRR     all
==============================  =====================  =====================  =====
BM25                            0.840 / 0.919 / 0.876  0.915 / 0.976 / 0.945  0.895
dense all-MiniLM-L6-v2          0.789 / 0.893 / 0.836  0.223 / 0.369 / 0.295  0.683
dense USE multilingual v3       0.696 / 0.853 / 0.766  0.697 / 0.848 / 0.765  0.766
fused MiniLM (λ 0.4; ZH 0.2)    0.873 / 0.928 / 0.898  0.919 / 0.978 / 0.947  0.912
fused USE, λ 0.4 (the default)  0.870 / 0.927 / 0.897  0.929 / 0.985 / 0.953  0.913
==============================  =====================  =====================  =====

- Embedder: USE, the winner on the mixed-language set as a ranker (0.766 vs 0.683; MiniLM
  cannot read Chinese). Fused, the two tie (0.913 vs 0.912); USE is also ~7x cheaper per query
  and needs no torch at query time.
- Text: the embedder sees title, description, tags, triggers and 300 characters of the body;
  BM25 sees 1,500 (text.py has the field ablation).
- Normalisation: cosine clipped at 0 and BM25 / the query's ceiling (absolute, so a threshold
  means the same for every query). The best of each normalisation over λ 0.2-0.8 (USE, all):
  cos/ceiling 0.913 (λ 0.4), min-max 0.912 (λ 0.3), cos/max-hit 0.914 (λ 0.6): a tie, so the
  absolute one. λ 0.4 is its argmax (0.3: 0.911, 0.5: 0.911, 0.6: 0.906, 0.8: 0.878).
- Relative window 0.15 below the best hit: 3.0 -> 1.55 skills per query, R@3 -0.1 pt EN,
  0 ZH: the chat prompt carries fewer unrelated skills.
- Near-duplicate removal (cos > 0.95): no measurable change in R@1/R@3 here; kept (SkillX).
- MMR: off; 0.85 cost 0.5 pt EN R@3, 0.7 cost 1.5 pt EN / 1.1 pt ZH.
- (Before issue 15) η = 0.2 on the fused score was not an off-topic filter: greetings and
  facts reached it through one shared word (BM25 over a ceiling made of the query's known
  words), 19 of 40 everyday questions got a starter skill injected.

Issue 15, the relevance decision (relevance.py; dev sets in bench/data, tune/heldout halves):
features that mean the same for every query (cosine, IDF-weighted query coverage smoothed with
one pseudo-word, BM25/ceiling); a conditional-logit *ranker* orders the pool and a logistic
*decision* gives P(related); η = 0.45 on P(related), chosen on the tune halves (0.45 and 0.5
let the same off-topic requests through, 0.45 served one more paraphrase; 0.4 let more
off-topic through). ``skilldesk bench retrieval`` (USE, tune / heldout):

==================================  ===============  ===============
as served (what the chat injects)   before           after
==================================  ===============  ===============
off-topic, starter bank, EN         0.52 / 0.67      0.10 / 0.05
off-topic, starter bank, ZH         0.10 / 0.00      0.00 / 0.00
off-topic, 120-skill bank, EN       0.67 / 0.76      0.19 / 0.24
off-topic, 120-skill bank, ZH       0.38 / 0.33      0.05 / 0.05
paraphrase R@1, EN                  0.24 / 0.53      0.53 / 0.47
paraphrase R@1, ZH                  0.77 / 0.59      0.71 / 0.53
held-out triggers R@1 (ranker), EN  0.870 / 0.870    0.862 / 0.860   (BM25 0.836 / 0.844)
held-out triggers R@1 (ranker), ZH  0.918 / 0.942    0.915 / 0.934   (BM25 0.902 / 0.931)
search + embedding p50 (3k / 2.2k)  -                6-9 ms; 15-24 ms if 2-4 sentences
==================================  ===============  ===============
Issue 15b: on capable models the chat adds the self-filter after this decision
(engine/chat/skill_filter.py, each candidate judged alone): off-topic on the 120-skill bank EN
tune / seen / fresh 0.19 / 0.24 / 0.58 -> 0.14 / 0.00 / 0.21, ZH 0.05 / 0.05 / 0.22 -> 0.00 /
0.05 / 0.04, starter bank <= 0.04 (``skilldesk bench retrieval --filter-model recommended
--splits tune,heldout,fresh``).
- CJK tokens: bigrams; adding unigrams moved BM25 ZH MRR by +0.003 and fused by -0.002.
"""

from __future__ import annotations

from engine.retrieval.fusion import Candidates, FusionParams
from engine.retrieval.index import SkillHit, SkillIndex, SyncReport

# relevance=True: relevance.py's ranker orders the pool and η applies to P(related); lam and
# the normalisations still make the fused score (tie-breaks, the bench's "fused" rows).
DEFAULT_PARAMS = FusionParams(
    lam=0.4,
    threshold=0.45,
    relevance=True,
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
