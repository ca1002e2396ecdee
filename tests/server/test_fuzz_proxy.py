"""Schema-driven fuzzing of the proxy (schemathesis over its own OpenAPI document).

A real ``skilldesk serve`` app (real desks, bank, embedder, uvicorn on a loopback port) with
the scripted model (bench/oracle.py ``OracleLLM`` behind a real ``ModelWorker``) so that valid
chat requests run a whole turn. Schemathesis generates requests for every operation of
``/openapi.json``: valid ones and ones that break the schema (wrong types, missing fields,
out-of-range values, odd strings), with and without a valid key. Promises: no 5xx, ever; every
4xx is an OpenAI error object ``{"error": {"message", "type", "code", "param"}}``.

Budget: ``SKILLDESK_PROXY_FUZZ_EXAMPLES`` cases per generation mode (default 60; the three runs take ~15 s);
the note of issue 17 reports a longer run.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings

from bench.oracle import OracleLLM
from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.llm.worker import ModelWorker
from engine.settings import Settings
from server import Desks, ServerConfig, ServerThread, create_app

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.generation import GenerationMode  # noqa: E402

EXAMPLES = int(os.environ.get("SKILLDESK_PROXY_FUZZ_EXAMPLES", "60"))
KEY = "key-fuzz-0123456789"


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzsrv")
    bank = SkillBank(root / "bank")
    bank.create(Skill(name="TLDR first", title="TLDR first",
                      description="Start summaries with a one-line TL;DR",
                      instructions="# Goal\nSummaries start with TL;DR.\n",
                      triggers=["summarize this"]), "alice")
    config = ServerConfig(port=0, api_keys={KEY: "alice"}, learn=False, max_body_bytes=200_000)

    def opener(user):
        from engine.desk import SkillDesk

        desk = SkillDesk.open(bank.root, user=user, config=Settings())
        desk.worker = ModelWorker(OracleLLM(reply="TL;DR: fine."))
        return desk

    desks = Desks(bank.root, config.users, Settings(), opener=opener)
    srv = ServerThread(create_app(desks, config), config).start()
    base = f"http://127.0.0.1:{srv.port}"
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    yield schema, base
    srv.stop()
    desks.close()


def check_response(response) -> None:
    status = response.status_code
    assert status < 500, f"{status} server error: {response.text[:300]}"
    if 400 <= status < 500:
        body = response.json()
        assert set(body) == {"error"}, body
        err = body["error"]
        assert isinstance(err["message"], str) and err["message"], body
        assert isinstance(err["type"], str) and "code" in err and "param" in err, body


@pytest.mark.parametrize(("mode", "authorized"), [
    (GenerationMode.POSITIVE, True), (GenerationMode.NEGATIVE, True),
    (GenerationMode.NEGATIVE, False)], ids=["valid", "invalid", "invalid-no-key"])
def test_proxy_survives_schema_fuzzing(proxy, mode, authorized):
    schema, base = proxy
    statuses: Counter[int] = Counter()
    headers = {"Authorization": f"Bearer {KEY}"} if authorized else {}
    n = EXAMPLES if authorized else max(10, EXAMPLES // 4)

    @settings(max_examples=n, deadline=timedelta(seconds=60), database=None,
              suppress_health_check=list(HealthCheck), print_blob=True)
    @given(case=schema.as_strategy(mode))
    def run(case):
        response = case.call(base_url=base, headers=headers, timeout=60)
        statuses[response.status_code] += 1
        check_response(response)

    run()
    assert sum(statuses.values()) >= min(n, 10)
    if authorized and mode == GenerationMode.POSITIVE:
        assert statuses[200] > 0, statuses  # valid requests do reach the model and the bank
    print(f"{mode.value} authorized={authorized}: {dict(sorted(statuses.items()))}")
