"""``ModelWorker``: the single owner of a backend, with one thread and a priority queue.

Every call to a model goes through its worker, so two inferences never overlap (llama.cpp
contexts are not thread-safe, and two OpenMP pools on 2 cores are ~20x slower).

Scheduling:

- ``FOREGROUND`` (the user's chat) runs before ``BACKGROUND`` (learning); equal priorities run
  in submission order.
- A foreground job that arrives while background jobs are queued simply goes first: they wait.
- ``PREPARE`` (a turn the user is still typing, ``SkillDesk.prepare``) runs between the two:
  before queued learning, after the chat. It never pre-empts a running job (a user who pauses
  while typing would otherwise restart a learning step at every pause); a chat job pre-empts
  it like any other.
- A foreground job that arrives while a background job is *running* pre-empts it: the running
  job's attempt is cancelled through its cancel token (within one token) and the job is put
  back in the queue, to start over once the foreground work is done. Background work is a pure
  function of its input (extract / judge / merge), so a restart is always safe; ``job.preempted``
  counts restarts, and an ``on_token`` callback of a pre-empted job sees the output restart.
- ``job.cancel()`` (the user's Stop) cancels a queued job before it starts or a running one
  within one token. A stopped chat job still *returns* its partial ``ChatResult``
  (``finish_reason == "cancelled"``); stopped structured/call jobs raise ``Cancelled``.

``wait_idle()`` / ``idle`` tell background code when the model has nothing queued or running.

At interpreter exit every worker still alive is closed and its thread joined (``EXIT_WAIT_S``):
the thread is a daemon, and a process whose C exit handlers (Qt's among them) run while
llama.cpp is inside a prompt evaluation crashes (SIGSEGV), which a prefill that cannot stop
mid-batch made possible whenever the app closed within seconds of loading its model.
"""

from __future__ import annotations

import atexit
import heapq
import itertools
import logging
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from engine.errors import Cancelled, ModelError
from engine.llm.base import CancelToken, ChatResult, GenParams, LLMBackend, Message

FOREGROUND, PREPARE, BACKGROUND = 0, 5, 10
EXIT_WAIT_S = 120.0  # at exit: the longest wait for a running model call to end

log = logging.getLogger(__name__)
_live: weakref.WeakSet[ModelWorker] = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    """Close every live worker and wait for its thread: a native call must not outlive Python."""
    workers = list(_live)
    for w in workers:
        w.close(wait=False)
    for w in workers:
        w._thread.join(EXIT_WAIT_S)
        if w._thread.is_alive():
            log.warning("model worker %s still running at exit", w._thread.name)


class Job:
    """A future-like handle for one request: ``result(timeout)``, ``cancel()``, ``done()``."""

    def __init__(self, run: Callable[[LLMBackend, CancelToken], Any], priority: int,
                 kind: str):
        self._run = run
        self.priority = int(priority)
        self.kind = kind
        self.token = CancelToken()  # the user's Stop
        self._attempt: CancelToken | None = None  # this run (cancelled by Stop or pre-emption)
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._result: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Job], Any]] = []
        self.status = "queued"  # queued | running | done | cancelled | failed
        self.preempted = 0
        self._preempt_requested = False

    # --- the caller's side --------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop: a queued job never starts; a running one stops within one token."""
        self.token.cancel()
        with self._lock:
            attempt = self._attempt
        if attempt is not None:
            attempt.cancel()

    @property
    def cancelled(self) -> bool:
        return self.token.cancelled

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> Any:
        if not self._done.wait(timeout):
            raise TimeoutError(f"model job ({self.kind}) not finished after {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result

    def add_done_callback(self, fn: Callable[[Job], Any]) -> None:
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    # --- the worker's side --------------------------------------------------------------------
    def _start_attempt(self) -> CancelToken:
        attempt = CancelToken()
        with self._lock:
            self._attempt = attempt
            self._preempt_requested = False
            self.status = "running"
        if self.token.cancelled:
            attempt.cancel()
        return attempt

    def _preempt(self) -> None:
        with self._lock:
            attempt = self._attempt
            self._preempt_requested = True
        if attempt is not None:
            attempt.cancel()

    def _finish(self, result: Any = None, error: BaseException | None = None,
                status: str = "done") -> None:
        with self._lock:
            self._result, self._error, self.status = result, error, status
            self._attempt = None
            callbacks, self._callbacks = self._callbacks, []
            self._done.set()
        for fn in callbacks:
            try:
                fn(self)
            except Exception:  # a broken callback must not kill the worker
                pass


class ChatStream:
    """Tokens of a chat job, yielded on the caller's thread as the worker produces them.

    Iterating ends when the job finishes; ``result`` then holds the ``ChatResult``. Breaking
    out of the loop (or calling ``cancel``) stops the generation.
    """

    _DONE = object()

    def __init__(self, worker: ModelWorker, messages: list[Message],
                 params: GenParams | None, priority: int):
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.job = worker.submit_chat(messages, params, priority, on_token=self._q.put)
        self.job.add_done_callback(lambda _job: self._q.put(self._DONE))
        self.result: ChatResult | None = None

    def cancel(self) -> None:
        self.job.cancel()

    def __iter__(self) -> Iterator[str]:
        try:
            while True:
                item = self._q.get()
                if item is self._DONE:
                    break
                yield item
        finally:
            if not self.job.done():  # the consumer stopped early: stop the model too
                self.job.cancel()
        self.result = self.job.result()


class ModelWorker:
    """Owns one backend (or a factory that builds it on the worker thread) and runs its jobs."""

    def __init__(self, backend: LLMBackend | Callable[[], LLMBackend], *, name: str = "model",
                 close_backend: bool = True):
        self._factory = backend if not hasattr(backend, "stream_chat") else None
        self.backend: LLMBackend | None = None if self._factory else backend  # type: ignore
        self._close_backend = close_backend
        self._cond = threading.Condition()
        self._heap: list[tuple[int, int, Job]] = []
        self._seq = itertools.count()
        self._running: Job | None = None
        self._closing = False
        self._load_error: BaseException | None = None
        self.ready = threading.Event()  # the backend is loaded (or failed to load)
        self.idle = threading.Event()  # nothing queued, nothing running
        self._thread = threading.Thread(target=self._loop, name=f"ModelWorker-{name}",
                                        daemon=True)
        self._thread.start()
        _live.add(self)

    # --- submitting -------------------------------------------------------------------------
    def submit(self, run: Callable[[LLMBackend, CancelToken], Any],
               priority: int = BACKGROUND, kind: str = "call") -> Job:
        """Run ``run(backend, cancel_token)`` on the worker thread; returns its :class:`Job`."""
        return self._enqueue(Job(run, priority, kind))

    def submit_chat(self, messages: list[Message], params: GenParams | None = None,
                    priority: int = FOREGROUND,
                    on_token: Callable[[str], Any] | None = None) -> Job:
        """A chat turn; ``on_token`` is called on the worker thread for every text chunk."""
        messages = [dict(m) for m in messages]

        def run(backend: LLMBackend, cancel: CancelToken) -> ChatResult:
            if on_token is None:
                return backend.chat(messages, params, cancel)
            for chunk in backend.stream_chat(messages, params, cancel):
                try:
                    on_token(chunk)
                except Exception:
                    cancel.cancel()  # the consumer is broken: stop wasting the model
                    raise
            return backend.last_result  # type: ignore[attr-defined]

        return self._enqueue(Job(run, priority, "chat"))

    def submit_structured(self, messages: list[Message], schema: dict[str, Any],
                          params: GenParams | None = None,
                          priority: int = BACKGROUND) -> Job:
        """A JSON answer matching ``schema`` (``StructuredOutputError`` when it does not)."""
        messages = [dict(m) for m in messages]
        return self._enqueue(Job(lambda b, c: b.structured(messages, schema, params, c),
                                 priority, "structured"))

    def stream_chat(self, messages: list[Message], params: GenParams | None = None,
                    priority: int = FOREGROUND) -> ChatStream:
        """``for chunk in worker.stream_chat(msgs): ...`` on any thread; see :class:`ChatStream`."""
        return ChatStream(self, messages, params, priority)

    def _enqueue(self, job: Job) -> Job:
        with self._cond:
            if self._closing:
                raise ModelError("the model worker is closed")
            heapq.heappush(self._heap, (job.priority, next(self._seq), job))
            self.idle.clear()
            running = self._running
            if running is not None and job.priority == FOREGROUND < running.priority:
                running._preempt()
            self._cond.notify_all()
        return job

    # --- state ------------------------------------------------------------------------------
    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running; False on timeout."""
        return self.idle.wait(timeout)

    def wait_ready(self, timeout: float | None = None) -> LLMBackend:
        """The loaded backend (raises the load error, e.g. a ``ModelError`` for a bad file)."""
        if not self.ready.wait(timeout):
            raise TimeoutError("the model is still loading")
        if self._load_error is not None:
            raise self._load_error
        assert self.backend is not None
        return self.backend

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._heap) + (self._running is not None)

    # --- the thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        if self._factory is not None:
            try:
                self.backend = self._factory()
            except BaseException as exc:  # reported to every job
                self._load_error = exc
        self.ready.set()
        while True:
            with self._cond:
                while not self._heap and not self._closing:
                    self._running = None
                    self.idle.set()
                    self._cond.wait()
                if not self._heap:  # closing and drained
                    self._running = None
                    self.idle.set()
                    break
                job = heapq.heappop(self._heap)[2]
                if job.token.cancelled:
                    self._finish_cancelled(job)
                    continue
                self._running = job
            self._execute(job)
        if self.backend is not None and self._close_backend:
            try:
                self.backend.close()
            except Exception:
                pass

    def _execute(self, job: Job) -> None:
        if self._load_error is not None:
            job._finish(error=self._load_error, status="failed")
            return
        attempt = job._start_attempt()
        try:
            result = job._run(self.backend, attempt)  # type: ignore[arg-type]
            error = None
        except BaseException as exc:
            result, error = None, exc
        with self._cond:
            self._running = None
            interrupted = error is not None or (isinstance(result, ChatResult)
                                                and result.finish_reason == "cancelled")
            requeue = (job._preempt_requested and interrupted and not job.token.cancelled
                       and not self._closing)
            if requeue:
                job.preempted += 1
                job.status = "queued"
                heapq.heappush(self._heap, (job.priority, next(self._seq), job))
        if requeue:
            return
        if job.token.cancelled and (error is not None or job.kind != "chat"):
            self._finish_cancelled(job, result)
        elif job.token.cancelled:
            job._finish(result=result, status="cancelled")
        elif error is not None:
            job._finish(error=error, status="failed")
        else:
            job._finish(result=result)

    @staticmethod
    def _finish_cancelled(job: Job, partial: Any = None) -> None:
        if job.kind == "chat":
            job._finish(result=partial or ChatResult(text="", finish_reason="cancelled"),
                        status="cancelled")
        else:
            job._finish(error=Cancelled(f"the {job.kind} job was stopped"), status="cancelled")

    def close(self, wait: bool = True, timeout: float | None = 30.0) -> None:
        """Stop accepting jobs, cancel queued and running ones, then close the backend."""
        with self._cond:
            self._closing = True
            queued = [j for _, _, j in self._heap]
            running = self._running
            self._cond.notify_all()
        for job in queued:
            job.cancel()
        if running is not None:
            running.cancel()
        if wait and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> ModelWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
