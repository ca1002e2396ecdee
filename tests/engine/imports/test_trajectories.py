"""Trajectory bootstrapping: planning / functional / atomic candidates from agent runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.bank.store import SkillBank
from engine.errors import SkillFormatError, StructuredOutputError
from engine.imports.trajectories import candidates_from_trajectory, load, parse
from engine.learning.candidate import Candidate

DATA = Path(__file__).parents[2] / "data"


def _by_level(skills):
    out = {}
    for s in skills:
        out.setdefault(s.level, []).append(s)
    return out


def test_openai_tool_calls_trajectory():
    skills = candidates_from_trajectory(json.loads((DATA / "trajectory_openai.json")
                                                   .read_text("utf-8")))
    lv = _by_level(skills)
    (plan,) = lv["planning"]
    steps = Candidate.from_skill(plan).workflow
    assert len(steps) == 3
    assert steps[0].startswith("edit_file(path=app/cli.py") and "p.add_argument" in steps[0]
    assert "tests/test_cli.py" in steps[1] and steps[2] == "Run `pytest tests/test_cli.py -q`"
    body = plan.instructions
    assert "ls app" not in body and "read_file" not in body  # exploration removed
    assert "parser.add_argument('--quiet')" not in body      # the failed edit removed
    assert [s.title for s in lv["functional"]] == ["run the tests"]
    tools = {s.title: s for s in lv["atomic"]}
    assert set(tools) == {"Using bash", "Using read_file", "Using edit_file"}
    edit = Candidate.from_skill(tools["Using edit_file"]).constraints
    assert "Call edit_file with arguments: path, old, new" in edit
    pitfall = next(r for r in edit if r.startswith("Pitfall"))
    assert "old text not found" in pitfall and "what worked" in pitfall
    assert all(s.source == "trajectory" for s in skills)


def test_steps_format_with_subtasks_and_a_failed_run():
    skills = candidates_from_trajectory(json.loads((DATA / "trajectory_steps.json")
                                                   .read_text("utf-8")))
    assert not any("failed" in s.title for s in skills)  # the unsuccessful run gives nothing
    lv = _by_level(skills)
    assert len(lv["planning"]) == 1
    steps = Candidate.from_skill(lv["planning"][0]).workflow
    assert len(steps) == 5 and not any("groupby('month').sum())" in s for s in steps)
    assert [s.title for s in lv["functional"]] == ["清洗数据", "生成报表"]  # 发送邮件: one step
    py = next(s for s in lv["atomic"] if s.title == "Using python")
    assert any("KeyError" in r and "what worked" in r
               for r in Candidate.from_skill(py).constraints)
    assert candidates_from_trajectory(json.loads((DATA / "trajectory_steps.json").read_text(
        "utf-8")), require_success=False)[-1].title.startswith("Using search")


def test_liberal_shapes_and_jsonl(tmp_path):
    msgs = json.loads((DATA / "trajectory_openai.json").read_text("utf-8"))["messages"]
    assert len(parse(msgs)) == 1 and parse(msgs)[0].task.startswith("Add a --verbose")
    legacy = {"task": "t", "steps": [{"action": "search[weather in Paris]",
                                      "observation": "sunny"},
                                     {"thought": "now answer", "action": "finish[sunny]",
                                      "observation": "done"}]}
    (t,) = parse(legacy)
    assert [s.tool for s in t.steps] == ["search", "finish"] and t.steps[0].args == "weather in Paris"
    f = tmp_path / "runs.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in [legacy, {"messages": msgs}]) + "\n")
    assert len(load(f)) == 2
    assert parse({"no": "trajectory"}) == [] and candidates_from_trajectory(42) == []
    (tmp_path / "bad.jsonl").write_text('{"ok": 1}\nnot json\n')
    with pytest.raises(SkillFormatError, match="line 2"):
        load(tmp_path / "bad.jsonl")


def test_llm_refinement_and_its_fallback():
    obj = json.loads((DATA / "trajectory_openai.json").read_text("utf-8"))

    class Scripted:
        def structured(self, name, **values):
            assert name == "trajectory" and "1. edit_file" in values["steps"]
            return {"name": "Add a CLI flag", "description": "Add an option and fix its test.",
                    "steps": ["Add the option to the parser", "Update the help test",
                              "Run the CLI tests"], "triggers": ["add a cli flag"]}

    plan = candidates_from_trajectory(obj, Scripted())[0]
    assert plan.title == "Add a CLI flag" and "add a cli flag" in plan.triggers
    assert Candidate.from_skill(plan).workflow[0] == "Add the option to the parser"

    class Garbage:
        def structured(self, name, **values):
            raise StructuredOutputError("not JSON")

    plan = candidates_from_trajectory(obj, Garbage())[0]
    assert plan.title.startswith("Plan:") and "unusable" in plan.extra_metadata["notes"][0]


def test_candidates_are_valid_skills(bank_dir):
    bank = SkillBank(bank_dir)
    for f in ("trajectory_openai.json", "trajectory_steps.json"):
        for s in candidates_from_trajectory(json.loads((DATA / f).read_text("utf-8"))):
            written = bank.create(s)
            assert bank.validate(written.path) == []
            again = bank.read(written.path)
            assert again.level == s.level and again.instructions == written.instructions
