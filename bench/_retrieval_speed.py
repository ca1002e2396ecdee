"""Retrieval speed: search latency by bank size, cold build, one-skill update, edit-to-searchable.

- Latency at N skills: the corpus replicated to N (replica = same text under another folder).
  Vectors of replicas are the original's plus small noise (``NoisyReplicaEmbedder``): embedding
  100k texts on 2 cores would take hours. Search time excludes the query embedding (a
  precomputed vector is passed); the query embedding is timed on its own, per embedder.
- Cold build: a fresh bank copy, real embedding of every skill, nothing cached.
- Update: one edited skill through ``SkillIndex.update`` (real embedding of one text, hnswlib
  replace, BM25 rebuild), then the save of the vector files.
- Edit-to-searchable: a desk with its watcher; a SKILL.md is rewritten by an atomic rename (temp
  file + ``os.replace``, as editors save) with a new word in its description; the time until
  ``desk.search(word)`` returns that skill.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench._retrieval_data import NoisyReplicaEmbedder, pct
from engine.bank import skillfile
from engine.bank.skill import Skill
from engine.retrieval import DEFAULT_PARAMS
from engine.retrieval.index import SkillIndex, skill_key


def replicate(skills: list[Skill], n: int) -> list[Skill]:
    out = []
    rounds = -(-n // len(skills))
    for r in range(rounds):
        for s in skills:
            if len(out) >= n:
                return out
            if r == 0:
                out.append(s)
                continue
            d = s.path.parent
            out.append(s.copy(path=d.parent / f"{d.name}--r{r}" / "SKILL.md"))
    return out


def _orig(key: str) -> str:
    return re.sub(r"--r\d+$", "", key)


def query_embedding(embedder, queries: list[str]) -> tuple[float, float]:
    embedder.encode_query("warm up")
    times = []
    for q in queries:
        t0 = time.perf_counter()
        embedder.encode_query(q)
        times.append((time.perf_counter() - t0) * 1000)
    return pct(times, 50), pct(times, 95)


def latency_at(skills: list[Skill], cached, n: int, queries: list[str], qvecs: np.ndarray,
               workdir: Path, edits: int = 10, ef: int | None = None, log=sys.stderr) -> dict:
    """Build an index of ``n`` replicated skills and time searches and one-skill updates."""
    bank_skills = replicate(skills, n)
    emb = NoisyReplicaEmbedder(cached)
    idx = SkillIndex(emb, workdir / f"vectors-{n}", DEFAULT_PARAMS)
    t0 = time.perf_counter()
    idx.sync(bank_skills)
    if ef:
        idx.dense.set_ef(ef)
    build_s = time.perf_counter() - t0
    print(f"  {n}: index built in {build_s:.1f}s (vectors replicated)", file=log, flush=True)
    for q, v in zip(queries[:5], qvecs[:5], strict=False):  # warm up
        idx.search(q, qvec=v)
    times, e2e = [], []
    for q, v in zip(queries, qvecs, strict=True):
        t1 = time.perf_counter()
        idx.search(q, qvec=v)
        times.append((time.perf_counter() - t1) * 1000)
        t1 = time.perf_counter()
        idx.search(q)  # what the chat pays: the query is embedded too (one thread)
        e2e.append((time.perf_counter() - t1) * 1000)
    # ANN quality at this size: hnswlib top-10 against brute force on the stored vectors.
    # "skill" recall counts a replica as its original (replicas are near-identical copies,
    # so which copy comes back is arbitrary).
    keys = list(idx.skills)
    allv = idx.dense.vectors(keys)
    rec, srec = [], []
    for v in qvecs[:100]:
        exact = [keys[i] for i in np.argsort(-(allv @ v))[:10]]
        got = [k for k, _c in idx.dense.search(v, 10)]
        rec.append(len(set(exact) & set(got)) / 10)
        e_orig, g_orig = {_orig(k) for k in exact}, {_orig(k) for k in got}
        srec.append(len(e_orig & g_orig) / len(e_orig))
    # one edited skill, several times
    upd, saves = [], []
    t2 = time.perf_counter()
    idx.save()
    first_save = time.perf_counter() - t2
    for i in range(edits):
        s = bank_skills[(i * 7919) % len(bank_skills)]
        edited = s.copy(description=f"{s.description} (edited {i} {time.time()})",
                        content_hash=f"edit-{i}")
        t3 = time.perf_counter()
        idx.update([edited])
        upd.append((time.perf_counter() - t3) * 1000)
        t4 = time.perf_counter()
        idx.save()
        saves.append((time.perf_counter() - t4) * 1000)
    return {"n": n, "build_s": build_s, "p50": pct(times, 50), "p95": pct(times, 95),
            "e2e_p50": pct(e2e, 50), "e2e_p95": pct(e2e, 95),
            "recall10": float(np.mean(rec)) if rec else 0.0,
            "skill_recall10": float(np.mean(srec)) if srec else 0.0, "ef": idx.dense.ef,
            "upd_p50": pct(upd, 50), "upd_p95": pct(upd, 95), "save_ms": pct(saves, 50),
            "first_save_s": first_save, "lex_build_s": idx.lexical.build_s}


def cold_build(bank_root: Path, embedder, user: str) -> dict:
    """Open a desk on a bank with no vector cache: every skill is embedded for real."""
    from engine.desk import SkillDesk
    from engine.settings import Settings

    t0 = time.perf_counter()
    desk = SkillDesk.open(bank_root, user, Settings(), embedder=embedder)
    total = time.perf_counter() - t0
    n = len(desk.skills)
    t1 = time.perf_counter()
    desk.close()
    reopen_t0 = time.perf_counter()
    desk2 = SkillDesk.open(bank_root, user, Settings(), embedder=embedder)
    reopen = time.perf_counter() - reopen_t0
    cache_ok = desk2.index.cache_status == ""
    desk2.close()
    return {"n": n, "total_s": total, "per_s": n / total if total else 0.0,
            "save_s": reopen_t0 - t1, "reopen_s": reopen, "cache_ok": cache_ok,
            "errors": len(desk.load_errors)}


def edit_to_searchable(bank_root: Path, embedder, user: str, edits: int, log=sys.stderr,
                       timeout: float = 5.0) -> dict:
    """p50/p95 seconds from an atomic-rename save to ``search`` returning the edited skill."""
    from engine.desk import SkillDesk
    from engine.settings import Settings

    desk = SkillDesk.open(bank_root, user, Settings(), embedder=embedder)
    desk.watch()
    time.sleep(0.3)
    files = sorted(p.path for p in desk.skills if p.scope == "user")
    lat, misses = [], 0
    try:
        for i in range(edits):
            f = files[(i * 37) % len(files)]
            word = f"qzx{i}vuk{os.getpid()}"
            skill = skillfile.read(f)
            text = skillfile.render(skill.copy(description=f"{word} {skill.description}"))
            fd, tmp = tempfile.mkstemp(prefix=".SKILL.md.", suffix=".swp", dir=f.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            t0 = time.perf_counter()
            os.replace(tmp, f)
            while True:
                hits = desk.search(word, 3, threshold=0.0)
                if any(h.skill.path and Path(h.skill.path) == f for h in hits):
                    lat.append(time.perf_counter() - t0)
                    break
                if time.perf_counter() - t0 > timeout:
                    misses += 1
                    break
                time.sleep(0.005)
            time.sleep(0.3)  # let the hand-edit version bump settle before the next edit
    finally:
        desk.close()
    print(f"  edit-to-searchable: {len(lat)} seen, {misses} missed", file=log, flush=True)
    return {"edits": edits, "seen": len(lat), "missed": misses, "p50": pct(lat, 50),
            "p95": pct(lat, 95), "max": max(lat) if lat else 0.0}


__all__ = ["cold_build", "edit_to_searchable", "latency_at", "query_embedding", "replicate",
           "skill_key"]
