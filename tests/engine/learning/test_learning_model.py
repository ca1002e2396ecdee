"""The learning loop on the real bundled model (SmolLM2-135M): a chat turn with an injected
skill, and no junk skill from a one-off chat — with the app's policy for this tiny model and
with every step forced through the model (whose answers are then mostly noise)."""

from __future__ import annotations

import pytest

from bench.learning_scenarios import seed_skill
from engine.desk import SkillDesk
from engine.llm.base import GenParams
from engine.llm.llama_backend import LlamaCppBackend
from engine.llm.registry import resolve
from engine.llm.worker import ModelWorker
from engine.settings import Settings

pytestmark = pytest.mark.model

ONE_OFF = [
    {"role": "user", "content": "Why is the sky always blue during the day but red at sunset?"},
    {"role": "assistant", "content": "Because of Rayleigh scattering: blue light scatters more."},
    {"role": "user", "content": "Write a two-line poem about never giving up."},
    {"role": "assistant", "content": "Fall seven times, stand up eight; the road is long."},
]


@pytest.fixture(scope="module")
def worker(bundled_model_path):
    spec = resolve(str(bundled_model_path))
    w = ModelWorker(LlamaCppBackend(spec, n_threads=2, n_ctx=2048))
    w.wait_ready()
    yield w
    w.close()


@pytest.fixture
def desk(tmp_path, worker):
    d = SkillDesk.open(tmp_path / "bank", config=Settings(), create=True, embedder="use")
    d.worker = worker
    yield d
    d.close()


def test_real_chat_turn_with_an_injected_skill(desk, worker):
    desk.bank.create(seed_skill({
        "name": "Summary with TL;DR first",
        "description": "How the user wants summaries of articles and texts written.",
        "constraints": ["Start summaries with a one-line TL;DR"],
        "triggers": ["summarize this article", "give me a summary"]}), "default")
    desk.refresh()
    r = desk.chat([{"role": "user", "content": "Summarize this article: bees pollinate crops "
                                               "and their numbers are falling."}],
                  learn=False, params=GenParams(max_tokens=16, temperature=0.0, seed=0))
    assert [i.title for i in r.injected] == ["Summary with TL;DR first"]
    assert r.text.strip() and r.usage.completion_tokens > 0
    assert r.model == worker.backend.name and r.finish_reason in ("stop", "length")
    assert r.ttft_s is not None and r.usage.prompt_tokens > 40  # the skill block was sent


@pytest.mark.parametrize("policy", ["tier", "llm"])
def test_one_off_chat_makes_no_skill_on_the_real_model(desk, policy):
    q = desk.learning
    pipe = q.pipeline
    assert pipe.llm.tier == "tiny" and pipe.policy["extract"] == "rule"
    chat = ONE_OFF
    if policy == "llm":  # one window, so one extraction call: the model is slow on 2 cores
        pipe.policy.update(extract="llm", judge="llm", merge="llm")
        chat = ONE_OFF[:2]
    report = desk.ingest(chat, timeout=600)
    assert not report.added and not report.merged, [(a.kind, a.reason) for a in report.actions]
    assert desk.bank.load("default", scope="user").skills == []
    assert all(a.kind in ("discard",) for a in report.actions)
    if policy == "llm":
        assert report.llm_calls >= 1  # the model was asked, and its answer was vetted
