"""``skilldesk bench evolution --mode remember``: the user asks to remember exactly the turns
that hold an expected rule (their evidence), every other turn is a plain chat turn."""

from __future__ import annotations

from bench.evolution import run_scenarios
from bench.learning_scenarios import load_scenarios
from bench.oracle import OracleLLM
from bench.triage import durable_turn
from engine.learning.pipeline import Pipeline
from engine.llm.worker import ModelWorker


def test_bench_evolution_remembers_the_turns_that_hold_an_expected_rule(embedder,
                                                                       monkeypatch):
    sc = next(s for s in load_scenarios("people", split="fresh41")
              if s["id"] == "m41-zh-two-renovation")  # two rules, in two later turns
    seen = []
    real = Pipeline.run

    def spy(self, messages, mode="turn", *args, **kwargs):
        newest = [m["content"] for m in messages if m["role"] == "user"][-1]
        seen.append((durable_turn(sc, newest), mode))
        return real(self, messages, mode, *args, **kwargs)

    monkeypatch.setattr(Pipeline, "run", spy)
    oracle = OracleLLM()
    worker = ModelWorker(oracle)
    try:
        out = run_scenarios(worker, embedder, [sc], policy="tier", mode="remember",
                            oracle=oracle, log=lambda *a: None)
    finally:
        worker.close()
    assert sorted(seen) == [(False, "turn"), (True, "remember"), (True, "remember")], seen
    assert out["score"].passed == 1
