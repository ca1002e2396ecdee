"""Skills about the user (engine/learning/about.py): the learning pipeline asks the model
whether a new skill is about the user or about a task, records ``about: user`` in the file, and
the self-filter judges such a skill with its own prompt. Scripted-model tests for the logic and
the file, one test on the recommended Qwen model."""

from __future__ import annotations

import pytest

from bench.oracle import OracleLLM
from engine.bank import skillfile
from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.learning.pipeline import Pipeline
from engine.llm.client import LLMClient
from tests.support import A, FixedExtract, U

SAID = [U("I can't have caffeine at all, doctor's orders."), A("Got it.")]


class Answers(FixedExtract):
    """One extracted skill; ``about``: the answer to the about prompt (a dict, or garbage)."""

    def __init__(self, about):
        super().__init__(["Never suggest drinks with caffeine"], name="No caffeine",
                         triggers=["what should I drink"],
                         sc={"expect": [{"evidence": "caffeine"}]})
        self.about, self.shown = about, []

    def _about(self, prompt: str) -> dict:
        self.shown.append(prompt)
        return self.about


@pytest.mark.parametrize("answer, about", [
    ({"about": "user"}, "user"),
    ({"about": "task"}, ""),
    ({"about": "both"}, ""),     # outside the schema: a task skill, as before
    ({"kind": "user"}, "")])     # garbage JSON: the same
def test_a_new_skill_records_what_the_model_says_it_is_about(tmp_path, answer, about):
    model = Answers(answer)
    bank = SkillBank(tmp_path / "bank")
    actions = Pipeline(bank, "default", LLMClient(model)).run(SAID)
    added = [a.skill for a in actions if a.kind == "add"]
    assert len(added) == 1, [(a.kind, a.reason) for a in actions]
    assert model.shown and "No caffeine" in model.shown[0]
    assert "Never suggest drinks with caffeine" in model.shown[0]
    on_disk = skillfile.read(added[0].path)
    assert on_disk.about == about
    assert ("about: user" in added[0].path.read_text("utf-8")) is (about == "user")


def test_the_tiny_tier_does_not_ask(tmp_path):
    model = Answers({"about": "user"})
    model.tier = "tiny"
    Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(model)).run(SAID)
    assert model.shown == []


def test_about_round_trips_and_anything_else_reads_as_a_task(tmp_path):
    s = Skill(name="no-caffeine", description="The user cannot have caffeine.", about="user")
    text = skillfile.render(s)
    assert "  about: user\n" in text
    p = tmp_path / "no-caffeine" / "SKILL.md"
    p.parent.mkdir()
    p.write_text(text, "utf-8")
    assert skillfile.read(p).about == "user"
    p.write_text(text.replace("about: user", "about: everyone"), "utf-8")
    assert skillfile.read(p).about == ""
    assert "about" not in skillfile.render(Skill(name="x", description="A task."))


def test_a_merge_keeps_the_target_s_about(tmp_path):
    from engine.learning.candidate import Candidate
    bank = SkillBank(tmp_path / "bank")
    target = bank.create(Skill(name="no-caffeine", description="The user cannot have caffeine.",
                               instructions="# Constraints & Style\n\n- No coffee\n",
                               about="user"), "default")
    c = Candidate(name="No caffeine", description="No caffeine.",
                  constraints=["No energy drinks either"])
    Pipeline(bank, "default", LLMClient(OracleLLM())).merge(c, target, None, "same fact")
    assert skillfile.read(target.path).about == "user"


@pytest.mark.model
@pytest.mark.slow
def test_qwen_tells_a_fact_about_the_user_from_a_task(qwen_path):
    """Skills outside the prompt's examples and the dev set (bench/data/about.jsonl)."""
    from engine.learning.about import ABOUT_USER_MIN_P, p_about_user
    from engine.llm.llama_backend import LlamaCppBackend
    from engine.llm.registry import resolve
    from engine.llm.worker import ModelWorker

    worker = ModelWorker(LlamaCppBackend(resolve(str(qwen_path)), n_threads=2, n_ctx=2048))
    try:
        client = LLMClient(worker)
        for title, desc, rules, user in [
                ("Peanut allergy", "The user is allergic to peanuts.",
                 ["Never suggest food with peanuts"], True),
                ("怕冷", "用户很怕冷。", ["推荐旅行地点时避开寒冷的地方"], True),
                ("Release notes", "The user wants release notes grouped by feature.",
                 ["Group changes by feature", "Put breaking changes first"], False),
                ("周报格式", "用户希望周报先写结论。", ["先写结论，再写细节"], False)]:
            p = p_about_user(client, title, desc, rules)
            assert (p >= ABOUT_USER_MIN_P) is user, (title, p)
    finally:
        worker.close()

