"""The relevance decision: is a candidate skill *related* to the request, or does it merely share
a frequent word with it?

One calibrated probability per candidate, from a logistic regression on features that mean the
same for every query (no per-query normalisation that turns the best of a bad pool into 1.0):

- ``cos``: cosine between the request and the skill (the embedder's);
- ``cover``: IDF-weighted query coverage (:meth:`LexicalIndex.coverage`): the share of the
  request's information the skill's text contains, words no skill knows counting fully;
- ``lex``: BM25 over the query's ceiling (what the fused score used), clipped to [0, 1];
- ``cos_gap`` / ``cover_gap``: how far below the pool's best candidate it is (SkillX keeps
  only hits near the best one).

Two linear models over these features, fitted by ``skilldesk bench retrieval --fit`` on the
tune halves of the dev sets (bench/data; never the held-out halves) and stored with how and on
what in ``relevance.json`` beside this file:

- the *ranker* orders the pool: a conditional logit (softmax over each query's pool) fitted so
  that the request's own skill comes first (paraphrases and held-out triggers, equal weight);
- the *decision* says whether a candidate applies at all: a logistic regression, related
  (the request's own skill) against the best candidates of off-topic requests, classes
  balanced, so 0.5 is its boundary. A skill is injected when P(related) reaches η (settings
  ``retrieval.min_relevance``).

Measured on the tune halves (bench/_retrieval_fit.py's docstring has the numbers): ranking by
P(related) itself lost 3 points of held-out-trigger R@1 against the fused score, the ranker
lost none and gained 30 points of paraphrase R@1; one model for both (the ranker's score,
Platt-scaled) let twice as many off-topic requests through as the separate decision.

A request of several sentences ("Summarize this: <pasted text>") is also scored sentence by
sentence (:func:`segments`, at most 4): each pooled skill's P(related) is its best over the
whole request and its sentences (MaxP), while the order stays the whole request's ranker score
(ranking by the best sentence let sub-sentences of long paraphrases pull distractors first:
EN paraphrase R@1 0.71 -> 0.53 on the tune half). Without it, pasted material dominated both the
cosine and the coverage and the summary skill got P 0.23 on the starter bank.

Greetings and thanks get nothing by the same mechanism: such a request has almost no
information (its tokens are stop words or one common word) and its cosine to any real skill is
low, so no candidate reaches 0.5; a request with no token at all has ``cover`` = 0.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.retrieval.fusion import Candidates

MODEL_FILE = Path(__file__).with_name("relevance.json")
FEATURES = ("cos", "cover", "lex", "cos_gap", "cover_gap")


def features(c: Candidates) -> np.ndarray:
    """``(len(c), len(FEATURES))`` feature rows of the pool."""
    n = len(c)
    if not n:
        return np.zeros((0, len(FEATURES)), dtype=np.float64)
    cos = np.clip(c.cos.astype(np.float64), 0.0, 1.0)
    cover = (c.cover if c.cover is not None else np.zeros(n)).astype(np.float64)
    raw = c.bm25.astype(np.float64)
    lex = np.clip(raw / c.ceiling, 0.0, 1.0) if c.ceiling > 0 else np.zeros(n)
    return np.stack([cos, cover, lex, cos.max() - cos, cover.max() - cover], axis=1)


@dataclass(frozen=True)
class Linear:
    bias: float
    weights: tuple[float, ...]
    columns: tuple[int, ...]  # which of FEATURES the weights apply to

    def __call__(self, f: np.ndarray) -> np.ndarray:
        return self.bias + f[:, list(self.columns)] @ np.asarray(self.weights)


@dataclass(frozen=True)
class Model:
    ranker: Linear    # orders the candidates (conditional logit over the pool)
    decision: Linear  # logit of P(related) (logistic regression)


def _linear(d: dict, path: str) -> Linear:
    unknown = [f for f in d["features"] if f not in FEATURES]
    if unknown or len(d["weights"]) != len(d["features"]):
        raise ValueError(f"{path}: bad relevance model (features {d['features']})")
    return Linear(float(d.get("bias", 0.0)), tuple(float(x) for x in d["weights"]),
                  tuple(FEATURES.index(f) for f in d["features"]))


@lru_cache(maxsize=4)
def load_model(path: str = str(MODEL_FILE)) -> Model:
    """The fitted models (``relevance.json``: features, weights, how they were fitted)."""
    d = json.loads(Path(path).read_text("utf-8"))
    model = Model(_linear(d["ranker"], path), _linear(d["decision"], path))
    if not set(d["decision"]["features"]) <= {"cos", "cover"}:
        raise ValueError(f"{path}: the decision may read cos and cover only (it also scores "
                         "single sentences, which have no BM25 pool)")
    return model


def scores(c: Candidates, model: Model | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(ranking score, P(related))`` for every pool member."""
    m = model or load_model()
    if not len(c):
        return np.zeros(0), np.zeros(0)
    f = features(c)
    z = m.decision(f)
    p = 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))
    if c.segment_prob is not None:  # a sentence of the request may be more related than all
        p = np.maximum(p, c.segment_prob)
    return m.ranker(f), p


def probability(c: Candidates, model: Model | None = None) -> np.ndarray:
    """P(related) for every pool member."""
    return scores(c, model)[1]


# Sentence ends, semicolons, colons and line breaks, in both scripts.
_SEGMENT = re.compile(r"[.!?。！？;；:：\n]+(?:\s+|$)|[。！？；：\n]+")
MAX_SEGMENTS = 4  # sentences searched separately (each costs one query embedding, ~2.5 ms)


def segments(query: str) -> list[str]:
    """The sentences of a request of more than one (at most MAX_SEGMENTS, each with a word);
    [] for a one-sentence request."""
    parts = [p.strip() for p in _SEGMENT.split(query or "") if p and p.strip()]
    parts = [p for p in parts if any(ch.isalnum() for ch in p)]
    return parts[:MAX_SEGMENTS] if len(parts) > 1 else []


def segment_probability(whole: Candidates, cos: np.ndarray, cover: np.ndarray,
                        model: Model | None = None) -> np.ndarray:
    """For each skill of the whole request's pool, its best P(related) to any one sentence of
    the request (MaxP). ``cos`` / ``cover``: ``(len(whole), sentences)`` per sentence. The
    decision reads cosine and coverage only (``lex`` is 0 here; :func:`load_model` refuses a
    decision that reads anything else)."""
    m = model or load_model()
    best = np.zeros(len(whole), dtype=np.float64)
    z = np.zeros(len(whole), dtype=np.float32)
    for j in range(cos.shape[1]):
        c = Candidates(whole.keys, cos[:, j].astype(np.float32), z, 0.0, whole.vecs,
                       cover[:, j].astype(np.float32))
        best = np.maximum(best, scores(c, m)[1])
    return best


def top_rows(c: Candidates, n: int, lam: float = 0.4) -> list[int]:
    """The ``n`` best pool rows by the fused score (cos / ceiling-normalised BM25)."""
    if not len(c):
        return []
    f = features(c)
    fused = lam * f[:, 0] + (1 - lam) * f[:, 2]
    return [int(i) for i in np.argsort(-fused, kind="stable")[:n]]


def logit(p: float) -> float:
    """log(p / (1 - p)), ``p`` clipped away from 0 and 1 (the scale the fitted scores add on)."""
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))
