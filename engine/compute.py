"""One gate for CPU-heavy work: model inference and batch embedding never run at the same time.

llama.cpp (OpenMP) and torch each spin a full thread pool; on a 2-core laptop two busy pools
slow each other down ~20x. The model worker holds the gate for each inference, the embedder for
each encode call. The foreground never starves: a chat turn pre-empts background inference (the
worker cancels it within a token), which releases the gate.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

_gate = threading.RLock()
_stats = {"waits": 0, "wait_s": 0.0}


@contextlib.contextmanager
def cpu_slot(timeout: float | None = None) -> Iterator[None]:
    """Hold the CPU gate for one unit of heavy work (re-entrant within a thread)."""
    t0 = time.perf_counter()
    if not _gate.acquire(timeout=-1 if timeout is None else timeout):
        raise TimeoutError("the CPU is busy with another model call")
    waited = time.perf_counter() - t0
    if waited > 0.001:
        _stats["waits"] += 1
        _stats["wait_s"] += waited
    try:
        yield
    finally:
        _gate.release()


def stats() -> dict[str, float]:
    return dict(_stats)
