"""The proxy without a chat model: a real ``skilldesk serve`` app (real desks, real bank, real
uvicorn on a random loopback port) driven with raw HTTP for bad input, auth and skill endpoints.

Chat requests here are all refused before the model would run; the model tests live in
tests/test_server_model.py.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
from pathlib import Path
from urllib.parse import quote

import pytest

from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.settings import Settings
from server import Desks, ServerConfig, ServerThread, create_app
from server.gate import Busy, ModelGate

KEY_A, KEY_B = "key-alice-0123456789", "key-bob-9876543210"


def make_skill(title: str, description: str, rule: str) -> Skill:
    return Skill(name=title, title=title, description=description,
                 instructions=f"# Goal\n{description}\n\n# Constraints & Style\n- {rule}\n",
                 tags=["test"])


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Two users (alice, bob) with their own keys; a Common library; one skill with history."""
    root = tmp_path_factory.mktemp("srv")
    bank = SkillBank(root / "bank")
    a1 = bank.create(make_skill("Weekly report format", "Write weekly reports in three parts",
                                "Always use the sections Progress, Risks, Next week."), "alice")
    a1v2 = bank.write(a1.copy(instructions=a1.instructions + "- Keep it under 200 words.\n"),
                      expected_hash=a1.content_hash)
    bank.create(make_skill("Python docstrings", "Write numpy-style docstrings for Python code",
                           "Document every parameter with its type."), "alice")
    bank.create(make_skill("Bob's SQL style", "Format SQL queries with uppercase keywords",
                           "Put each clause on its own line."), "bob")
    common = bank.common_dir / "starter" / "polite-email"
    common.mkdir(parents=True)
    (common / "SKILL.md").write_text(
        "---\nname: polite-email\ndescription: Write short polite emails to colleagues\n---\n"
        "# Goal\nWrite short polite emails.\n\n# Constraints & Style\n- Greet by name.\n",
        encoding="utf-8")
    config = ServerConfig(port=0, api_keys={KEY_A: "alice", KEY_B: "bob"}, learn=False,
                          max_body_bytes=100_000)
    desks = Desks(bank.root, config.users, Settings(), preload=False)  # no chat here
    srv = ServerThread(create_app(desks, config), config).start()
    yield {"srv": srv, "bank": bank, "a1": a1v2, "root": root}
    srv.stop()
    desks.close()


def call(srv, method: str, path: str, body=None, key: str | None = KEY_A,
         headers: dict | None = None, raw: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = f"Bearer {key}"
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers=h)
    r = conn.getresponse()
    payload = r.read()
    conn.close()
    try:
        return r.status, json.loads(payload), r
    except ValueError:
        return r.status, payload, r


def assert_openai_error(status: int, body: dict, expected: int) -> dict:
    assert status == expected, body
    assert set(body) == {"error"}
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and "code" in err
    return err


CHAT = "/v1/chat/completions"
USER_MSG = [{"role": "user", "content": "hello"}]


# --- bad input: raw HTTP ------------------------------------------------------------------------
@pytest.mark.parametrize("raw,code", [
    (b"{not json", "invalid_json"),
    (b'{"messages": [{"role": "user", "content": "hi"}]', "invalid_json"),  # truncated
    (b"[1, 2, 3]", "invalid_json"),
    (b"", "invalid_json"),
    (b"\xff\xfe\x00garbage", "invalid_json"),
])
def test_malformed_json_is_a_clear_400(server, raw, code):
    status, body, _ = call(server["srv"], "POST", CHAT, raw=raw)
    err = assert_openai_error(status, body, 400)
    assert err["code"] == code and err["type"] == "invalid_request_error"


@pytest.mark.parametrize("payload,param", [
    ({"messages": []}, "messages"),
    ({}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": 42}]}, "messages.0.content"),
    ({"messages": USER_MSG, "max_tokens": 0}, "max_tokens"),
    ({"messages": USER_MSG, "max_tokens": 10**9}, "max_tokens"),
    ({"messages": USER_MSG, "temperature": 7}, "temperature"),
    ({"messages": USER_MSG, "n": 3}, "n"),
    ({"messages": USER_MSG, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"messages": USER_MSG, "tools": [{"type": "function"}]}, "tools"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages.0.content"),
    ({"messages": [{"role": "assistant", "content": "only me"}]}, "messages"),
    ({"messages": USER_MSG, "stream": "yes please"}, "stream"),
])
def test_bad_fields_are_400_naming_the_field(server, payload, param):
    status, body, _ = call(server["srv"], "POST", CHAT, payload)
    err = assert_openai_error(status, body, 400)
    assert err["param"] == param, err


def test_wrong_content_type_says_so(server):
    status, body, _ = call(server["srv"], "POST", CHAT, raw=b"hello",
                           headers={"Content-Type": "text/plain"})
    err = assert_openai_error(status, body, 400)
    assert "application/json" in err["message"]


def test_huge_body_is_413_and_the_server_lives_on(server):
    srv = server["srv"]
    huge = json.dumps({"messages": [{"role": "user", "content": "x" * 300_000}]}).encode()
    status, body, _ = call(srv, "POST", CHAT, raw=huge)
    assert assert_openai_error(status, body, 413)["code"] == "request_too_large"
    # chunked (no Content-Length): counted while reading
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    conn.request("POST", CHAT, body=iter([huge[i:i + 65536] for i in range(0, len(huge), 65536)]),
                 headers={"Content-Type": "application/json",
                          "Authorization": f"Bearer {KEY_A}"}, encode_chunked=True)
    r = conn.getresponse()
    assert r.status == 413 and json.loads(r.read())["error"]["code"] == "request_too_large"
    conn.close()
    assert call(srv, "GET", "/health")[0] == 200


def test_embeddings_input_limits(server):
    for bad in ({"input": []}, {"input": [""]}, {"input": 5}, {"input": ["x"] * 1000}):
        status, body, _ = call(server["srv"], "POST", "/v1/embeddings", bad)
        assert_openai_error(status, body, 400)


# --- auth -------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", [None, "wrong-key-0000000000", KEY_A[:-1], KEY_A + "x", ""])
def test_missing_or_wrong_key_is_401_everywhere(server, key):
    for method, path, body in [("GET", "/v1/models", None), ("GET", "/v1/skills", None),
                               ("POST", CHAT, {"messages": USER_MSG}),
                               ("POST", "/v1/embeddings", {"input": "x"}),
                               ("GET", "/v1/skills/search?q=report", None)]:
        status, payload, r = call(server["srv"], method, path, body, key=key)
        err = assert_openai_error(status, payload, 401)
        assert err["code"] == "invalid_api_key"
        assert r.getheader("WWW-Authenticate") == "Bearer"


def test_wrong_scheme_is_401(server):
    status, body, _ = call(server["srv"], "GET", "/v1/models", key=None,
                           headers={"Authorization": f"Basic {KEY_A}"})
    assert_openai_error(status, body, 401)


def test_health_needs_no_key_and_says_little(server):
    status, body, _ = call(server["srv"], "GET", "/health", key=None)
    assert status == 200 and body["status"] == "ok"
    assert "bank" not in json.dumps(body).lower()


def test_models_lists_one_model(server):
    status, body, _ = call(server["srv"], "GET", "/v1/models")
    assert status == 200 and body["object"] == "list" and len(body["data"]) == 1
    assert body["data"][0]["object"] == "model" and body["data"][0]["id"]


# --- identity -----------------------------------------------------------------------------------
def test_each_key_sees_only_its_users_skills(server):
    srv = server["srv"]
    _, alice, _ = call(srv, "GET", "/v1/skills?scope=user", key=KEY_A)
    _, bob, _ = call(srv, "GET", "/v1/skills?scope=user", key=KEY_B)
    assert {s["title"] for s in alice["data"]} == {"Weekly report format", "Python docstrings"}
    assert {s["title"] for s in bob["data"]} == {"Bob's SQL style"}
    assert all(s["owner"] == "alice" and s["path"].startswith("Users/alice/")
               for s in alice["data"])
    status, body, _ = call(srv, "GET", "/v1/skills/" + quote("Bob's SQL style"), key=KEY_A)
    assert_openai_error(status, body, 404)


@pytest.mark.parametrize("evil", ["../../etc", "/etc", "..", "bob", "alice/../bob", "CON",
                                  "a\x00b"])
def test_request_cannot_choose_the_user(server, evil):
    """user fields, query parameters and headers are ignored: the key decides."""
    srv, bank = server["srv"], server["bank"]
    before = tree(bank.root.parent)
    headers = {"X-User": evil.replace("\x00", ""), "OpenAI-User": evil.replace("\x00", ""),
               "X-SkillDesk-User": evil.replace("\x00", "")}
    q = evil.replace("\x00", "%00")
    status, body, _ = call(srv, "GET", f"/v1/skills?scope=user&user={q}", headers=headers)
    assert status == 200
    assert {s["owner"] for s in body["data"]} == {"alice"}
    status, body, _ = call(srv, "POST", "/v1/embeddings", {"input": "hello", "user": evil},
                           headers=headers)
    assert status == 200 and len(body["data"][0]["embedding"]) > 100
    assert tree(bank.root.parent) == before
    assert not (bank.root.parent / "etc").exists()


# --- skill endpoints ----------------------------------------------------------------------------
def test_list_includes_common_and_reports_scope(server):
    status, body, _ = call(server["srv"], "GET", "/v1/skills")
    assert status == 200
    by_title = {s["title"]: s for s in body["data"]}
    assert by_title["polite-email"]["scope"] == "common"
    assert by_title["Weekly report format"]["scope"] == "user"
    assert body["errors"] == []
    status, body, _ = call(server["srv"], "GET", "/v1/skills?scope=everything")
    assert_openai_error(status, body, 400)


def test_get_by_id_name_and_title(server):
    a1 = server["a1"]
    for ref in (a1.id, a1.name, a1.title):
        status, body, _ = call(server["srv"], "GET", f"/v1/skills/{quote(ref)}")
        assert status == 200, body
        assert body["id"] == a1.id and body["version"] == "0.1.1"
        assert "Keep it under 200 words" in body["instructions"]
        assert not os.path.isabs(body["path"])


@pytest.mark.parametrize("ref", ["..%2F..%2Fetc%2Fpasswd", "%2e%2e", ".history", "x%00y",
                                 "..", "%2Fetc%2Fpasswd", "SKILL.md%2F..", "nope"])
def test_path_like_refs_never_reach_the_disk(server, ref):
    status, body, _ = call(server["srv"], "GET", f"/v1/skills/{ref}")
    assert status in (400, 404), (ref, status, body)
    assert_openai_error(status, body, status)


def test_search_finds_the_relevant_skill(server):
    status, body, _ = call(server["srv"], "GET",
                           "/v1/skills/search?q=how%20should%20I%20write%20my%20weekly%20report"
                           "&top_k=3")
    assert status == 200, body
    assert body["data"], body
    top = body["data"][0]
    assert top["skill"]["title"] == "Weekly report format"
    assert 0 <= top["score"] <= 1 and {"dense", "lexical"} <= set(top)
    status, body, _ = call(server["srv"], "GET", "/v1/skills/search?q=")
    assert_openai_error(status, body, 400)


def test_history_and_revert(server):
    srv, bank, a1 = server["srv"], server["bank"], server["a1"]
    status, hist, _ = call(srv, "GET", f"/v1/skills/{a1.id}/history")
    assert status == 200
    assert [v["version"] for v in hist["data"]] == ["0.1.0", "0.1.1"]
    assert [v["current"] for v in hist["data"]] == [False, True]

    status, body, _ = call(srv, "POST", f"/v1/skills/{a1.id}/revert", {"version": "0.1.0"})
    assert status == 200, body
    assert body["version"] == "0.1.2" and "200 words" not in body["instructions"]
    on_disk = bank.read(a1.path)
    assert on_disk.version == "0.1.2" and "200 words" not in on_disk.instructions
    status, hist, _ = call(srv, "GET", f"/v1/skills/{a1.id}/history")
    assert [v["version"] for v in hist["data"]] == ["0.1.0", "0.1.1", "0.1.2"]
    assert hist["data"][-1]["current"] and hist["data"][-1]["source"] == "revert"

    status, body, _ = call(srv, "POST", f"/v1/skills/{a1.id}/revert", {"version": "9.9.9"})
    assert_openai_error(status, body, 404)
    status, body, _ = call(srv, "POST", f"/v1/skills/{a1.id}/revert", {"version": ""})
    assert_openai_error(status, body, 400)
    status, body, _ = call(srv, "POST", f"/v1/skills/{a1.id}/revert", raw=b"{oops")
    assert_openai_error(status, body, 400)


def test_common_skills_cannot_be_reverted(server):
    status, body, _ = call(server["srv"], "POST", "/v1/skills/polite-email/revert",
                           {"version": "0.1.0"})
    assert assert_openai_error(status, body, 403)["code"] == "read_only"


def test_openapi_describes_the_skill_endpoints(server):
    status, spec, _ = call(server["srv"], "GET", "/openapi.json", key=None)
    assert status == 200
    paths = spec["paths"]
    for path, method in [("/v1/skills", "get"), ("/v1/skills/search", "get"),
                         ("/v1/skills/{ref}", "get"), ("/v1/skills/{ref}/history", "get"),
                         ("/v1/skills/{ref}/revert", "post"), ("/v1/chat/completions", "post")]:
        op = paths[path][method]
        schema = op["responses"]["200"]["content"]["application/json"]["schema"]
        assert "$ref" in schema, (path, schema)
    schemas = spec["components"]["schemas"]
    assert {"instructions", "version", "scope"} <= set(schemas["SkillDetail"]["properties"])
    assert "ErrorResponse" in schemas


# --- the gate ---------------------------------------------------------------------------------
def test_gate_serves_in_order_and_rejects_after_the_wait():
    async def scenario():
        gate = ModelGate(1, wait_s=0.2, max_waiting=2)
        order = []
        first = await gate.acquire()

        async def waiter(name):
            slot = await gate.acquire()
            order.append(name)
            await asyncio.sleep(0.01)
            slot.release()

        tasks = [asyncio.create_task(waiter(n)) for n in ("b", "c")]
        await asyncio.sleep(0.01)
        with pytest.raises(Busy) as over:  # queue full: refused at once
            await gate.acquire()
        assert over.value.retry_after >= 1
        first.release()
        await asyncio.gather(*tasks)
        assert order == ["b", "c"]
        hold = await gate.acquire()
        with pytest.raises(Busy):  # waited 0.2 s, still busy
            await gate.acquire()
        hold.release()
        hold.release()  # idempotent
        again = await gate.acquire()
        again.release()
        assert gate.busy == 0 and gate.waiting == 0

    asyncio.run(scenario())


# --- the command line -----------------------------------------------------------------------------
@pytest.mark.parametrize("extra,needle", [
    (["--user", "../../etc"], "must be a single name"),
    (["--keys", "KEYS"], "keys file"),
    (["--api-key", "short"], "8 characters"),
])
def test_serve_refuses_bad_identity_config_in_one_line(tmp_path, capsys, extra, needle):
    from cli.main import main

    (tmp_path / "keys.json").write_text('{"k": ["not", "a", "user"]}', encoding="utf-8")
    extra = [str(tmp_path / "keys.json") if a == "KEYS" else a for a in extra]
    code = main(["serve", "--bank", str(tmp_path / "bank"), "--port", "0", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and needle in err[-1] and err[-1].startswith("skilldesk: error:")
    assert not (tmp_path / "etc").exists()
