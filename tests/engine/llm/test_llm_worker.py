"""ModelWorker scheduling: priorities, pre-emption, cancellation, no overlapping inferences.

A probe backend stands in for the model (this tests the worker's logic, not a model): it emits
one token every few milliseconds, honours the cancel token between tokens, and records how many
calls are inside it at once and in which order calls started.
"""

from __future__ import annotations

import threading
import time

import pytest

from engine.errors import Cancelled, ModelError, StructuredOutputError
from engine.llm.base import ChatResult, GenParams, Usage
from engine.llm.worker import BACKGROUND, FOREGROUND, PREPARE, ModelWorker


class ProbeBackend:
    name = "probe"
    context_length = 1024

    def __init__(self, delay: float = 0.005):
        self.delay = delay
        self.inside = 0
        self.max_inside = 0
        self.started: list[str] = []
        self.lock = threading.Lock()
        self.last_result: ChatResult | None = None
        self.closed = False

    def _enter(self, tag: str) -> None:
        with self.lock:
            self.inside += 1
            self.max_inside = max(self.max_inside, self.inside)
            self.started.append(tag)

    def _exit(self) -> None:
        with self.lock:
            self.inside -= 1

    def stream_chat(self, messages, params=None, cancel=None):
        n = (params or GenParams()).max_tokens or 10
        tag = messages[-1]["content"]
        self._enter(tag)
        result = ChatResult(text="", usage=Usage(1, 0), finish_reason="length")
        self.last_result = result
        try:
            for i in range(n):
                if cancel is not None and cancel.cancelled:
                    result.finish_reason = "cancelled"
                    return
                time.sleep(self.delay)
                result.text += f"{tag}{i} "
                result.usage.completion_tokens += 1
                yield f"{tag}{i} "
        finally:
            self._exit()

    def chat(self, messages, params=None, cancel=None):
        for _ in self.stream_chat(messages, params, cancel):
            pass
        return self.last_result

    def structured(self, messages, schema, params=None, cancel=None):
        result = self.chat(messages, params, cancel)
        if result.finish_reason == "cancelled":
            raise Cancelled("stopped")
        if messages[-1]["content"] == "bad":
            raise StructuredOutputError("not JSON")
        return {"tag": messages[-1]["content"], "tokens": result.usage.completion_tokens}

    def count_tokens(self, text):
        return len(text.split())

    def close(self):
        self.closed = True


def msg(tag: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": tag}]


@pytest.fixture
def probe():
    backend = ProbeBackend()
    worker = ModelWorker(backend)
    yield backend, worker
    worker.close()


def test_never_two_inferences_at_once(probe):
    backend, worker = probe
    jobs = []

    def submitter(k: int) -> None:
        for i in range(5):
            prio = FOREGROUND if (i + k) % 2 else BACKGROUND
            jobs.append(worker.submit_chat(msg(f"t{k}-{i}"), GenParams(max_tokens=3), prio))

    threads = [threading.Thread(target=submitter, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for job in jobs:
        assert job.result(timeout=10).finish_reason == "length"
    assert backend.max_inside == 1
    assert len(backend.started) == 20


def test_foreground_runs_before_queued_background(probe):
    backend, worker = probe
    gate = threading.Event()
    blocker = worker.submit(lambda b, c: gate.wait(5), FOREGROUND)  # hold the worker
    bg = [worker.submit_chat(msg(f"bg{i}"), GenParams(max_tokens=2), BACKGROUND)
          for i in range(3)]
    fg = [worker.submit_chat(msg(f"fg{i}"), GenParams(max_tokens=2), FOREGROUND)
          for i in range(2)]
    gate.set()
    for job in [blocker, *bg, *fg]:
        job.result(timeout=10)
    assert backend.started == ["fg0", "fg1", "bg0", "bg1", "bg2"]


def test_running_background_job_is_preempted_and_requeued(probe):
    backend, worker = probe
    bg = worker.submit_structured(msg("bg"), {"type": "object"}, GenParams(max_tokens=200))
    while not backend.started:
        time.sleep(0.001)
    t0 = time.perf_counter()
    fg = worker.submit_chat(msg("fg"), GenParams(max_tokens=3), FOREGROUND)
    assert fg.result(timeout=5).text == "fg0 fg1 fg2 "
    assert time.perf_counter() - t0 < 0.5  # it did not wait for 200 background tokens
    assert bg.result(timeout=10) == {"tag": "bg", "tokens": 200}  # restarted, then finished
    assert bg.preempted == 1
    assert backend.started == ["bg", "fg", "bg"]
    assert backend.max_inside == 1


def test_a_prepared_turn_goes_before_learning_without_preempting_it(probe):
    """PREPARE (a turn the user is still typing): before queued background work, never
    pre-empting a running background job (a pause in typing must not restart learning); a chat
    pre-empts it."""
    backend, worker = probe
    bg = worker.submit_chat(msg("bg"), GenParams(max_tokens=40), BACKGROUND)
    while not backend.started:
        time.sleep(0.001)
    queued = worker.submit_chat(msg("bq"), GenParams(max_tokens=2), BACKGROUND)
    prep = worker.submit_chat(msg("prep"), GenParams(max_tokens=200), PREPARE)
    assert bg.result(timeout=10).finish_reason == "length" and bg.preempted == 0
    while backend.started[-1] != "prep":
        time.sleep(0.001)
    fg = worker.submit_chat(msg("fg"), GenParams(max_tokens=2), FOREGROUND)
    fg.result(timeout=5)
    prep.result(timeout=10)
    queued.result(timeout=10)
    assert prep.preempted == 1
    assert backend.started == ["bg", "prep", "fg", "prep", "bq"]


def test_foreground_does_not_preempt_foreground(probe):
    backend, worker = probe
    first = worker.submit_chat(msg("a"), GenParams(max_tokens=20), FOREGROUND)
    while not backend.started:
        time.sleep(0.001)
    second = worker.submit_chat(msg("b"), GenParams(max_tokens=2), FOREGROUND)
    assert first.result(timeout=5).finish_reason == "length"
    assert second.result(timeout=5).finish_reason == "length"
    assert first.preempted == 0 and backend.started == ["a", "b"]


def test_stream_and_stop_within_one_token(probe):
    backend, worker = probe
    stream = worker.stream_chat(msg("s"), GenParams(max_tokens=500))
    got = []
    for chunk in stream:
        got.append(chunk)
        if len(got) == 3:
            stream.cancel()
    assert stream.result is not None and stream.result.finish_reason == "cancelled"
    assert 3 <= len(got) <= 4  # at most the token already in flight
    assert stream.result.usage.completion_tokens <= 4
    # the worker is fine afterwards
    assert worker.submit_chat(msg("n"), GenParams(max_tokens=2)).result(5).text == "n0 n1 "


def test_breaking_out_of_a_stream_stops_the_job(probe):
    backend, worker = probe
    stream = worker.stream_chat(msg("x"), GenParams(max_tokens=500))
    for i, _ in enumerate(stream):
        if i == 1:
            break
    result = stream.job.result(timeout=5)
    assert result.finish_reason == "cancelled" and stream.job.status == "cancelled"
    assert result.usage.completion_tokens < 10


def test_cancel_before_start_and_structured_cancel(probe):
    backend, worker = probe
    gate = threading.Event()
    worker.submit(lambda b, c: gate.wait(5), FOREGROUND)
    chat = worker.submit_chat(msg("never"), GenParams(max_tokens=2))
    structured = worker.submit_structured(msg("never2"), {"type": "object"})
    chat.cancel()
    structured.cancel()
    gate.set()
    assert chat.result(timeout=5).finish_reason == "cancelled"
    with pytest.raises(Cancelled):
        structured.result(timeout=5)
    worker.wait_idle(5)
    assert "never" not in backend.started and "never2" not in backend.started


def test_errors_reach_the_caller_and_the_worker_survives(probe):
    backend, worker = probe
    with pytest.raises(StructuredOutputError):
        worker.submit_structured(msg("bad"), {"type": "object"}).result(timeout=5)

    def broken(_chunk):
        raise RuntimeError("UI died")

    job = worker.submit_chat(msg("c"), GenParams(max_tokens=50), on_token=broken)
    with pytest.raises(RuntimeError, match="UI died"):
        job.result(timeout=5)
    assert worker.submit_chat(msg("ok"), GenParams(max_tokens=1)).result(5).text == "ok0 "


def test_idle_event_and_timeout(probe):
    backend, worker = probe
    assert worker.wait_idle(2)
    job = worker.submit_chat(msg("w"), GenParams(max_tokens=40))
    assert not worker.idle.is_set()
    with pytest.raises(TimeoutError):
        job.result(timeout=0.01)
    assert worker.wait_idle(5) and job.done() and worker.pending == 0


def test_close_cancels_and_closes_backend():
    backend = ProbeBackend()
    worker = ModelWorker(backend)
    running = worker.submit_chat(msg("r"), GenParams(max_tokens=10_000))
    queued = worker.submit_structured(msg("q"), {"type": "object"})
    while not backend.started:
        time.sleep(0.001)
    worker.close()
    assert running.result(timeout=5).finish_reason == "cancelled"
    with pytest.raises(Cancelled):
        queued.result(timeout=5)
    assert backend.closed
    with pytest.raises(ModelError, match="closed"):
        worker.submit_chat(msg("late"))


def test_factory_load_error_is_reported_to_jobs():
    def factory():
        raise ModelError("/x/model.gguf: truncated GGUF file")

    worker = ModelWorker(factory)
    with pytest.raises(ModelError, match="truncated"):
        worker.wait_ready(5)
    with pytest.raises(ModelError, match="truncated"):
        worker.submit_chat(msg("a")).result(timeout=5)
    worker.close()


def test_closing_the_desk_waits_for_a_prompt_evaluation_the_cancel_cannot_stop(
        tmp_path, monkeypatch, embedder):
    """A prefill (the warm-up) runs to its end inside llama.cpp whatever the cancel token
    says; the desk's close must not return while it runs (a process that then exited crashed in
    it: SIGSEGV at the app's exit)."""
    import engine.desk as desk_module
    from engine.desk import SkillDesk
    from engine.settings import Settings

    backend = ProbeBackend()
    monkeypatch.setattr(desk_module, "make_worker", lambda settings: ModelWorker(backend))
    desk = SkillDesk.open(tmp_path / "bank", user="default", config=Settings(), create=True,
                          embedder=embedder)
    started, done = threading.Event(), threading.Event()

    def prefill(b, cancel):  # ignores the cancel token, like one llama_eval call
        started.set()
        time.sleep(0.5)
        done.set()

    desk.worker.submit(prefill, BACKGROUND, kind="warm-up")
    assert started.wait(5)
    desk.close()
    assert done.is_set() and backend.closed  # the job ended, then the backend was closed


EXIT_CHILD = """
import sys, time
from engine.llm.worker import BACKGROUND, ModelWorker
from tests.engine.llm.test_llm_worker import ProbeBackend

def prefill(b, cancel):  # ignores the cancel token, like one llama_eval call
    print("started", flush=True)
    time.sleep(1.0)
    print("ended", flush=True)

worker = ModelWorker(ProbeBackend())
worker.submit(prefill, BACKGROUND, kind="warm-up")
time.sleep(0.3)
sys.exit(0)  # never closed: the interpreter exits while the job runs
"""


def test_the_interpreter_does_not_exit_while_a_model_call_runs():
    """The worker's thread is a daemon, so nothing else stops the process from tearing down
    while llama.cpp is inside a prompt evaluation: the app crashed so (SIGSEGV in Qt's exit
    handlers, the model thread still decoding) when it was closed right after loading."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", EXIT_CHILD], cwd=root, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["started", "ended"], out.stdout + out.stderr
