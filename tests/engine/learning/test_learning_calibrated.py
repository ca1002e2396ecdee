"""Issue 16, second round, on scripted backends: triage is a calibrated probability (not the
model's argmax), a judge's merge into a skill that shares no task word becomes an add, and
extraction reads the triaged turn as the evidence with the earlier requests as context."""

from __future__ import annotations

import math
import re

import pytest

from bench.learning_scenarios import SPLITS
from bench.oracle import OracleLLM
from bench.triage import durable_turn, extract_table, story_sentences, story_table, table
from engine.bank.store import SkillBank
from engine.learning import Pipeline
from engine.learning import triage as gate
from engine.learning.candidate import Candidate
from engine.learning.judge import Neighbour, shares_task
from engine.learning.pipeline import TRIAGE_SURE_P, topic_chain
from engine.learning.queue import event_reason
from engine.llm.client import LLMClient
from engine.llm.worker import ModelWorker
from tests.support import A, FixedExtract, U

KINDS = ["none", "preference", "rule", "correction", "persona", "format", "constraint"]


class Scored(OracleLLM):
    """An oracle that also exposes ``choice_logprobs`` with a fixed P(none)."""

    def __init__(self, p_none: float, best: str = "constraint", p_again: float = 0.9, **kw):
        super().__init__(**kw)
        self.p_none, self.best, self.p_again, self.prefixes = p_none, best, p_again, []

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        if prefix.startswith('{"scope"'):  # the lasting check of a later turn
            self.calls.append("lasting")
            return {"every": math.log(self.p_again), "this": math.log(1 - self.p_again)}
        self.calls.append("triage")
        self.prefixes.append(prefix)
        rest = (1 - self.p_none) / (len(options) - 1)
        probs = {o: (self.p_none if o == "none" else rest) for o in options}
        probs[self.best] += 1e-6  # the likeliest durable kind
        return {o: math.log(p) for o, p in probs.items()}


def test_choice_renormalises_the_backends_logprobs_through_the_worker():
    worker = ModelWorker(Scored(0.25))
    try:
        probs = LLMClient(worker).choice("triage", "kind", user_turns="1. I only fly economy.")
    finally:
        worker.close()
    assert sorted(probs) == sorted(KINDS) and abs(sum(probs.values()) - 1) < 1e-9
    assert abs(probs["none"] - 0.25) < 1e-6


def test_choice_without_logprobs_counts_the_structured_answer_as_certain():
    sc = {"expect": [{"outcome": "add", "evidence": "economy"}]}
    probs = LLMClient(OracleLLM(sc)).choice("triage", "kind", user_turns="1. I only fly economy.")
    assert probs["rule"] == 1.0 and probs["none"] == 0.0
    with pytest.raises(ValueError):
        LLMClient(OracleLLM(sc)).choice("triage", "nothing", user_turns="1. x")


@pytest.mark.parametrize("p_none,durable", [(0.9, False), (0.02, True)])
def test_triage_says_yes_only_when_the_durable_probability_reaches_the_bar(tmp_path, p_none,
                                                                           durable):
    llm = Scored(p_none)
    pipe = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm))
    pipe.checkpoint = lambda: None
    turns = gate.user_turns([U("Explain the CAP theorem.")])
    p, kind = pipe.triage_score(turns)
    assert abs(p - (1 - p_none)) < 1e-6 and kind == "constraint"
    assert (pipe._triage(turns) is not None) is durable
    assert llm.prefixes == ['{"kind": "'] * 2  # one forward pass per decision, no sampling


class ReadsContext(Scored):
    """P(none) 0.2 when the newest turn is read after earlier ones, 0.6 when read alone."""

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        self.p_none = 0.2 if "\n2. " in messages[-1]["content"] else 0.6
        return super().choice_logprobs(messages, prefix, options, cancel)


def test_triage_is_the_mean_of_the_read_in_context_and_the_read_alone(tmp_path):
    llm = ReadsContext(0.0)
    pipe = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm))
    pipe.checkpoint = lambda: None
    p, _ = pipe.triage_score(gate.user_turns([U("Plan a trip to Lisbon."), U("Shorter.")]))
    assert abs(p - (0.8 + 0.4) / 2) < 1e-6 and len(llm.prefixes) == 2
    p, _ = pipe.triage_score(gate.user_turns([U("I only fly economy.")]))  # no earlier turns:
    assert abs(p - 0.4) < 1e-6 and len(llm.prefixes) == 3  # one read


def test_a_triage_argmax_for_a_durable_kind_below_the_bar_is_no(tmp_path, monkeypatch):
    """The case of the 1.5B model: its argmax is a durable kind (P(none) 0.3 < any other
    single kind's share of 0.7 would not be), yet the bar decides, not the argmax."""
    monkeypatch.setattr(gate, "DURABLE_MIN_P", 0.8)
    pipe = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(Scored(0.3)))
    pipe.checkpoint = lambda: None
    assert pipe._triage(gate.user_turns([U("Plan a 3-day trip to Lisbon.")])) is None
    monkeypatch.setattr(gate, "DURABLE_MIN_P", 0.6)
    assert pipe._triage(gate.user_turns([U("Plan a 3-day trip to Lisbon.")])) == "constraint"


# ------------------------------------------------------------------------------ merges
def _skill(name: str, rules: list[str], triggers: list[str]):
    return Candidate(name=name, description=f"{name}.", goal="", constraints=rules, workflow=[],
                     triggers=triggers, tags=[], level="functional").to_skill(source="imported")


def _cand(name: str, rules: list[str], triggers: list[str]) -> Candidate:
    return Candidate(name=name, description="The user avoids it.", goal="", constraints=rules,
                     workflow=[], triggers=triggers, tags=[], level="functional")


def test_shares_task_ignores_the_words_rules_are_said_with():
    workout = _skill("Avoid jumping or high-impact movements",
                     ["Avoid jumping or high-impact movements"], ["plan a workout"])
    assert not shares_task(_cand("Avoid gluten", ["Avoid gluten in food suggestions"],
                                 ["suggest a recipe"]), workout)
    assert not shares_task(_cand("Hands-on learning", ["Prefer hands-on learning"],
                                 ["teach me something"]), workout)
    assert shares_task(_cand("Low-impact workouts", ["No running"], ["plan a workout"]), workout)
    email = _skill("Work email style", ["Sign with the first name only"], ["draft a work email"])
    assert shares_task(_cand("Sign-off", ["End emails to colleagues with 'Thanks'"], []), email)


def test_a_skills_description_is_not_its_task():
    # a learned skill's description is often the user's sentence: its everyday words ("high")
    # made a diet rule "the same task" as a skill about humid places (PrefEval dev)
    humid = Candidate(name="Humidity and rain", goal="", workflow=[], tags=[],
                      description="I dislike living in places with high humidity.",
                      constraints=["Avoid humid, rainy places"], triggers=["where should I live"],
                      level="functional").to_skill(source="extracted")
    diet = _cand("Low-FODMAP diet", ["Avoid foods high in FODMAPs"], ["suggest a meal"])
    assert not shares_task(diet, humid)
    assert shares_task(_cand("Rainy places", ["Avoid places with rainy winters"], []), humid)


class MergeEverything(OracleLLM):
    """A judge that merges every new rule into the first skill it is shown (what Qwen-1.5B
    did on PrefEval: 9 unrelated preferences into one workout skill)."""

    def _judge(self, prompt):
        return {"action": "merge", "target": 1, "reason": "same"}


def test_a_merge_into_a_skill_that_shares_no_task_word_is_an_add(tmp_path):
    sc = {"expect": [{"outcome": "add", "name": "Gluten-free food", "evidence": "avoid gluten",
                      "constraints": ["Avoid gluten in any food or recipe suggestion"],
                      "triggers": ["suggest a recipe"], "keywords": ["gluten"]}]}
    bank = SkillBank(tmp_path / "bank")
    workout = bank.create(_skill("Avoid jumping or high-impact movements",
                                 ["Avoid jumping or high-impact movements"],
                                 ["plan a workout"]), "default", source="imported")
    # a fused score as high as a single skill in the bank gets, whatever it says
    pipe = Pipeline(bank, "default", LLMClient(MergeEverything(sc)),
                    search=lambda q, k: [Neighbour(workout, 0.9, 0.5, 0.0)])
    # said beside a request (said alone, the "nothing asked" check stops it first)
    actions = pipe.run([U("What could I cook tonight? I strictly avoid gluten, I have celiac "
                          "disease.")], "turn")
    assert [a.kind for a in actions] == ["add"] and "shares no word" in actions[0].reason
    assert bank.read(workout.path).instructions == workout.instructions  # untouched


# ------------------------------------------------------------------------------ extraction
class Recording(OracleLLM):
    def __init__(self, sc):
        super().__init__(sc)
        self.prompts: list[str] = []

    def structured(self, messages, schema, params=None, cancel=None):
        if "skills" in set(schema.get("properties") or {}):
            self.prompts.append(messages[-1]["content"])
        return super().structured(messages, schema, params, cancel)


def test_extraction_reads_the_triaged_turn_as_evidence_and_earlier_requests_as_context(
        tmp_path):
    sc = {"expect": [{"outcome": "add", "name": "Pirate persona", "evidence": "pirate",
                      "constraints": ["Talk like a cheerful pirate"], "keywords": ["pirate"]}]}
    llm = Recording(sc)
    said = [U("Explain what a mortgage is."), A("A mortgage is a loan..."),
            U("Let's make this fun. Talk to me like a cheerful pirate in every reply.")]
    w = gate.windows(said, "turn", lambda turns: "persona")
    assert w and w[0].focus == 1  # decided by the model on the newest turn
    pipe = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm))
    pipe.checkpoint = lambda: None
    pipe.extract(w[0])
    prompt = llm.prompts[-1]
    evidence = prompt.split("User messages:", 1)[1]
    assert "1. Let's make this fun" in evidence and "mortgage" not in evidence
    assert "Earlier user messages" in prompt and "Explain what a mortgage is." in prompt
    # a cue word fast-tracks the window, and still only its newest turn is evidence (the
    # request before a rule is what a small model would make a skill of)...
    fast = gate.windows([U("Summarize this."), A("..."), U("From now on, use bullets.")], "turn")
    assert fast[0].cues and fast[0].focus == 1
    # ...but a format asked for again is said in every turn that asked for it
    again = gate.windows([U("Summarize this in bullets."), A("..."),
                          U("Now this one, in bullets too.")], "turn")
    assert again[0].cues == ["repeated:bullets"] and again[0].focus == 0


class ExtractScored(OracleLLM):
    """An oracle whose extraction answer starts with ' []' with probability ``p_empty``."""

    def __init__(self, sc, p_empty: float):
        super().__init__(sc)
        self.p_empty, self.min_items = p_empty, []

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        assert prefix == '{"skills":' and " []" in options
        rest = (1 - self.p_empty) / (len(options) - 1)
        return {o: math.log(self.p_empty if o == " []" else rest) for o in options}

    def structured(self, messages, schema, params=None, cancel=None):
        if "skills" in set(schema.get("properties") or {}):
            self.min_items.append(schema["properties"]["skills"].get("minItems", 0))
        return super().structured(messages, schema, params, cancel)


@pytest.mark.parametrize("p_empty,sure,written", [(0.8, 0.0, False), (0.3, 0.0, True),
                                                   (0.8, TRIAGE_SURE_P, True)])
def test_extraction_decides_by_its_first_token_and_then_must_write_a_skill(tmp_path, p_empty,
                                                                          sure, written):
    sc = {"expect": [{"outcome": "add", "name": "No ibuprofen", "evidence": "warfarin",
                      "constraints": ["Never suggest ibuprofen or aspirin"],
                      "keywords": ["ibuprofen"]}]}
    llm = ExtractScored(sc, p_empty)
    pipe = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm))
    pipe.checkpoint = lambda: None
    w = gate.windows([U("I'm on warfarin, so no ibuprofen or aspirin for my headaches.")],
                     "turn", lambda turns: "constraint")
    pipe.triaged = {0: sure}  # triage's P(durable) for the turn: sure enough overrules "[]"
    found, failed = pipe.extract(w[0])
    assert failed is None and bool(found) is written
    # below the bar nothing is generated; at or above it the schema asks for a skill
    assert llm.min_items == ([1] if written else [])


def test_bench_triage_story_labels_a_later_turns_sentences_and_tabulates_bars():
    """A sentence of the later turn that holds the evidence is the rule; one that holds a
    word the item forbids is story; the opening's sentences and unlabelled ones are left out."""
    sc = {"id": "x", "lang": "en", "split": "s", "messages": [
        U("Write the notice, Mrs Pell wants it up today."), A("Done."),
        U("Never put flat numbers in notices. Mrs Pell at 4B cried. Thanks a lot.")],
          "expect": [{"evidence": "never put flat numbers in notices", "forbid": ["Pell"]}]}
    rows = story_sentences(sc)
    assert [(r["sentence"], r["label"]) for r in rows] == [
        ("Never put flat numbers in notices.", "rule"), ("Mrs Pell at 4B cried.", "story")]
    assert rows[0]["request"] == "Write the notice, Mrs Pell wants it up today."
    rows[0]["p"], rows[1]["p"] = 0.2, 0.45
    out = story_table(rows, bars=(0.4, 0.5)).splitlines()
    assert out[1].split()[:4] == ["en", "1", "1", "1.000"]
    assert "1/1     0/1" in out[1] and "0/1     0/1" in out[1]


def test_bench_triage_labels_turns_by_the_evidence_and_tabulates_bars():
    sc = {"id": "x", "expect": [{"evidence": "avoid gluten"}]}
    assert durable_turn(sc, "I strictly avoid gluten.") and not durable_turn(sc, "Hi")
    rows = [{"id": "x", "oneoff": False, "durable": True, "cued": False, "p": 0.9, "s": 1.0},
            {"id": "y", "oneoff": True, "durable": False, "cued": False, "p": 0.6, "s": 1.0}]
    out = table(rows, bars=(0.5, 0.7))
    assert "0.5   | 1/1 (1.00)" in out and "| 1/1 (1.00)" in out.splitlines()[3]
    assert out.splitlines()[4].endswith("0/1")  # at 0.7 the one-off is no longer let through
    rows[0]["pe"], rows[1]["pe"] = 0.35, 0.2  # extraction's P(a skill) on the passed turns
    # a turn triage stops (below DURABLE_MIN_P) counts only where extraction is the only gate
    rows.append({"id": "z", "oneoff": True, "durable": False, "cued": False, "p": 0.01,
                 "s": 1.0, "pe": 0.5})
    ext = extract_table(rows, bars=(0.3, 0.4)).splitlines()
    assert "2 turns of triage let through" in ext[0]
    assert ext[3].startswith("0.3   | 1/1") and ext[3].endswith("0/2")
    assert ext[4].startswith("0.4   | 0/1")
    assert "3 turns of every scored turn" in ext[5]
    assert ext[8].startswith("0.3   | 1/1") and "| 1/2" in ext[8] and ext[8].endswith("1/2")


def test_bench_triage_separates_openings_from_later_turns():
    """The AUC of each score is given for openings and later turns apart: a score that ranks
    the openings right and the later turns backwards must not read as one middling figure."""
    from bench.triage import auc, separation

    assert auc([0.9, 0.8], [0.1]) == 1.0 and auc([0.1], [0.9, 0.1]) == 0.25
    assert auc([], [0.3]) is None
    row = lambda opening, durable, p: {"opening": opening, "durable": durable, "p": p}  # noqa: E731
    rows = [row(True, True, 0.9), row(True, False, 0.2), row(True, False, 0.3),
            row(False, True, 0.4), row(False, False, 0.8)]
    lines = separation(rows).splitlines()
    triage_line = next(ln for ln in lines if ln.startswith("triage P(durable)"))
    assert "| 1.00 (1/2)" in triage_line and triage_line.endswith("| 0.00 (1/1)")
    assert not any(ln.startswith("extraction") for ln in lines)  # no pe scored: no line


def test_bench_triage_fits_the_opening_gate_on_its_three_reads():
    """``--openings --extract --lasting``: the opening gate's three reads get an AUC each, and
    the logistic fit of OPENING_FIT weighs the read that separates (here the sentence's P
    times P(the writer's own)) and not the one that does not (the whole message's P);
    extraction's P(a skill), no read of the gate, gets a line only where it was scored."""
    import random

    from bench.triage import opening_table

    rng = random.Random(7)
    rows = [{"opening": True, "durable": d, "p": rng.uniform(0.3, 0.7),
             "ps": rng.uniform(0.3, 0.9), "pw": rng.uniform(0.6, 0.95) if d else
             rng.uniform(0.1, 0.65)} for d in [True] * 20 + [False] * 60]
    out = opening_table(rows + [{"opening": False, "durable": True, "p": 0.9}])
    assert "openings with the gate's three reads: 80 (20 durable, 60 not)" in out
    pw_auc = float(next(ln for ln in out.splitlines() if ln.startswith(
        "P(the writer's own)")).rsplit("|", 1)[1])
    assert pw_auc > 0.95
    assert "extraction" not in out
    fit = out.split("OPENING_FIT = (", 1)[1].split(")", 1)[0]
    w_p, w_joint, _ = (float(v) for v in fit.split(", "))
    assert w_joint > abs(w_p), fit
    assert "extraction P(a skill)" in opening_table([{**r, "pe": 0.5} for r in rows])
    assert opening_table([{"opening": True, "durable": True, "p": 0.5, "ps": 0.5,
                           "pw": None}]) == "openings with the gate's three reads: none"
    # a story triage reads low whole (0.2) but whose writer's sentence is sure: the gate lets
    # it through only where triage's bar does not stop it first
    two = opening_table([{"opening": True, "durable": True, "p": 0.2, "ps": 0.95, "pw": 0.95},
                         {"opening": True, "durable": False, "p": 0.6, "ps": 0.1, "pw": 0.1}])
    assert "lets on 1 (0 durable); the gate at 0.4 lets through 0 durable, 0 others" in two
    assert "without triage's bar, the gate at 0.4 lets through 1 durable, 0 others" in two


def test_bench_triage_lasting_compares_the_gates_on_later_turns():
    """A durable later turn triage scores below its bar but the lasting check is sure of
    counts for the app's gate (the lasting check's bar), not for triage's; a one-off turn
    triage is sure of, but the lasting check is not, stops there."""
    from bench.triage import lasting_table, let_through
    from engine.learning.pipeline import LASTING_MIN_P

    row = lambda i, durable, p, pl, oneoff=False: {  # noqa: E731
        "id": i, "opening": False, "durable": durable, "oneoff": oneoff, "p": p, "pl": pl}
    rows = [row("a", True, 0.32, 0.73), row("b", True, 0.6, LASTING_MIN_P),
            row("c", False, 0.95, LASTING_MIN_P - 0.04, oneoff=True)]
    lines = lasting_table(rows).splitlines()
    assert lines[0] == "later turns with both reads: 3 (2 durable, 1 not)"
    gate = {ln.split("|")[0].strip(): ln for ln in lines if "|" in ln}
    app = gate[f"lasting >= {LASTING_MIN_P} (app)"]
    assert "| 2/2 (1.00)" in app and app.endswith("0/1")
    assert "| 1/2 (0.50)" in gate["triage >= 0.42 alone"]
    assert gate["even odds, triage and lasting"].endswith("1/1")  # 0.95 >= 1 - 0.2
    assert "| 1/2 (0.50)" in gate["lasting >= 0.5"]
    assert let_through(rows[0]) and let_through(rows[1]) and not let_through(rows[2])
    # the likeliest sentence read alone gets its AUC where every row has it
    assert "triage P, likeliest sentence" not in gate
    for r, ps in zip(rows, (0.8, 0.7, 0.2), strict=True):
        r["ps"] = ps
    gate = {ln.split("|")[0].strip(): ln for ln in lasting_table(rows).splitlines() if "|" in ln}
    assert gate["triage P, likeliest sentence"].endswith("| 1.00")


def test_bench_triage_tabulates_the_turns_cue_words_find_at_the_apps_gate():
    """A later turn cue words found goes on by the lasting check, whatever triage says; an
    opening they found at triage's bar. The cued table counts what each gate lets through."""
    from bench.triage import cued_table, let_through
    from engine.learning.pipeline import LASTING_MIN_P

    row = lambda i, durable, pc, pl=None: {  # noqa: E731
        "id": i, "turn": 2, "opening": pl is None, "durable": durable, "oneoff": not durable,
        "cued": True, "p": None, "pc": pc, "pl": pl}
    rows = [row("dont", True, 0.62, 0.45), row("after", False, 0.23),
            row("always", False, 0.6), row("tweak", False, 0.65, 0.2)]
    assert [let_through(r) for r in rows] == [True, False, True, False]
    gate = {ln.split("|")[0].strip(): ln for ln in cued_table(rows).splitlines() if "|" in ln}
    assert gate["cue words alone"].endswith("| 3/3")
    assert gate["triage >= 0.42"].endswith("| 2/3")
    app = gate[f"lasting >= {LASTING_MIN_P} (later turns), else triage (app)"]
    assert "| 1/1" in app and app.endswith("| 1/3")  # the tweak (0.2) stops


def test_bench_triage_cued_scores_only_the_turns_cue_words_find(tmp_path):
    """``--cued``: the turns cue words find, with triage's P and the lasting check's, and no
    model call for the others."""
    from bench.triage import score_turns

    said = "From now on, keep every answer under 100 words."
    assert gate.windows([U("Plan a week in Crete."), A("Day 1"), U(said)], "turn",
                        lambda seg: None)  # cue words find it without the model
    sc = {"id": "c", "expect": [{"evidence": "under 100 words"}],
          "messages": [U("Plan a week in Crete."), A("Day 1: ..."), U("Thanks, lovely."),
                       A("Enjoy!"), U(said)]}
    llm = Scored(0.3, p_again=0.7)
    pipe = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm))
    pipe.checkpoint = lambda: None
    [row] = score_turns(pipe, sc, lasting=True, cued=True)
    assert (row["turn"], row["cued"], row["durable"]) == (4, True, True)
    assert abs(row["pc"] - 0.7) < 1e-6 and abs(row["pl"] - 0.7) < 1e-6
    assert llm.calls.count("lasting") == 1 and llm.calls.count("triage") == 2
    assert len(score_turns(pipe, sc, lasting=True)) == 3  # without it, every user turn


def test_bench_triage_labels_extracted_rules_and_tabulates_the_keep_bar():
    from bench.triage import rule_label, rules_table

    sc = {"expect": [{"outcome": "add", "keywords": ["peanut|nut"], "forbid": ["Lisbon"]}]}
    assert rule_label(sc, "Avoid peanuts") is True
    assert rule_label(sc, "Avoid peanuts in Lisbon") is False  # a case detail
    assert rule_label(sc, "Be kind") is None and rule_label({"expect": []}, "Avoid nuts") is False
    rules = [{"label": True, "lexical": False, "pk": 0.7},  # paraphrased: only the model keeps it
             {"label": True, "lexical": True, "pk": 0.2},
             {"label": False, "lexical": False, "pk": 0.5}]
    out = rules_table([{"rules": rules}], bars=(0.6,)).splitlines()
    assert out[3].split("|")[1:3] == [" 1/2          ", " 0/1        "]  # word overlap
    assert out[5].startswith("overlap or P >= 0.6") and " 2/2 " in out[5] and " 0/1 " in out[5]


# ------------------------------------------------------------------------------ grounding
def test_own_sentence_picks_the_users_sentence_that_says_the_paraphrased_rule():
    from engine.learning.rules import own_sentence

    said = ["Let's make this fun. Talk to me like a cheerful pirate in every reply, matey."]
    assert own_sentence(["Keep the tone cheerful", "Say 'matey'"], said) == \
        "Talk to me like a cheerful pirate in every reply, matey."
    assert own_sentence(["不推荐辣的食物"], ["我完全不能吃辣。"]) == "我完全不能吃辣。"
    assert own_sentence(["No technical jargon"], ["Explain what a mortgage is."]) is None
    assert own_sentence(["Titles as questions"], ["Can titles be questions?"]) is None
    assert own_sentence(["Use three sections: Decisions, Action items"],  # one word: a request
                        ["Turn these notes into meeting minutes: action needed."]) is None


def test_a_reason_told_after_the_rule_stays_out_of_the_users_words():
    from engine.learning.checks import in_user_words

    # the sentence the model shortened: the clause that says the rule best and what frames it;
    # the reason after it shares a word ("tour") and stays out
    said = ["Tour notices say where to meet and what to wear, a group of ten stood at the wrong "
            "gate for an hour on the last tour."]
    assert in_user_words(["Tour notices say where to meet"], said, ["Write Saturday's notice"]) \
        == ["Tour notices say where to meet and what to wear"]
    said = ["活动通知要写清楚在哪集合、穿什么，上回十个人在错的门口等了一个钟头。"]
    assert in_user_words(["活动通知写清楚集合地点"], said, ["帮我写周六的通知"]) == \
        ["活动通知要写清楚在哪集合、穿什么"]


def test_a_cued_rule_sentence_adds_its_rule_to_the_models_not_its_reason(tmp_path):
    sc = {"expect": [{"outcome": "add", "evidence": "meeting point"}]}
    model = FixedExtract(["Put the meeting point in tour notices"], name="Tour notices",
                         triggers=["write a tour notice"], sc=sc)
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(model)).run([
        U("Write the notice for Saturday's walk up the ridge."), A("Here is the notice: ..."),
        U("Always put the meeting point in tour notices, last time ten people waited at the "
          "wrong gate.")], "turn")
    assert [a.kind for a in actions] == ["add"]
    body = actions[0].skill.instructions
    assert "meeting point" in body and "gate" not in body, body


def test_a_rule_paraphrased_past_grounding_becomes_the_users_own_sentence(tmp_path):
    sc = {"expect": [{"outcome": "add", "evidence": "不能吃辣"}]}
    bank = SkillBank(tmp_path / "bank")
    paraphrase = FixedExtract(["不推荐辣的食物"], name="Spice level", triggers=["推荐菜"],
                              sc=sc)
    actions = Pipeline(bank, "default", LLMClient(paraphrase)).run(
        [U("我完全不能吃辣。")], "turn")
    assert [a.kind for a in actions] == ["add"]
    assert "我完全不能吃辣" in actions[0].skill.instructions


class KeepScored(FixedExtract):
    """FixedExtract on a backend that reads token scores: extraction decides "a skill", the
    keep check (keep.md) says yes with probability ``p_keep``; the quote step (quote.md)
    answers "none" with probability ``p_none``, or gives no usable answer (None)."""

    def __init__(self, rules, p_keep, p_none=None, **kw):
        super().__init__(rules, **kw)
        self.p_keep, self.p_none = p_keep, p_none

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        if prefix.startswith('{"keep"'):
            self.calls.append("keep")
            return {o: math.log(self.p_keep if o == "yes" else 1 - self.p_keep) for o in options}
        if prefix.startswith('{"sentence"'):
            self.calls.append("quote")
            if self.p_none is None:
                raise ValueError("no usable answer")
            rest = (1 - self.p_none) / (len(options) - 1)
            return {o: math.log(self.p_none if o == "0" else rest) for o in options}
        return {o: math.log(0.01 if o == " []" else 0.99) for o in options}  # extraction


def test_the_users_own_sentence_comes_before_the_models_keep_check(tmp_path):
    bank = SkillBank(tmp_path / "bank")
    said = [U("菜谱别写成一大段，按步骤一条一条列出来，我做饭时好对照。")]
    # the model's wording lost the format; the user's own sentence says it: theirs wins, and
    # the keep check is not asked
    llm = KeepScored(["把内容拆成小段，方便阅读"], 0.99, name="菜谱格式")
    [add] = Pipeline(bank, "default", LLMClient(llm)).run(said, "turn")
    assert add.kind == "add" and "按步骤一条一条" in add.skill.instructions
    assert "keep" not in llm.calls
    # no sentence of the user's shares its words and the quote step gives no answer (a
    # question is no sentence that can last): the keep check decides on the model's wording
    said = [U("I'm allergic to peanuts, any snack ideas for the train?")]
    for p_keep, kinds in ((0.99, ["add"]), (0.1, ["discard"])):
        llm = KeepScored(["Suggest only nut-free foods"], p_keep, name="Nut-free food")
        actions = Pipeline(SkillBank(tmp_path / f"b{p_keep}"), "default", LLMClient(llm)).run(
            said, "turn")
        assert [a.kind for a in actions] == kinds and "keep" in llm.calls


def test_the_keep_check_never_saves_a_rule_after_the_model_answered_none(tmp_path):
    """The model, asked which of the user's sentences should last (quote.md), answered none:
    its own wording of an ungrounded rule is not kept, however sure the keep check is (on
    Qwen-1.5B it kept "跟物业沟通" for a message to the caretaker about tomorrow's repair)."""
    said = [U("帮我跟物业说一声，明天上午家里没人，修水管改到下午，别让师傅白跑一趟")]
    for p_none, kinds in ((0.6, ["discard"]), (0.05, ["add"])):
        llm = KeepScored(["提前告知维修时间"], 0.99, p_none, name="维修通知")
        actions = Pipeline(SkillBank(tmp_path / f"b{p_none}"), "default", LLMClient(llm)).run(
            said, "turn")
        assert [a.kind for a in actions] == kinds, [(a.kind, a.reason) for a in actions]
        assert "quote" in llm.calls and ("keep" in llm.calls) == (kinds == ["add"])
    # one sentence, after an earlier turn: "none" is a yes/no on it (a small model leans to
    # "none" on lone firm facts), not a pick among sentences: the keep check decides
    llm = KeepScored(["Skip water trips"], 0.99, 0.6, name="Water fear")
    actions = Pipeline(SkillBank(tmp_path / "lone"), "default", LLMClient(llm)).run(
        [U("Hi there."), A("Hello! How can I help?"), U("I'm terrified of deep water.")],
        "turn")
    assert [a.kind for a in actions] == ["add"] and "keep" in llm.calls, \
        [(a.kind, a.reason) for a in actions]
    assert "- Skip water trips" in actions[0].skill.instructions.splitlines()


@pytest.mark.parametrize("p_none, rule", [
    (0.6, "I'm terrified of deep water."),  # triage's P (0.86) outweighs P(none): the sentence
    (0.95, "Skip boat trips and beach days")])  # P(none) outweighs it: the keep check decides
def test_an_openings_one_sentence_is_the_rule_where_triage_outweighs_none(tmp_path, p_none,
                                                                          rule):
    """A lone firm fact opens the conversation and the model's rule shares none of its words:
    where triage's P outweighs the quote step's P(none), the user's one sentence is the rule
    (no majority asked of a yes/no) and the keep check is not asked about the model's own
    wording; where it does not, the keep check decides on that wording."""
    llm = KeepScored(["Skip boat trips and beach days"], 0.99, p_none, name="Water fear")
    actions = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run(
        [U("I'm terrified of deep water.")], "turn")
    assert ("keep" in llm.calls) is (p_none > 0.86)
    assert [a.kind for a in actions] == ["add"], [(a.kind, a.reason) for a in actions]
    assert f"- {rule}" in actions[0].skill.instructions.splitlines()


class BothScored(Scored):
    """Triage says durable with probability ``p_durable`` (every read), extraction "a skill"
    with ``p_skill``, the sentence is about the writer with ``p_mine``; every later turn is
    wanted again."""

    def __init__(self, sc, p_durable: float, p_skill: float, p_mine: float = 0.5):
        super().__init__(1 - p_durable, scenario=sc)
        self.p_skill, self.p_mine = p_skill, p_mine

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        if prefix == '{"skills":':
            self.calls.append("extract-score")
            rest = self.p_skill / (len(options) - 1)
            return {o: math.log(1 - self.p_skill if o == " []" else rest) for o in options}
        if prefix.startswith('{"who"'):
            self.calls.append("mine")
            return {"me": math.log(self.p_mine), "always": -30.0,
                    "other": math.log((1 - self.p_mine) / 2),
                    "request": math.log((1 - self.p_mine) / 2), "usual": -30.0}
        return super().choice_logprobs(messages, prefix, options, cancel)


@pytest.mark.parametrize("p_durable, p_skill, p_mine, opening, later", [
    (0.6, 0.5, 0.2, False, True),   # not the writer's: not at the opening; later bars pass
    (0.5, 0.5, 0.99, True, True),   # about the writer, sure: the opening goes on
    (0.8, 0.5, 0.05, False, True),  # triage fairly sure, but someone else's: not at the opening
    (0.85, 0.5, 0.5, True, True),   # triage sure: past a middling third read
    (0.6, 0.2, 0.2, False, False)])  # below extraction's bar, not the writer's: nowhere
def test_the_opening_is_decided_by_one_score_fitted_on_its_three_reads(
        tmp_path, p_durable, p_skill, p_mine, opening, later):
    """The conversation's opening message goes on where the logistic fit of triage's reads and
    P(about the writer) reaches its bar (``opening_p``), without extraction's first decision;
    a later turn keeps its own gates (the lasting check, then extraction's bar) and is not
    asked whether it is about the writer."""
    sc = {"expect": [{"outcome": "add", "name": "Water fear", "evidence": "deep water",
                      "constraints": ["No boat trips"], "keywords": ["boat"]}]}
    said = "I'm terrified of deep water, so no boat trips on this holiday in Crete."
    for msgs, written in (([U(said)], opening),
                          ([U("Plan a week in Crete."), A("Day 1: ..."), U(said)], later)):
        llm = BothScored(sc, p_durable, p_skill, p_mine)
        pipe = Pipeline(SkillBank(tmp_path / f"b{len(msgs)}"), "default", LLMClient(llm))
        actions = pipe.run(msgs, "turn")
        at_opening = len(msgs) == 1
        assert ("extract-score" in llm.calls) is not at_opening
        assert ("mine" in llm.calls) is at_opening
        assert any(a.kind == "add" for a in actions) is written, \
            [(a.kind, a.reason) for a in actions]


@pytest.mark.parametrize("p_durable, p_mine, written", [
    (0.6, 0.2, False),   # past triage's bar, but not the opening's fit
    (0.85, 0.99, True)])
def test_an_opening_cue_words_find_is_decided_by_the_openings_fit(tmp_path, p_durable,
                                                                 p_mine, written):
    """A cue word ("wrong") finds the opening: cue words may take a turn to the model, never
    past it, so the opening's fitted score decides, as where the model's triage found it."""
    said = "My new glasses keep sliding down my nose when I read. What am I doing wrong?"
    from engine.learning import triage
    assert triage.signal(said).correction  # the cue words' path
    sc = {"expect": [{"outcome": "add", "name": "Glasses fit", "evidence": "sliding",
                      "constraints": ["Check how the glasses fit"], "keywords": ["glasses"]}]}
    llm = BothScored(sc, p_durable, 0.99, p_mine)
    actions = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run([U(said)],
                                                                                "turn")
    assert "mine" in llm.calls
    assert any(a.kind == "add" for a in actions) is written, \
        [(a.kind, a.reason) for a in actions]


class FactBeside(FixedExtract):
    """FixedExtract on a backend that reads token scores: triage says durable with P
    ``p_fact`` of a message that holds ``fact``, 0.3 of any other (``p_whole``, where given,
    of the whole two-sentence message); extraction "a skill" with P ``p_skill``; the quote
    step "none" and the keep check no; a sentence that holds ``fact`` is about the writer with
    P ``p_mine``, any other 0.3. Keeps the evidence and context of every extraction.
    ``kind``: the durable kind triage finds likeliest for the sentence that holds ``fact``
    (None: all six alike)."""

    def __init__(self, rules, fact, p_fact=0.95, p_whole=None, p_skill=0.99, kind=None,
                 p_mine=0.9, **kw):
        super().__init__(rules, **kw)
        self.fact, self.p_fact, self.p_whole, self.prompts = fact, p_fact, p_whole, []
        self.p_skill, self.kind, self.p_mine = p_skill, kind, p_mine

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        said = messages[-1]["content"]
        if prefix.startswith('{"kind"'):
            said = said.rsplit("\n", 1)[-1].split(". ", 1)[-1]  # "1. <the message>"
            p = (self.p_fact if self.fact in said else 0.3) if self.p_whole is None or \
                said.count(".") < 2 else self.p_whole  # the whole message: two sentences
            share = {o: 1 / 6 for o in options if o != "none"}
            if self.kind is not None and self.fact in said:
                share = {o: 0.5 if o == self.kind else 0.1 for o in share}
            return {o: math.log(1 - p if o == "none" else p * share[o]) for o in options}
        if prefix.startswith(('{"sentence"', '{"keep"')):
            return {o: math.log(0.9 if o in ("0", "no") else 0.1 / (len(options) - 1))
                    for o in options}
        if prefix.startswith('{"who"'):
            p = self.p_mine if self.fact in said else 0.3
            return {"me": math.log(p), "always": -30.0, "other": math.log(1 - p),
                    "request": -30.0, "usual": -30.0}
        rest = self.p_skill / (len(options) - 1)  # extraction
        return {o: math.log(1 - self.p_skill if o == " []" else rest) for o in options}

    def structured(self, messages, schema, params=None, cancel=None):
        if "skills" in set(schema.get("properties") or {}):
            self.prompts.append(messages[-1]["content"])
        return super().structured(messages, schema, params, cancel)


@pytest.mark.parametrize("said, fact, word", [
    # the request is a question (never a rule): the one other sentence is the evidence
    ("Any ideas for a night out on saturday? I've got tinnitus, so anywhere loud is out.",
     "I've got tinnitus, so anywhere loud is out.", "tinnitus"),
    # two statements: the one triage, reading each alone, finds likeliest to last
    ("Plan a day trip from Leeds for me and my wife. I've got a bad knee, so no long walks.",
     "I've got a bad knee, so no long walks.", "knee"),
    ("我有日光性皮炎，晒不了太阳。七月带我妈去厦门玩三天，帮我排一下路线。", "我有日光性皮炎，晒不了太阳。",
     "日光性皮炎")])
def test_an_openings_fact_beside_its_request_is_extracted_alone(tmp_path, said, fact, word):
    """A conversation opens with a request and a fact about the user beside it: extraction
    reads the fact's sentence as the evidence and the rest of the message as context (read
    whole, Qwen-1.5B wrote the request's task skill: "Tent selection"), and where the model's
    rule is not grounded in the user's words, the fact's sentence is the rule."""
    llm = FactBeside(["Suggest places with seating"], word, name="Outings")
    actions = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run([U(said)],
                                                                                "turn")
    context, evidence = re.split("User messages:|用户消息：", llm.prompts[-1])
    assert evidence.strip() == f"1. {fact}"
    assert said.replace(fact, "").split()[0] in context
    assert [a.kind for a in actions] == ["add"], [(a.kind, a.reason) for a in actions]
    assert f"- {fact}" in actions[0].skill.instructions.splitlines()
    # a rule the user's sentence grounds stays the model's
    llm = FactBeside(["Avoid long walks" if "knee" in fact else "Avoid loud places"], word,
                     name="Outings")
    if "日光" not in fact:
        [add] = Pipeline(SkillBank(tmp_path / "c"), "default", LLMClient(llm)).run([U(said)],
                                                                                  "turn")
        assert add.kind == "add" and "- Avoid " in add.skill.instructions


class FactRestated(FactBeside):
    """FactBeside whose model, asked for the fact alone (fact.md), answers ``restated``."""

    def __init__(self, rules, fact, restated, **kw):
        super().__init__(rules, fact, **kw)
        self.restated = restated

    def structured(self, messages, schema, params=None, cancel=None):
        if set(schema.get("properties") or {}) == {"fact"}:
            self.calls.append("fact")
            return {"fact": self.restated}
        return super().structured(messages, schema, params, cancel)


STORY = ("Any ideas for a night out on saturday? I've got tinnitus since the Leeds gig in 2019, "
         "a club or a gig sets it off screaming for days.")


@pytest.mark.parametrize("restated, rule", [
    # the fact without the story of this one occasion: the rule and the skill's description
    ("The user has tinnitus: a club or a gig sets it off.",
     "The user has tinnitus: a club or a gig sets it off."),
    # in words the user never said (another language is none of theirs either): the user's
    # sentence, as before
    ("用户有耳鸣。", None),
    ("The user enjoys quiet museums and libraries.", None)])
def test_an_openings_fact_is_the_rule_without_its_story(tmp_path, restated, rule):
    """A fact beside the opening's request whose model rule is not grounded in the user's
    words: the model's statement of the fact without its story (fact.md) is the rule where
    the user's words ground it; otherwise the user's sentence, story and all."""
    said = STORY.split("? ", 1)[1]
    llm = FactRestated(["Suggest quiet venues"], "tinnitus", restated, name="Night out")
    [add] = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run([U(STORY)],
                                                                              "turn")
    assert add.kind == "add" and "fact" in llm.calls, add.reason
    rules = [line[2:] for line in add.skill.instructions.splitlines() if line.startswith("- ")]
    assert rules == [rule or said]
    if rule is not None:
        assert add.skill.description == rule
        s = add.skill
        written = "\n".join([s.title, s.description, s.instructions, *s.triggers]).lower()
        assert not [w for w in ("leeds", "2019", "screaming") if w in written], written


@pytest.mark.parametrize("restated, fact_is_rule", [
    ("The user has tinnitus: a club or a gig sets it off.", True),
    ("用户有耳鸣。", False)])  # words the user never said: the model's rule stands
def test_an_openings_fact_is_said_without_its_story_where_the_models_rule_passes_too(
        tmp_path, restated, fact_is_rule):
    """The model's rule for a fact beside the opening's request passes the checks, but it is
    one case of the fact, or its story ("Avoid tasks that require two hands" for "I've only
    got the one arm, lost the other in a farm accident…"; read fresh53-66): the fact said
    without its story is the rule and the description wherever it passes the checks too."""
    llm = FactRestated(["Avoid a club or a gig"], "tinnitus", restated, name="Night out")
    [add] = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run([U(STORY)],
                                                                              "turn")
    assert add.kind == "add" and llm.calls.count("fact") == 1, add.reason
    rules = [line[2:] for line in add.skill.instructions.splitlines() if line.startswith("- ")]
    assert (rules == [restated]) is fact_is_rule, rules
    assert (add.skill.description == restated) is fact_is_rule
    if not fact_is_rule:
        assert rules and "用户" not in "".join(rules)


WARFARIN = ("Any herbal teas to help me wind down at night? I'm on warfarin for life after a "
            "clot on my lung so anything that messes with blood thinners is out.")


@pytest.mark.parametrize("restated, rule", [
    ("The user is on warfarin: anything that messes with blood thinners is out.",
     "The user is on warfarin: anything that messes with blood thinners is out."),
    ("用户在吃抗凝药。", None)])  # words the user never said: their sentence, as before
def test_an_openings_fact_the_user_said_better_is_said_without_its_story(tmp_path, restated,
                                                                        rule):
    """The model's rule for a fact beside the opening's request is grounded but drops what
    the user said ("Avoid blood thinners"), so the user's sentence would win
    (:func:`in_user_words`), story and all ("a clot on my lung"): the fact said without its
    story is the rule and the description where the user's words ground it."""
    said = WARFARIN.split("? ", 1)[1]
    llm = FactRestated(["Avoid blood thinners"], "warfarin", restated, name="Warfarin")
    [add] = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run([U(WARFARIN)],
                                                                              "turn")
    assert add.kind == "add" and llm.calls.count("fact") == 1, add.reason
    rules = [line[2:] for line in add.skill.instructions.splitlines() if line.startswith("- ")]
    assert rules == [rule or said]
    assert (add.skill.description == rule) is (rule is not None)


@pytest.mark.parametrize("p_fact, written", [(0.9, True), (0.45, False)])
def test_the_opening_gate_reads_the_likeliest_sentence_alone(tmp_path, p_fact, written):
    """Triage read the whole opening (a request and a fact beside it) at 0.45, past its own
    bar, and whether the fact is the writer's is a toss-up (0.5): the gate goes on where the
    fact's sentence read alone is likely to last (0.9), and stops where it is no likelier
    than the whole (:func:`opening_p`'s second read)."""
    said = "Plan a day trip from Leeds for me and my wife. I've got a bad knee, so no long walks."
    llm = FactBeside(["Avoid long walks"], "knee", p_fact=p_fact, p_whole=0.45, p_skill=0.86,
                     name="Outings", p_mine=0.5)
    actions = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run([U(said)],
                                                                                "turn")
    assert any(a.kind == "add" for a in actions) is written, [(a.kind, a.reason) for a in actions]


def test_the_opening_gate_reads_a_chinese_run_on_sentence_by_its_topic_chains():
    """A Chinese sentence is read clause by clause; a clause that does not name the writer is
    read after the clause that starts its chain (the subject it drops); English whole."""
    assert topic_chain("我婆婆糖尿病十来年了，一天打两回胰岛素，这周末来我家住，帮我排三顿饭") == [
        "我婆婆糖尿病十来年了", "我婆婆糖尿病十来年了，一天打两回胰岛素", "这周末来我家住", "帮我排三顿饭"]
    assert topic_chain("五一去青岛，我晕船，坐船就吐") == ["五一去青岛", "我晕船", "我晕船，坐船就吐"]
    assert topic_chain("I've got a bad knee, so no long walks.") == [
        "I've got a bad knee, so no long walks."]


class OtherLikelier(FactBeside):
    """FactBeside whose opening also holds a sentence about someone else (one that holds
    ``other``): triage, reading it alone, finds it likelier to last (0.95) than the writer's
    own fact, and it is not the writer's own (P 0.02)."""

    def __init__(self, rules, fact, other, **kw):
        super().__init__(rules, fact, **kw)
        self.other = other

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        said = messages[-1]["content"]
        if self.other in said and self.fact not in said:
            if prefix.startswith('{"kind"'):
                return {o: math.log(0.05 if o == "none" else 0.95 / (len(options) - 1))
                        for o in options}
            if prefix.startswith('{"who"'):
                return {"me": math.log(0.02), "always": -30.0, "other": math.log(0.98),
                        "request": -30.0, "usual": -30.0}
        return super().choice_logprobs(messages, prefix, options, cancel)


def test_the_opening_gate_reads_the_writers_own_sentence_not_the_likeliest(tmp_path):
    """In a story, a sentence about someone else reads likelier to last (0.95) than the
    writer's own fact (0.7): the gate weighs every sentence (its P times P(the writer's own),
    :func:`opening_p`), goes on with the writer's, and extraction reads that one alone."""
    fact = "I can't eat anything spicy since my operation."
    said = (f"My brother-in-law is badly allergic to shellfish and he's staying all week. {fact}"
            " What should I cook?")
    llm = OtherLikelier(["Cook nothing spicy"], "spicy", "shellfish", p_fact=0.7, p_whole=0.6,
                        kind="constraint", name="Cooking")
    actions = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run([U(said)],
                                                                                "turn")
    assert [a.kind for a in actions] == ["add"], [(a.kind, a.reason) for a in actions]
    assert re.split("User messages:|用户消息：", llm.prompts[-1])[1].strip() == f"1. {fact}"


def test_an_opening_whose_other_words_say_nothing_is_read_whole(tmp_path):
    """The rest of the opening is no request ("Ok?"): the message is read whole, with no
    empty context line."""
    llm = FactBeside(["Avoid meat"], "vegan", name="Vegan")
    Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run(
        [U("I'm strictly vegan. Ok?")], "turn")
    assert llm.prompts[-1].rstrip().endswith("1. I'm strictly vegan. Ok?")
    assert "Earlier user messages" not in llm.prompts[-1]


def test_an_openings_rule_about_its_own_task_is_read_with_the_request(tmp_path):
    """The likeliest sentence shares the request's task word ("summary"): it is a rule about
    that task, not a fact beside it, and extraction reads the whole message."""
    said = "Summarize the minutes for me. Start every summary with a one-line TL;DR."
    llm = FactBeside(["Start every summary with a one-line TL;DR"], "TL;DR", name="Summaries")
    Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run([U(said)], "turn")
    assert llm.prompts[-1].rstrip().endswith(f"1. {said}")


@pytest.mark.parametrize("kind, alone", [("constraint", True), ("rule", False)])
def test_an_openings_fact_that_shares_a_word_with_its_request_is_read_alone(tmp_path, kind,
                                                                            alone):
    """The likeliest sentence shares a word with the request ("two"): where triage, reading
    it alone, finds it likeliest a constraint (a fact about the user), it is the evidence and
    the request its context; where a rule, it is about the request's task and read whole."""
    fact = "I've only got the one arm, so nothing that needs two hands."
    said = f"Plan me two weeks of things to do with the grandkids. {fact}"
    llm = FactBeside(["Suggest things to do one-handed"], "one arm", kind=kind,
                     name="One-handed")
    Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run([U(said)], "turn")
    evidence = re.split("User messages:|用户消息：", llm.prompts[-1])[1].strip()
    assert evidence == (f"1. {fact}" if alone else f"1. {said}"), evidence


def test_an_openings_fact_is_read_alone_where_cue_words_let_the_opening_on(tmp_path):
    """Cue words let the opening on ("that's not", a correction's, in the fact's story), not
    the model's triage: its fact is read apart from the request all the same."""
    fact = "I've got a bad knee, that's not going to change, so no long walks."
    said = f"Plan a day trip for me and my wife this weekend. {fact}"
    from engine.learning import triage
    assert triage.signal(said).correction  # the cue words' path, not the opening gate's
    llm = FactBeside(["Avoid long walks"], "knee", kind="constraint", name="Outings")
    Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run([U(said)], "turn")
    evidence = re.split("User messages:|用户消息：", llm.prompts[-1])[1].strip()
    assert evidence == f"1. {fact}", evidence


def test_a_cue_word_in_the_request_beside_an_openings_fact_makes_no_rule(tmp_path):
    """The cue word sits in the request ("always"), the opening's fact is read apart from
    it: the user's own rule sentences are taken from the fact, so the request is no rule."""
    said = "Plan our dinners for the week, always with a pudding. I'm coeliac, so no gluten."
    from engine.learning import triage
    assert triage.signal(said).preference
    llm = FactBeside(["Nothing with gluten"], "coeliac", kind="constraint", name="Coeliac")
    [add] = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run([U(said)],
                                                                              "turn")
    assert add.kind == "add", add.reason
    assert "pudding" not in add.skill.instructions, add.skill.instructions


def test_a_later_turns_evidence_is_the_whole_turn(tmp_path):
    """Only the conversation's opening is cut to its fact: a later turn already has its
    request before it, as context."""
    llm = FactBeside(["Suggest places with seating"], "knee", name="Outings")
    said = "Plan a day trip for me and my wife. I've got a bad knee, so no long walks."
    Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(llm)).run(
        [U("Hi!"), A("Hello! How can I help?"), U(said)], "turn")
    assert llm.prompts and llm.prompts[-1].rstrip().endswith(f"1. {said}")


class QuoteScored(FixedExtract):
    """FixedExtract on a backend that reads token scores: triage says durable with
    probability ``p_triage``, extraction "a skill", the keep check no, and the quote step
    (quote.md) points at the option whose text holds ``word`` (None: at "no sentence") with
    probability ``p_quote``;
    a later turn is wanted again (lasting.md) with probability ``p_again``. ``p_always``: the
    opening gate's "who" read (mine.md) finds a sentence that holds ``word`` a standing
    instruction of the writer's with this probability, any other a request (None: no such
    reads)."""

    def __init__(self, rules, word, p_quote, p_triage=0.9, p_again=0.9, p_always=None, **kw):
        super().__init__(rules, **kw)
        self.word, self.p_quote, self.p_triage, self.p_again = word, p_quote, p_triage, p_again
        self.p_always = p_always
        self.options: list[str] = []

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        if prefix.startswith('{"who"') and self.p_always is not None:
            said = messages[-1]["content"]
            p = self.p_always if self.word is not None and self.word in said else 0.02
            return {o: math.log({"always": p, "request": 1 - p}.get(o, 1e-9)) for o in options}
        if prefix.startswith('{"sentence"'):
            self.calls.append("quote")
            shown = messages[-1]["content"].rsplit("Sentences:", 1)[1].strip().splitlines()
            self.options = [line.split(". ", 1)[1] for line in shown]
            pick = "0" if self.word is None else next(
                str(i) for i, o in enumerate(self.options, 1) if self.word in o)
            rest = (1 - self.p_quote) / (len(options) - 1)
            return {o: math.log(self.p_quote if o == pick else rest) for o in options}
        if prefix.startswith('{"kind"'):
            return {o: math.log(1 - self.p_triage if o == "none" else self.p_triage / 6)
                    for o in options}
        if prefix.startswith('{"keep"'):
            self.calls.append("keep")
            return {o: math.log(0.1 if o == "yes" else 0.9) for o in options}
        if prefix.startswith('{"scope"'):
            self.calls.append("lasting")
            return {"every": math.log(self.p_again), "this": math.log(1 - self.p_again)}
        return {o: math.log(0.01 if o == " []" else 0.99) for o in options}  # extraction


PERSONA = [U("How do I keep basil alive on a windowsill?"), A("Water it when the soil is dry."),
           U("Dull. Explain things to me like an overexcited sports commentator. "
             "Whatever I ask, I want that voice.")]


@pytest.mark.parametrize("p_quote,p_triage,rule", [
    (0.8, 0.9, "Explain things to me like an overexcited sports commentator."),
    (0.4, 0.9, None),    # the model is not sure which sentence: the paraphrase goes
    (0.8, 0.5, None)])   # triage let the turn through, but not surely: no rescue is asked
def test_a_paraphrased_persona_is_the_users_sentence_the_model_points_at(
        tmp_path, p_quote, p_triage, rule):
    """The model's rule lost what the user asked for ("Use an energetic tone" for a sports
    commentator) and shares no two words with any sentence of theirs: the quote step picks
    the user's own sentence, which is grounded by construction; questions are no option."""
    llm = QuoteScored(["Use an energetic, upbeat tone"], "commentator", p_quote, p_triage,
                      name="Energetic tone")
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(
        PERSONA, "turn")
    if rule is None:  # (the quote step is asked in the last case too, whether it says none)
        assert [a.kind for a in actions] == ["discard"]
        return
    assert [a.kind for a in actions] == ["add"] and "quote" in llm.calls
    assert rule in actions[0].skill.instructions
    assert "basil" not in actions[0].skill.instructions.lower()
    assert llm.options == ["Dull.", rule, "Whatever I ask, I want that voice."]


@pytest.mark.parametrize("word", [None, "别扣"])
def test_the_cue_word_fallback_never_overrules_the_models_none(tmp_path, word):
    """A one-off request with a "don't" in it (read fresh33, Qwen2.5-Coder-1.5B): the model's
    rule is not grounded and the model, asked which sentence should last, answers none; the
    cue-word fallback then writes nothing (it had made the whole message a skill's rule).
    Where the model points at the clause, that clause is the rule. (The opening gate reads
    the sentence clause by clause, :func:`topic_chain`: each is a request unless it holds
    ``word``, which is the writer's standing instruction.)"""
    said = [U("帮我跟健身房的私教小周说一声，这次周四晚上的课我请个假，孩子发烧得在家看着，"
              "课往后顺延一节就行，别扣我课时")]
    llm = QuoteScored(["提供请假信息"], word, 0.8, name="请假", p_always=0.9)
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(said, "turn")
    if word is None:
        assert [a.kind for a in actions] == ["discard"], [(a.kind, a.reason) for a in actions]
        return
    assert [a.kind for a in actions] == ["add"], [(a.kind, a.reason) for a in actions]
    assert "- 别扣我课时" in actions[0].skill.instructions.splitlines()


def test_the_quote_step_offers_each_chinese_clause_alone(tmp_path):
    """A Chinese sentence runs clauses together with "，": each is an option, so the rule is
    the clause that says it, not the personal detail beside it."""
    said = [U("复利是什么意思？"), A("复利就是利滚利。"),
            U("听不懂。我是开网店的，你给我打个生活里的比方，讲得跟聊天一样。")]
    llm = QuoteScored(["用简单易懂的语言解释"], "比方", 0.8, name="通俗解释")
    [add] = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(said, "turn")
    assert llm.options == ["听不懂。", "我是开网店的", "你给我打个生活里的比方", "讲得跟聊天一样。"]
    assert add.kind == "add" and "你给我打个生活里的比方" in add.skill.instructions
    assert "网店" not in add.skill.instructions


TWEAK = [U("Write a leaving card message for Dave from the warehouse."), A("Dear Dave, ..."),
         U("Too formal, he's a laugh. Make it cheeky and mention his forklift.")]


@pytest.mark.parametrize("p_triage, p_again, learned", [
    (0.6, 0.1, False),   # P(about every piece of that work) below LASTING_MIN_P
    (0.9, 0.2, False),   # however sure triage is
    (0.6, 0.45, True),   # past the bar
    (0.3, 0.45, True)])  # below triage's own bar for openings
def test_a_later_turn_goes_on_only_where_it_is_about_every_piece_of_that_work(
        tmp_path, p_triage, p_again, learned):
    """A later turn ("make it cheeky"): the model is asked whether what it says is about
    this answer only or about every future piece of that work, reading the turn alone (read
    after the request, it separated less); its P decides, whatever triage's P."""
    llm = QuoteScored(["Make the message cheeky"], "", 0.0, p_triage, p_again, name="Cheeky")
    asked = []
    real = llm.choice_logprobs

    def spy(messages, prefix, options, cancel=None):
        if prefix.startswith('{"scope"'):
            asked.append(messages[-1]["content"])
        return real(messages, prefix, options, cancel)

    llm.choice_logprobs = spy
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(
        TWEAK, "turn")
    assert ("extract" in llm.calls) == learned, (llm.calls, [a.reason for a in actions])
    assert llm.calls.count("lasting") == 1  # the opening gets the opening check instead
    assert asked == ["Earlier: \n"
                     "Newest: Too formal, he's a laugh. Make it cheeky and mention his forklift."]


CUED = [U("Book a table for six on Friday."), A("Done: Luigi's, 7 pm."),
        U("Never pick places with loud music, I can't hear a word in them.")]


@pytest.mark.parametrize("p_triage, p_again, learned", [
    (0.3, 0.9, True),    # about every such booking: on, though triage reads it low
    (0.9, 0.1, False)])  # about this case only ("way too soppy for Steve…"): stopped
def test_cue_words_take_a_later_turn_to_the_lasting_check(tmp_path, p_triage, p_again,
                                                          learned):
    """A "never" finds a later turn: the model is still asked (cue words are ambiguous:
    "以后" is also "after", "always" also a problem that keeps happening), and the lasting
    check decides, as for a turn cue words did not find, whatever triage's P."""
    llm = QuoteScored(["Avoid places with loud music"], "", 0.0, p_triage, p_again=p_again,
                      name="Quiet places")
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(CUED, "turn")
    assert ("extract" in llm.calls) == learned, (llm.calls, [a.reason for a in actions])
    assert llm.calls.count("lasting") == 1
    # remembered, the user's word stands: no triage is asked at all
    llm = QuoteScored(["Avoid places with loud music"], "", 0.0, 0.1, name="Quiet places")
    seen = []
    real = llm.choice_logprobs
    llm.choice_logprobs = lambda m, prefix, o, c=None: (seen.append(prefix), real(m, prefix, o, c))[1]
    Pipeline(SkillBank(tmp_path / "bank2"), "default", LLMClient(llm)).run(CUED, "remember")
    assert "extract" in llm.calls and not any(p.startswith('{"kind"') for p in seen)


@pytest.mark.parametrize("split", [s for s in SPLITS if s.startswith("fresh")])
def test_the_fresh_sets_load_by_split_and_cover_what_the_issue_names(split):
    from bench.learning_scenarios import load_scenarios
    from engine.text import normalize

    rows = load_scenarios(split=split)
    assert len(rows) >= 20 and rows == load_scenarios("people", split=split)
    assert {r["split"] for r in rows} == {split} and {r["lang"] for r in rows} == {"en", "zh"}
    assert sum(1 for r in rows if not r["expect"]) >= 6
    assert {"firm", "no-cue", "format-twice", "merge", "contradict", "two-tasks"} <= {
        r["kind"] for r in rows}
    for r in rows:  # the oracle can answer every item: its evidence is in the user's words
        said = normalize(" ".join(m["content"] for m in r["messages"] if m["role"] == "user"))
        assert all(normalize(e["evidence"]) in said for e in r["expect"]), r["id"]


def test_scenarios_load_from_several_sets_by_kind():
    from bench.learning_scenarios import load_scenarios

    rows = load_scenarios("people_fresh10,people_fresh11", kinds=["merge", "contradict"])
    assert {r["split"] for r in rows} == {"fresh10", "fresh11"}
    assert {r["kind"] for r in rows} == {"merge", "contradict"} and len(rows) == 8


class ReplaceScored(OracleLLM):
    """An oracle that reads the replace check's answer as a probability: P(yes) is ``p`` for
    a saved rule holding ``word``, 0.05 for any other. ``leave_out``: the merge answer leaves
    out the saved rules holding ``word`` (as the model does when it reads a contradiction)."""

    def __init__(self, word: str, p: float, leave_out: bool = False):
        super().__init__({"expect": []})
        self.word, self.p, self.leave_out, self.asked = word, p, leave_out, []

    def _merge(self, prompt):
        out = super()._merge(prompt)
        if self.leave_out:
            out["constraints"] = [r for r in out["constraints"] if self.word not in r]
        return out

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        assert prefix == '{"replaces": "' and set(options) == {"yes", "no"}
        rule = messages[-1]["content"].rsplit("Saved rule:", 1)[1]
        self.asked.append(rule.strip())
        yes = self.p if self.word in rule else 0.05
        return {"yes": math.log(yes), "no": math.log(1 - yes)}


@pytest.mark.parametrize("p,leave_out,dropped", [(0.9, True, True), (0.2, True, False),
                                                 (0.9, False, True), (0.6, False, False)])
def test_a_merge_drops_the_old_rule_the_users_new_message_replaces(tmp_path, p, leave_out,
                                                                    dropped):
    """Every old rule is asked about, and the one the replace check ranks first goes when its
    P reaches the bar, whether the merge model left it out or kept it (the 1.5B merge model
    kept the contradicted rule in 15 of 16 read contradiction scenarios)."""
    bank = SkillBank(tmp_path / "bank")
    chart = bank.create(Candidate(name="Chore charts", description="Chore charts.",
                                  constraints=["One column per child",
                                               "A reward star for each chore done"],
                                  triggers=["make a chore chart"]).to_skill(), "default")
    new = Candidate(name="Chore charts", description="Pay per chore.",
                    constraints=["Next to each chore, show what it pays"],
                    said="The stars stopped working. We've switched to pocket money, so next "
                         "to each chore put what it pays instead.")
    llm = ReplaceScored("star", p, leave_out)
    pipe = Pipeline(bank, "default", LLMClient(llm))
    pipe.checkpoint = lambda: None
    done = pipe.merge(new, chart, None, "same task",
                      asked=f"Make this week's chore chart for the kids / {new.said}")
    body = bank.read(done.skill.path).instructions
    assert "what it pays" in body and "One column per child" in body
    assert ("reward star" in body) is not dropped
    assert llm.asked == ["One column per child", "A reward star for each chore done"]
    assert any("replaced rule" in n for n in done.notes) is dropped
    assert bank.read(done.skill.path).description == "Chore charts."  # never "Pay per chore."
    assert done.replaced == (["A reward star for each chore done"] if dropped else [])
    # the event log the Learning panel shows says so
    assert ("replaced rule 'A reward star" in event_reason(done)) is dropped
    assert done.previous_version  # the old wording is one undo away


class ReplaceScoredMany(ReplaceScored):
    """P(yes) per saved rule from ``scores`` (by a word the rule holds), 0.05 for the rest."""

    def __init__(self, scores: dict[str, float], leave_out: str = ""):
        super().__init__(leave_out or "\x00", 0.0, bool(leave_out))
        self.scores = scores

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        rule = messages[-1]["content"].rsplit("Saved rule:", 1)[1]
        self.asked.append(rule.strip())
        yes = next((p for w, p in self.scores.items() if w in rule), 0.05)
        return {"yes": math.log(yes), "no": math.log(1 - yes)}


def _merged_rules(tmp_path, rules, llm):
    bank = SkillBank(tmp_path / "bank")
    skill = bank.create(Candidate(name="Class emails", description="Class emails.",
                                  constraints=rules, triggers=["email the class"]).to_skill(),
                        "default")
    new = Candidate(name="Class emails", description="Class emails.",
                    constraints=["Say there is no class on bank holidays"],
                    said="put in that there's no class on bank holidays")
    pipe = Pipeline(bank, "default", LLMClient(llm))
    pipe.checkpoint = lambda: None
    done = pipe.merge(new, skill, None, "same task",
                      asked=f"email the class about next week / {new.said}")
    return bank.read(done.skill.path).instructions


def test_a_merge_takes_back_one_rule_at_most_the_one_ranked_first(tmp_path):
    """A message that adds a detail still scores 0.5-0.7 on some rules (read fresh37-52): two
    rules over the bar, only the first goes."""
    body = _merged_rules(tmp_path, ["Bring a yoga mat", "Say the start time", "Say the room"],
                         ReplaceScoredMany({"mat": 0.8, "room": 0.7}))
    assert "yoga mat" not in body and "the room" in body and "start time" in body
    assert "bank holidays" in body


@pytest.mark.parametrize("leave_out,stays", [("", True), ("mat", False)])
def test_the_only_rule_of_a_skill_goes_only_where_the_merge_left_it_out(tmp_path, leave_out,
                                                                        stays):
    """One rule has nothing to be ranked against: a second fact of one area judged the same
    task scores high on it too. It goes where the merge model left it out as well."""
    body = _merged_rules(tmp_path, ["Bring a yoga mat"],
                         ReplaceScoredMany({"mat": 0.9}, leave_out=leave_out))
    assert ("yoga mat" in body) is stays and "bank holidays" in body


@pytest.mark.parametrize("request_first,leave_out,asked", [
    (False, "", []), (False, "gluten", []), (False, "peanuts", []),
    (True, "", ["Never suggest gluten-containing foods", "Avoid all foods containing peanuts"])])
def test_a_fact_said_alone_is_not_asked_whether_it_takes_a_rule_back(tmp_path, request_first,
                                                                     leave_out, asked):
    """The replace check reads one fact as taking back another of its area (read PrefEval
    620..659: a shellfish allergy scored 0.75 and 0.74 on a gluten and a peanut rule). Said
    alone, a fact is not asked about and no rule goes, not even one the merge model left out
    that shares its words ("foods containing"); said for a request (a follow-up in a task),
    every rule is asked and the one ranked first goes."""
    bank = SkillBank(tmp_path / "bank")
    food = bank.create(Candidate(name="Foods to avoid", description="Foods the user avoids.",
                                 constraints=["Never suggest gluten-containing foods",
                                              "Avoid all foods containing peanuts"],
                                 triggers=["suggest a recipe"]).to_skill(), "default")
    said = "I have a severe allergy to shellfish, so I cannot eat any seafood."
    new = Candidate(name="Foods to avoid", description="Foods the user avoids.",
                    constraints=["Avoid all foods containing seafood or shellfish"], said=said)
    llm = ReplaceScoredMany({"gluten": 0.75, "peanuts": 0.74}, leave_out=leave_out)
    pipe = Pipeline(bank, "default", LLMClient(llm))
    pipe.checkpoint = lambda: None
    done = pipe.merge(new, food, None, "same task",
                      asked=f"plan dinners for the week / {said}" if request_first else said)
    body = bank.read(done.skill.path).instructions
    assert llm.asked == asked
    assert "seafood" in body and "peanuts" in body
    assert ("gluten" in body) is not request_first
    assert done.replaced == (["Never suggest gluten-containing foods"] if request_first else [])


def test_bench_replace_labels_the_contradicted_rule_and_tabulates_bars():
    from bench.replace import auc, pairs
    from bench.replace import table as replace_table

    sc = {"id": "x", "bank": [{"name": "Chore charts",
                               "constraints": ["One column per child", "A star per chore"]}],
          "messages": [U("Make the chart."), A("…"), U("We've switched to pocket money.")],
          "expect": [{"outcome": "merge", "into": "Chore charts", "evidence": "pocket money",
                      "absent": ["star"]}]}
    rows = pairs([sc])
    assert [(r["rule"], r["replaced"]) for r in rows] == [("One column per child", False),
                                                          ("A star per chore", True)]
    assert all(r["said"] == "We've switched to pocket money." for r in rows)
    rows[0]["p"], rows[1]["p"] = 0.4, 0.8
    assert auc(rows) == 1.0
    text = replace_table(rows, bars=(0.5, 0.9))
    assert "0.5      1/1              0/1" in text and "0.9      0/1              0/1" in text
    assert "0.5      1/1              0/1            1/1            0/1" in text
    rows[0]["p"] = 0.85  # the rule that stands ranked first: the pipeline would drop it
    text = replace_table(rows, bars=(0.5,))
    assert "0.5      1/1              1/1            0/1            1/1" in text


@pytest.mark.parametrize("rule,learned", [
    ("Follow the proper push-up form", False),  # the request before the evidence, restated
    ("Add an easier version for beginners", True)])
def test_a_rule_that_only_restates_the_request_before_the_evidence_is_dropped(tmp_path, rule,
                                                                               learned):
    said = [U("How do I do a proper push-up? I think my form is off."), A("Hands under…"),
            U("Same again for squats, and give an easier version for beginners.")]
    w = gate.windows(said, "turn", lambda turns: "format")
    assert w[0].focus == 1  # the newest turn is the evidence, the push-up request context
    model = FixedExtract([rule], name="Exercise explanations",
                         sc={"expect": [{"evidence": "easier version"}]})
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(model)).run(said)
    written = [a.skill for a in actions if a.kind == "add"]
    assert bool(written) is learned, [(a.kind, a.reason) for a in actions]
    if learned:
        assert "easier version" in written[0].instructions


class Namer(FixedExtract):
    """The scripted model: one extracted skill, and ``answer`` to the naming prompt."""

    def __init__(self, rules: list[str], name: str, answer: str, evidence: str = "总数"):
        super().__init__(rules, name=name, triggers=["写报告"],
                         sc={"expect": [{"evidence": evidence}]})
        self.answer = answer
        self.named: list[str] = []

    def _name(self, prompt: str) -> dict:
        self.named.append(prompt)
        return {"name": self.answer}


REPORT_CHAT = [U("帮我起草季度销售报告，给区域董事会看的。"), A("好的……"),
               U("总数放在第一行，董事会别的都不看。")]


@pytest.mark.parametrize("answer, named", [
    ("总数优先的汇报", True),
    ("季度销售总数", False),  # the request's topic, which the rules never said
    ("总数放在第一行因为董事会别的都不看所以要放最前面", False),  # a rule, not a name
    ("技能", False),  # generic
    ("总数在第3行", False),  # a number
    ("Totals first", False),  # not the rules' language
    ("总数写法", False)])  # "写法" copied from the prompt's example answer ("周报写法")
def test_a_name_cut_from_the_request_is_named_again_by_the_model_from_the_rules(
        tmp_path, answer, named):
    """The extracted name carried the request's topic ("季度销售报告格式"): cut by characters,
    what is left ("格式") is no name, so the model names the skill from its rules when it is
    written, and its answer counts only when it is a short name without that topic."""
    model = Namer(["总数放在第一行"], "季度销售报告格式", answer)
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(model)).run(
        REPORT_CHAT)
    written = [a.skill for a in actions if a.kind == "add"]
    assert len(written) == 1 and len(model.named) == 1, [(a.kind, a.reason) for a in actions]
    assert "总数放在第一行" in model.named[0]
    assert "销售" not in model.named[0]  # the prompt never shows the request
    title = written[0].title
    assert (title == answer) is named, title
    assert "销售" not in title and "季度" not in title


def test_the_models_own_name_english_cuts_and_the_tiny_tier_are_not_renamed(tmp_path):
    model = Namer(["总数放在第一行"], "总数优先", "别的名字")
    actions = Pipeline(SkillBank(tmp_path / "a"), "default", LLMClient(model)).run(REPORT_CHAT)
    assert [a.skill.title for a in actions if a.kind == "add"] == ["总数优先"]
    english = Namer(["Put the totals in the first line"], "Quarterly sales report format",
                    "Other name", evidence="totals")
    actions = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(english)).run(
        [U("Draft the quarterly sales report for the regional board."), A("Here it is…"),
         U("Put the totals in the first line, the board reads nothing else.")])
    titles = [a.skill.title for a in actions if a.kind == "add"]
    assert len(titles) == 1 and "quarterly" not in titles[0].lower(), titles  # cut by words
    tiny = Namer(["总数放在第一行"], "季度销售报告格式", "总数优先的汇报")
    tiny.tier = "tiny"
    Pipeline(SkillBank(tmp_path / "c"), "default", LLMClient(tiny)).run(REPORT_CHAT)
    assert model.named == [] and english.named == [] and tiny.named == []


def test_an_openings_check_and_its_rescue_ask_the_model_once(tmp_path):
    """The opening's second look and the quote rescue read the same prompt: one call."""
    llm = QuoteScored(["Use an energetic, upbeat tone"], "commentator", 0.8, 0.9,
                      name="Energetic tone")
    [add] = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(
        [U("Talk to me like an overexcited sports commentator, whatever I ask, I want that "
           "voice.")], "turn")
    assert add.kind == "add" and "sports commentator" in add.skill.instructions
    assert llm.calls.count("quote") == 1


def test_a_rule_the_model_shortened_is_said_in_the_users_words():
    from engine.learning.checks import in_user_words

    requests = ["write the meetup message for Sunday's hike at Box Hill, 9am start"]
    said = ["add a line reminding them to bring a reusable water bottle for the hike. Last time "
            "Tom forgot his and we had to turn back at 3pm."]
    assert in_user_words(["Bring a water bottle"], said, requests) == [
        "Add a line reminding them to bring a reusable water bottle for the hike."]
    # what the sentence adds is the request's own words: the instance, the model's rule stays
    assert in_user_words(["Make it funnier"], ["make the toast for my brother's wedding funnier"],
                         ["write a toast for my brother's wedding"]) == ["Make it funnier"]
    # a name in the sentence, a question, or nothing added: the model's rule stays
    assert in_user_words(["Keep reports under two pages"],
                         ["keep Sarah's reports under two pages from now on"], []) == \
        ["Keep reports under two pages"]
    assert in_user_words(["Bring a water bottle"], ["could they bring a water bottle?"], []) == \
        ["Bring a water bottle"]
    assert in_user_words(["Always put the total at the top"],
                         ["always put the total at the top"], []) == \
        ["Always put the total at the top"]
    # a reason or a story after a comma is not the rule
    assert in_user_words(["Label each box"],
                         ["and each box needs a label with the room it goes to, last time the "
                          "movers left everything in the hall"], ["write the moving-day plan"]) == [
        "And each box needs a label with the room it goes to"]
    # Chinese: the model reorders characters; the clauses that say the rule are theirs, the
    # framing before and the reason after are not
    assert in_user_words(["自带水杯"], ["通知里加一句：请大家自带水杯，山上没有卖水的。"],
                         ["帮我写个周日爬山的集合通知"]) == ["请大家自带水杯"]
    assert in_user_words(["收好衣服，关紧窗户"],
                         ["通知里加一句：请大家提前把阳台的衣服收好，把窗户关紧，上次好几家的玻璃被吹坏了。"],
                         ["帮我写个台风预警通知"]) == ["请大家提前把阳台的衣服收好，把窗户关紧"]


def test_a_rule_said_after_the_request_keeps_the_users_words_in_the_skill(tmp_path):
    sc = {"expect": [{"outcome": "add", "evidence": "bring a reusable water bottle"}]}
    llm = FixedExtract(["Bring a water bottle"], name="Hike meetup messages",
                       triggers=["write the meetup message"], sc=sc)
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(
        [U("write the meetup message for Sunday's hike at Box Hill, 9am start"),
         A("Hi all! Sunday's hike at Box Hill starts at 9am. See you there!"),
         U("add a line reminding them to bring a reusable water bottle for the hike. Last "
           "time Tom forgot his and we had to turn back at 3pm.")], "turn")
    [add] = [a for a in actions if a.kind == "add"]
    rules = add.skill.instructions
    assert "bring a reusable water bottle for the hike" in rules, rules
    assert "Tom" not in rules and "Box Hill" not in rules


class Doubtful(QuoteScored):
    """Every gate's model read says "not lasting": triage P(durable) 0.1, P(about every
    piece of that work) 0.1, extraction's first token "nothing" with P 0.9; asked which
    sentence lasts, the one holding ``word`` (P 0.8)."""

    def __init__(self, rules, word="whole team", **kw):
        super().__init__(rules, word, 0.8, p_triage=0.1, p_again=0.1, **kw)

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        if prefix.startswith('{"skills"'):
            self.calls.append("extract-score")
            rest = 0.1 / (len(options) - 1)
            return {o: math.log(0.9 if o == " []" else rest) for o in options}
        return super().choice_logprobs(messages, prefix, options, cancel)


CARD = [U("Write a leaving card message for Dave from the warehouse."), A("Dear Dave, …"),
        U("Sign cards from the whole team, not just from me.")]


@pytest.mark.parametrize("mode, learned", [("turn", False), ("remember", True)])
def test_a_turn_the_user_asks_to_remember_skips_the_models_guess_at_what_lasts(
        tmp_path, mode, learned):
    llm = Doubtful(["Sign cards from the whole team"], name="Card sign-offs",
                   triggers=["write a card"])
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(
        [*CARD, A("Done: from all of us at the warehouse.")], mode)
    adds = [a for a in actions if a.kind == "add"]
    assert bool(adds) == learned, [(a.kind, a.reason) for a in actions]
    if learned:  # the rule is still checked and written as any rule is
        assert "Sign cards from the whole team" in adds[0].skill.instructions
        # no model guess asked where the user said it: neither the lasting check nor
        # extraction's first decision
        assert "lasting" not in llm.calls and "extract-score" not in llm.calls
    else:
        assert "extract" not in llm.calls


def test_remembering_a_turn_writes_the_users_words_never_the_models_invention(tmp_path):
    """The user's word replaces the gates, not the checks: a rule the model made up (no word
    of it in the message) is dropped, and the sentence the model points at, the user's own,
    is the rule."""
    llm = Doubtful(["Always attach a photo of the team"], name="Card photos",
                   triggers=["write a card"])
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(
        CARD, "remember")
    [add] = [a for a in actions if a.kind in ("add", "merge")]
    rules = add.skill.instructions.split("# Constraints")[1]
    assert "photo" not in rules.lower()
    assert "Sign cards from the whole team, not just from me" in rules


def test_the_desk_remembers_the_last_user_message_it_is_given(tmp_path, embedder):
    from engine.errors import SkillDeskError
    from tests.support import DeskMaker

    maker = DeskMaker(tmp_path, embedder)
    try:
        desk = maker(Doubtful(["Sign cards from the whole team"], name="Card sign-offs",
                              triggers=["write a card"]))
        report = desk.remember([*CARD, A("From all of us.")], wait=True, timeout=60)
        assert [a.kind for a in report.actions] == ["add"], \
            [(a.kind, a.reason) for a in report.actions]
        assert "whole team" in desk.bank.read(report.added[0].skill.path).instructions
        with pytest.raises(SkillDeskError, match="no user message"):
            desk.remember([A("Hello")])
    finally:
        maker.close()


ASKED_AGAIN = [
    U("Suggest three day hikes near Lyon."), A("1. Mont Thou 2. Crêt de la Perdrix 3. Pilat"),
    U("Can you give the elevation gain for each one? My knees are not what they were."),
    A("Mont Thou 400 m, Crêt de la Perdrix 600 m, Pilat 700 m."),
    U("Now three cycling routes around Annecy."),
    A("1. The lake loop 2. Col de la Forclaz 3. Semnoz"),
    U("and same for these, how much climbing is there")]


class AskedAgain(QuoteScored):
    """QuoteScored that answers the asked-again check (again.md) yes with ``p_same`` and keeps
    what extraction read."""

    def __init__(self, p_same, **kw):
        super().__init__(["Give the elevation gain for each one"], "", 0.0, **kw)
        self.p_same, self.read = p_same, []

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        if prefix.startswith('{"again"'):
            self.calls.append("again")
            return {"yes": math.log(self.p_same), "no": math.log(1 - self.p_same)}
        return super().choice_logprobs(messages, prefix, options, cancel)

    def _extract(self, prompt):
        self.read.append(prompt)
        return super()._extract(prompt)


@pytest.mark.parametrize("p_lasting, p_same, learned", [
    (0.9, 0.8, True), (0.9, 0.2, False), (0.1, 0.8, True), (0.1, 0.2, False)])
def test_a_turn_that_asks_again_for_a_new_answer_is_read_with_the_turn_it_repeats(
        tmp_path, p_lasting, p_same, learned):
    """"and same for these, how much climbing is there" after a new request: where the model
    reads it as asking again what "Can you give the elevation gain for each one?" asked, both
    turns are the evidence (the rule is said in the earlier one), the requests are context,
    and it goes on even where the lasting check read it alone as about this answer only."""
    llm = AskedAgain(p_same, p_again=p_lasting, name="Elevation gain")
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(
        ASKED_AGAIN, "turn")
    assert llm.calls.count("again") == 1  # the opening and the request just before: no option
    if p_lasting < 0.33 and not learned:
        assert "extract" not in llm.calls and not actions
        return
    evidence = llm.read[-1].rsplit("User messages:", 1)[1]
    assert ("elevation gain for each one" in evidence) == learned
    assert "and same for these" in evidence and "cycling routes" not in evidence
    assert "Lyon" not in evidence  # the first request is context, never evidence
    if learned:
        assert [a.kind for a in actions] == ["add"], [a.reason for a in actions]
        assert "Give the elevation gain for each one" in actions[0].skill.instructions
        assert "knees" not in actions[0].skill.instructions


def test_bench_triage_again_tabulates_the_pairs_per_split_and_language():
    """The asked-again table: per split and language, the AUC and, per bar, the repeats
    found and the other follow-ups taken; the data on disk has both splits, both languages
    and both labels."""
    import json

    from bench.triage import AGAIN_DATA, again_table

    row = lambda lang, label, p, split="tune": {  # noqa: E731
        "lang": lang, "label": label, "p": p, "split": split}
    rows = [row("en", "yes", 0.9), row("en", "no", 0.65), row("zh", "yes", 0.55),
            row("zh", "no", 0.2), row("en", "yes", 0.8, "heldout"), row("en", "no", 0.1, "heldout")]
    lines = {tuple(ln.split()[:2]): ln for ln in again_table(rows).splitlines()[1:]}
    assert lines[("tune", "en")].split()[3] == "1.00"
    assert lines[("tune", "all")].split()[3] == "0.75"  # 0.65 above 0.55
    at_06 = lines[("tune", "all")].split()[4:6]  # @0.5, then @0.6
    assert at_06 == ["2/2", "1/2"] and lines[("tune", "all")].split()[6:8] == ["1/2", "1/2"]
    assert ("heldout", "zh") not in lines and ("heldout", "en") in lines
    data = [json.loads(x) for x in AGAIN_DATA.read_text(encoding="utf-8").splitlines()]
    assert {(r["split"], r["lang"], r["label"]) for r in data} == {
        (s, lang, lab) for s in ("tune", "heldout") for lang in ("en", "zh") for lab in ("yes", "no")}


CAPTAIN = [U("How do bees make honey?"), A("They collect nectar and evaporate it in the hive."),
           U("lovely. answer like a ship's captain in a storm, shouting orders and 'batten "
             "down the hatches'. my daughter thinks it's hilarious")]


class SaysTheRule(QuoteScored):
    """QuoteScored whose extraction writes ``rules`` and whose rule.md answer is ``said``."""

    def __init__(self, rules, said, **kw):
        super().__init__(rules, "", 0.0, name="Ship captain voice", **kw)
        self.said = said

    def _reword(self, prompt):
        if "Said:" in prompt:
            self.calls.append("rule")
            return {"rule": self.said}
        return super()._reword(prompt)


@pytest.mark.parametrize("rules, said, kept, gone", [
    # the model's paraphrase lost what the persona is: the user's words, without the story
    (["Answer like a captain"],
     "Answer like a ship's captain in a storm, shouting orders and 'batten down the hatches'.",
     "ship's captain in a storm", "daughter"),
    # the restatement says what the user never did: the model's (grounded) rule stands
    (["Answer like a ship's captain"], "Always end with a pirate joke.",
     "Answer like a ship's captain", "pirate joke")])
def test_a_rule_said_in_a_later_turn_is_the_users_own_rule_where_it_passes_the_checks(
        tmp_path, rules, said, kept, gone):
    """A persona said after a question, with no cue word: the model's rule kept its gist
    ("Answer like a captain"); the rule restated in the user's words, without the story
    (rule.md), is the skill's rule where the checks pass it, and never where they do not."""
    llm = SaysTheRule(rules, said)
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(
        CAPTAIN, "turn")
    assert llm.calls.count("rule") == 1
    [add] = [a for a in actions if a.kind == "add"]
    assert kept in add.skill.instructions and gone not in add.skill.instructions, \
        add.skill.instructions


def test_the_users_own_rule_never_rescues_a_candidate_the_checks_stop(tmp_path):
    """The model's rule for the persona is not grounded and nothing rescues it: the rule in
    the user's words (grounded by construction, as a one-off request's would be) is not even
    asked for, and nothing is written."""
    llm = SaysTheRule(["Use nautical language"], "Answer like a ship's captain in a storm.")
    actions = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(
        CAPTAIN, "turn")
    assert "rule" not in llm.calls and not [a for a in actions if a.kind == "add"], \
        [(a.kind, a.reason) for a in actions]


class StoryScored(QuoteScored):
    """QuoteScored whose story check (part.md) reads a sentence that holds one of
    ``story_words`` a story with probability ``p_story``, any other sentence a rule."""

    def __init__(self, rules, story_words, p_story, **kw):
        super().__init__(rules, "", 0.0, **kw)
        self.story_words, self.p_story, self.parts = story_words, p_story, []

    def choice_logprobs(self, messages, prefix, options, cancel=None):
        if prefix.startswith('{"part"'):
            sentence = messages[-1]["content"].rsplit("Sentence:", 1)[1].strip()
            self.parts.append(sentence)
            p = self.p_story if any(w in sentence for w in self.story_words) else 0.1
            return {"story": math.log(p), "rule": math.log(1 - p)}
        return super().choice_logprobs(messages, prefix, options, cancel)


NOTICE = [U("Write this month's notice for the residents' noticeboard: bins move to Tuesdays."),
          A("Notice: from next week the bins go out on Tuesdays."),
          U("Never put anyone's flat number in the notices. Mrs Pell at 4B cried for a week "
            "after the last one named her.")]


@pytest.mark.parametrize("p_story, kept", [(0.9, False), (0.3, True)])
def test_a_later_turns_rule_keeps_none_of_the_story_told_after_it(tmp_path, p_story, kept):
    """The rule of a later turn, in the user's words, with the story told after it (names,
    numbers of one case): each sentence is read by the story check, after the request, and
    a sentence whose P(story) reaches STORY_MIN_P is left out of the rule; below it, kept."""
    rule = "Never put anyone's flat number in the notices."
    story = "Mrs Pell at 4B cried for a week after the last one named her."
    llm = StoryScored([f"{rule} {story}"], ["Pell"], p_story, name="Notices")
    [add] = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(NOTICE, "turn")
    assert add.kind == "add", add.reason
    assert rule in add.skill.instructions
    assert ("Pell" in add.skill.instructions) is kept
    assert llm.parts == [rule, story]  # each sentence alone


def test_a_rule_that_reads_all_story_is_left_as_the_checks_judged_it(tmp_path):
    """Where every sentence of the rule reads as story, the check has nothing to keep and
    leaves the rule alone (a one-sentence rule is never asked about)."""
    said = "Never put anyone's flat number in the notices. Mrs Pell at 4B cried for a week."
    llm = StoryScored([said], ["Pell", "Never"], 0.9, name="Notices")
    [add] = Pipeline(SkillBank(tmp_path / "bank"), "default", LLMClient(llm)).run(NOTICE, "turn")
    assert add.kind == "add" and "Pell" in add.skill.instructions
    llm = StoryScored(["Never put anyone's flat number in the notices."], ["Pell"], 0.9,
                      name="Notices")
    Pipeline(SkillBank(tmp_path / "bank2"), "default", LLMClient(llm)).run(NOTICE, "turn")
    assert llm.parts == []
