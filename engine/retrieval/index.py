"""``SkillIndex``: the skills of one desk, searchable by meaning and by words.

It holds the current skills (by :func:`skill_key`, scope/owner/folder), their retrieval texts and hashes, one
:class:`~engine.retrieval.dense.DenseIndex` (hnswlib, persisted per embedder signature) and one
:class:`~engine.retrieval.lexical.LexicalIndex` (bm25s, rebuilt on change). ``sync`` takes the
complete set (open, full refresh); ``update`` takes changed and removed skills (the watcher).
Only texts whose hash changed are embedded; the BM25 snapshot is rebuilt on any change.

``search``: the query is embedded once; the pool is the union of the dense top-``pool`` and the
lexical top-``pool``; every pool member gets its exact cosine (stored vectors) and its true BM25
score; then :mod:`~engine.retrieval.fusion` ranks and selects.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from engine.bank.skill import Skill
from engine.retrieval import relevance
from engine.retrieval.dense import DenseIndex, DenseStats
from engine.retrieval.document import (
    DEFAULT_FIELDS,
    DENSE_INSTRUCTIONS_CHARS,
    LEXICAL_INSTRUCTIONS_CHARS,
    index_texts,
    text_hash,
)
from engine.retrieval.embedders import Embedder
from engine.retrieval.fusion import Candidates, FusionParams, params_for, select
from engine.retrieval.lexical import LexicalIndex

SCOPE_VALUES = ("user", "common", "all")


def skill_key(skill: Skill) -> str:
    """The index's identity of a skill: ``<scope>/<owner>/<folder>``.

    By folder, not by the front-matter name: two folders may carry the same ``name`` (real
    banks do), and the key also names the skill's vectors in the cache files.
    """
    folder = skill.path.parent.name if skill.path is not None else skill.name
    return f"{skill.scope}/{skill.owner}/{folder}"


@dataclass
class SkillHit:
    """One retrieved skill: fused score and the two normalised ranker scores, all in [0, 1]."""

    skill: Skill
    score: float
    dense: float
    lexical: float


@dataclass
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    dense: DenseStats = field(default_factory=DenseStats)
    lexical_s: float = 0.0
    total_s: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


class SkillIndex:
    def __init__(self, embedder: Embedder, vectors_dir: str | os.PathLike | None,
                 params: FusionParams | None = None, *,
                 fields: tuple[str, ...] = DEFAULT_FIELDS,
                 dense_chars: int = DENSE_INSTRUCTIONS_CHARS,
                 lexical_chars: int = LEXICAL_INSTRUCTIONS_CHARS, cjk: str = "bigram",
                 persist: bool = True,
                 text_fn: Callable[[Skill], str | tuple[str, str]] | None = None,
                 name: str = "default"):
        from engine.retrieval import DEFAULT_PARAMS

        self.embedder = embedder
        self.params = params or DEFAULT_PARAMS
        self.fields, self.dense_chars, self.lexical_chars = fields, dense_chars, lexical_chars
        self.text_fn = text_fn
        self.dense = DenseIndex(embedder, vectors_dir, persist=persist, name=name)
        self.lexical = LexicalIndex(cjk=cjk)
        self.skills: dict[str, Skill] = {}
        self._texts: dict[str, tuple[str, str, str, str]] = {}  # dense hash/text, lexical
        self._scopes: dict[str, set[str]] = {}
        self._by_path: dict[str, str] = {}  # real path of each SKILL.md -> key
        self._lock = threading.RLock()     # the maps above
        self._writer = threading.Lock()    # one sync/update at a time
        self._loaded = False
        self.cache_status = ""             # why the vector cache was not used ("" = it was)
        self.generation = 0                # goes up whenever the indexed skills change

    # ------------------------------------------------------------------ contents
    def __len__(self) -> int:
        return len(self.skills)

    def texts_for(self, skill: Skill) -> tuple[str, str]:
        """``(text the embedder sees, text BM25 sees)`` of a skill."""
        if self.text_fn is not None:
            got = self.text_fn(skill)
            return (got, got) if isinstance(got, str) else got
        return index_texts(skill, self.fields, dense_chars=self.dense_chars,
                           lexical_chars=self.lexical_chars)

    def text_for(self, skill: Skill) -> str:
        """The text the embedder sees (what a stored vector stands for)."""
        return self.texts_for(skill)[0]

    def key_for_path(self, path: str | os.PathLike) -> str | None:
        with self._lock:
            return self._by_path.get(os.path.realpath(path))

    def keys_under(self, folder: str | os.PathLike) -> list[str]:
        """Keys of indexed skills whose SKILL.md lies under ``folder``."""
        base = os.path.realpath(folder) + os.sep
        with self._lock:
            return [k for p, k in self._by_path.items() if p.startswith(base)]

    def indexed_hash(self, key: str) -> str | None:
        """The file content hash of the indexed version of a skill."""
        with self._lock:
            s = self.skills.get(key)
            return s.content_hash if s else None

    # ------------------------------------------------------------------ changes
    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self.cache_status = self.dense.load()
            self._loaded = True

    def sync(self, skills: Iterable[Skill]) -> SyncReport:
        """Make the index hold exactly ``skills``."""
        skills = {skill_key(s): s for s in skills}
        with self._writer:
            self._ensure_loaded()
            with self._lock:
                old = dict(self.skills)
            return self._apply(skills, [k for k in old if k not in skills], complete=True)

    def update(self, skills: Iterable[Skill] = (), removed: Iterable[str] = ()) -> SyncReport:
        """Add or replace ``skills`` and drop the ``removed`` keys; leaves the rest."""
        with self._writer:
            self._ensure_loaded()
            with self._lock:
                merged = dict(self.skills)
            gone = list(dict.fromkeys(k for k in removed if k in merged))  # a folder and its
            # SKILL.md can both name the same skill
            for k in gone:
                del merged[k]
            merged.update({skill_key(s): s for s in skills})
            return self._apply(merged, gone, complete=False)

    def _apply(self, skills: dict[str, Skill], gone: list[str], *, complete: bool) -> SyncReport:
        t0 = time.perf_counter()
        rep = SyncReport(removed=list(gone))
        with self._lock:
            old_texts, old_skills = dict(self._texts), dict(self.skills)
            if gone:  # a removed skill stops being a result now, before any index work
                self.skills = {k: v for k, v in self.skills.items() if k not in set(gone)}
        texts: dict[str, tuple[str, str, str, str]] = {}
        for k, s in skills.items():
            prev = old_skills.get(k)
            if prev is s and k in old_texts:
                texts[k] = old_texts[k]
                continue
            dense, lexical = self.texts_for(s)
            texts[k] = (text_hash(dense), dense, text_hash(lexical), lexical)
            if prev is None:
                rep.added.append(k)
            elif prev.content_hash != s.content_hash or old_texts.get(k) != texts[k]:
                rep.updated.append(k)
        # dense first (it embeds outside its lock), then swap the lexical snapshot and the map
        rep.dense = self.dense.apply({k: t[:2] for k, t in texts.items()}, complete=complete,
                                     remove=tuple(gone))
        rep.dense.rebuilt = self.cache_status
        lexical_stale = (rep.changed or len(self.lexical) != len(texts) or any(
            old_texts.get(k, ("",) * 4)[2] != t[2] for k, t in texts.items()))
        if lexical_stale:
            t1 = time.perf_counter()
            self.lexical.build({k: t[2:] for k, t in texts.items()})
            rep.lexical_s = time.perf_counter() - t1
        scopes: dict[str, set[str]] = {"user": set(), "common": set()}
        with self._lock:
            old_paths = {k: p for p, k in self._by_path.items()}
        by_path: dict[str, str] = {}
        for k, s in skills.items():
            scopes.setdefault(s.scope, set()).add(k)
            if s.path is not None:
                p = old_paths.get(k) if old_skills.get(k) is s else None
                by_path[p or os.path.realpath(s.path)] = k
        with self._lock:
            if rep.changed or skills.keys() != old_skills.keys() or any(
                    old_skills.get(k) is not v for k, v in skills.items()):
                self.generation += 1
            self.skills, self._texts, self._scopes = skills, texts, scopes
            self._by_path = by_path
        rep.total_s = time.perf_counter() - t0
        return rep

    def save(self) -> None:
        """Persist the vectors (a no-op when nothing changed since the last save)."""
        self.dense.save()

    # ------------------------------------------------------------------ queries
    def embed_query(self, query: str) -> np.ndarray:
        return self.embedder.encode_query(query)

    def _allowed(self, scope: str) -> set[str] | None:
        if scope == "all":
            return None
        if scope not in SCOPE_VALUES:
            raise ValueError(f"scope must be one of {', '.join(SCOPE_VALUES)}, not {scope!r}")
        with self._lock:
            return self._scopes.get(scope, set())

    def candidates(self, query: str, *, scope: str = "all", pool: int | None = None,
                   qvec: np.ndarray | None = None, segments: bool = False) -> Candidates:
        """The fusion pool for ``query`` (``qvec``: a precomputed query vector).

        ``segments``: a request of several sentences is also searched sentence by sentence,
        and each pooled skill gets its best P(related) to any one sentence
        (:func:`relevance.segment_probability`; the order stays the whole request's): "Summarize
        this: <pasted text>" is related to a summary skill through its first sentence, whatever
        the pasted text is about.
        """
        whole = self._candidates(query, scope, pool, qvec)
        parts = relevance.segments(query) if segments and len(whole) else []
        if not parts:
            return whole
        # only the whole request's pool is scored, and P(related) needs cosine and coverage
        # alone: one batch embedding and one coverage per sentence, no further index search
        cos = whole.vecs @ self.embedder.encode(parts).T
        cover = np.stack([self.lexical.coverage(t, whole.keys) for t in parts], axis=1)
        return replace(whole, segment_prob=relevance.segment_probability(whole, cos, cover))

    def _candidates(self, query: str, scope: str, pool: int | None,
                    qvec: np.ndarray | None) -> Candidates:
        pool = pool or self.params.pool
        allowed = self._allowed(scope)
        if not query.strip() or not self.skills:
            return _empty(self.embedder.dim)
        if qvec is None:
            qvec = self.embed_query(query)
        dense_hits = self.dense.search(qvec, pool, allowed)
        dense_keys = [k for k, _c in dense_hits]
        lex_hits, ceiling, extra = self.lexical.search(query, pool, allowed, include=dense_keys)
        raw = dict(extra)
        raw.update(lex_hits)
        keys = list(dict.fromkeys(dense_keys + [k for k, _s in lex_hits]))
        with self._lock:
            keys = [k for k in keys if k in self.skills]
        vecs = self.dense.vectors(keys)
        cos = vecs @ np.asarray(qvec, dtype=np.float32) if keys else np.zeros(0, np.float32)
        bm = np.array([raw.get(k, 0.0) for k in keys], dtype=np.float32)
        return Candidates(keys, cos.astype(np.float32), bm, ceiling, vecs,
                          self.lexical.coverage(query, keys))

    def search(self, query: str, top_k: int | None = None, *, scope: str = "all",
               params: FusionParams | None = None, qvec: np.ndarray | None = None,
               threshold: float | None = None) -> list[SkillHit]:
        p = params_for(params or self.params, query, self.embedder.multilingual)
        if threshold is not None:
            p = p.with_(threshold=threshold)
        c = self.candidates(query, scope=scope, pool=max(p.pool, top_k or 0), qvec=qvec,
                            segments=p.relevance)
        chosen = select(c, p, top_k)
        with self._lock:
            return [SkillHit(self.skills[c.keys[i]], round(f, 4), round(d, 4), round(lx, 4))
                    for i, f, d, lx in chosen if c.keys[i] in self.skills]


def _empty(dim: int) -> Candidates:
    z = np.zeros(0, dtype=np.float32)
    return Candidates([], z, z, 0.0, np.zeros((0, dim), dtype=np.float32))


def skill_dir_of(path: str | os.PathLike) -> Path:
    """The skill folder a watched path belongs to (the folder itself, or a SKILL.md's parent)."""
    p = Path(path)
    return p.parent if p.name.lower() == "skill.md" else p
