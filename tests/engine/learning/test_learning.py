"""The learning loop's logic: gate, windows, junk checks, rule extraction, and every benchmark
scenario through the real queue, pipeline, bank and hybrid retrieval with the scripted oracle."""

from __future__ import annotations

import json

import pytest

from bench.learning_scenarios import load_scenarios, score, seed_bank
from bench.oracle import OracleLLM
from engine import prompts
from engine.bank.store import SkillBank
from engine.errors import StructuredOutputError
from engine.learning import Pipeline
from engine.learning import triage as gate
from engine.learning.candidate import Candidate, parse_body
from engine.learning.checks import known_already, repair_merge, vet_candidate
from engine.learning.pipeline import Neighbour
from engine.learning.rules import is_rule_sentence, rule_extract
from engine.llm.client import LLMClient
from engine.llm.structured import check_schema, parse_and_validate
from engine.llm.worker import ModelWorker
from tests.support import A, U, open_desk, replay

SCENARIOS = load_scenarios()




# ------------------------------------------------------------------------------ prompts
@pytest.mark.parametrize("name, lang", [("rewrite", None), ("chat", None), ("extract", None),
                                        ("extract", "zh"), ("judge", None), ("merge", None),
                                        ("triage", None)])
def test_prompt_files_load_fill_and_have_valid_schemas(name, lang):
    p = prompts.load(name, lang=lang)
    assert (p.variant == "zh") == (lang == "zh")
    msgs = p.render(**{k: f"<{k}>" for k in p.inputs})
    # the chat prompt is the newest request's template (the system message is the user's own)
    assert msgs[0]["role"] == ("user" if name == "chat" else "system")
    assert all(m["content"] for m in msgs[1:])
    assert all(f"<{k}>" in "".join(m["content"] for m in msgs) for k in p.inputs)
    if name != "chat":
        check_schema(p.schema)
        # every few-shot answer in the file is itself valid under the schema
        for m in msgs:
            if m["role"] == "assistant":
                parse_and_validate(m["content"], p.schema)
    with pytest.raises(prompts.PromptError):
        p.render(wrong="x")


# ------------------------------------------------------------------------------ the gate
@pytest.mark.parametrize("text", [
    "From now on, always start summaries with a TL;DR.", "Please never use emojis.",
    "No, I said four spaces, not two.", "以后写周报都用三段式。", "每次回答都先给结论",
    "不要在代码里用缩写", "Going forward, use British spelling."])
def test_gate_finds_durable_cues(text):
    assert gate.windows([U(text)], "turn"), text


def test_typographic_apostrophes_read_as_plain_ones():
    """What macOS, iOS and word processors type: "Don’t" is "Don't" to the cue words and the
    tokens (a curly "Don’t use emoji" had no cue; "don’t" was the token "don")."""
    from engine.text import content_tokens, normalize
    assert gate.signal("Don’t use emoji in replies.").correction == ["don't use"]
    assert content_tokens("I can’t eat gluten, it’s Dani’s rule") == content_tokens(
        "I can't eat gluten, it's Dani's rule")
    assert normalize("‘Cheers’ isn’t OK") == "‘cheers’ isn't ok"  # quotes stay quotes


@pytest.mark.parametrize("messages", [
    [U("Translate 'good morning' into Spanish."), A("Buenos días.")],
    [U("Give me a pancake recipe."), A("..."), U("Thanks! How long per side?")],
    [U("明天北京天气怎么样？"), A("...")],
    [U("How do I center a div?"), A("I will always use bullet points from now on."),
     U("great, thanks")],  # the assistant's words are never evidence
])
def test_gate_lets_one_offs_through_without_any_model_call(messages):
    assert gate.windows(messages, "turn") == [] and gate.windows(messages, "conversation") == []


def test_windows_split_topics_and_turn_mode_reads_only_the_newest_topic():
    msgs = [U("Write a cover letter for a data analyst role."), A("Dear..."),
            U("From now on keep cover letters to one page."), A("OK"),
            U("By the way, a different topic: always list recipe ingredients in grams.")]
    conv = gate.windows(msgs, "conversation")
    assert [len(w.turns) for w in conv] == [2, 1]
    turn = gate.windows(msgs, "turn")
    assert len(turn) == 1 and "grams" in turn[0].user_text and "cover" not in turn[0].user_text
    # a short correction never starts a new topic
    assert len(gate.segments(gate.user_turns([U("Write a python date parser."),
                                              U("No, four spaces.")]))) == 1


def test_a_whole_conversations_evidence_starts_at_the_first_turn_triage_did_not_rule_out():
    msgs = [U("Write a short note asking my landlord to fix the dripping kitchen tap."), A("Sure."),
            U("Make this one a bit more formal, he is rather old-fashioned."), A("Sure.")]

    def only(*durable):
        return lambda turns: "rule" if turns[-1].text.startswith(durable) else None

    # triage read the request and found nothing: it is what the later turn was about
    [w] = gate.windows(msgs, "conversation", only("Make"))
    assert w.focus == 1 and w.cues == ["model:rule"]
    [w] = gate.windows(msgs, "conversation", only("Make", "Write"))
    assert w.focus == 0
    # a turn triage did not read (past TRIAGE_CALLS from the end) may hold a rule: evidence
    more = msgs + [x for i in range(gate.TRIAGE_CALLS) for x in (U(f"Make it warmer {i}."), A("."))]
    [w] = gate.windows(more, "conversation", only("Make"))
    assert w.focus == 0


def test_repeated_format_demand_without_cue_words_passes_the_gate():
    msgs = [U("Explain DNS in bullet points."), A("-"), U("Now TLS, bullet points again.")]
    assert gate.windows(msgs, "turn")[0].cues == ["repeated:bullets"]
    assert gate.windows(msgs[:1], "turn") == []


# ------------------------------------------------------------------------------ junk checks
def cand(**kw) -> Candidate:
    base = dict(name="Summary format", description="How summaries look.",
                constraints=["Start summaries with a one-line TL;DR"], triggers=["summarize"],
                confidence=0.9)
    base.update(kw)
    return Candidate(**base)


USER = "From now on always start summaries with a one-line TL;DR."


@pytest.mark.parametrize("c, why", [
    (cand(constraints=[]), "no rules"),
    (cand(name="User preferences"), "generic name"),
    (cand(constraints=["Cite three academic sources in APA style"]), "grounded"),
    (cand(confidence=0.2), "low confidence"),
])
def test_vet_discards_junk(c, why):
    assert why in (vet_candidate(c, USER) or "")


@pytest.mark.parametrize("said, rule, kept", [
    # how a rule is said ("never", "suggest", "mention") is no claim the user must have made
    ("I have no interest in motorsports.", "Never suggest or mention motorsports", True),
    ("I despise running as a form of exercise.", "Never recommend running", True),
    # a rule that lost what the user said is still not theirs
    ("I adhere to a raw food diet.", "Follow the diet without exceptions", False),
])
def test_a_fact_said_as_a_rule_is_grounded_by_what_it_names(said, rule, kept):
    c = cand(name="Things I avoid", constraints=[rule])
    assert (vet_candidate(c, said) is None) == kept


def test_vet_drops_rules_copied_from_the_assistant_and_scrubs_case_details():
    assistant = "I will always use numbered lists and cite three academic sources."
    c = cand(constraints=["Cite three academic sources", "Start summaries with a one-line TL;DR"])
    assert vet_candidate(c, USER, assistant) is None
    assert c.constraints == ["Start summaries with a one-line TL;DR"]
    c = Candidate.from_json({"name": "Mail to bob@example.com", "description": "x",
                             "constraints": ["Email bob@example.com about order 4821931"]})
    assert "@" not in c.name and "4821931" not in c.constraints[0]


def test_vet_drops_a_question_written_as_a_rule():
    said = "年化6%，十年后大概有多少？算收益的时候把通胀也扣掉，我想看实际购买力。"
    c = cand(name="收益计算", constraints=["年化6%，十年后大概有多少？", "算收益的时候把通胀也扣掉"])
    assert vet_candidate(c, said) is None and c.constraints == ["算收益的时候把通胀也扣掉"]
    c = cand(constraints=["Can summaries start with a TL;DR?"])
    assert "no rule grounded" in vet_candidate(c, "Can summaries start with a TL;DR?")


def test_known_rule_and_merge_repair():
    existing = Candidate.from_skill(cand(name="Python code style", constraints=[
        "Use type hints on every function", "Use two spaces for indentation"]).to_skill())
    assert known_already(cand(constraints=["In Python always use type hints on every function"]),
                         existing)
    new = cand(constraints=["Use four spaces for indentation"])
    assert not known_already(new, existing)
    merged = Candidate(name="x", description="d", constraints=["Use four spaces for indentation"])
    notes = repair_merge(merged, existing, new)  # the model forgot the type-hint rule
    assert merged.name == "Python code style"
    assert "Use type hints on every function" in merged.constraints
    assert "Use two spaces for indentation" not in merged.constraints  # corrected, not kept
    assert notes


def test_body_round_trip_keeps_hand_written_sections():
    body = "# Goal\n\nG.\n\n# Constraints & Style\n\n- a rule\n- b rule\n\n# Notes\n\nmine\n"
    goal, rules, steps, extra = parse_body(body)
    assert (goal, rules, steps) == ("G.", ["a rule", "b rule"], []) and "mine" in extra
    assert "# Notes" in Candidate(name="n", description="d", goal=goal, constraints=rules,
                                  extra_sections=extra).body()


@pytest.mark.parametrize("sentence, is_rule", [
    ("From now on, always start summaries with a one-line TL;DR.", True),
    ("When you review my code, always list the problems by severity first.", True),
    ("Could you always use bullets from now on?", True),
    ("Why is the sky always blue during the day?", False),
    ("Write a two-line poem about never giving up.", False),
    ("帮我把这句话改得通顺一点：我们明天不要开会了因为老板出差。", False),
    ("以后给客户写邮件都用正式的商务语气。", True),
    ("Again, I always want summaries to start with a one-line TL;DR.", True),
    ("I'd like you to never use the passive voice.", True),
    ("I always forget my router password.", False),
    ("Why do I always want coffee after lunch?", False),
    ("我希望你每次都先给结论。", True),
])
def test_rule_sentences(sentence, is_rule):
    assert is_rule_sentence(sentence) is is_rule


def test_rule_extraction_uses_the_users_words_only():
    w = gate.windows([U("Summarize this article about bees."), A("Always use tables, I say."),
                      U("From now on, always start summaries with a one-line TL;DR.")])[0]
    [c] = rule_extract(w)
    assert c.constraints == ["Always start summaries with a one-line TL;DR"]
    assert "tables" not in c.text.lower() and c.level_guessed


@pytest.mark.parametrize("said, rule", [
    ("Summarize: the office is closed on Monday. Again, I always want summaries to start with "
     "a one-line TL;DR.", "Summaries should always start with a one-line TL;DR"),
    ("I'd like you to never use the passive voice.", "Never use the passive voice"),
    ("I want you to answer in French from now on.", "Answer in French"),
    ("I prefer answers that end with a short checklist.",
     "Prefer answers that end with a short checklist"),
    ("Again, I always want my emails signed 'Best regards, Sam'.",
     "Emails should always be signed 'Best regards, Sam'"),
])
def test_first_person_preferences_become_instructions(said, rule):
    """A model follows an instruction more often than a report of what the user wants."""
    [c] = rule_extract(gate.windows([U(said)])[0])
    assert c.constraints == [rule]


# ------------------------------------------------------------------------------ garbage
class GarbageLLM(OracleLLM):
    """Answers one step with text that is not valid JSON for its schema."""

    def __init__(self, scenario, bad_step: str, text: str = '{"skills": [{"name": 3'):
        super().__init__(scenario)
        self.bad_step, self.text = bad_step, text

    def structured(self, messages, schema, params=None, cancel=None):
        props = set(schema.get("properties") or {})
        kind = ("extract" if "skills" in props else "judge" if "action" in props
                else "rewrite" if "query" in props else "merge")
        if kind == self.bad_step:
            self.calls.append(kind)
            return parse_and_validate(self.text, schema)
        return super().structured(messages, schema, params, cancel)


@pytest.mark.parametrize("bad_step, text", [
    ("extract", '{"skills": [{"name": 3'), ("extract", "I think the user likes TL;DRs!"),
    ("extract", '{"skills": [{"name": "x"}]}'), ("judge", '{"action": "explode"}'),
    ("merge", '{"description": ""}'), ("merge", "")])
def test_garbage_from_the_model_is_a_discard_never_a_crash_never_a_skill(tmp_path, bad_step,
                                                                           text):
    sc = next(s for s in SCENARIOS if s["id"] == "en-correct-indent")
    bank = SkillBank(tmp_path / "bank")
    seeded = seed_bank(bank, "default", sc)
    before = {p: p.read_bytes() for p in (tmp_path / "bank" / "Users").rglob("SKILL.md")}
    llm = GarbageLLM(sc, bad_step, text)
    # the model's step alone (no rule back-up), so the garbage is what decides
    actions = Pipeline(bank, "default", LLMClient(llm), policy={"extract": "llm"}).run(
        sc["messages"], "conversation")
    assert bad_step in llm.calls
    assert [a.kind for a in actions] == ["discard"], actions
    assert "unusable" in actions[0].reason or "not shown" in actions[0].reason
    assert {p: p.read_bytes() for p in (tmp_path / "bank" / "Users").rglob("SKILL.md")} == before
    assert len(bank.load("default").skills) == len(seeded)


class MergeEverythingLLM(OracleLLM):
    """A judge that merges every candidate into its first neighbour (what Qwen did once with
    an SQL rule and a Python skill)."""

    def structured(self, messages, schema, params=None, cancel=None):
        if "action" in set(schema.get("properties") or {}):
            self.calls.append("judge")
            return {"action": "merge", "target": 1, "reason": "same task (code style)"}
        return super().structured(messages, schema, params, cancel)


def test_a_merge_across_named_tools_is_overruled_to_an_add(tmp_path):
    sc = next(s for s in SCENARIOS if s["id"] == "en-distractor-add")
    bank = SkillBank(tmp_path / "bank")
    seed_bank(bank, "default", sc)
    python = next(s for s in bank.load("default").skills if s.title == "Python code style")
    search = lambda q, k: [Neighbour(python, 0.9, 0.9, 0.9)]  # noqa: E731 - the judge's view
    llm = MergeEverythingLLM(sc)
    actions = Pipeline(bank, "default", LLMClient(llm), search=search).run(sc["messages"], "turn")
    assert "judge" in llm.calls
    [add] = actions
    assert add.kind == "add" and "overruled" in add.reason and "sql" in add.reason, add
    assert bank.read(python.path).version == python.version  # the Python skill is untouched


def test_structured_error_type_from_validation():
    with pytest.raises(StructuredOutputError):
        parse_and_validate("not json", prompts.load("judge").schema)


# ------------------------------------------------------------------------------ scenarios
@pytest.mark.parametrize("sc", SCENARIOS, ids=[s["id"] for s in SCENARIOS])
def test_oracle_scenario_ends_in_its_expected_state(sc, tmp_path, embedder):
    oracle = OracleLLM(sc)
    worker = ModelWorker(oracle)
    desk = open_desk(tmp_path / "bank", embedder, worker)
    try:
        before = seed_bank(desk.bank, "default", sc)
        desk.refresh()
        actions = replay(desk, sc["messages"])
        after = desk.bank.load("default", scope="user").skills
        s = score(sc, before, after, actions)
        assert s.passed, (s.notes, [(a.kind, a.reason) for a in actions])
        if not sc["expect"] or all(e["outcome"] == "known" for e in sc["expect"]):
            assert {x.id: x.version for x in after} == {x.id: x.version for x in before.values()}
    finally:
        desk.close()
        worker.close()


def test_repeated_correction_merges_into_the_same_skill_with_a_version_bump(tmp_path, embedder):
    sc = next(s for s in SCENARIOS if s["id"] == "en-add-then-correct")
    worker = ModelWorker(OracleLLM(sc))
    desk = open_desk(tmp_path / "bank", embedder, worker)
    try:
        first = replay(desk, sc["messages"][:4])
        [added] = [a for a in first if a.kind == "add"]
        rest = replay(desk, sc["messages"])  # the same chat, continued: a correction
        [merged] = [a for a in rest if a.kind == "merge"]
        skills = desk.bank.load("default", scope="user").skills
        assert len(skills) == 1 and skills[0].id == added.skill.id
        assert skills[0].version == "0.1.1" and merged.previous_version == "0.1.0"
        assert "bold" in skills[0].instructions and "date" in skills[0].instructions
        assert [v.version for v in desk.bank.history.versions(skills[0].id)] == ["0.1.0",
                                                                                  "0.1.1"]
    finally:
        desk.close()
        worker.close()


def test_scenario_file_is_big_enough_and_bilingual():
    kinds = {s["kind"] for s in SCENARIOS}
    assert len(SCENARIOS) >= 30 and sum(s["lang"] == "zh" for s in SCENARIOS) >= 10
    assert {"once", "repeated", "one-off", "correction", "two-tasks", "topic-switch"} <= kinds
    for s in SCENARIOS:
        json.dumps(s)
        for e in s["expect"]:
            assert e["keywords"] and e["outcome"] in ("add", "merge", "known")


def test_tags_are_short_labels_in_the_skills_language_and_a_merge_keeps_the_skills_own():
    """Seen importing a real session: a Chinese skill's tags grew to "formatting",
    "no flowery language", "no fancy words" through its merges."""
    said = "不要有幻觉，要用word格式、不用花里胡哨的表达。"
    c = Candidate(name="公文写作要求", description="写作要求", constraints=["不要有幻觉", "用word格式"],
                  tags=["写作", "formatting", "no flowery language", "SQL", "公文写作规范要求"],
                  confidence=0.9)
    assert vet_candidate(c, said) is None
    assert c.tags == ["写作", "sql"]
    existing = Candidate.from_skill(c.to_skill())
    merged = Candidate(name="x", description="写作要求", constraints=["不要有幻觉", "用word格式",
                                                                  "不用夸张的词"],
                       tags=["no exaggeration", "文风"])
    repair_merge(merged, existing, Candidate(name="y", description="d",
                                             constraints=["不用夸张的词"]))
    assert merged.tags == ["写作", "sql", "文风"]
    en = Candidate(name="Code review", description="d", constraints=["Review the tests first"],
                   tags=["Testing", "review tests before code", "代码"], confidence=0.9)
    assert vet_candidate(en, "Review the tests first, always.") is None
    assert en.tags == ["testing"]
    c = Candidate(name="见解", description="d", constraints=["内容犀利，要有自己的见解"],
                  tags=["政府", "写作"], confidence=0.9, topic=frozenset({"政府"}))
    assert vet_candidate(c, "内容犀利，要有自己的见解。") is None and c.tags == ["写作"]
