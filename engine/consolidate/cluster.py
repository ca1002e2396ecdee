"""Finding near-duplicate skills: unit vectors in, capped clusters of similar skills out.

Clustering is agglomerative over the cosine graph (edges where cosine ≥ ``threshold``; SkillX
uses 0.9), processed from the most similar pair down:

- ``linkage="complete"`` (default): two groups join only if *every* cross pair is above the
  threshold, so a cluster never chains A~B~C into one skill when A and C differ;
- ``linkage="single"``: connected components (DBSCAN with ``min_samples=1`` and ``eps = 1 -
  threshold``), which can chain;

and a group never grows past ``max_size`` (SkillX caps cluster size so one merge prompt stays
small). Skills of different levels are never grouped unless ``cross_level`` is set: a planning
skill and an atomic skill about the same tool are not duplicates. Pairs are found block by block
(``BLOCK_CELLS / n`` rows at a time), so memory stays about 64 MB even at 100k skills.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_THRESHOLD = 0.9
DEFAULT_MAX_SIZE = 8
BLOCK_CELLS = 1 << 24  # similarities computed at once (64 MB of float32)
LINKAGES = ("complete", "single")


@dataclass(frozen=True)
class Group:
    """One cluster: member indices (into the input order), similarity summary, keeper index."""

    members: tuple[int, ...]
    similarity: float        # the lowest pairwise cosine inside the group
    mean_similarity: float
    keeper: int              # the medoid: highest mean cosine to the others


def similar_pairs(vecs: np.ndarray, threshold: float,
                  groups: Sequence[str] | None = None) -> list[tuple[float, int, int]]:
    """``(cosine, i, j)`` with ``i < j`` for every pair at or above ``threshold``.

    ``groups`` (one label per row, e.g. the level): only pairs with equal labels are returned.
    Rows of zeros (no vector) never pair.
    """
    v = np.asarray(vecs, dtype=np.float32)
    n = len(v)
    if n < 2:
        return []
    norms = np.linalg.norm(v, axis=1)
    v = v / np.maximum(norms, 1e-12)[:, None]
    valid = norms > 1e-6
    labels = np.asarray(list(groups)) if groups is not None else None
    out: list[tuple[float, int, int]] = []
    rows_per_block = max(16, min(4096, BLOCK_CELLS // n))
    for start in range(0, n, rows_per_block):
        block = v[start:start + rows_per_block] @ v.T
        rows, cols = np.nonzero(block >= threshold)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            i = start + r
            if c <= i or not (valid[i] and valid[c]):
                continue
            if labels is not None and labels[i] != labels[c]:
                continue
            out.append((float(block[r, c]), i, c))
    out.sort(key=lambda t: (-t[0], t[1], t[2]))
    return out


def cluster(vecs: np.ndarray, threshold: float = DEFAULT_THRESHOLD, *,
            max_size: int = DEFAULT_MAX_SIZE, linkage: str = "complete",
            groups: Sequence[str] | None = None) -> list[Group]:
    """Clusters of two or more rows, largest similarity first (deterministic order)."""
    if linkage not in LINKAGES:
        raise ValueError(f"linkage must be one of {LINKAGES}")
    if max_size < 2:
        return []
    v = np.asarray(vecs, dtype=np.float32)
    v = v / np.maximum(np.linalg.norm(v, axis=1), 1e-12)[:, None] if len(v) else v
    parent: dict[int, int] = {}
    members: dict[int, list[int]] = {}

    def root(i: int) -> int:
        while parent.get(i, i) != i:
            parent[i] = parent.get(parent[i], parent[i])
            i = parent[i]
        return i

    for _sim, i, j in similar_pairs(v, threshold, groups):
        a, b = root(i), root(j)
        if a == b:
            continue
        ma, mb = members.get(a, [a]), members.get(b, [b])
        if len(ma) + len(mb) > max_size:
            continue
        if linkage == "complete" and len(ma) * len(mb) > 1:
            if float((v[ma] @ v[mb].T).min()) < threshold:
                continue
        keep, drop = (a, b) if a < b else (b, a)
        parent[drop] = keep
        members[keep] = sorted(ma + mb)
        members.pop(drop, None)

    out = []
    for idx in members.values():
        if len(idx) < 2:
            continue
        sims = v[idx] @ v[idx].T
        off = sims[~np.eye(len(idx), dtype=bool)]
        mean_to_others = (sims.sum(axis=1) - 1.0) / (len(idx) - 1)
        keeper = idx[int(np.argmax(mean_to_others))]
        out.append(Group(tuple(idx), round(float(off.min()), 4), round(float(off.mean()), 4),
                         keeper))
    out.sort(key=lambda g: (-g.similarity, g.members))
    return out
