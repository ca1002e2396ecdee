"""The proxy with the real bundled model (SmolLM2), driven with the official ``openai`` client.

One set of desks (tmp bank, bundled GGUF, 2 threads) serves a few apps, each a real uvicorn on
a random loopback port: learning off (most tests), learning on, a tiny queue wait (503s), and
an upstream-mode proxy in front of ``python -m llama_cpp.server``.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

openai = pytest.importorskip("openai")

from engine.bank.skill import Skill  # noqa: E402
from engine.bank.store import SkillBank  # noqa: E402
from engine.settings import ModelSettings, Settings  # noqa: E402
from server import Desks, ServerConfig, ServerThread, create_app  # noqa: E402
from tests.support import LLAMA_SERVER  # noqa: E402

pytestmark = pytest.mark.model
KEY = "test-key-0123456789"
REPORT_Q = "How should I structure my weekly status report for the team?"


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def env(tmp_path_factory, bundled_model_path):
    root = tmp_path_factory.mktemp("srvm")
    bank = SkillBank(root / "bank")
    bank.create(Skill(
        name="weekly-status-report", title="Weekly status report",
        description="Structure weekly status reports for the team in three sections",
        instructions="# Goal\nWrite the weekly status report.\n\n# Constraints & Style\n"
                     "- Use three sections: Progress, Risks, Next week.\n- At most 150 words.\n",
        tags=["report", "weekly"], triggers=["weekly report", "status report"]), "default")
    settings = Settings(model=ModelSettings(model=str(bundled_model_path), n_threads=2,
                                            n_ctx=2048))
    desks = Desks(bank.root, ["default"], settings)
    desks.wait_ready(120)
    servers = {}

    def serve(name: str, **cfg) -> ServerThread:
        cfg.setdefault("learn", False)
        config = ServerConfig(port=0, api_keys={KEY: "default"}, **cfg)
        servers[name] = ServerThread(create_app(desks, config), config).start()
        return servers[name]

    serve("plain")
    serve("learn", learn=True)
    serve("tight", queue_wait_s=0.05)
    serve("patient", queue_wait_s=600)  # timing-free: every request waits its turn
    yield {"desks": desks, "bank": bank, "root": root, "srv": servers, "serve": serve}
    for s in servers.values():
        s.stop()
    desks.close()


def client(srv: ServerThread, timeout: float = 300, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key=KEY, max_retries=0, timeout=timeout,
                         **kw)


def test_non_streaming_completion_has_the_openai_shape_and_real_usage(env):
    c = client(env["srv"]["plain"])
    r = c.chat.completions.create(model="anything", max_tokens=8, temperature=0,
                                  messages=[{"role": "user", "content": REPORT_Q}])
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.model == env["desks"].model_name
    assert r.choices[0].message.role == "assistant"
    assert isinstance(r.choices[0].message.content, str) and r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    u = r.usage
    assert 1 <= u.completion_tokens <= 8 and u.total_tokens == u.prompt_tokens + u.completion_tokens
    # the skill block is in the prompt: far more tokens than the question alone
    backend = env["desks"].model_worker().backend
    assert u.prompt_tokens > backend.count_tokens(REPORT_Q) + 20
    info = r.model_extra["skilldesk"]
    assert [s["name"] for s in info["injected"]] == ["weekly-status-report"]
    assert info["learn"] is False and info["timings"]["retrieve_s"] >= 0


def test_injection_costs_prompt_tokens(env):
    c = client(env["srv"]["plain"])
    with_skill = c.chat.completions.create(model="m", max_tokens=2, temperature=0,
                                           messages=[{"role": "user", "content": REPORT_Q}])
    without = c.chat.completions.create(
        model="m", max_tokens=2, temperature=0,
        messages=[{"role": "user", "content": "What is the capital city of Portugal, please?"}])
    assert without.model_extra["skilldesk"]["injected"] == []
    assert with_skill.usage.prompt_tokens > without.usage.prompt_tokens + 15


def test_streaming_chunks_end_with_usage_and_done(env):
    c = client(env["srv"]["plain"])
    stream = c.chat.completions.create(model="m", max_tokens=8, temperature=0, stream=True,
                                       stream_options={"include_usage": True},
                                       messages=[{"role": "user", "content": REPORT_Q}])
    chunks = list(stream)
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert len({ch.id for ch in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text.strip()
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finishes[-1] in ("stop", "length") and all(f is None for f in finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert 1 <= chunks[-1].usage.completion_tokens <= 8 and chunks[-1].usage.prompt_tokens > 20


def test_raw_sse_ends_with_done(env):
    srv = env["srv"]["plain"]
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    conn.request("POST", "/v1/chat/completions", headers={
        "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        body=json.dumps({"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4,
                         "stream": True}))
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream")
    events = [e for e in r.read().decode().split("\n\n") if e]
    conn.close()
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    last = json.loads(events[-2][6:])
    assert last["choices"][0]["finish_reason"] in ("stop", "length")


def test_models_and_embeddings_through_the_client(env):
    c = client(env["srv"]["plain"])
    assert [m.id for m in c.models.list().data] == [env["desks"].model_name]
    e = c.embeddings.create(model="x", input=["weekly status report", "status report for the "
                                              "week", "a recipe for pancakes"])
    v = np.array([d.embedding for d in e.data])
    assert v.shape[0] == 3 and v.shape[1] == env["desks"].embedder.dim
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-3)
    assert v[0] @ v[1] > v[0] @ v[2]
    assert e.usage.prompt_tokens > 0


def test_path_like_user_names_create_nothing(env):
    root, bank = env["root"], env["bank"]
    before = tree(root)
    c = client(env["srv"]["learn"])
    for evil in ("../../etc", "/tmp/owned", "..", "default/../../x", "CON"):
        r = c.chat.completions.create(
            model="m", max_tokens=2, user=evil, extra_headers={"X-User": evil,
                                                               "OpenAI-User": evil},
            messages=[{"role": "user", "content": "From now on always answer in French."}])
        assert r.choices[0].message.content is not None
    env["desks"].get("default").learning.wait_idle(120)
    new = tree(root) - before
    # only the bank's own places may change (a learned skill, its history, caches, locks)
    allowed = ("bank/Users/default/", "bank/.history", "bank/vectors", "bank/.locks",
               "bank/Users/default")
    assert all(p.startswith(allowed) for p in new), sorted(new)
    assert not any("etc" in Path(p).parts or "owned" in p for p in tree(root))
    assert sorted(p.name for p in (bank.root / "Users").iterdir()) == ["default"]


def test_learning_is_on_unless_the_request_turns_it_off(env):
    desk = env["desks"].get("default")
    c = client(env["srv"]["learn"])
    def queued() -> int:
        return sum(1 for e in desk.learning.events if e.kind == "queued")

    n0 = queued()
    r = c.chat.completions.create(model="m", max_tokens=2, messages=[
        {"role": "user", "content": "Always put the risks first in my weekly report."}])
    assert r.model_extra["skilldesk"]["learn"] is True
    assert queued() == n0 + 1
    r = c.chat.completions.create(model="m", max_tokens=2, extra_body={
        "skilldesk": {"learn": False}}, messages=[
        {"role": "user", "content": "Always put the risks first in my weekly report."}])
    assert r.model_extra["skilldesk"]["learn"] is False
    assert queued() == n0 + 1
    plain = client(env["srv"]["plain"])  # a server started with learning off
    plain.chat.completions.create(model="m", max_tokens=2, messages=[
        {"role": "user", "content": "Always put the risks first in my weekly report."}])
    assert queued() == n0 + 1


def post(srv: ServerThread, path: str, body: dict) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    r = conn.getresponse()
    out = json.loads(r.read())
    conn.close()
    return r.status, out


def test_remember_learns_the_last_user_message_and_says_what_it_became(env):
    """POST /v1/skills/remember (the app's Remember this): the skill it wrote, in the answer
    and in the bank; refused on a server that does not learn, and without a user message."""
    bank = env["bank"]
    before = {s.id for s in bank.load("default", scope="user").skills}
    msgs = [{"role": "user", "content": "Always end meeting notes with a list of owners."},
            {"role": "assistant", "content": "Sure."}]
    status, out = post(env["srv"]["learn"], "/v1/skills/remember", {"messages": msgs})
    assert status == 200, out
    assert out["done"] is True and out["job_id"]
    [written] = [a for a in out["data"] if a["kind"] in ("add", "merge")]
    new = {s.id: s for s in bank.load("default", scope="user").skills}
    assert written["skill"]["id"] in new
    assert "owner" in new[written["skill"]["id"]].instructions.lower()
    assert written["skill"]["id"] not in before or written["kind"] == "merge"
    status, out = post(env["srv"]["plain"], "/v1/skills/remember", {"messages": msgs})
    assert status == 403 and out["error"]["code"] == "learning_off"
    status, out = post(env["srv"]["learn"], "/v1/skills/remember",
                       {"messages": [{"role": "assistant", "content": "Hello"}]})
    assert status == 400 and out["error"]["param"] == "messages"


def test_concurrent_requests_are_serialised_and_all_answered(env):
    c = client(env["srv"]["patient"], timeout=900)
    results, errors = [], []

    def one(i: int) -> None:
        try:
            r = c.chat.completions.create(model="m", max_tokens=4, stream=i % 2 == 0,
                                          messages=[{"role": "user", "content": f"Count to {i}"}])
            text = "".join(ch.choices[0].delta.content or "" for ch in r if ch.choices) \
                if i % 2 == 0 else r.choices[0].message.content
            results.append(text)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == [] and len(results) == 6


def _first_content(stream) -> str:
    for ch in stream:
        if ch.choices and ch.choices[0].delta.content:
            return ch.choices[0].delta.content
    raise AssertionError("the stream ended without content")


def test_a_busy_model_gives_503_with_retry_after(env):
    srv = env["srv"]["tight"]
    worker = env["desks"].model_worker()
    long = client(srv, timeout=900).chat.completions.create(
        model="m", max_tokens=1500, stream=True,
        messages=[{"role": "user", "content": "Write a long story about a dragon."}])
    try:
        assert _first_content(long)  # the model is generating for this request now
        with pytest.raises(openai.APIStatusError) as exc:
            client(srv).chat.completions.create(model="m", max_tokens=2,
                                                messages=[{"role": "user", "content": "hi"}])
        assert exc.value.status_code == 503
        assert int(exc.value.response.headers["Retry-After"]) >= 1
        assert exc.value.body["code"] == "model_busy"
    finally:
        long.close()
    assert worker.wait_idle(120)


def test_client_disconnect_stops_the_generation(env):
    srv = env["srv"]["plain"]
    worker = env["desks"].model_worker()
    stream = client(srv, timeout=900).chat.completions.create(
        model="m", max_tokens=1500, stream=True,
        messages=[{"role": "user", "content": "Write a very long essay."}])
    assert _first_content(stream)  # generation is under way
    t0 = time.monotonic()
    stream.close()  # the client goes away mid-answer
    assert worker.wait_idle(120), "the model kept generating for a client that left"
    left = time.monotonic() - t0
    ok = client(srv).chat.completions.create(model="m", max_tokens=2,
                                             messages=[{"role": "user", "content": "hi"}])
    assert ok.choices[0].message.content is not None
    assert left < 120


# --- upstream mode: the proxy in front of llama_cpp.server --------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def upstream(bundled_model_path, tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("up") / "upstream.log"
    proc = subprocess.Popen(
        [*LLAMA_SERVER, "--model", str(bundled_model_path),
         "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2",
         "--n_threads_batch", "2", "--n_ctx", "2048", "--verbose", "False"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v1/models")
            if c.getresponse().status == 200:
                break
        except OSError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail(f"llama_cpp.server did not start: {log.read_text()[-2000:]}")
    yield f"http://127.0.0.1:{port}/v1"
    proc.terminate()
    proc.wait(20)


def test_upstream_mode_proxies_to_an_openai_server(env, upstream, tmp_path):
    bank = SkillBank(tmp_path / "ubank")
    bank.create(Skill(name="weekly-status-report", title="Weekly status report",
                      description="Structure weekly status reports in three sections",
                      instructions="# Goal\nReports.\n\n# Constraints & Style\n- Three parts.\n"),
                "default")
    settings = Settings(model=ModelSettings(backend="openai", base_url=upstream,
                                            api_model="smol"))
    # an upstream server's model is of tier "unknown", which runs the self-filter; this one is
    # the 135M test model, whose yes/no is chance: the test is about proxying, not filtering
    settings.retrieval.self_filter = False
    desks = Desks(bank.root, ["default"], settings)
    config = ServerConfig(port=0, learn=False)
    try:
        desks.wait_ready(30)
        with ServerThread(create_app(desks, config), config) as srv:
            c = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0)
            r = c.chat.completions.create(model="m", max_tokens=6, temperature=0,
                                          messages=[{"role": "user", "content": REPORT_Q}])
            assert r.choices[0].message.content
            assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 20
            assert [s["name"] for s in r.model_extra["skilldesk"]["injected"]] == [
                "weekly-status-report"]
            chunks = list(c.chat.completions.create(
                model="m", max_tokens=6, stream=True, messages=[{"role": "user",
                                                                 "content": REPORT_Q}]))
            assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    finally:
        desks.close()


def test_skilldesk_serve_command_end_to_end(bundled_model_path, tmp_path):
    """`skilldesk serve` as a user starts it: a subprocess on a free loopback port."""
    port = _free_port()
    env = {**__import__("os").environ, "SKILLDESK_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "serve", "--bank", str(tmp_path / "bank"),
         "--port", str(port), "--api-key", KEY, "--model", str(bundled_model_path),
         "--threads", "2", "--no-learn", "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
        cwd=Path(__file__).resolve().parents[2])
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "skilldesk serve did not come up"
            time.sleep(0.3)
        bad = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong-key-123",
                            max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        good = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY,
                             max_retries=0, timeout=300)
        assert good.models.list().data[0].id
        r = good.chat.completions.create(model="m", max_tokens=3,
                                         messages=[{"role": "user", "content": "Hello!"}])
        assert r.usage.completion_tokens >= 1 and r.model_extra["skilldesk"]["learn"] is False
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode in (0, -15)
