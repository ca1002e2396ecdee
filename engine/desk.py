"""``SkillDesk``: one bank, one user, one index, one model worker, one learning queue.

The engine's front door; the desktop app, the CLI, the proxy and the benchmarks use nothing
else to change skills. What it owns (each built once, each with one owner):

- ``bank`` (:class:`~engine.bank.store.SkillBank`): the SKILL.md files, history and trash;
- ``index`` (:class:`~engine.retrieval.index.SkillIndex`): hnswlib + bm25s over the skills;
- ``worker`` (:class:`~engine.llm.worker.ModelWorker`): the configured model, built on first use
  (searching never loads a model); a worker assigned from outside is not closed by the desk;
- ``learning`` (:class:`~engine.learning.queue.LearningQueue`): background learning, its event
  log under ``$SKILLDESK_HOME/evolution/``.

Reading: ``search``, ``render_context`` (the same block the chat injects), ``neighbours`` (the
judge's search). Turns: ``chat`` (engine/chat/turn.py: rewrite, plan, retrieve, render,
generate) and ``ingest`` (engine/learning/: triage, extract, judge, merge). Writes: ``create``,
``update``, ``delete``, ``restore``, ``revert``, ``undo``: each reindexes what it changed, so no
caller has to remember a refresh. Hand edits arrive through ``watch`` / ``refresh``. What a user
does to their skills (new, disable / enable, always-on, level, move, trash, usage, "didn't fit")
is in the :class:`~engine.desk_skills.SkillManagement` mixin; its bookkeeping is a sidecar
(``<bank>/.skilldesk/<user>.json``), never the SKILL.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from engine.bank.skill import Skill
from engine.bank.starter import seed_starter
from engine.bank.store import LoadError, SkillBank
from engine.chat import skill_filter
from engine.chat.plan import plan_search
from engine.chat.render import DEFAULT_SKILL_CHARS, render_skills, user_written
from engine.chat.turn import Decision, Turn, TurnResult, TurnStream
from engine.consolidate import MergeFn, Plan, Record, apply_plan
from engine.consolidate import undo as undo_record
from engine.desk_skills import SkillManagement
from engine.errors import Cancelled, SkillDeskError, SkillFormatError, UnsafePathError
from engine.fsutil import check_component
from engine.learning.events import LearningEvent, LearningReport
from engine.learning.pipeline import Neighbour, Pipeline
from engine.learning.queue import LearningQueue
from engine.llm import tiers
from engine.llm.base import CancelToken, GenParams
from engine.llm.client import LLMClient
from engine.llm.factory import make_worker
from engine.llm.worker import BACKGROUND, FOREGROUND, PREPARE, Job, ModelWorker
from engine.retrieval import DEFAULT_PARAMS, SkillHit, SkillIndex, SyncReport
from engine.retrieval.embedders import Embedder, make_embedder
from engine.retrieval.index import SCOPE_VALUES, skill_dir_of, skill_key
from engine.settings import Settings, home_dir

PRIMED_SKILLS = 4  # warm_up: the self-filter's prompt is kept for the skills used most
WORKER_CLOSE_S = 10.0  # close(): the longest wait for the model's running job (the app waits 15 s)

log = logging.getLogger("skilldesk.desk")


class SkillDesk(SkillManagement):
    """Skills of ``user`` in ``bank``, searchable; see the module docstring."""

    def __init__(self, bank: SkillBank, user: str, config: Settings, index: SkillIndex):
        self.bank = bank
        self.user = user
        self.config = config
        self.index = index
        self.load_errors: list[LoadError] = []
        self._listeners: list[Callable[[SyncReport], object]] = []
        self._refresh_lock = threading.Lock()
        self._watcher = None
        self.last_report = SyncReport()
        self.closed = False
        self._own_lock = threading.Lock()
        self._worker: ModelWorker | None = None
        self._own_worker = False
        self._learning: LearningQueue | None = None
        self._prepared: _Prepared | None = None  # the latest prepare()
        self._init_state()  # disabled / always-on / usage / feedback (engine/desk_skills.py)

    # ------------------------------------------------------------------ open / close
    @classmethod
    def open(cls, bank_dir: str | os.PathLike | None = None, user: str | None = "default",
             config: Settings | None = None, *, create: bool = False,
             embedder: Embedder | str | None = None, watch: bool = False,
             starter: bool = False) -> SkillDesk:
        """Open ``bank_dir`` (default: the settings' bank) for ``user`` and build its index.

        ``create``: make the bank folder if it does not exist (else NotFoundError).
        ``embedder``: an Embedder, a name ("minilm", "use") or a model folder; default: the
        settings' choice, else the measured default. ``watch``: start the file watcher.
        ``starter``: give a new or empty bank the shipped starter skills (what the app, the
        terminal chat and the proxy do, so a first conversation is the same in each).
        """
        config = config or Settings.load()
        user = check_component(user or config.user or "default", "user")
        if starter and (create or config.bank_dir(bank_dir).is_dir()):
            seed_starter(config.bank_dir(bank_dir), user)
        bank = SkillBank(config.bank_dir(bank_dir), create=create)
        if not isinstance(embedder, Embedder):
            embedder = make_embedder(embedder or config.embedder)
        r = config.retrieval
        if r.scope not in SCOPE_VALUES:
            raise SkillDeskError(f"retrieval scope must be one of {', '.join(SCOPE_VALUES)}, "
                                 f"not {r.scope!r} (check the settings)")
        params = DEFAULT_PARAMS.with_(top_k=int(r.top_k), threshold=float(r.min_relevance))
        desk = cls(bank, user, config,
                   SkillIndex(embedder, bank.vectors_dir, params, name=user))
        desk.refresh()
        if watch:
            desk.watch()
        return desk

    def close(self) -> None:
        """Stop the watcher and save the vectors. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        with self._own_lock:
            queue, worker = self._learning, (self._worker if self._own_worker else None)
        if queue is not None:
            queue.close()
        if worker is not None:
            # wait for the running job: it is cancelled (a generation stops within a token),
            # but a prompt evaluation (the warm-up's prefill) runs to its end in llama.cpp, and
            # a process that exits meanwhile crashed there (SIGSEGV at the app's exit in CI)
            worker.close(wait=True, timeout=WORKER_CLOSE_S)
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        self.index.save()

    def __enter__(self) -> SkillDesk:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ retrieval
    @property
    def skills(self) -> list[Skill]:
        return list(self.index.skills.values())

    def search(self, query: str, top_k: int | None = None, *, scope: str | None = None,
               threshold: float | None = None) -> list[SkillHit]:
        """The skills that apply to ``query``, best first (at most ``top_k``).

        Disabled skills and skills that "didn't fit" a similar request are left out (see
        engine/desk_skills.py); always-on skills are added by the chat, not here."""
        k = top_k if top_k is not None else self.index.params.top_k
        extra = self._extra()
        hits = self.index.search(query or "", k + extra if k is not None and extra else k,
                                 scope=scope or self.config.retrieval.scope,
                                 threshold=threshold)
        hits = self._filter_hits(query or "", list(hits), k) if extra else list(hits)
        return self._own_version(hits)

    def _own_version(self, hits: list[SkillHit]) -> list[SkillHit]:
        """A shared (Common) skill stands aside for the user's own skill on the same task: the
        user's rules override the shipped default (a learned "start summaries with 'In
        short:'" over the starter TL;DR skill). "Same task" is the relevance decision itself,
        each skill's title and description as the request, both ways: the user's skill is the
        shared one's best related user skill and the shared one is its best related shared
        skill (P(related) ≥ η; mutual, so no new threshold). The user's skill inherits the
        shared skill's score for this request (when it is served already, the shared one is simply left out). Disabled skills
        never step in."""
        if not any(h.skill.scope == "common" for h in hits):
            return hits
        served = {h.skill.id for h in hits}
        disabled = self.state.ids_where("disabled")
        out: list[SkillHit] = []
        for h in hits:
            if h.skill.scope == "common":
                mine = [u for u in self._same_task(h.skill, "user")
                        if u.skill.id not in disabled
                        and [c.skill.id for c in self._same_task(u.skill, "common")]
                        == [h.skill.id]]
                if mine and mine[0].skill.id in served:
                    continue  # the user's own version is served already
                if mine:
                    served.add(mine[0].skill.id)
                    h = SkillHit(mine[0].skill, h.score, mine[0].dense, mine[0].lexical)
            out.append(h)
        return out

    def _same_task(self, skill: Skill, scope: str) -> list[SkillHit]:
        return list(self.index.search(f"{skill.title}. {skill.description}", 1, scope=scope))

    def render_context(self, query: str, *, hits: list[SkillHit] | None = None,
                       budget: int = DEFAULT_SKILL_CHARS) -> str:
        """The skill block the chat would inject for ``query`` ("" when none applies)."""
        hits = self.with_always_on(self.search(query), query) if hits is None else hits
        return render_skills(hits, budget)

    def user_written_rules(self, skill: Skill) -> set[str]:
        """The rules of ``skill`` that the user wrote by hand (first seen in a hand edit, per
        the history): the renderer keeps them first when a skill is over budget."""
        if skill.scope != "user":
            return set()
        try:
            hist = self.bank.history
            versions = [(v.source, hist.skill_at(skill.id, v.version).instructions)
                        for v in hist.versions(skill.id)]  # oldest first
        except (OSError, SkillDeskError):
            return set()
        return user_written(versions, skill)

    def neighbours(self, query: str, k: int) -> list[Neighbour]:
        """The judge's search: the user's own skills by hybrid score, no relevance cut."""
        params = self.index.params.with_(threshold=0.0, window=None)
        disabled = self.state.ids_where("disabled")  # never merged into while disabled
        hits = self.index.search(query or "", k + len(disabled), scope="user", params=params)
        return [Neighbour(h.skill, h.score, h.dense, h.lexical) for h in hits
                if h.skill.id not in disabled][:k]

    def search_many(self, queries: list[str], top_k: int) -> list[list[SkillHit]]:
        """One search per query, the queries embedded in one batch (the plan's steps)."""
        if not queries:
            return []
        vecs = self.index.embedder.encode(list(queries))
        scope = self.config.retrieval.scope
        extra = self._extra()
        out = [list(self.index.search(q, top_k + extra, scope=scope, qvec=v))
               for q, v in zip(queries, vecs, strict=True)]
        return [self._filter_hits(q, h, top_k) for q, h in zip(queries, out, strict=True)
                ] if extra else out

    # ------------------------------------------------------------------ changes
    def refresh(self, paths: Iterable[str | os.PathLike] | None = None) -> SyncReport:
        """Re-read the bank (``paths=None``) or just the given SKILL.md files / skill folders.

        Unchanged skills are not re-embedded. Listeners get the report when something changed.
        """
        with self._refresh_lock:
            rep = self._refresh_all() if paths is None else self._refresh_paths(paths)
            self.last_report = rep
            if rep.changed:
                self.index.save()
        if rep.changed:
            for fn in list(self._listeners):
                fn(rep)
        return rep

    def _refresh_all(self) -> SyncReport:
        result = self.bank.load(self.user, "all")
        self.load_errors = list(result.errors)
        return self.index.sync(result.skills)

    def _in_scope(self, d: Path) -> bool | None:
        """True: a skill folder of this desk; False: not ours; None: a bigger folder."""
        try:
            rel = d.resolve().relative_to(self.bank.root).parts
        except (ValueError, OSError):
            return False
        if not rel or rel[0] not in ("Users", "Common"):
            return False
        if rel[0] == "Users" and len(rel) >= 2 and rel[1] != self.user:
            return False
        return True if len(rel) == 3 else None if len(rel) < 3 else False

    def _refresh_paths(self, paths: Iterable[str | os.PathLike]) -> SyncReport:
        changed: list[Skill] = []
        removed: list[str] = []
        errors = {e.path: e for e in self.load_errors}
        for raw in paths:
            d = skill_dir_of(raw)
            scope = self._in_scope(d)
            if scope is None:  # a user or library folder appeared or vanished
                return self._refresh_all()
            if not scope:
                continue
            f = self.bank.skill_file(d)
            old = self.index.keys_under(d)
            if f is None:
                removed += old
                errors = {p: e for p, e in errors.items() if Path(p).parent != d}
                continue
            try:
                skill = self.bank.read(f)
            except (SkillFormatError, UnsafePathError) as exc:
                removed += old
                errors[str(f)] = LoadError(str(f), getattr(exc, "reason", str(exc)))
                continue
            errors.pop(str(f), None)
            if self.index.indexed_hash(skill_key(skill)) != skill.content_hash:
                changed.append(skill)
        self.load_errors = list(errors.values())
        return self.index.update(changed, removed)

    def is_current(self, path: str | os.PathLike, content_hash: str | None) -> bool:
        """Whether the index already holds this content for this SKILL.md (own writes).

        Waits for a refresh in progress (the app refreshing right after its own write).
        """
        with self._refresh_lock:
            key = self.index.key_for_path(path)
            return key is not None and content_hash is not None and (
                self.index.indexed_hash(key) == content_hash)

    def add_listener(self, fn: Callable[[SyncReport], object]) -> Callable[[], None]:
        """``fn(report)`` after every refresh that changed something; returns unsubscribe."""
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn) if fn in self._listeners else None

    def watch(self, *, debounce: float | None = None, record_hand_edits: bool = True):
        """Start the file watcher (hand edits become searchable within a second)."""
        from engine.bank.watcher import DEBOUNCE_S, SkillWatcher

        if self._watcher is None:
            self._watcher = SkillWatcher(
                self.bank.root, lambda paths: self.refresh(paths), bank=self.bank,
                is_current=self.is_current, record_hand_edits=record_hand_edits,
                debounce=DEBOUNCE_S if debounce is None else debounce,
                accept=lambda p: self._in_scope(skill_dir_of(p)) is not False).start()
        return self._watcher

    # ------------------------------------------------------------------ writes
    # Every write goes through the bank (atomic, versioned, conflict-checked) and reindexes.
    def create(self, skill: Skill, *, source: str = "user") -> Skill:
        """A new skill of this desk's user (a unique folder); returns it as written."""
        written = self.bank.create(skill, self.user, source=source)
        self._reindex(written)
        return written

    def update(self, skill: Skill, *, expected_hash: str | None, source: str = "user") -> Skill:
        """Write a new version of ``skill`` if the file still has ``expected_hash``."""
        written = self.bank.write(skill, expected_hash=expected_hash, source=source)
        self._reindex(written)
        return written

    def revert(self, skill: Skill, to_version: str) -> Skill:
        """A new version whose content is ``to_version``'s."""
        written = self.bank.revert(skill, to_version)
        self._reindex(written)
        return written

    def delete(self, skill: Skill) -> Path:
        """Move the skill to ``.trash/`` (restorable); returns where it went."""
        where = self.bank.delete(skill)
        self._reindex(skill)
        return where

    def restore(self, trashed: str | os.PathLike) -> Skill:
        """Bring a trashed skill back under this desk's user."""
        skill = self.bank.restore(trashed, self.user)
        self._reindex(skill)
        return skill

    def read(self, path: str | os.PathLike) -> Skill:
        """The skill at ``path`` as it is on disk now."""
        return self.bank.read(path)

    def find(self, ref: str) -> Skill:
        """A skill by id, name, title or path; this user's own skills win ties."""
        return self.bank.find(ref, self.user, among=list(self.index.skills.values()))

    def undo(self, event_id: str) -> LearningEvent:
        """Undo one learning event (an add goes to the trash, a merge is reverted); no model."""
        return self.learning.undo(event_id)

    def consolidate(self, plan: Plan, *, merge: MergeFn | None = None,
                    progress: Callable[[int, int], object] | None = None) -> Record:
        """Apply a consolidation plan (``engine.consolidate.make_plan(desk)``): merge each
        cluster into its keeper, the others to the trash; one record, undoable."""
        return apply_plan(self.bank, plan, merge=merge, progress=progress,
                          refresh=self.refresh)

    def undo_consolidation(self, record_id: str | None = None, *,
                           force: bool = False) -> Record:
        """Put back, byte for byte, what a consolidation (default: the latest) changed."""
        return undo_record(self.bank, record_id, force=force, refresh=self.refresh)

    def _reindex(self, skill: Skill) -> None:
        if skill.path is not None:
            self.refresh([Path(skill.path)])

    # ------------------------------------------------------------------ the model
    @property
    def worker(self) -> ModelWorker:
        """The configured model's worker (loaded on first use; assignable for tests/benches)."""
        with self._own_lock:
            if self._worker is None:
                self._worker, self._own_worker = make_worker(self.config.model), True
            return self._worker

    @worker.setter
    def worker(self, value: ModelWorker | None) -> None:
        """Use ``value`` for chat and learning (the desk will not close it)."""
        with self._own_lock:
            old = self._worker if self._own_worker else None
            self._worker, self._own_worker = value, False
            queue = self._learning
        if queue is not None:
            queue.rebind()
        if old is not None and old is not value:
            old.close(wait=False)

    def warm_up(self) -> Job | None:
        """Evaluate the self-filter prompt's fixed part (instructions and examples, ~250
        tokens) at background priority right after the model loads, so its KV snapshot is
        there for the first answer that gets a skill: cold, that answer waited ~8 s more on the
        2-core box (issue 15b); then the same prompt with the line of each of the
        ``PRIMED_SKILLS`` skills used most (the request left empty), kept as prefix snapshots
        (engine/llm/llama_backend.py), so judging one of them evaluates only the request. The
        job (the app calls this after loading the model), or None when the filter does not run
        for this model or these settings, or the backend cannot prefill (only llama.cpp keeps
        KV state)."""
        worker = self.worker
        worker.wait_ready()
        if not (self.config.retrieval.self_filter
                and tiers.policy(tiers.tier_of(worker)).self_filter):
            return None
        if not callable(getattr(worker.backend, "prefill", None)):
            return None
        client = LLMClient(worker, priority=BACKGROUND)
        # empty inputs: the rendered prompt is the fixed part plus a few template tokens
        fixed = client.prompt("filter").render(request="", skills="")
        # each skill with the prompt that judges it (a skill about the user has its own)
        lines = [client.prompt(skill_filter.prompt_for(s)).render(
                     request="", skills=skill_filter.candidate_line(s))
                 for s in self.most_used(PRIMED_SKILLS)]

        def run(b: Any, c: Any) -> int:
            n = b.prefill(fixed, c)
            for messages in lines:
                n = b.prefill(messages, c, kind="prefix")
            return n

        return worker.submit(run, BACKGROUND, kind="warm-up")

    # ------------------------------------------------------------------ learning
    @property
    def learning(self) -> LearningQueue:
        """The background learning queue (its pipeline is built when the first job runs)."""
        with self._own_lock:
            if self._learning is None:
                tag = hashlib.sha256(str(self.bank.root).encode()).hexdigest()[:10]
                self._learning = LearningQueue(
                    self.pipeline, skills=self,
                    log_path=home_dir() / "evolution" / f"{tag}-{self.user}.jsonl")
            return self._learning

    def pipeline(self) -> Pipeline:
        """A learning pipeline on this desk's bank, model (background priority) and index."""
        worker = self.worker
        worker.wait_ready()
        client = LLMClient(worker, priority=BACKGROUND)
        return Pipeline(self.bank, self.user, client, search=self.neighbours,
                        refresh=lambda paths: self.refresh(paths),
                        eta=self._eta())

    def _eta(self) -> float | None:
        """η, where the index scores P(related): the judge's bar for a merge into a skill whose
        task the user was not asking for (engine/learning/judge.py)."""
        p = self.index.params
        return p.threshold if p.relevance and p.threshold > 0 else None

    def ingest(self, messages: list[dict], *, wait: bool = True,
               timeout: float | None = None) -> LearningReport:
        """Learn from a whole conversation now (all its topics); the add/merge/discard report.

        ``wait=False`` queues it and returns a report holding only the job id."""
        return self._report(self.learning.submit(messages, mode="conversation"), wait, timeout)

    def _report(self, job_id: str, wait: bool, timeout: float | None) -> LearningReport:
        """A queued learning job's report: only its id, or (``wait``) the job's when done."""
        return self.learning.result(job_id, timeout) if wait else LearningReport(job_id=job_id)

    def remember(self, messages: list[dict], *, turn_id: str | None = None, wait: bool = False,
                 timeout: float | None = None) -> LearningReport:
        """Learn from the user's last message of ``messages`` because they asked for it
        ("Remember this" on a message; ``/remember`` in ``skilldesk chat``): no model guess
        at whether it lasts, the checks after extraction as always (Pipeline.run's
        "remember" mode). ``messages`` end at that user message or at the reply to it.
        Queued behind the chat like any learning; its events carry ``turn_id`` (a caller
        that follows them picks it before the job can run); ``wait`` returns the report."""
        last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        if last < 0:
            raise SkillDeskError("there is no user message to remember")
        return self._report(self.learning.submit(messages[:last + 2], turn_id, mode="remember"),
                            wait, timeout)

    # ------------------------------------------------------------------ chat
    def chat(self, messages: list[dict], stream: bool = False,
             cancel: CancelToken | None = None, learn: bool = True, *,
             params: GenParams | None = None, plan: bool | None = None,
             top_k: int | None = None,
             self_filter: bool | None = None) -> TurnResult | TurnStream:
        """One turn (engine/chat/turn.py): rewrite, retrieve (planned for complex requests on
        models able to plan), answer; then queued for learning when ``learn`` and the settings
        allow. A TurnResult, or a TurnStream of text chunks when ``stream``. ``cancel`` stops
        every model call of the turn (the rewrite, the plan, the self-filter, the answer).
        ``self_filter``: None follows the settings (``retrieval.self_filter``); the tier
        decides whether the model can run it at all (engine/llm/tiers.py). When
        :meth:`prepare` decided the skills of exactly these messages and the bank has not
        changed since, the turn starts from that decision."""
        with self._own_lock:
            ahead, self._prepared = self._prepared, None
        decided = None
        if ahead is not None:  # the key only where there is something to compare it with
            ahead.cancel()  # its prefill stops within a chunk; what it evaluated stays
            if ahead.decided is not None and ahead.key == self._turn_key(
                    messages, plan, top_k, self_filter):
                decided = ahead.decided
        turn = self._turn(messages, plan=plan, top_k=top_k, self_filter=self_filter,
                          params=params, cancel=cancel, learn=learn, decided=decided)
        return TurnStream(turn) if stream else turn.run()

    def prepare(self, messages: list[dict], *, plan: bool | None = None,
                top_k: int | None = None, self_filter: bool | None = None) -> threading.Thread:
        """Decide the skills of a turn the user is still typing (``messages`` end with the
        draft) and evaluate its prompt into the model's KV cache, on a thread of its own at
        ``PREPARE`` priority (before queued learning, never pre-empting it; the chat pre-empts
        it). When the user sends exactly these messages and the bank has not changed,
        :meth:`chat` starts from this decision: the rewrite check, retrieval and the
        self-filter call are done, and the prompt is evaluated but for what the prefill had
        no time for, so a turn that injects skills starts answering about as soon as one
        that does not. A newer call, or any chat, stops the one before. The app calls it when
        the user pauses typing; the thread is returned for tests and benchmarks."""
        key = self._turn_key(messages, plan, top_k, self_filter)
        ahead = _Prepared(key)
        with self._own_lock:
            old, self._prepared = self._prepared, ahead
        if old is not None:
            old.cancel()

        def work() -> None:
            try:
                turn = self._turn(messages, plan=plan, top_k=top_k, self_filter=self_filter,
                                  cancel=ahead.token, learn=False, priority=PREPARE)
                decided = turn.decide()
                if ahead.token.cancelled:
                    return  # a step was stopped: its answer is not this turn's decision
                ahead.decided = decided
                backend = self.worker.backend
                if not callable(getattr(backend, "prefill", None)):
                    return
                _rendered, msgs = turn.answer_messages(decided)
                job = ahead.submit(lambda: self.worker.submit(
                    lambda b, c: b.prefill(msgs, c, kind="chat"), PREPARE, kind="prepare"))
                if job is not None:
                    job.result()
            except Cancelled:
                pass
            except Exception as exc:  # noqa: BLE001 - a failed guess only costs its time
                log.info("prepare failed: %s", exc)

        t = threading.Thread(target=work, name="skilldesk-prepare", daemon=True)
        t.start()
        return t

    def _turn_key(self, messages: list[dict], plan: bool | None, top_k: int | None,
                  self_filter: bool | None) -> str:
        """What a decision depends on: the messages, the options, the indexed skills, and which
        are disabled or always on (a skill learned, edited, disabled or pinned meanwhile makes
        a prepared decision stale)."""
        msgs = [{"role": m.get("role"), "content": m.get("content")} for m in messages]
        flags = [sorted(self.state.ids_where(f)) for f in ("disabled", "always_on")]
        return json.dumps([msgs, plan, top_k, self_filter, self.index.generation, flags],
                          sort_keys=True, default=str)

    def _turn(self, messages: list[dict], *, plan: bool | None, top_k: int | None,
              self_filter: bool | None, params: GenParams | None = None,
              cancel: CancelToken | None = None, learn: bool = True,
              priority: int = FOREGROUND, decided: Decision | None = None) -> Turn:
        worker = self.worker
        worker.wait_ready()
        tier = tiers.tier_of(worker)
        use_plan = tiers.policy(tier).plan if plan is None else plan

        def retrieve(query: str, k: int | None, client: LLMClient) -> list[SkillHit]:
            if use_plan:
                hits = plan_search(self, query, client, top_k=k).hits
            else:
                hits = self.search(query, k)
            return self.versioned(self.with_always_on(hits, query))

        def on_done(result: TurnResult, convo: list[dict]) -> str | None:
            try:
                self.record_use(result.injected)
            except OSError as exc:  # bookkeeping must never cost the answer
                log.warning("could not record skill usage: %s", exc)
            if not (learn and self.config.learning):
                return None
            return self.learning.submit(convo, turn_id=result.turn_id)

        def confidence(query: str) -> float:  # the rewrite check: plain search, best P(related)
            return max((h.score for h in self.search(query, 1)), default=0.0)

        always = {s.id for s in self.always_on()}

        def judged(hit: SkillHit) -> bool:  # the self-filter never drops an always-on skill
            return hit.skill.id not in always

        use_filter = self.config.retrieval.self_filter if self_filter is None else self_filter
        return Turn(messages, worker=worker, search=retrieve,
                    system_prompt=self.config.model.system_prompt or "", top_k=top_k,
                    params=params, on_done=on_done, tier=tier, cancel=cancel,
                    confidence=confidence, edited=self.user_written_rules,
                    judged=judged if use_filter else None, priority=priority,
                    decided=decided)


class _Prepared:
    """One :meth:`SkillDesk.prepare`: its key, its decision once made, its prefill job."""

    def __init__(self, key: str):
        self.key = key
        self.decided: Decision | None = None
        self.token = CancelToken()  # the turn's: stops its rewrite, plan and filter calls
        self.job: Job | None = None
        self._lock = threading.Lock()

    def cancel(self) -> None:
        """Stop it (its prefill within a chunk: what it evaluated stays in the KV cache)."""
        with self._lock:
            self.token.cancel()
            job = self.job
        if job is not None:
            job.cancel()

    def submit(self, make: Callable[[], Job]) -> Job | None:
        """Start the prefill job unless it was stopped meanwhile."""
        with self._lock:
            if self.token.cancelled:
                return None
            self.job = make()
            return self.job
