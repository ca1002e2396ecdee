"""What ``SkillDesk`` gains from the learning loop: ``worker``, ``chat``, ``evolution``, ``ingest``.

engine/desk.py stays about skills and retrieval; its ``chat``/``ingest`` methods and its
``worker``/``evolution`` properties delegate here.

- ``desk.worker``: the :class:`~engine.llm.worker.ModelWorker` of the configured model, built on
  first use from ``desk.config.model`` (never a stand-in: no model, no chat). Tests and
  benchmarks may assign their own worker; a worker the desk did not build is not closed by it.
- ``desk.evolution``: the :class:`~engine.evolution.queue.EvolutionQueue` (events appended to
  ``$SKILLDESK_HOME/evolution/<bank>-<user>.jsonl``), its pipeline searching the user's skills
  with the desk's hybrid retrieval and reindexing what it writes.
- ``desk.chat``: one :class:`~engine.turn.Turn` (plan-aware retrieval for complex requests on
  models able to plan), then the conversation queued for learning when ``learn`` and the
  ``learning`` setting allow.
- ``desk.ingest``: the same pipeline on a whole conversation, now.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from .evolution.client import LLMClient, tier_of
from .evolution.events import EvolutionReport
from .evolution.pipeline import Neighbour, Pipeline
from .evolution.queue import EvolutionQueue
from .llm.base import CancelToken, GenParams
from .llm.worker import BACKGROUND, ModelWorker
from .settings import home_dir
from .turn import Turn, TurnResult, TurnStream

_lock = threading.Lock()


def _state(desk: Any) -> dict[str, Any]:
    st = desk.__dict__.get("_learning")
    if st is None:
        with _lock:
            st = desk.__dict__.setdefault("_learning", {"worker": None, "own_worker": False,
                                                        "queue": None})
    return st


# ------------------------------------------------------------------------------ the model
def get_worker(desk: Any) -> ModelWorker:
    st = _state(desk)
    with _lock:
        if st["worker"] is None:
            from .llm.factory import make_worker

            st["worker"], st["own_worker"] = make_worker(desk.config.model), True
        return st["worker"]


def set_worker(desk: Any, worker: ModelWorker | None) -> None:
    """Use ``worker`` for chat and learning (the desk will not close it)."""
    st = _state(desk)
    with _lock:
        old = st["worker"] if st["own_worker"] else None
        st["worker"], st["own_worker"] = worker, False
        queue = st["queue"]
    if queue is not None:
        queue.rebind()
    if old is not None and old is not worker:
        old.close(wait=False)


# ------------------------------------------------------------------------------ learning
def neighbour_search(desk: Any):
    """The judge's search: the user's own skills by hybrid score, no η threshold."""

    def search(query: str, k: int) -> list[Neighbour]:
        index = getattr(desk, "index", None)
        if index is not None and hasattr(index, "params"):  # no η, no relative window
            params = index.params.with_(threshold=0.0, window=None)
            hits = index.search(query or "", k, scope="user", params=params)
        else:
            hits = desk.search(query, k, scope="user", threshold=0.0)
        return [Neighbour(h.skill, h.score, h.dense, h.lexical) for h in hits]

    return search


def make_pipeline(desk: Any) -> Pipeline:
    worker = get_worker(desk)
    worker.wait_ready()
    client = LLMClient(worker, priority=BACKGROUND, tier=tier_of(worker))
    return Pipeline(desk.bank, desk.user, client, search=neighbour_search(desk),
                    refresh=lambda paths: desk.refresh(paths))


def log_path(desk: Any):
    tag = hashlib.sha256(str(desk.bank.root).encode()).hexdigest()[:10]
    return home_dir() / "evolution" / f"{tag}-{desk.user}.jsonl"


class DeskEvolutionQueue(EvolutionQueue):
    """The desk's queue: its pipeline is (re)built from the desk's current worker."""

    def __init__(self, desk: Any):
        self._desk = desk
        super().__init__(lambda: make_pipeline(desk), log_path=log_path(desk))

    def rebind(self) -> None:
        """The desk's worker changed: build the pipeline again before the next job."""
        self._pipeline = None


def get_evolution(desk: Any) -> EvolutionQueue:
    st = _state(desk)
    with _lock:
        if st["queue"] is None:
            st["queue"] = DeskEvolutionQueue(desk)
        return st["queue"]


def ingest(desk: Any, messages: list[dict], wait: bool = True,
           timeout: float | None = None) -> EvolutionReport:
    """Run the learning pipeline on a whole conversation (all its topics)."""
    queue = get_evolution(desk)
    job_id = queue.submit(messages, mode="conversation")
    if not wait:
        return EvolutionReport(job_id=job_id)
    return queue.result(job_id, timeout)


# ------------------------------------------------------------------------------ chat
def chat(desk: Any, messages: list[dict], stream: bool = False,
         cancel: CancelToken | None = None, learn: bool = True,
         params: GenParams | None = None, plan: bool | None = None,
         top_k: int | None = None) -> TurnResult | TurnStream:
    """One foreground turn (see engine/turn.py); queued for learning afterwards."""
    worker = get_worker(desk)
    worker.wait_ready()
    tier = tier_of(worker)
    use_plan = plan if plan is not None else tier in ("capable", "unknown")

    def search(query: str, k: int | None) -> list[Any]:
        if use_plan:
            from .plan import plan_search

            client = LLMClient(worker, priority=0, tier=tier)  # FOREGROUND
            return plan_search(desk, query, client, top_k=k).hits
        return desk.search(query, k)

    def on_done(result: TurnResult, convo: list[dict]) -> str | None:
        if not (learn and getattr(desk.config, "learning", True)):
            return None
        return get_evolution(desk).submit(convo, turn_id=result.turn_id)

    system = getattr(getattr(desk.config, "model", None), "system_prompt", "") or ""
    turn = Turn(messages, worker=worker, search=search, system_prompt=system, top_k=top_k,
                params=params, on_done=on_done, tier=tier, cancel=cancel)
    return TurnStream(turn) if stream else turn.run()


def close(desk: Any) -> None:
    st = desk.__dict__.get("_learning")
    if not st:
        return
    if st["queue"] is not None:
        st["queue"].close()
    if st["worker"] is not None and st["own_worker"]:
        st["worker"].close(wait=False)
