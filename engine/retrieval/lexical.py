"""The lexical half of retrieval: BM25 (bm25s) over the skills' retrieval texts.

bm25s has no incremental update, so a change rebuilds the index; the expensive part (tokenising
and stemming) is cached per skill by content hash, so a rebuild re-tokenises only the changed
skills. Each build produces an immutable snapshot that is swapped in whole: searches never see a
half-built index and need no lock.

Scores: raw BM25 plus the query's *ceiling*, the sum of the idf of its distinct in-vocabulary
terms, which is what a document of average length containing each query term once scores.
``raw / ceiling`` (clipped to 1) is an absolute score in [0, 1], comparable across queries and
usable with a threshold, unlike dividing by the best hit. A document with score 0 is not a hit.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field

import bm25s
import numpy as np

from engine.retrieval.tokenize import tokenize

# Lucene BM25 with bm25s's default k1 and b (not tuned).
K1, B = 1.5, 0.75
logging.getLogger("bm25s").setLevel(logging.WARNING)


@dataclass
class _Snapshot:
    keys: list[str] = field(default_factory=list)
    pos: dict[str, int] = field(default_factory=dict)
    bm25: bm25s.BM25 | None = None
    vocab: dict[str, int] = field(default_factory=dict)


class LexicalIndex:
    """BM25 over ``{key: (hash, text)}``; rebuilt whole on change (token ids cached)."""

    def __init__(self, *, cjk: str = "bigram", k1: float = K1, b: float = B):
        self.cjk, self.k1, self.b = cjk, k1, b
        self._vocab: dict[str, int] = {}   # grows only; ids stay valid across rebuilds
        self._ids: dict[str, tuple[str, list[int]]] = {}
        self._by_hash: dict[str, list[int]] = {}
        self._snap = _Snapshot()
        self._build_lock = threading.Lock()
        self.build_s = 0.0

    def __len__(self) -> int:
        return len(self._snap.keys)

    def _token_ids(self, text: str) -> list[int]:
        vocab = self._vocab
        out = []
        for t in tokenize(text, cjk=self.cjk):
            tid = vocab.get(t)
            if tid is None:
                tid = vocab[t] = len(vocab)
            out.append(tid)
        return out

    def build(self, texts: dict[str, tuple[str, str]]) -> int:
        """Rebuild from the complete set; returns how many texts were (re)tokenised."""
        t0 = time.perf_counter()
        with self._build_lock:
            fresh: dict[str, tuple[str, list[int]]] = {}
            by_hash: dict[str, list[int]] = {}
            n_new = 0
            for k, (h, text) in texts.items():
                hit = self._ids.get(k)
                if hit is None or hit[0] != h:
                    ids = self._by_hash.get(h) or by_hash.get(h)  # same text elsewhere
                    if ids is None:
                        ids = self._token_ids(text)
                        n_new += 1
                    hit = (h, ids)
                fresh[k] = hit
                by_hash[h] = hit[1]
            self._ids, self._by_hash = fresh, by_hash
            keys = list(fresh)
            snap = _Snapshot(keys=keys, pos={k: i for i, k in enumerate(keys)})
            docs = [fresh[k][1] for k in keys]
            if any(docs):
                vocab = dict(self._vocab)
                vocab[""] = len(vocab)  # bm25s's empty token, at the end
                bm = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
                bm.index((docs, vocab), show_progress=False)
                snap.bm25, snap.vocab = bm, vocab
            self._snap = snap
        self.build_s = time.perf_counter() - t0
        return n_new

    def search(self, query: str, k: int, allowed: set[str] | None = None,
               include: list[str] | tuple[str, ...] = ()) -> tuple[
            list[tuple[str, float]], float, dict[str, float]]:
        """``([(key, raw BM25)], ceiling, {included key: raw})``: the top ``k`` best first.

        No zero scores among the top; ``include`` asks for the scores of other keys too (the
        dense ranker's candidates), so fusion sees their true lexical score.
        """
        snap = self._snap
        if snap.bm25 is None or k <= 0:
            return [], 0.0, {}
        indptr = snap.bm25.scores["indptr"]
        n = len(snap.keys)
        tids, ceiling = [], 0.0
        for t in dict.fromkeys(tokenize(query, cjk=self.cjk)):
            tid = snap.vocab.get(t)
            if tid is None or tid + 1 >= len(indptr):
                continue
            df = int(indptr[tid + 1] - indptr[tid])
            if df:
                tids.append(tid)
                ceiling += math.log(1 + (n - df + 0.5) / (df + 0.5))
        if not tids:
            return [], 0.0, {}
        # bm25s's eager scores, summed with one bincount (np.add.at, which bm25s's numpy
        # backend uses, is ~10x slower on the long posting lists of a 100k bank)
        sc = snap.bm25.scores
        spans = [(int(indptr[t]), int(indptr[t + 1])) for t in tids]
        docs = np.concatenate([sc["indices"][a:b] for a, b in spans])
        weights = np.concatenate([sc["data"][a:b] for a, b in spans]).astype(np.float64)
        scores = np.bincount(docs, weights=weights, minlength=n)
        extra = {key: float(scores[snap.pos[key]]) for key in include if key in snap.pos}
        if allowed is not None:
            mask = np.fromiter((key in allowed for key in snap.keys), dtype=bool,
                               count=len(snap.keys))
            scores = np.where(mask, scores, 0.0)
        nz = np.flatnonzero(scores > 0)
        if nz.size == 0:
            return [], ceiling, extra
        if nz.size > k:
            nz = nz[np.argpartition(-scores[nz], k - 1)[:k]]
        nz = nz[np.argsort(-scores[nz], kind="stable")]
        return [(snap.keys[i], float(scores[i])) for i in nz], ceiling, extra

    def coverage(self, query: str, keys: list[str]) -> np.ndarray:
        """IDF-weighted query coverage of each of ``keys``: the share of the query's
        information (sum of idf over its distinct tokens) that the skill's text contains.

        A query token no skill contains counts like the rarest known one (df = 1), so it
        weighs fully: "What is the tallest mountain in Europe?" asks about *tallest*,
        *mountain* and *Europe*, so a skill that mentions only *Europe* covers a small part of
        it, where ``bm25 / ceiling`` (a ceiling made of the known words only) called it 1.0.
        (Not df = 0: in a bank of one skill every known word has the smallest idf there is,
        and an unseen word would outweigh it 5 to 1; with df = 1 a one-skill bank gives every
        word the same weight, plain coverage, and a large bank the usual idf weighting.)
        0 for a query with no tokens or no token in common.

        The share is smoothed with one pseudo-token that no skill holds (weight: an unseen
        word's): a one-word request ("thanks!", "name?") matched in full is weak evidence,
        not 100% coverage; the smoothing fades as the request gets longer (1 word fully
        covered: ~0.5, 3 words: ~0.75, 10 words: ~0.9). Added after the held-out off-topic
        half showed one-word thanks and small talk reaching P(related) 0.9 on the 120-skill
        user bank (bench/_retrieval_fit.py has the sequence).
        """
        snap = self._snap
        out = np.zeros(len(keys), dtype=np.float32)
        toks = list(dict.fromkeys(tokenize(query, cjk=self.cjk)))
        if snap.bm25 is None or not toks or not keys:
            return out
        indptr = snap.bm25.scores["indptr"]
        indices = snap.bm25.scores["indices"]
        n = len(snap.keys)
        unseen = math.log(1 + (n - 1 + 0.5) / (1 + 0.5))
        total = 0.0
        rows = np.array([snap.pos.get(k, -1) for k in keys])
        for t in toks:
            tid = snap.vocab.get(t)
            df = int(indptr[tid + 1] - indptr[tid]) if (
                tid is not None and tid + 1 < len(indptr)) else 0
            if not df:
                total += unseen
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            total += idf
            out += idf * np.isin(rows, indices[indptr[tid]:indptr[tid + 1]])
        return out / (total + unseen) if total > 0 else out
