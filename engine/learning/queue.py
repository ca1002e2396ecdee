"""``LearningQueue``: the background thread that learns from each finished chat turn.

Jobs (a conversation snapshot) are queued after every turn and run one at a time through the
:class:`~engine.learning.pipeline.Pipeline`, whose model calls go to the ModelWorker at
BACKGROUND priority, so a chat turn always goes first (and pre-empts a running call).

Where jobs run: an ``executor`` (a callable that runs a callable on some thread) is handed a
*drain* whenever jobs are waiting and none is running; the drain runs queued jobs one after the
other and returns when the queue is empty, paused or closed. The default executor starts a
daemon thread per drain; the desktop app passes its own QThreadPool (``set_executor``), so
evolution jobs run in Qt's pool while the queue keeps them one at a time.

Observable for the app: :meth:`state`, the event log (:attr:`events`, also appended to a JSONL
file when ``log_path`` is given), :meth:`subscribe` callbacks (called on the thread running the
job), :meth:`pause`/:meth:`resume` (takes effect between steps), :meth:`undo` per action, and
:meth:`wait_idle`.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.bank.skill import Skill
from engine.errors import Cancelled, NotFoundError, SkillDeskError
from engine.learning.events import Action, LearningEvent, LearningReport
from engine.learning.pipeline import Pipeline
from engine.text import clip

log = logging.getLogger("skilldesk.learning")

Executor = Callable[[Callable[[], None]], Any]


class SkillWriter(Protocol):
    """What undo needs: read a skill, delete it, revert it; each write reindexes."""

    def read(self, path: str | Path) -> Skill: ...

    def delete(self, skill: Skill) -> Path: ...

    def revert(self, skill: Skill, to_version: str) -> Skill: ...


class _PipelineWriter:
    """A bare pipeline's bank and reindex callback as a :class:`SkillWriter` (tests, bench)."""

    def __init__(self, pipeline: Pipeline):
        self.p = pipeline

    def read(self, path: str | Path) -> Skill:
        return self.p.bank.read(path)

    def delete(self, skill: Skill) -> Path:
        out = self.p.bank.delete(skill)
        self.p.refresh([Path(skill.path)])
        return out

    def revert(self, skill: Skill, to_version: str) -> Skill:
        out = self.p.bank.revert(skill, to_version)
        self.p.refresh([Path(out.path)])
        return out


def thread_executor(fn: Callable[[], None]) -> None:
    """The default executor: one daemon thread per drain (it ends when the queue is empty)."""
    threading.Thread(target=fn, name="LearningQueue", daemon=True).start()


@dataclass
class _Job:
    id: str
    messages: list[dict]
    mode: str
    turn_id: str | None
    done: threading.Event = field(default_factory=threading.Event)
    report: LearningReport | None = None


class LearningQueue:
    """One background learner per desk (bank + user)."""

    def __init__(self, pipeline: Pipeline | Callable[[], Pipeline], *,
                 log_path: str | Path | None = None, paused: bool = False,
                 executor: Executor | None = None, skills: SkillWriter | None = None):
        self._pipeline_or_factory = pipeline
        self._skills = skills
        self._pipeline: Pipeline | None = pipeline if isinstance(pipeline, Pipeline) else None
        self._cond = threading.Condition()
        self._jobs: collections.deque[_Job] = collections.deque()
        self._by_id: dict[str, _Job] = {}
        self._running: _Job | None = None
        self._done = 0
        self._paused = paused
        self._closed = False
        self._executor: Executor = executor or thread_executor
        self._draining = False  # a drain was handed to the executor and has not returned
        self._drain_thread: threading.Thread | None = None
        self._subscribers: list[Callable[[LearningEvent], Any]] = []
        self._ids = itertools.count(1)
        self._log_path = Path(log_path) if log_path else None
        self.events: list[LearningEvent] = self._load_log()

    # ------------------------------------------------------------------------ the pipeline
    @property
    def pipeline(self) -> Pipeline:
        if self._pipeline is None:
            self._pipeline = self._pipeline_or_factory()  # type: ignore[operator]
        return self._pipeline

    def rebind(self) -> None:
        """The model changed: build the pipeline again (from the factory) before the next job."""
        if not isinstance(self._pipeline_or_factory, Pipeline):
            self._pipeline = None

    # ------------------------------------------------------------------------ submitting
    def submit(self, messages: list[dict], turn_id: str | None = None,
               mode: str = "turn") -> str:
        """Queue a conversation snapshot; returns the job id (events carry it)."""
        job = _Job(f"j{next(self._ids)}-{int(time.time() * 1000) % 10**8}",
                   [dict(m) for m in messages], mode, turn_id)
        if self._closed:
            raise SkillDeskError("the learning queue is closed")
        # "queued" is announced before the thread can see the job (so it precedes "running")
        self._emit(LearningEvent(self._event_id(), "queued", turn_id=turn_id, job_id=job.id))
        with self._cond:
            if self._closed:
                raise SkillDeskError("the learning queue is closed")
            self._jobs.append(job)
            self._by_id[job.id] = job
            self._kick()
            self._cond.notify_all()
        return job.id

    def run(self, messages: list[dict], mode: str = "conversation", turn_id: str | None = None,
            timeout: float | None = None) -> LearningReport:
        """Queue a job and wait for its report (what ``SkillDesk.ingest`` uses)."""
        job_id = self.submit(messages, turn_id, mode)
        return self.result(job_id, timeout)

    def result(self, job_id: str, timeout: float | None = None) -> LearningReport:
        job = self._by_id.get(job_id)
        if job is None:
            raise NotFoundError(f"no learning job {job_id}")
        if not job.done.wait(timeout):
            raise TimeoutError(f"learning job {job_id} not finished after {timeout} s")
        return job.report or LearningReport(job_id=job_id)

    # ------------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        with self._cond:
            return {"queued": len(self._jobs), "running": int(self._running is not None),
                    "done": self._done, "paused": self._paused}

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        with self._cond:
            self._paused = True
            self._cond.notify_all()

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._kick()
            self._cond.notify_all()

    def set_executor(self, executor: Executor | None) -> None:
        """Run later drains with ``executor`` (``None``: a thread of our own)."""
        with self._cond:
            self._executor = executor or thread_executor

    def wait_idle(self, timeout: float | None = None) -> bool:
        """True once nothing is queued or running (False on timeout, e.g. while paused)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._jobs or self._running is not None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def subscribe(self, callback: Callable[[LearningEvent], Any]) -> Callable[[], None]:
        with self._cond:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._cond:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop: queued jobs are dropped, a running model call is cancelled."""
        with self._cond:
            self._closed = True
            dropped = list(self._jobs)
            self._jobs.clear()
            self._cond.notify_all()
        for job in dropped:
            job.done.set()
        if self._pipeline is not None and self._pipeline.llm is not None:
            self._pipeline.llm.cancel_all()
        if threading.current_thread() is self._drain_thread:
            return  # closed from a subscriber: the drain sees ``_closed`` and returns
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._draining:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    log.warning("learning: a job still running %.0f s after close", timeout)
                    return
                self._cond.wait(left)

    # ------------------------------------------------------------------------ undo
    def undo(self, event_id: str) -> LearningEvent:
        """Undo one add (the skill goes to the trash) or merge (the previous version returns)."""
        ev = next((e for e in self.events if e.id == event_id), None)
        if ev is None:
            raise NotFoundError(f"no learning event {event_id}")
        if ev.kind not in ("add", "merge") or not ev.path:
            raise SkillDeskError(f"a {ev.kind} event cannot be undone")
        if ev.undone:
            raise SkillDeskError(f"event {event_id} was already undone")
        skills = self._skills or _PipelineWriter(self.pipeline)  # the desk: no model needed
        skill = skills.read(ev.path)
        if ev.kind == "add":
            skills.delete(skill)
            reason = f"undid add of {skill.title} (moved to the trash)"
            version = skill.version
        else:
            if not ev.previous_version:
                raise SkillDeskError(f"event {event_id} does not say which version to restore")
            skill = skills.revert(skill, ev.previous_version)
            reason = f"undid merge into {skill.title}: content of {ev.previous_version} restored"
            version = skill.version
        ev.undone = True
        out = LearningEvent(self._event_id(), "undo", turn_id=ev.turn_id, job_id=ev.job_id,
                             skill_id=skill.id, skill_name=skill.name, title=skill.title,
                             path=str(ev.path), version=version, reason=reason, undoes=ev.id)
        self._emit(out)
        return out

    # ------------------------------------------------------------------------ the drain
    def _checkpoint(self) -> None:
        """Called by the pipeline between steps: wait while paused, stop when closed."""
        with self._cond:
            while self._paused and not self._closed:
                self._cond.wait()
            if self._closed:
                raise Cancelled("learning stopped")

    def _kick(self) -> None:
        """Hand a drain to the executor if jobs wait and none runs (``_cond`` held)."""
        if self._draining or self._closed or self._paused or not self._jobs:
            return
        self._draining = True
        try:
            self._executor(self._drain)
        except BaseException:
            self._draining = False
            raise

    def _drain(self) -> None:
        """Run queued jobs one at a time until the queue is empty, paused or closed."""
        self._drain_thread = threading.current_thread()
        try:
            while True:
                with self._cond:
                    if self._closed or self._paused or not self._jobs:
                        return
                    job = self._jobs.popleft()
                    self._running = job
                try:
                    self._run_job(job)
                finally:
                    with self._cond:
                        self._running = None
                        self._done += 1
                        self._cond.notify_all()
                    job.done.set()
        finally:
            with self._cond:
                self._drain_thread = None
                self._draining = False
                self._kick()  # a job submitted between the last check and now
                self._cond.notify_all()

    def _run_job(self, job: _Job) -> None:
        self._emit(LearningEvent(self._event_id(), "running", turn_id=job.turn_id,
                                  job_id=job.id))
        report = LearningReport(job_id=job.id)
        t0 = time.perf_counter()
        try:
            pipeline = self.pipeline
            calls0 = pipeline.llm.stats.calls if pipeline.llm is not None else 0
            report.actions = pipeline.run(job.messages, job.mode, job.turn_id,
                                          checkpoint=self._checkpoint)
            report.llm_calls = (pipeline.llm.stats.calls - calls0) if pipeline.llm else 0
        except Cancelled:
            report.actions.append(Action("error", reason="stopped", step="queue"))
        except Exception as exc:  # never let one bad job kill learning
            log.exception("learning job %s failed", job.id)
            report.actions.append(Action("error", reason=f"{type(exc).__name__}: {exc}",
                                         step="queue"))
        report.seconds = time.perf_counter() - t0
        job.report = report
        for a in report.actions:
            s = a.skill
            self._emit(LearningEvent(
                self._event_id(), a.kind, turn_id=job.turn_id, job_id=job.id,
                skill_id=s.id if s else None, skill_name=s.name if s else None,
                title=s.title if s else (a.candidate.name if a.candidate else None),
                path=str(s.path) if s is not None and s.path else None,
                version=s.version if s else None, previous_version=a.previous_version,
                reason=event_reason(a), replaced=list(a.replaced)))
        kinds = collections.Counter(a.kind for a in report.actions)
        summary = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "no durable signal"
        self._emit(LearningEvent(self._event_id(), "done", turn_id=job.turn_id, job_id=job.id,
                                  reason=f"{summary} ({report.seconds:.1f} s, "
                                         f"{report.llm_calls} model calls)"))

    # ------------------------------------------------------------------------ events
    def note(self, kind: str, **fields: Any) -> LearningEvent:
        """Log an event that is not a learning job's (the user's "didn't fit" feedback, a
        skill disabled from it): it joins the log and reaches the subscribers like any other."""
        ev = LearningEvent(self._event_id(), kind, **fields)
        self._emit(ev)
        return ev

    def _event_id(self) -> str:
        return f"e{next(self._ids)}-{int(time.time() * 1000) % 10**8}"

    def _emit(self, ev: LearningEvent) -> None:
        with self._cond:
            self.events.append(ev)
            subscribers = list(self._subscribers)
        if self._log_path is not None and ev.kind not in ("queued", "running"):
            try:
                self._log_path.parent.mkdir(parents=True, exist_ok=True)
                with open(self._log_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(ev.to_dict(), ensure_ascii=False) + "\n")
            except OSError as exc:
                log.warning("learning: cannot append to %s: %s", self._log_path, exc)
        for fn in subscribers:
            try:
                fn(ev)
            except Exception:  # a broken subscriber must not stop learning
                log.exception("learning subscriber failed")

    def _load_log(self) -> list[LearningEvent]:
        if self._log_path is None or not self._log_path.is_file():
            return []
        out = []
        try:
            lines = self._log_path.read_text(encoding="utf-8", errors="replace").splitlines(
            )[-500:]
        except OSError:
            return []
        for line in lines:  # a cut-short or hand-mangled line is skipped, never fatal
            ev = _event_from_line(line)
            if ev is not None:
                out.append(ev)
        undone = {e.undoes for e in out if e.kind == "undo"}
        for e in out:
            e.undone = e.undone or e.id in undone
        return out


_EVENT_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,), "kind": (str,), "reason": (str,), "time": (int, float), "undone": (bool,),
    "replaced": (list,)}


def _event_from_line(line: str) -> LearningEvent | None:
    """One line of the event log as an event, or None when it is not one (torn, wrong types)."""
    try:
        d = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(d, dict):
        return None
    values: dict[str, Any] = {}
    for name in LearningEvent.__dataclass_fields__:
        if name not in d:
            continue
        v = d[name]
        ok = _EVENT_TYPES.get(name, (str, type(None)))
        if not isinstance(v, ok) or (isinstance(v, bool) and bool not in ok) or (
                isinstance(v, list) and not all(isinstance(x, str) for x in v)):
            return None
        values[name] = v
    if "id" not in values or "kind" not in values:
        return None
    return LearningEvent(**values)


def event_reason(a: Action) -> str:
    """What the event log (and the app's Learning panel) says of ``a``: its reason and what the
    write changed beyond it (a rule the user's new message replaced, a rule kept that the
    model's merge had lost), so no rule leaves a skill unseen."""
    return clip("; ".join([a.reason, *a.notes]), 600)

