"""Admission to the model: one request at a time, a bounded wait, then an honest 503.

The engine's ModelWorker already serialises inference; this gate sits in front of it on the
event loop so that waiting requests hold no thread, wait in arrival order, and give up after
``wait_s`` seconds (or at once when ``max_waiting`` are already waiting) with a ``Retry-After``
estimate from the recent service times. All methods run on the server's event loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time


class Busy(Exception):
    """The model stayed busy: answer 503 with ``Retry-After: retry_after``."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class ModelGate:
    def __init__(self, slots: int = 1, wait_s: float = 30.0, max_waiting: int = 128):
        self.slots = slots
        self.wait_s = wait_s
        self.max_waiting = max_waiting
        self._free = slots
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._service_s = 1.0  # running mean of how long a request holds the model
        self.admitted = 0
        self.rejected = 0

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def busy(self) -> int:
        return self.slots - self._free

    def retry_after(self) -> int:
        return max(1, min(120, math.ceil(self._service_s * (self.waiting + 1) / self.slots)))

    def _busy(self, why: str) -> Busy:
        self.rejected += 1
        return Busy(why, self.retry_after())

    async def acquire(self) -> Slot:
        """A slot on the model (use ``async with``); raises :class:`Busy` after the wait."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return self._admit()
        if len(self._waiters) >= self.max_waiting:
            raise self._busy(f"the model is busy ({self.waiting} requests waiting); retry later")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        self._waiters.append(fut)
        timer = loop.call_later(self.wait_s, self._expire, fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._release()  # granted just as the client went away
            else:
                self._drop(fut)
            raise
        finally:
            timer.cancel()
        return self._admit()

    def _admit(self) -> Slot:
        self.admitted += 1
        return Slot(self)

    def _expire(self, fut: asyncio.Future) -> None:
        if not fut.done():
            self._drop(fut)
            fut.set_exception(self._busy(
                f"the model stayed busy for {self.wait_s:g} s; retry later"))

    def _drop(self, fut: asyncio.Future) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass

    def _release(self, held_s: float | None = None) -> None:
        if held_s is not None:
            self._service_s = 0.8 * self._service_s + 0.2 * held_s
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(True)  # the slot passes straight to the next in line
                return
        self._free = min(self.slots, self._free + 1)


class Slot:
    """One admitted request's hold on the model; ``release()`` is idempotent."""

    def __init__(self, gate: ModelGate):
        self._gate = gate
        self._t0 = time.perf_counter()
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._gate._release(time.perf_counter() - self._t0)

    async def __aenter__(self) -> Slot:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()
