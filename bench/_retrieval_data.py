"""Helpers of the retrieval bench: the corpus as a bank, an embedding cache, tables.

``CachedEmbedder`` keeps the vectors the bench computed (by text hash, per embedder signature)
in a cache folder, so repeated bench runs on a shared 2-core machine do not re-embed the
corpus. It is used by the bench only; the app's cache is the index itself.
``NoisyReplicaEmbedder`` stands in for embedding at 10k / 100k skills: a replicated skill gets
its original's vector plus small Gaussian noise (the bench tables say so).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from engine.fsutil import atomic_write
from engine.retrieval.embedders import Embedder

DEFAULT_CORPUS = Path(os.environ.get("SKILLDESK_CORPUS",
                                     "/work/shared/corpora/autoskill-dev"))
DEFAULT_CACHE = Path(os.environ.get("SKILLDESK_BENCH_CACHE",
                                    Path(tempfile.gettempdir()) / "skilldesk-bench-cache"))
USER = "bench"


def corpus_bank(corpus: Path, dest: Path, limit: int | None = None) -> Path:
    """Copy the corpus into a fresh bank: ConvSkill subsets -> Users/bench/<subset>--<skill>,
    Common/<library>/<skill> as it is. Returns the bank root."""
    n = 0
    for f in sorted(Path(corpus).rglob("SKILL.md")):
        rel = f.parent.relative_to(corpus).parts
        if rel[0] == "Common" and len(rel) == 3:
            target = dest / "Common" / rel[1] / rel[2]
        else:
            target = dest / "Users" / USER / f"{rel[-2]}--{rel[-1]}"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target / "SKILL.md")
        n += 1
        if limit and n >= limit:
            break
    return dest


def _h(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class CachedEmbedder(Embedder):
    """Wraps an embedder; vectors already computed (same signature, same text) are reused."""

    def __init__(self, base: Embedder, cache_dir: Path | None):
        super().__init__()
        self.base = base
        self.name, self.dim, self.signature = base.name, base.dim, base.signature
        self.multilingual = base.multilingual
        self.file = Path(cache_dir) / f"{base.signature}.npz" if cache_dir else None
        self._vecs: dict[str, np.ndarray] = {}
        self._new = 0
        if self.file and self.file.is_file():
            try:
                with np.load(self.file) as z:
                    keys = json.loads(bytes(z["keys"]).decode())
                    self._vecs = dict(zip(keys, z["vecs"], strict=True))
            except (OSError, ValueError, KeyError):
                self._vecs = {}

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        keys = [_h(t) for t in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._vecs))
        first = {k: t for k, t in zip(keys, texts, strict=True)}
        for i in range(0, len(missing), 256):  # flushed as it goes: a killed run keeps its work
            part = missing[i:i + 256]
            vecs = self.base.encode([first[k] for k in part], batch_size)
            self._vecs.update(zip(part, vecs, strict=True))
            self._new += len(part)
            if self._new >= 256:
                self.flush()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.vstack([self._vecs[k] for k in keys]).astype(np.float32)

    def encode_query(self, text: str) -> np.ndarray:
        return self.base.encode_query(text)

    def flush(self) -> None:
        if not self.file or not self._new:
            return
        self.file.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self._vecs)
        import io

        buf = io.BytesIO()
        np.savez(buf, keys=np.frombuffer(json.dumps(keys).encode(), dtype=np.uint8),
                 vecs=np.vstack([self._vecs[k] for k in keys]).astype(np.float32))
        atomic_write(self.file, buf.getvalue())
        self._new = 0


class NoisyReplicaEmbedder(Embedder):
    """``encode`` returns the cached vector of the text plus noise of norm ~sigma, renormalised."""

    def __init__(self, base: CachedEmbedder, sigma: float = 0.1, seed: int = 0):
        super().__init__()
        self.base = base
        self.name, self.dim, self.signature = base.name, base.dim, base.signature + "-replica"
        self.multilingual = base.multilingual
        self.sigma = sigma / np.sqrt(base.dim)  # noise vector norm ~sigma: cos ~0.995
        self.rng = np.random.default_rng(seed)

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        v = self.base.encode(texts, batch_size)
        v = v + self.rng.normal(0, self.sigma, v.shape).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def encode_query(self, text: str) -> np.ndarray:
        return self.base.encode_query(text)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


def table(headers: list[str], rows: list[list], title: str = "") -> str:
    """A plain-text table (right-aligned numbers)."""
    cells = [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                     for i, (h, w) in enumerate(zip(headers, widths, strict=True)))
    out = [title, line, "-" * len(line)] if title else [line, "-" * len(line)]
    for r in cells:
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(out)


def _fmt(c) -> str:
    if isinstance(c, float):
        return f"{c:.3f}" if abs(c) < 10 else f"{c:.1f}"
    return str(c)
