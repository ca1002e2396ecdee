"""The dense half of retrieval: one hnswlib cosine index per embedder, kept on disk.

Files, under ``<bank>/vectors/``::

    <signature>.<user>.hnsw   the hnswlib index (labels are ints, never reused)
    <signature>.<user>.json   signature, dim, hnswlib settings, the index file's size and
                              sha256, and for every skill key its label and the content hash
                              of the text embedded

One pair per user (a desk indexes that user's skills plus the Common ones), so two users of one
bank (the proxy serves several) never overwrite each other's cache.

:class:`DenseIndex` is the one object that owns the hnswlib index. Every hnswlib call (query,
add, mark_deleted, resize, save, get_items) happens under ``self.lock``; embedding happens
outside it, so searches continue while a changed skill is being encoded. A missing, corrupted
(size/sha256 mismatch, unreadable) or stale (other signature, dim, format, labels missing) cache
is rebuilt from the texts, never trusted. ``ef`` is not saved by hnswlib: it is set after every
load and init.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import hnswlib
import numpy as np

from engine.compute import cpu_slot
from engine.fsutil import atomic_write, file_lock, fsync_dir
from engine.retrieval.embedders import Embedder

FORMAT = 1
# hnswlib settings. M=16 / ef_construction=100 build fast on 2 cores. ef at query time,
# recall@10 against brute force: 22.5k distinct USE vectors 0.993 (ef 64) / 0.995 (128) /
# 0.998 (256) at 0.15 / 0.23 / 0.98 ms per query; the bench's 100k bank (the corpus replicated
# 46x, near-identical copies, the worst case for HNSW) 0.73 / 0.83 / 0.90. 128: +0.1 ms.
M = 16
EF_CONSTRUCTION = 100
EF_SEARCH = 128
ADD_CHUNK = 2048  # vectors added per cpu_slot() hold


@dataclass
class DenseStats:
    embedded: int = 0
    reused: int = 0
    removed: int = 0
    embed_s: float = 0.0
    index_s: float = 0.0
    rebuilt: str = ""  # why the cache was not used ("" = it was)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class DenseIndex:
    """Vectors of skill texts for one embedder; ``key`` is the skill's stable key."""

    def __init__(self, embedder: Embedder, vectors_dir: str | os.PathLike | None, *,
                 ef: int = EF_SEARCH, persist: bool = True, name: str = "default"):
        self.embedder = embedder
        self.name = name  # the user: part of the file names
        self.dir = Path(vectors_dir) if vectors_dir else None
        self.persist = persist and self.dir is not None
        self.ef = ef
        self.lock = threading.RLock()        # every hnswlib call
        self._writer = threading.Lock()      # one writer at a time (embedding outside self.lock)
        self._index: hnswlib.Index | None = None
        self._labels: dict[str, int] = {}
        self._hashes: dict[str, str] = {}
        self._keys: dict[int, str] = {}
        self._next = 0
        self._deleted = 0
        self.dirty = False
        self.status = "empty"

    # ------------------------------------------------------------------ files
    def _paths(self) -> tuple[Path, Path]:
        return self._file(".hnsw"), self._file(".json")

    def _file(self, suffix: str) -> Path:
        return self.dir / f"{self.embedder.signature}.{self.name}{suffix}"

    @property
    def files(self) -> tuple[Path, Path]:
        """``(index file, metadata file)``."""
        return self._paths()

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self._file(".lock")):
            yield

    def _new_index(self, capacity: int) -> hnswlib.Index:
        idx = hnswlib.Index(space="cosine", dim=self.embedder.dim)
        idx.init_index(max_elements=max(1024, capacity), M=M, ef_construction=EF_CONSTRUCTION)
        idx.set_ef(self.ef)
        idx.set_num_threads(1)
        return idx

    def load(self) -> str:
        """Adopt the cache on disk if it is valid; returns "" or why it was not used."""
        if not self.persist:
            return "no cache (not persisted)"
        index_path, meta_path = self._paths()
        with self._file_lock():
            try:
                meta = json.loads(meta_path.read_text("utf-8"))
            except FileNotFoundError:
                return "missing"
            except (OSError, ValueError):
                return "unreadable metadata"
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                return "old format"
            if meta.get("signature") != self.embedder.signature or meta.get(
                    "dim") != self.embedder.dim:
                return "other embedder"
            try:
                size = index_path.stat().st_size
            except OSError:
                return "index file missing"
            if size != meta.get("size") or _sha256_file(index_path) != meta.get("sha256"):
                return "index file corrupted (size or checksum mismatch)"
            items = meta.get("items")
            if not isinstance(items, dict):
                return "unreadable metadata"
            try:
                idx = hnswlib.Index(space="cosine", dim=self.embedder.dim)
                idx.load_index(str(index_path), max_elements=int(meta["capacity"]))
                ids = set(idx.get_ids_list())
                labels = {str(k): int(v[0]) for k, v in items.items()}
                hashes = {str(k): str(v[1]) for k, v in items.items()}
            except (RuntimeError, ValueError, KeyError, TypeError, IndexError, MemoryError):
                return "index file unreadable"
            if idx.element_count != meta.get("count") or not set(labels.values()) <= ids:
                return "index and metadata disagree"
        idx.set_ef(self.ef)  # ef is not saved with the index
        idx.set_num_threads(1)
        with self.lock:
            self._index = idx
            self._labels, self._hashes = labels, hashes
            self._keys = {v: k for k, v in labels.items()}
            self._next = int(meta.get("next", max(ids, default=-1) + 1))
            self._deleted = idx.element_count - len(labels)
            self.status = "loaded"
            self.dirty = False
        return ""

    def save(self) -> None:
        if not self.persist or not self.dirty:
            return
        index_path, meta_path = self._paths()
        tmp = index_path.with_name(f".{index_path.name}.{os.getpid()}.tmp")
        with self._file_lock():
            with self.lock:
                if self._index is None:
                    return
                self._index.save_index(str(tmp))
                meta = {"format": FORMAT, "signature": self.embedder.signature,
                        "dim": self.embedder.dim, "space": "cosine", "M": M,
                        "ef_construction": EF_CONSTRUCTION,
                        "capacity": self._index.get_max_elements(),
                        "count": self._index.element_count, "next": self._next,
                        "items": {k: [lab, self._hashes[k]] for k, lab in self._labels.items()}}
                self.dirty = False
            try:
                with open(tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
                meta["size"] = tmp.stat().st_size
                meta["sha256"] = _sha256_file(tmp)
                os.replace(tmp, index_path)
                fsync_dir(index_path.parent)
                atomic_write(meta_path, json.dumps(meta, separators=(",", ":")))
            except BaseException:
                self.dirty = True  # try again at the next save
                raise
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()

    # ------------------------------------------------------------------ updates
    def hashes(self) -> dict[str, str]:
        with self.lock:
            return dict(self._hashes)

    def __len__(self) -> int:
        return len(self._labels)

    def apply(self, texts: dict[str, tuple[str, str]], *, complete: bool,
              remove: tuple[str, ...] = ()) -> DenseStats:
        """Bring the index up to date with ``{key: (hash, text)}``.

        Only texts whose hash differs from the indexed one are embedded. ``complete``: the
        mapping is the whole set, so every other key is removed; ``remove``: keys to drop.
        """
        st = DenseStats()
        with self._writer:
            current = self.hashes()
            todo = [k for k, (h, _t) in texts.items() if current.get(k) != h]
            gone = [k for k in current if k not in texts] if complete else [
                k for k in remove if k in current and k not in texts]
            st.reused = len(texts) - len(todo)
            t0 = time.perf_counter()
            vecs = self.embedder.encode([texts[k][1] for k in todo])
            st.embedded, st.embed_s = len(todo), time.perf_counter() - t0
            t0 = time.perf_counter()
            with self.lock:
                if self._index is None:
                    self._index = self._new_index(len(texts) * 5 // 4 + 16)
                for k in gone + [k for k in todo if k in self._labels]:
                    self._index.mark_deleted(self._labels[k])
                    del self._keys[self._labels.pop(k)]
                    self._hashes.pop(k, None)
                    self._deleted += 1
                st.removed = len(gone)
            for start in range(0, len(todo), ADD_CHUNK):
                chunk = todo[start:start + ADD_CHUNK]
                with cpu_slot(), self.lock:
                    need = self._index.element_count + len(chunk)
                    if need > self._index.get_max_elements():
                        self._index.resize_index(max(need, self._index.get_max_elements() * 2))
                    labels = np.arange(self._next, self._next + len(chunk), dtype=np.int64)
                    self._index.add_items(vecs[start:start + len(chunk)], labels,
                                          num_threads=2)
                    self._next += len(chunk)
                    for k, lab in zip(chunk, labels.tolist(), strict=True):
                        self._labels[k], self._keys[lab] = lab, k
                        self._hashes[k] = texts[k][0]
            if todo or gone:
                self.dirty = True
                self.status = "updated"
                if self._deleted > 256 and self._deleted > len(self._labels):
                    self._compact()
            st.index_s = time.perf_counter() - t0
        return st

    def _compact(self) -> None:
        """Rebuild the graph from the live vectors once deleted ones outnumber them."""
        with cpu_slot(), self.lock:
            keys = list(self._labels)
            vecs = np.asarray(self._index.get_items([self._labels[k] for k in keys]),
                              dtype=np.float32).reshape(len(keys), self.embedder.dim)
            idx = self._new_index(len(keys) * 5 // 4 + 16)
            labels = np.arange(len(keys), dtype=np.int64)
            if keys:
                idx.add_items(vecs, labels, num_threads=2)
            self._index = idx
            self._labels = dict(zip(keys, labels.tolist(), strict=True))
            self._keys = {v: k for k, v in self._labels.items()}
            self._next, self._deleted = len(keys), 0

    def set_ef(self, ef: int) -> None:
        """Query-time breadth of the HNSW search (recall vs speed)."""
        with self.lock:
            self.ef = ef
            if self._index is not None:
                self._index.set_ef(ef)

    # ------------------------------------------------------------------ queries
    def search(self, vec: np.ndarray, k: int, allowed: set[str] | None = None) -> list[
            tuple[str, float]]:
        """The ``k`` nearest skills as ``(key, cosine)``, best first."""
        with self.lock:
            idx, live = self._index, len(self._labels)
            if idx is None or live == 0 or k <= 0:
                return []
            flt = None
            if allowed is not None:
                ok = {self._labels[x] for x in allowed if x in self._labels}
                live = len(ok)
                if not live:
                    return []
                flt = ok.__contains__
            k = min(k, live)
            while True:
                try:
                    labels, dist = idx.knn_query(vec, k=k, filter=flt)
                    break
                except RuntimeError:  # fewer reachable than k (many deleted): ask for less
                    if k <= 1:
                        return []
                    k //= 2
            return [(self._keys[int(lab)], 1.0 - float(d))
                    for lab, d in zip(labels[0], dist[0], strict=True) if int(lab) in self._keys]

    def vectors(self, keys: list[str]) -> np.ndarray:
        """Stored unit vectors for ``keys`` (zeros for a key not in the index)."""
        out = np.zeros((len(keys), self.embedder.dim), dtype=np.float32)
        with self.lock:
            rows = [(i, self._labels[k]) for i, k in enumerate(keys) if k in self._labels]
            if rows and self._index is not None:
                got = self._index.get_items([lab for _i, lab in rows])
                out[[i for i, _lab in rows]] = np.asarray(got, dtype=np.float32)
        return out
