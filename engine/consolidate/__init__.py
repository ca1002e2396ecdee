"""Bank consolidation (SkillX's refinement): merge near-duplicate skills, flag junk, undo.

::

    from engine.consolidate import make_plan, apply_plan, undo, flag_bank
    plan = make_plan(desk, scope="user", threshold=0.9)   # dry run: nothing is written
    plan.to_json()      # {"clusters": [{"skills": [paths], "similarity": ..}, ...], ...}
    record = apply_plan(desk.bank, plan, merge=union_merge)  # or llm_merge(client)
    undo(desk.bank, record.id)                             # one step back, byte for byte

Steps: embed every skill in scope with the desk's embedder (stored index vectors are reused
when the indexed text is current), cluster (:mod:`.cluster`: cosine ≥ threshold, complete
linkage, capped size, one level at a time), merge each cluster into its keeper
(:mod:`.merge`), record everything needed to undo it (:mod:`.record`), flag junk
(:mod:`.flags`; flags never delete). Only the user's own skills are ever written; a cluster
with shared (Common) members is shown in the plan but merges only its user members.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from engine.bank.skill import Skill, parse_version
from engine.bank.store import SkillBank
from engine.consolidate.cluster import DEFAULT_MAX_SIZE, DEFAULT_THRESHOLD, Group, cluster
from engine.consolidate.flags import Flag, flag_skills, load_report, save_report
from engine.consolidate.merge import MergeFn, llm_merge, union_merge
from engine.consolidate.record import Record, apply_plan, list_records, load_record, undo
from engine.errors import SkillDeskError
from engine.retrieval.document import retrieval_text
from engine.retrieval.index import SkillIndex

__all__ = ["DEFAULT_MAX_SIZE", "DEFAULT_THRESHOLD", "Cluster", "Flag", "MergeFn", "Plan",
           "Record", "apply_plan", "flag_bank", "list_records", "llm_merge", "load_record",
           "load_report", "make_plan", "skill_vectors", "undo", "union_merge"]


@dataclass
class Cluster:
    """Near-duplicates that would become one skill: ``keeper`` absorbs the others."""

    skills: list[Skill]
    similarity: float
    mean_similarity: float
    keeper: Skill
    level: str

    @property
    def mergeable(self) -> list[Skill]:
        """The members that can be merged (user skills; shared ones are read-only)."""
        return [s for s in self.skills if s.scope == "user"]

    @property
    def skipped(self) -> str:
        """Why apply would leave this cluster alone ("" when it would merge it)."""
        users = self.mergeable
        if len(users) < 2:
            return "only one user skill; shared (Common) skills are read-only"
        if sum(1 for s in users if s.resources) > 1:
            return "several members have resource files; merge them by hand"
        return ""

    def to_json(self) -> dict[str, Any]:
        return {"skills": [str(s.path) for s in self.skills], "similarity": self.similarity,
                "mean_similarity": self.mean_similarity, "level": self.level,
                "keeper": str(self.keeper.path), "titles": [s.title for s in self.skills],
                "hashes": [s.content_hash for s in self.skills],
                "skip": self.skipped or None}


@dataclass
class Plan:
    """The dry run: what :func:`apply_plan` would merge, and the skills the filter flags."""

    clusters: list[Cluster]
    threshold: float
    max_size: int
    scope: str
    user: str
    n_skills: int
    embedder: str
    bank: str
    flags: list[Flag] = field(default_factory=list)
    embed_s: float = 0.0
    cluster_s: float = 0.0
    reused_vectors: int = 0

    @property
    def merges(self) -> int:
        """Skills that apply would retire into a keeper."""
        return sum(len(c.mergeable) - 1 for c in self.clusters if not c.skipped)

    def to_json(self) -> dict[str, Any]:
        return {"clusters": [c.to_json() for c in self.clusters],
                "threshold": self.threshold, "max_size": self.max_size, "scope": self.scope,
                "user": self.user, "bank": self.bank, "n_skills": self.n_skills,
                "merges": self.merges, "embedder": self.embedder,
                "flags": [f.__dict__ for f in self.flags],
                "time_s": {"embed": round(self.embed_s, 3), "cluster": round(self.cluster_s, 3)},
                "reused_vectors": self.reused_vectors}


class IndexedBank(Protocol):
    """A bank with its index (a :class:`~engine.desk.SkillDesk` is one)."""

    bank: SkillBank
    user: str
    index: SkillIndex


def skill_vectors(skills: list[Skill], desk: IndexedBank | None = None,
                  embedder: Any = None) -> tuple[np.ndarray, int, str]:
    """``(unit vectors, how many came from the index, embedder signature)`` for ``skills``.

    With a desk, its index's stored vectors are used for every skill whose indexed file is the
    one on disk (same content hash); the rest are embedded with the desk's embedder, from the
    same retrieval text the index uses. Without a desk, ``embedder`` (anything with
    ``encode(texts)``) embeds everything.
    """
    index = desk.index if desk is not None else None
    emb = index.embedder if index is not None else embedder
    if emb is None:
        from engine.retrieval.embedders import make_embedder

        emb = make_embedder(None)
    text_for = index.text_for if index is not None else retrieval_text
    dim = int(getattr(emb, "dim", 0) or 0)
    vecs: list[np.ndarray | None] = [None] * len(skills)
    reused = 0
    if index is not None:
        current = index.skills
        keys = [_index_key(s) for s in skills]
        usable = [i for i, (s, k) in enumerate(zip(skills, keys, strict=True))
                  if k in current and current[k].content_hash == s.content_hash]
        if usable:
            stored = index.dense.vectors([keys[i] for i in usable])
            for row, i in enumerate(usable):
                if float(np.abs(stored[row]).sum()) > 0:
                    vecs[i] = stored[row]
                    reused += 1
    todo = [i for i, v in enumerate(vecs) if v is None]
    if todo:
        fresh = np.asarray(emb.encode([text_for(skills[i]) for i in todo]), dtype=np.float32)
        for row, i in enumerate(todo):
            vecs[i] = fresh[row]
    dim = dim or (len(vecs[0]) if vecs else 0)
    out = np.vstack(vecs).astype(np.float32) if vecs else np.zeros((0, dim), np.float32)
    return out, reused, str(getattr(emb, "signature", "") or type(emb).__name__)


def _index_key(s: Skill) -> str:
    from engine.retrieval.index import skill_key

    return skill_key(s)


def _keeper_rank(s: Skill, mean_sim: float) -> tuple:
    # the most evolved, most representative, richest member absorbs the others
    return (s.scope == "user", bool(s.resources), parse_version(s.version), round(mean_sim, 2),
            len(s.instructions))


def make_plan(desk: IndexedBank | None = None, *, bank: SkillBank | None = None,
              user: str | None = None,
              scope: str = "user", threshold: float = DEFAULT_THRESHOLD,
              max_size: int = DEFAULT_MAX_SIZE, cross_level: bool = False,
              linkage: str = "complete", embedder: Any = None, flags: bool = True,
              skills: list[Skill] | None = None) -> Plan:
    """The consolidation plan for ``desk`` (or ``bank`` + ``embedder``); writes nothing."""
    if not 0.0 < threshold <= 1.0:
        raise SkillDeskError(f"--threshold {threshold} is not a cosine similarity in (0, 1]; "
                             "SkillX uses 0.9")
    if bank is None:
        if desk is None:
            raise SkillDeskError("make_plan needs a desk or a bank")
        bank = desk.bank
    user = user or (desk.user if desk is not None else None) or "default"
    if skills is None:
        skills = bank.load(user, scope=scope).skills
    t0 = time.perf_counter()
    vecs, reused, signature = skill_vectors(skills, desk, embedder)
    t1 = time.perf_counter()
    groups: list[Group] = cluster(vecs, threshold, max_size=max_size, linkage=linkage,
                                  groups=None if cross_level else [s.level for s in skills])
    clusters = []
    for g in groups:
        members = [skills[i] for i in g.members]
        sub = vecs[list(g.members)]
        sims = sub @ sub.T
        mean = (sims.sum(axis=1) - 1.0) / max(1, len(members) - 1)
        keeper = max(range(len(members)), key=lambda k: _keeper_rank(members[k], float(mean[k])))
        clusters.append(Cluster(members, g.similarity, g.mean_similarity, members[keeper],
                                members[keeper].level))
    t2 = time.perf_counter()
    flagged = flag_skills([s for s in skills if s.scope == "user"]) if flags else []
    return Plan(clusters, threshold, max_size, scope, user, len(skills), signature,
                str(bank.root), flagged, embed_s=t1 - t0, cluster_s=t2 - t1,
                reused_vectors=reused)


def flag_bank(bank: SkillBank, user: str, *, save: bool = True) -> tuple[list[Flag], Path | None]:
    """Flag the user's junk skills and (by default) save the report; nothing is deleted."""
    flagged = flag_skills(bank.load(user, scope="user").skills)
    return flagged, (save_report(bank.root, user, flagged) if save else None)
