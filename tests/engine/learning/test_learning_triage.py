"""Learning from what people actually say (issue 16), on the scripted oracle: the model's triage
lets through rules said without cue words, cue words only fast-track, the tiny tier keeps its
rules; skills stay general; a contradicting rule replaces the old one; the PrefEval protocol."""

from __future__ import annotations

import json
import time

import pytest

from bench import prefeval
from bench.learning_scenarios import load_scenarios, score, seed_bank
from bench.oracle import OracleLLM
from engine import prompts
from engine.bank.store import SkillBank
from engine.errors import StructuredOutputError
from engine.learning import Pipeline
from engine.learning import triage as gate
from engine.learning.candidate import Candidate
from engine.learning.checks import (
    KEEP_MIN_P,
    case_details,
    case_words,
    generalize,
    repair_merge,
    vet_candidate,
)
from engine.learning.rules import rule_extract, said_for_this_request, short_name
from engine.llm import tiers
from engine.llm.client import LLMClient
from engine.llm.worker import ModelWorker
from engine.text import content_tokens
from tests.support import A, FixedExtract, U, open_desk, replay

PEOPLE = {s["id"]: s for s in load_scenarios("people")}




# ------------------------------------------------------------------------------ the set
def test_people_set_is_big_bilingual_and_split_in_halves():
    rows = list(PEOPLE.values())
    assert len(rows) >= 40 and sum(r["lang"] == "zh" for r in rows) >= 14
    tune = [r for r in rows if r["split"] == "tune"]
    assert abs(len(tune) - len(rows) / 2) <= 1 and {r["split"] for r in rows} == {"tune",
                                                                                  "heldout"}
    assert sum(1 for r in rows if not r["expect"]) >= 12  # one-offs
    kinds = {r["kind"] for r in rows}
    assert {"persona", "firm", "no-cue", "do-not", "format-twice", "merge", "contradict",
            "two-tasks", "topic-switch", "one-off"} <= kinds


# ------------------------------------------------------------------------------ triage
def test_the_triage_prompt_loads_and_its_answer_is_one_small_enum():
    p = prompts.load("triage")
    msgs = p.render(user_turns="1. I only fly economy.")
    assert msgs[0]["role"] == "system" and msgs[-1]["content"].endswith("economy.")
    assert p.max_tokens <= 16 and list(p.schema["properties"]) == ["kind"]
    assert "none" in p.schema["properties"]["kind"]["enum"]


def test_tier_policy_triage_by_model_on_capable_models_by_rules_on_the_tiny_one():
    assert tiers.policy("capable").triage == "llm" and tiers.policy("unknown").triage == "llm"
    assert tiers.policy("tiny").triage == "rule"


def test_windows_ask_decide_only_where_no_cue_fast_tracks():
    asked = []

    def decide(turns):
        asked.append([t.text for t in turns])
        return "constraint"

    fast = gate.windows([U("From now on, answer in French.")], "turn", decide)
    assert fast and not asked  # a cue fast-tracks: no model call
    slow = gate.windows([U("I strictly avoid gluten, I have celiac disease.")], "turn", decide)
    assert slow and slow[0].cues == ["model:constraint"] and len(asked) == 1
    assert gate.windows([U("Is it cold in Oslo?")], "turn", lambda t: None) == []
    assert gate.windows([U("Is it cold in Oslo?")], "turn") == []  # no decide: cues only


@pytest.mark.parametrize("sid", ["p-en-pirate", "f-en-economy", "d-en-recap", "t-zh-three",
                                 "w-en-workout-grocery"])
def test_rules_said_without_cue_words_are_learned_through_the_models_triage(sid, tmp_path,
                                                                             embedder):
    sc = PEOPLE[sid]
    oracle = OracleLLM(sc)
    desk = open_desk(tmp_path / "bank", embedder, ModelWorker(oracle))
    try:
        before = seed_bank(desk.bank, "default", sc)
        desk.refresh()
        actions = replay(desk, sc["messages"])
        s = score(sc, before, desk.bank.load("default", scope="user").skills, actions)
        assert s.passed, (s.notes, [(a.kind, a.reason) for a in actions])
        assert "triage" in oracle.calls
    finally:
        desk.close()


def test_the_tiny_tier_never_asks_the_model_to_triage(tmp_path):
    sc = PEOPLE["p-en-pirate"]
    oracle = OracleLLM(sc)
    oracle.tier = "tiny"
    bank = SkillBank(tmp_path / "bank")
    actions = Pipeline(bank, "default", LLMClient(oracle)).run(sc["messages"], "conversation")
    assert "triage" not in oracle.calls and actions == []


class BadTriage(OracleLLM):
    def structured(self, messages, schema, params=None, cancel=None):
        if "kind" in set(schema.get("properties") or {}):
            self.calls.append("triage")
            raise StructuredOutputError("not JSON")
        return super().structured(messages, schema, params, cancel)


def test_an_unusable_triage_answer_learns_nothing_and_never_crashes(tmp_path):
    sc = PEOPLE["f-en-gluten"]
    llm = BadTriage(sc)
    bank = SkillBank(tmp_path / "bank")
    assert Pipeline(bank, "default", LLMClient(llm)).run(sc["messages"], "conversation") == []
    assert llm.calls == ["triage"] and bank.load("default").skills == []


@pytest.mark.parametrize("sid", [s for s in PEOPLE if not PEOPLE[s]["expect"]])
def test_one_offs_write_nothing_even_when_triage_is_asked(sid, tmp_path, embedder):
    sc = PEOPLE[sid]
    desk = open_desk(tmp_path / "bank", embedder, ModelWorker(OracleLLM(sc)))
    try:
        actions = replay(desk, sc["messages"])
        assert not [a for a in actions if a.kind in ("add", "merge")]
        assert desk.bank.load("default", scope="user").skills == []
    finally:
        desk.close()


def test_a_chat_turn_never_waits_for_a_background_triage(tmp_path, embedder):
    sc = PEOPLE["f-en-wheelchair"]
    slow = OracleLLM(sc, delay_s=2.0, reply="Fast answer.")
    desk = open_desk(tmp_path / "bank", embedder, ModelWorker(slow))
    try:
        job = desk.learning.submit(sc["messages"], mode="conversation")
        t0 = time.perf_counter()
        while "triage" not in slow.calls:  # the background triage is now running
            assert time.perf_counter() - t0 < 10
            time.sleep(0.01)
        started = time.perf_counter()
        r = desk.chat([U("What is the capital of France?")], learn=False)
        assert r.text == "Fast answer." and time.perf_counter() - started < 1.0
        assert desk.learning.wait_idle(30)
        assert [a.kind for a in desk.learning.result(job).actions] == ["add"]
    finally:
        desk.close()


# ------------------------------------------------------------------------------ general skills
def test_generalize_takes_names_numbers_and_quotes_of_the_request_out_of_the_skill():
    turns = ["Plan a 3-day trip to Lisbon with museums.",
             "Trip plans for me always list the train times."]
    c = Candidate(name="Lisbon trip plans", description="Trip plans like the Lisbon one.",
                  goal="Plan trips to Lisbon.", constraints=["Always list the train times"],
                  triggers=["plan a trip", "plan a 3-day trip to Lisbon", "x" * 70])
    assert {"lisbo", "3"} <= case_details(turns, c.constraints)
    notes = generalize(c, turns)
    text = " ".join([c.name, c.description, c.goal, *c.triggers]).lower()
    assert "lisbon" not in text and "3" not in text and notes
    assert c.triggers == ["plan a trip"] and c.name == "trip plans"
    # a topic word only the request had never names the skill; one the rules use may
    turns = ["Explain how a heat pump works.", "Talk to me like a grumpy wizard in every reply."]
    c = Candidate(name="Heat pump explanation", description="Explaining heat pumps.",
                  constraints=["Talk like a grumpy wizard in every reply"], triggers=["explain"])
    generalize(c, turns)
    assert "heat" not in (c.name + c.description).lower() and "wizard" in c.name.lower()
    c = Candidate(name="Customer reply tone", description="Replies to customers.",
                  constraints=["Address customers by first name"])
    generalize(c, ["Reply to this customer about a late parcel.",
                   "Our replies use first names."])
    assert c.name == "Customer reply tone"
    # the tools a rule is about are the kind of task, never the instance
    assert "python" not in case_details(["Write a Python function to sort names."],
                                        ["Use f-strings in Python"]) | case_details(
        ["Write a Python function to sort names.", "In Python use f-strings."],
        ["Use f-strings in Python"])


@pytest.mark.parametrize("turns,name,rule,general", [
    (["帮我起草一封律师函：我的当事人交了三万块定金给一家装修公司。",
      "落款前加一句回复期限，写明对方收到后几日内书面答复。"],
     "律师函回复期限", "落款前写明回复期限，要求对方几日内书面答复",
     "回复期限"),  # not a clipped clause of the rule ("落款前写明回复期")
    # nothing but the topic and a generic word left: the rule's short form names it
    (["帮我写一副春节对联。", "上联和下联字数要一样。"], "对联格式", "上联和下联字数相同",
     short_name("上联和下联字数相同")),
    # an English name neither starts nor ends on a function word once its topic went
    (["What's the difference between a lasting power of attorney and a deputyship?",
      "For power of attorney questions, always say which form costs more to register."],
     "Deputyship and power of attorney costs",
     "For power of attorney, say which form costs more to register",
     "power of attorney costs")])  # not "and power of attorney costs"
def test_a_name_loses_the_requests_topic_not_its_meaning(turns, name, rule, general):
    c = Candidate(name=name, description=f"{name}.", constraints=[rule])
    generalize(c, turns)
    assert c.name == general


def test_case_details_are_found_per_sentence_when_one_message_holds_request_and_rule():
    # the request and the rule in one message, the rule reworded by the model
    turns = ["Which hotel in Porto should I book for the Friday gig? I can't do stairs, "
             "my knees are shot."]
    rules = ["Avoid places with stairs; suggest lifts or step-free access"]
    assert {"porto", "frida"} <= case_details(turns, rules)
    c = Candidate(name="Porto hotels", description="Hotels in Porto for the gig.",
                  constraints=rules, workflow=["Check the Porto hotel for lifts"],
                  triggers=["book a hotel"])
    generalize(c, turns)
    text = " ".join([c.name, c.description, *c.workflow, *c.triggers]).lower()
    assert "porto" not in text and "gig" not in text and c.workflow == []
    # a Chinese clause of a long rule states it; the request clause is the case
    turns = ["帮我排一个吉他练习计划，我周六有三个小时。",
             "我练半小时手就酸了，每段别超过十五分钟，中间歇一下。"]
    topic = case_details(turns, ["练习计划每段不超过十五分钟，段与段之间安排休息"], topic=True)
    assert {"周六", "三小"} <= topic and "分钟" not in topic
    # a request that shares one word with a rule about it stays the request
    assert "pizza" in case_details(["Give me a pizza recipe.", "Recipes for me need grams."],
                                   ["Give recipe quantities in grams"], topic=True)


def test_a_fact_said_beside_the_rule_in_its_sentence_is_no_topic_of_the_request():
    """A Chinese sentence is cut at its commas; the clause that says what the rule is for (the
    user's condition) is the rule's, not the request's: the skill's description keeps it."""
    turns = ["周末同学聚会让我订饭店，十来个人，帮我想想点什么菜。"
             "我有高血压，咸菜、腊肉、酱菜这些我一吃就头晕，医生不让碰。"]
    rules = ["避免咸菜、腊肉和酱菜"]
    topic = case_details(turns, rules, topic=True)
    assert content_tokens("高血压") & topic == set()
    assert content_tokens("同学聚会") <= topic  # the request's own words still are
    c = Candidate(name="饮食建议", description="用户有高血压，饮食要清淡。",
                  goal="为高血压用户推荐菜。", constraints=rules, triggers=["点菜"])
    generalize(c, turns)
    assert "高血压" in c.description and "高血压" in c.goal, c
    # a question beside the rule clause is asked, not said for the rule
    turns = ["我有高血压，咸菜、腊肉、酱菜这些我一吃就头晕，同学聚会点什么菜好？"]
    assert content_tokens("同学聚会") <= case_details(turns, rules, topic=True)


def test_the_requests_before_the_rule_are_the_case_when_the_model_reworded_the_rule():
    # the model's rule shares no word with the user's; the request before is still the case
    asked, said = "区块链到底是个啥？新闻里天天说。", "听不懂。我是开小卖部的，你给我打个生活里的比方，讲得跟家常话一样。"
    c = Candidate(name="生活中的比方", description="用户需要一个生活中的比方来解释区块链。",
                  goal="用生活中的例子解释区块链。", constraints=["用简单易懂的语言"],
                  triggers=["解释区块链", "讲个比方"])
    generalize(c, [said], requests=[asked])
    assert "区块链" not in c.description + c.goal and c.general_triggers() == ["讲个比方"], c
    assert c.name == "生活中的比方"
    # a request turn never states the rule, even when it shares the rule's words
    topic = case_details(["Make the timeline shorter."], ["Keep the timeline under ten lines"],
                         topic=True, requests=["Write a timeline of the French Revolution."])
    assert content_tokens("French Revolution") <= topic and "timel" not in topic


STORY = ["Write a bedtime story about a turtle called Pip who is scared of the dark.",
         "End it with him falling asleep, bedtime stories are for winding her down."]


@pytest.mark.parametrize("answer, rules", [
    ("End the story with the main character falling asleep",
     ["End the story with the main character falling asleep"]),  # reworded: kept
    ("End the story with Pip falling asleep", []),  # still names the case: the rule goes
    ("Write a story", [])])  # lost what the rule says: the rule goes
def test_a_rule_naming_the_requests_case_is_reworded_by_the_model_or_dropped(answer, rules):
    asked = []
    c = Candidate(name="Bedtime stories", description="Stories end with Pip asleep.",
                  constraints=["End the story with Pip falling asleep"], confidence=0.9)
    why = vet_candidate(c, "\n".join(STORY), "", STORY[1:], context=STORY[:1],
                        reword=lambda rule, words: asked.append(words) or answer)
    assert asked == [["Pip"]]
    assert c.constraints == rules
    assert (why is None) == bool(rules), why
    if rules:  # the name and description are made from the reworded rule
        assert "pip" not in (c.name + c.description).lower()
    # without a model to reword (the rule tier) nothing changes
    c = Candidate(name="x y", description="z", constraints=["Use tabs, as Pip does"],
                  confidence=0.9)
    vet_candidate(c, "Use tabs, as Pip does", "", ["Use tabs, as Pip does"])
    assert c.constraints == ["Use tabs, as Pip does"]


def test_the_words_that_carry_the_case_are_found_in_any_script():
    assert case_words("End the story with Pip falling asleep", {"pip"}) == ["Pip"]
    assert case_words("把12号楼的停水时间放在第一句", {"12"}) == ["12"]  # not the whole clause


def test_the_pipeline_rewords_a_rule_that_names_the_requests_case(tmp_path):
    said = [U(STORY[0]), A("Once upon a time…"), U(STORY[1])]
    model = StatedConstraint(["End the story with Pip falling asleep"], name="Bedtime stories",
                             triggers=["write a bedtime story"])
    [add] = [a for a in Pipeline(SkillBank(tmp_path / "bank"), "default",
                                 LLMClient(model)).run(said, "turn") if a.kind == "add"]
    assert "falling asleep" in add.skill.instructions
    text = "\n".join([add.skill.name, add.skill.description, add.skill.instructions,
                      *add.skill.triggers]).lower()
    assert "pip" not in text, text
    assert "reword" in model.calls


def test_a_name_in_the_one_sentence_of_a_request_that_the_rule_leaves_out_is_the_case():
    # the turn's one sentence is both the request and where the model found its rule
    turns = ["Invoice for Kowalski Joinery, 14 hours this week: kitchen units and skirting."]
    rules = ["List the hours worked on the invoice"]
    assert content_tokens("Kowalski Joinery") <= case_details(turns, rules)
    c = Candidate(name="Invoices", description="Invoices for Kowalski Joinery.",
                  constraints=rules, triggers=["invoice Kowalski", "write an invoice"])
    generalize(c, turns)
    assert c.triggers == ["write an invoice"] and "kowalski" not in c.description.lower()
    # a name the rule itself says is the rule's ("Use British spelling"); a number of the
    # rule's sentence is what the rule is, even where the model's wording lost it
    assert not case_details(["Use British spelling in my emails."], ["Use British spelling"])
    assert not case_details(["When I get you to write birthday card messages, keep them "
                             "under 30 words."], ["Limit the words in each card message"])


def test_the_request_sentence_is_the_case_when_it_shares_as_many_words_with_the_rule():
    # both sentences share one word with the reworded rule ("plans" / "seasick"); the one
    # stating it is the one whose own words the rule holds more of
    turns = ["Plan a long weekend on the coast of Maine for my wife and me in September. "
             "I get violently seasick, so anything on a boat is out for me."]
    rules = ["The user gets seasick: no cruises in travel plans"]
    topic = case_details(turns, rules, topic=True)
    assert content_tokens("Maine weekend coast September") <= topic, topic
    assert not content_tokens("seasick boat") & topic
def test_vet_uses_the_turns_to_generalize_and_keeps_a_stated_constraint():
    c = Candidate(name="Gluten-free food", description="Avoid gluten.",
                  constraints=["Avoid gluten in any food suggestion"], confidence=0.9)
    said = "I strictly avoid gluten, I have celiac disease."
    assert vet_candidate(c, said, "", [said]) is None  # two of the user's words ground it
    c = Candidate(name="Made up", description="x", constraints=["Use tabs in Go code"],
                  confidence=0.9)
    assert vet_candidate(c, said, "", [said]) is not None


@pytest.mark.parametrize("text,asks", [
    ("电动车电池好像不行了，充满电才跑十来公里，是不是该换了", True),   # A-not-A, no mark
    ("还有个事，我妈的社保卡丢了，要补办，在杭州，怎么弄", True),       # a short "how" clause
    ("is it daft to pay off my car finance early", True),              # aux before subject
    ("不管是不是周末，都要提醒我", False),                              # "whether or not"
    ("每次都帮我检查有没有错别字", False),                              # an embedded question
    ("我不知道怎么写", False),                                          # an embedded question
    ("能不能拆成一步一步的，前面标上1、2、3，我照着做", False),
    ("通知里写清楚几点开门、需不需要带证件", False),                    # asked of what is written
    ("每道菜后面标一下辣不辣", False),
    ("你写的是不是太长了", True),                                       # about what was written
    ("Do not put prices in the captions", False),
    ("Have this ready by nine", False),
    # a last clause that asks what the user is to do; not one asked of what is written
    ("also he wants a taco bar for his mates, what fillings and salsas should I do", True),
    ("how do I get it out without wrecking the tiles", True),
    ("and give those the chilli treatment too, how fiery is each one", False),
    ("Always tell me how much I would save", False),
])
def test_a_question_typed_without_its_mark_is_a_question(text, asks):
    from engine.learning.rules import is_question
    assert is_question(text) is asks


def test_a_rule_that_is_the_users_own_question_said_again_is_dropped():
    turns = ["手机号想携号转网，从移动转电信，要怎么弄",
             "能不能拆成一步一步的，前面标上1、2、3，我照着做",
             "还有个事，我妈的社保卡丢了，要补办，在杭州，怎么弄"]
    c = Candidate(name="社保卡补办", description="x", constraints=["我妈的社保卡丢了，要补办，在杭州"],
                  confidence=0.9)
    assert vet_candidate(c, "\n".join(turns), "", turns) is not None
    # the format asked of the assistant, though said as a question, is a rule
    c = Candidate(name="办事步骤标号", description="x", constraints=["拆成一步一步的，前面标上1、2、3"],
                  confidence=0.9)
    assert vet_candidate(c, "\n".join(turns), "", turns) is None
    # a fact said inside a question is a part of it, and stays
    said = "I'm vegan, so what could I cook for six friends on Saturday?"
    c = Candidate(name="Vegan food", description="x", constraints=["The user is vegan: no meat"],
                  confidence=0.9)
    assert vet_candidate(c, said, "", [said]) is None


def test_the_models_keep_score_decides_a_rule_where_it_answers():
    said = "I'm allergic to peanuts. Suggest a snack for the train."
    own_words = "Avoid all products containing peanuts"  # one word of the user's: ungrounded
    request = "Suggest a snack for the train"  # the request itself: grounded word for word

    def vet(rule, keep):
        c = Candidate(name="Snacks", description="x", constraints=[rule], confidence=0.9)
        return vet_candidate(c, said, "", [said], keep)

    assert vet(own_words, None) is not None and vet(request, None) is None  # words alone
    high, low = (lambda r: KEEP_MIN_P), (lambda r: KEEP_MIN_P - 0.01)
    assert vet(own_words, high) is None and vet(own_words, low) is not None  # the model's bar
    assert vet(own_words, lambda r: None) is not None  # no usable answer: words alone
    asked = []
    assert vet(request, lambda r: asked.append(r) or 0.0) is None and not asked  # never asked
    assert vet("Is a banana a good snack?", high) is not None  # a question never is a rule


def test_the_keep_check_runs_only_where_token_scores_can_be_read(tmp_path):
    bank = SkillBank(tmp_path)
    w = gate.Window(turns=gate.user_turns([U("I only drink decaf. What goes with cake?")]),
                    cues=[])
    assert Pipeline(bank, "default", LLMClient(OracleLLM())).keeper(w) is None
    assert Pipeline(bank, "default", None).keeper(w) is None


def test_the_rule_fallback_never_names_a_skill_with_a_raw_sentence():
    rule = ("Whenever you write release notes for me, put breaking changes first and link "
            "every ticket, thanks")
    name = short_name(rule)
    assert len(name.split()) <= 6 and len(name) < len(rule) / 2
    w = gate.windows([U("Write release notes for version 4.2 of Atlas."), A("Here they are."),
                      U(rule)], "conversation")
    [c] = rule_extract(w[-1])
    assert all("atlas" not in t.lower() and "4.2" not in t for t in c.triggers)
    # nor with a fragment its quotes or a "TL;DR" cut short (a read split's run: "Avoid words like
    # or" for "Avoid words like 'struggles' or 'weak'")
    assert short_name("Avoid words like 'struggles' or 'weak'") == "Avoid words"
    assert short_name("Start every summary with a TL;DR") == "Start every summary with a TL;DR"
    assert short_name("No bananas, potatoes, tomatoes or oranges") == "No bananas"


# ------------------------------------------------------------------------------ merges
def rules(name, *constraints):
    return Candidate(name=name, description="d", constraints=list(constraints))


def test_a_contradicting_rule_replaces_the_old_one_when_the_model_names_it():
    ex = rules("Meeting notes", "List attendees first", "Write action items at the end")
    new = rules("Meeting notes", "Put action items at the very top")
    merged = rules("x", "List attendees first", "Write action items at the end",
                   "Put action items at the very top")
    notes = repair_merge(merged, ex, new, replaced=["Write action items at the end"])
    assert merged.constraints == ["List attendees first", "Put action items at the very top"]
    assert any("replaced" in n for n in notes)
    # a rule the model lost (and did not name as replaced) comes back; naming a rule the skill
    # never had removes nothing
    merged = rules("x", "Put action items at the very top")
    repair_merge(merged, ex, new, replaced=["A rule that was never there"])
    assert "List attendees first" in merged.constraints


def test_a_merge_of_another_fact_keeps_the_old_rule_and_what_the_skill_is_about():
    """A read PrefEval merge: "I follow a strict raw food diet" judged the same task as a
    spicy-food skill; the model wrote the new rule alone (a word-overlap "correction" of
    "Avoid spicy foods") and the new fact as the description."""
    ex = rules("Spicy food", "Avoid spicy foods")
    ex.description, ex.goal = "The user dislikes spicy food.", "Keep every suggestion non-spicy."
    new = rules("Raw food", "Avoid cooked foods")

    def model_merge():
        m = rules("x", "Avoid cooked foods")
        m.description, m.goal = "The user follows a strict raw food diet.", "Keep it raw."
        return m
    asked: list[str] = []
    merged = model_merge()
    repair_merge(merged, ex, new, takes_back=lambda olds: asked.extend(olds) or set())
    assert asked == ["Avoid spicy foods"]  # the skill's rules are asked about
    assert merged.constraints == ["Avoid cooked foods", "Avoid spicy foods"]
    assert (merged.description, merged.goal) == (ex.description, ex.goal)
    # the user's message takes it back: the old rule goes, the skill may say what it is now
    merged = model_merge()
    notes = repair_merge(merged, ex, new, takes_back=set)
    assert merged.constraints == ["Avoid cooked foods"] and any("replaced" in n for n in notes)
    assert merged.description == "The user follows a strict raw food diet."


def test_a_merge_keeps_no_rule_that_neither_the_skill_nor_the_new_rule_says():
    ex = rules("Step-by-step guides", "Number every step", "One action per step")
    new = rules("Step-by-step guides", "Say what the user should see after each step")
    # the model merged in the case it saw (a router reset on the user's phone) and reworded
    merged = rules("x", "Number every step", "One action per step",
                   "Say what the user should see after each step",
                   "Restart the Netgear router from the phone app first")
    notes = repair_merge(merged, ex, new)
    assert merged.constraints == ["Number every step", "One action per step",
                                  "Say what the user should see after each step"]
    assert any("neither the skill nor the new rule" in n for n in notes)
    # a rewording that combines what both say stays
    merged = rules("x", "Number every step, one action per step",
                   "After each step say what the user should see")
    repair_merge(merged, ex, new)
    assert "Number every step, one action per step" in merged.constraints


def test_a_merge_carries_none_of_the_requests_topic_into_the_skill():
    ex = rules("Lesson summaries", "What we practised, then what to work on")
    ex.description = ex.goal = "Summaries of driving lessons."
    new = rules("Lesson summary", "Say whether a fault would fail the test")
    new.topic = frozenset(content_tokens("Bethany roundabout Thursday"))
    new.triggers = ["summarise Bethany's lesson", "summarise a lesson"]
    # the merge prompt shows the triggers without the request's topic
    shown = new.fields_text().splitlines()[-1]
    assert shown.startswith("triggers: summarise") and "bethany" not in shown.lower(), shown
    # the model wrote the learner's name into the description, a rule and a step
    merged = rules("x", "What we practised, then what to work on",
                   "Say whether a fault would fail the test",
                   "Note Bethany's roundabout faults first")
    merged.description = "Summaries of Bethany's driving lessons."
    merged.goal = "Summaries of driving lessons, faults judged against the test."
    merged.workflow = ["List Bethany's faults", "Say what to practise"]
    repair_merge(merged, ex, new)
    assert merged.constraints == ["What we practised, then what to work on",
                                  "Say whether a fault would fail the test"]
    assert merged.description == "Summaries of driving lessons."  # the skill's own
    assert merged.goal == "Summaries of driving lessons, faults judged against the test."
    assert merged.workflow == ["Say what to practise"]


def test_a_contradicting_merge_keeps_the_old_wording_in_history(tmp_path, embedder):
    sc = PEOPLE["m-en-minutes-flip"]
    desk = open_desk(tmp_path / "bank", embedder, ModelWorker(OracleLLM(sc)))
    try:
        seeded = seed_bank(desk.bank, "default", sc)
        desk.refresh()
        actions = replay(desk, sc["messages"])
        [merge] = [a for a in actions if a.kind == "merge"]
        now = merge.skill.instructions
        assert "very top" in now and "at the end" not in now
        old = desk.bank.history.text(merge.skill.id, seeded["Meeting notes"].version)
        assert "Write action items at the end" in old
    finally:
        desk.close()


# ------------------------------------------------------------------------------ PrefEval
ITEMS = [  # made up for the test (PrefEval's items are never copied into the repository)
    {"topic": "t", "preference": "I never drink coffee, it keeps me awake.",
     "question": "What should I order at a cafe?", "options": ["Herbal tea", "Espresso",
                                                               "Latte", "Cold brew"],
     "answer_index": 0},
    {"topic": "t", "preference": "I only take trains when I travel.",
     "question": "How should I get to Paris?", "options": ["A train", "A plane", "A car",
                                                           "A cruise"], "answer_index": 0},
]


def test_prefeval_items_are_ordered_and_shuffled_by_seed_and_sliced(tmp_path):
    f = tmp_path / "items.jsonl"
    f.write_text("\n".join(json.dumps(d) for d in ITEMS * 3) + "\n", encoding="utf-8")
    a = prefeval.load_items(f, seed=1, offset=0, limit=4)
    assert [d["_index"] for d in a] == [d["_index"] for d in prefeval.load_items(f, seed=1,
                                                                                 limit=4)]
    b = prefeval.load_items(f, seed=1, offset=4, limit=4)
    assert len(b) == 2 and not {d["_index"] for d in a} & {d["_index"] for d in b}
    q = prefeval.question_text(a[0])
    assert prefeval.ASK in q and q.count(")") >= 4
    right = "ABCD"[a[0]["_order"].index(0)]
    assert prefeval.is_right(a[0], right) and not prefeval.is_right(a[0], None)
    assert prefeval.answer_letter("B) A plane") == "B" and prefeval.answer_letter("C") == "C"
    assert prefeval.answer_letter("I cannot say") is None


class LetterOracle(OracleLLM):
    """Answers every question with the letter of the first option it was shown."""

    def __init__(self, items):
        super().__init__({"expect": [{"outcome": "add", "name": f"Preference {i}",
                                      "evidence": d["preference"][:20],
                                      "constraints": [d["preference"]],
                                      "triggers": [d["question"]]}
                                     for i, d in enumerate(items)]}, reply="A")


def test_prefeval_protocol_learns_each_preference_and_asks_in_new_chats(tmp_path, embedder):
    f = tmp_path / "items.jsonl"
    f.write_text("\n".join(json.dumps(d) for d in ITEMS) + "\n", encoding="utf-8")
    items = prefeval.load_items(f, seed=3)
    oracle = LetterOracle(items)
    worker = ModelWorker(oracle)
    try:
        out = prefeval.run(worker, embedder, items, log=lambda *_: None)
    finally:
        worker.close()
    expected = sum(d["_order"][0] == 0 for d in items) / len(items)
    for cond in ("none", "reminder", "learned"):
        assert out[cond]["accuracy"] == expected and out[cond]["unparsed"] == 0
    assert all(out["learn"]["own"][str(d["_index"])] for d in items)  # one skill per preference
    assert out["learn"]["skills"] == len(items)
    assert 0.0 <= out["learned"]["own_injected"] <= 1.0
    assert out["learned"]["own_injected"] + out["learned"]["own_filtered"] <= 1.0
    assert all(out["learn"]["names"][str(d["_index"])] for d in items)
    assert "learned" in prefeval.table("t", out) and "own skill filtered out" in \
        prefeval.table("t", out)


def test_prefeval_keeps_the_learned_bank_and_asks_again_without_learning(tmp_path, embedder):
    f = tmp_path / "items.jsonl"
    f.write_text("\n".join(json.dumps(d) for d in ITEMS) + "\n", encoding="utf-8")
    items = prefeval.load_items(f, seed=3)
    keep = tmp_path / "kept"
    first = LetterOracle(items)
    worker = ModelWorker(first)
    try:
        out = prefeval.run(worker, embedder, items, conditions=("learned",), keep=keep,
                           log=lambda *_: None)
    finally:
        worker.close()
    assert (keep / prefeval.OWN_FILE).exists() and "extract" in " ".join(first.calls)
    again = LetterOracle(items)
    worker = ModelWorker(again)
    try:
        out2 = prefeval.run(worker, embedder, items, conditions=("learned",), keep=keep,
                            log=lambda *_: None)
        with pytest.raises(ValueError, match="did not learn"):  # other items: refused
            prefeval.run(worker, embedder, prefeval.load_items(f, seed=4) + [
                {**items[0], "_index": 999}], conditions=("learned",), keep=keep,
                log=lambda *_: None)
    finally:
        worker.close()
    assert "extract" not in " ".join(again.calls)  # asked on the kept bank, nothing learned
    assert out2["learn"]["own"] == out["learn"]["own"]
    assert out2["learned"]["own_injected"] == out["learned"]["own_injected"]
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    worker = ModelWorker(LetterOracle(items))
    try:
        with pytest.raises(ValueError, match="new folder"):
            prefeval.run(worker, embedder, items, conditions=("learned",),
                         keep=tmp_path / "full", log=lambda *_: None)
    finally:
        worker.close()
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"


def test_bench_prefeval_rejects_a_missing_file_clearly(capsys):
    assert prefeval.main(["--data", "/nonexistent/prefeval.jsonl"]) == 2
    assert "cannot read" in capsys.readouterr().out




class JudgeSays(OracleLLM):
    """The oracle, but the judge always gives ``answer``."""

    def __init__(self, sc, answer):
        super().__init__(sc)
        self.answer = answer

    def structured(self, messages, schema, params=None, cancel=None):
        if "action" in set(schema.get("properties") or {}):
            self.calls.append("judge")
            return dict(self.answer)
        return super().structured(messages, schema, params, cancel)


def test_a_judge_naming_a_skill_it_was_not_shown_never_drops_the_rule(tmp_path, embedder):
    sc = PEOPLE["m-en-python"]
    llm = JudgeSays(sc, {"action": "merge", "target": 7, "reason": "same task"})
    desk = open_desk(tmp_path / "bank", embedder, ModelWorker(llm))
    try:
        seed_bank(desk.bank, "default", sc)
        desk.refresh()
        actions = replay(desk, sc["messages"])
        writes = [a for a in actions if a.kind in ("add", "merge")]
        assert len(writes) == 1 and "not shown" in writes[0].reason
        assert "f-string" in writes[0].skill.instructions.lower()
    finally:
        desk.close()


PY_SAYS = {"name": "Python code style", "description": "How the user wants Python written.",
           "constraints": ["Use type hints", "Format strings with f-strings"],
           "triggers": ["write a python function"]}
PY_OTHER = {**PY_SAYS, "constraints": ["Use type hints"]}  # same task, not this rule
POSTER = {"name": "Poster design", "description": "How the user wants posters laid out.",
          "constraints": ["Use at most two fonts"], "triggers": ["design a poster"]}


@pytest.mark.parametrize("bank,target,kind", [
    ([PY_SAYS], 1, "discard"), ([PY_SAYS], 0, "discard"),  # named, or the nearest: says it
    ([PY_OTHER], 1, "add"), ([PY_OTHER], 0, "add"),  # same task, but it does not say it
    ([POSTER], 1, "add"), ([POSTER], 0, "add")])  # another task
def test_a_judges_discard_holds_only_where_the_skill_it_points_at_says_the_rule(
        tmp_path, embedder, bank, target, kind):
    sc = {"bank": bank, "expect": [{"outcome": "add", "name": "Python functions",
                                     "evidence": "f-strings",
                                     "constraints": ["In Python functions use f-strings"],
                                     "keywords": ["f-string"]}]}
    llm = JudgeSays(sc, {"action": "discard", "target": target, "reason": "already there"})
    desk = open_desk(tmp_path / "bank", embedder, ModelWorker(llm))
    try:
        seeded = seed_bank(desk.bank, "default", sc)
        desk.refresh()
        actions = replay(desk, [U("From now on, in Python functions use f-strings.")])
        assert "judge" in llm.calls
        [judged] = [a for a in actions if a.kind in ("add", "discard")]
        assert judged.kind == kind, judged.reason
        if kind == "discard":  # it names the skill that says it
            assert judged.skill is not None and judged.skill.title in seeded
        else:
            assert "does not say" in judged.reason and "f-string" in judged.skill.instructions
    finally:
        desk.close()


class RuleSaid(FixedExtract):
    """FixedExtract whose triage reads a rule (cue words take a turn to the model, never
    past it: Pipeline._confirm)."""

    def _triage(self, prompt: str) -> dict:
        return {"kind": "rule"}


def test_a_cue_word_rule_is_never_lost_and_examples_are_the_users_own(tmp_path):
    said = [U("From now on, always start every summary you write for me with a one-line "
              "TL;DR, then give at most three bullet points."), A("OK.")]
    bank = SkillBank(tmp_path / "bank")
    # Qwen-1.5B kept one of the two rules and moved the other into a made-up example
    forgetful = RuleSaid(["No more than three bullet points"],
                         examples=["TL;DR: key points. - one - two"])
    actions = Pipeline(bank, "default", LLMClient(forgetful)).run(said, "turn")
    [add] = [a for a in actions if a.kind == "add"]
    body = add.skill.instructions.lower()
    assert "tl;dr" in body and "three bullet" in body
    assert add.skill.examples == []  # the model's invented example is not the user's


def test_a_reworded_cue_word_rule_keeps_the_users_own_words(tmp_path):
    said = [U("Summarize: the office is closed on Monday. Again, I always want summaries to "
              "start with a one-line TL;DR."), A("OK.")]
    bank = SkillBank(tmp_path / "bank")
    # Qwen-1.5B reworded the rule and dropped the word that made it the user's
    rewording = RuleSaid(["Start with a one-line summary"])
    actions = Pipeline(bank, "default", LLMClient(rewording)).run(said, "turn")
    [add] = [a for a in actions if a.kind == "add"]
    rules = [ln for ln in add.skill.instructions.splitlines() if ln.startswith("- ")]
    assert rules == ["- Summaries should always start with a one-line TL;DR"], rules
    assert "monday" not in add.skill.instructions.lower()  # the request's case stays out


class StatedConstraint(FixedExtract):
    def _triage(self, prompt: str) -> dict:
        return {"kind": "constraint"}


def test_a_new_skills_triggers_lose_the_requests_topic(tmp_path):
    said = [U("Plan a birthday dinner menu for my aunt Rosa. I'm vegetarian, so no meat or "
              "fish for me."), A("Here is a menu…")]
    model = StatedConstraint(["No meat or fish in food suggestions"], name="Vegetarian food",
                             triggers=["birthday dinner menu for my aunt",
                                       "suggest vegetarian food", "vegetarian birthday recipes"])
    [add] = [a for a in Pipeline(SkillBank(tmp_path / "bank"), "default",
                                 LLMClient(model)).run(said, "turn") if a.kind == "add"]
    # "birthday", "dinner", "menu" and "aunt" were this request's topic, not the rule's
    assert add.skill.triggers == ["suggest vegetarian food", "vegetarian recipes"], \
        add.skill.triggers
    assert add.candidate.triggers[0] == "birthday dinner menu for my aunt"  # what the judge saw


class MergesIntoFirst(StatedConstraint):
    """Extraction answers one fixed skill; the judge merges it into the first skill shown."""

    def structured(self, messages, schema, params=None, cancel=None):
        if "action" in set(schema.get("properties") or {}):
            self.judged = messages[-1]["content"]
            return {"action": "merge", "target": 1, "reason": "same task (menus)"}
        return super().structured(messages, schema, params, cancel)


def one_skill_bank(tmp_path, name: str, rule: str, trigger: str):
    """A bank holding one skill of the user's (a skill from before the conversation)."""
    bank = SkillBank(tmp_path / "bank")
    skill = bank.create(Candidate(name=name, description=f"{name}.", constraints=[rule],
                                  triggers=[trigger]).to_skill(), "default")
    return bank, skill


def written(bank, said, model):
    """The one add or merge learning writes from ``said`` on the scripted ``model``."""
    [done] = [a for a in Pipeline(bank, "default", LLMClient(model)).run(said, "turn")
              if a.kind in ("add", "merge")]
    return done


def test_triggers_a_merge_adds_lose_the_requests_topic_and_the_judge_reads_the_request(
        tmp_path):
    bank, menu = one_skill_bank(tmp_path, "Menu descriptions",
                                "Describe each dish in one sentence", "write menu descriptions")
    said = [U("Write menu descriptions for our autumn dishes: pumpkin risotto and lamb "
              "shoulder."), A("Pumpkin risotto: …"),
            U("Put the allergens in brackets after each dish, like (milk, gluten).")]
    model = MergesIntoFirst(["Put the allergens in brackets after each dish"],
                            name="Menu allergens",
                            triggers=["write menu descriptions for pumpkin risotto",
                                      "list allergens after each dish"])
    merge = written(bank, said, model)
    assert merge.kind == "merge" and merge.skill.id == menu.id and "allergens" in merge.skill.instructions
    # the judge was told what the user was asking for when they said the rule
    assert "ASKED: Write menu descriptions for our autumn dishes" in model.judged
    # what the merge adds loses "pumpkin", "risotto", "autumn": this request's topic
    assert merge.skill.triggers == ["write menu descriptions", "list allergens after each dish"], \
        merge.skill.triggers


def test_a_name_said_with_a_possessive_stays_out_of_the_triggers_a_merge_adds(tmp_path):
    bank, sheets = one_skill_bank(tmp_path, "Aftercare sheets", "Wash instructions first",
                                  "write an aftercare sheet")
    said = [U("Write the aftercare sheet for Dani's fine-line piece on her forearm."),
            A("Aftercare: …"),
            U("Add a healing timeline after the washing bit: days 1 to 3, then the first week.")]
    model = MergesIntoFirst(["Add a healing timeline after the washing instructions"],
                            name="Healing timeline",
                            triggers=["healing timeline for Dani", "add a healing timeline"])
    merge = written(bank, said, model)
    assert merge.kind == "merge" and merge.skill.id == sheets.id
    # "Dani's" is Dani: the client's name is this request's, not the skill's
    assert merge.skill.triggers == ["write an aftercare sheet", "add a healing timeline"], \
        merge.skill.triggers


@pytest.mark.parametrize("request_turn, kind", [
    ("Make me a twelve-week running plan for a half marathon.", "merge"),  # the skill's task
    ("Write a thank-you card for my physio.", "add")])  # another task: the vetoes stand
def test_a_judges_merge_into_the_skill_the_user_was_asking_for_is_not_overruled(
        tmp_path, request_turn, kind):
    bank, plans = one_skill_bank(tmp_path, "Running training plans",
                                 "Give each week a long run", "make a running plan")
    said = [U(request_turn), A("Here it is…"),
            U("My shins can't take more pounding, so put swimming or cycling on two days.")]
    # the name shares no word with the skill's name, triggers or tags: "shares no task word"
    model = MergesIntoFirst(["Put swimming or cycling on two days"],
                            name="Low-impact days", triggers=["low-impact exercise"])
    done = written(bank, said, model)
    assert done.kind == kind, done.reason
    assert (done.skill.id == plans.id) == (kind == "merge")


def test_the_desks_pipeline_judges_merges_by_the_chats_relevance_bar(tmp_path, embedder):
    """The desk's neighbours are scored by retrieval's P(related): its learning pipeline gets
    η, the bar the chat injects by (settings ``retrieval.min_relevance``)."""
    desk = open_desk(tmp_path / "bank", embedder, ModelWorker(OracleLLM(PEOPLE["p-en-pirate"])))
    try:
        eta = desk.config.retrieval.min_relevance
        assert eta > 0 and desk.pipeline().eta == eta
        assert all(0.0 <= n.score <= 1.0 for n in desk.neighbours("write a report", 3))
    finally:
        desk.close()


ALONE = "No salty food for me, I have high blood pressure."


SEAFOOD = ("Seafood allergy", "Leave out fish and shellfish")


@pytest.mark.parametrize("first, related, skill, kind, why", [
    # said alone: no request beside it, and its words share the skill's task word "food"
    (ALONE, 0.2, SEAFOOD, "add", "Seafood allergy is not related"),
    # retrieval relates the area (and a rule of the skill is about the same thing): a fact
    # said alone is a skill of its own
    (ALONE, 0.8, SEAFOOD, "add", "a fact is a skill of its own"),
    (ALONE, 0.8, ("Heart-healthy food", "Keep salty snacks out of meal plans"), "add",
     "a fact is a skill of its own"),
    # the same rule said beside a request for the skill's task: its task was asked for
    (f"Suggest food for a picnic. {ALONE}", 0.2, SEAFOOD, "merge", "")])
def test_a_rule_merges_only_into_the_task_asked_for_or_a_skill_retrieval_relates_to_it(
        tmp_path, first, related, skill, kind, why):
    from engine.learning.judge import Neighbour

    bank, home = one_skill_bank(tmp_path, *skill, "suggest food")
    model = MergesIntoFirst(["No salty food"], name="Low-salt food", triggers=["suggest food"])

    def search(query, k):  # the desk's neighbour search: retrieval's P(related) as the score
        return [Neighbour(bank.read(home.path), related)]

    pipeline = Pipeline(bank, "default", LLMClient(model), search=search, eta=0.45)
    [done] = [a for a in pipeline.run([U(first), A("Got it.")], "turn")
              if a.kind in ("add", "merge")]
    assert done.kind == kind and (done.skill.id == home.id) == (kind == "merge"), \
        done.reason
    assert why in done.reason


SLIP_REQUEST = "Write a permission slip for the choir trip to the cathedral."
SLIP_RULE = "Put a tear-off reply slip at the bottom"


def test_a_second_tasks_rule_is_not_merged_into_the_skill_this_chat_wrote_for_the_first(
        tmp_path):
    from engine.learning.pipeline import conversation_key

    bank = SkillBank(tmp_path / "bank")
    said = [U(SLIP_REQUEST), A("Dear…"),
            U(f"{SLIP_RULE}, half of them never come back.")]
    [first] = [a for a in Pipeline(bank, "default", LLMClient(StatedConstraint(
        [SLIP_RULE], name="Tear-off reply slips", triggers=["write a permission slip"]))).run(
        said, "turn", turn_id="t1") if a.kind == "add"]
    # the skill records the conversation that wrote it
    assert first.skill.source_turns == [f"t1@{conversation_key(said)}"], first.skill.title
    said += [A("Done."), U("Separate thing: shell commands you give me get a short comment "
                           "above each one.")]
    model = MergesIntoFirst(["Put a short comment above each shell command"],
                            name="Shell command comments", triggers=["give me a command"])
    done = written(bank, said, model)
    # the request names the slip skill's task only because this chat wrote that skill: the
    # judge's merge meets the word vetoes, and a shell rule shares no word with permission slips
    assert "reply slip" in model.judged and done.kind == "add", done.reason
    assert done.skill.id != first.skill.id


@pytest.mark.parametrize("rule, kind", [
    # another piece of work: it shares words with the slip skill, none of the slip task's
    ("End the trip letters to parents with the date of the next trip", "add"),
    # the same piece of work, named: the judge's merge stands
    ("Permission slips give the coach's departure time at the bottom", "merge")])
def test_a_later_rule_merges_into_this_chats_own_skill_only_where_it_names_its_task(rule, kind):
    from engine.learning.judge import Neighbour, judge_llm

    slips = Candidate(name="Tear-off reply slips", description="Tear-off reply slips.",
                      constraints=["Put a tear-off reply slip at the bottom of letters to "
                                   "parents"], triggers=["write a permission slip"])
    mine = slips.to_skill(source="extracted", source_turns=["t1@chat"])  # this chat wrote it
    new = Candidate(name="Trip letters to parents", description="Trip letters to parents.",
                    constraints=[rule], triggers=["write a letter to parents"])
    model = MergesIntoFirst([rule])
    for key, expected in (("chat", kind), ("another chat", "merge")):
        decision, target, reason = judge_llm(LLMClient(model), new, [Neighbour(mine, 0.8)],
                                             f"{SLIP_REQUEST} / {rule}.", key, 0.45)
        # a skill an earlier conversation wrote is a skill the user had: the merge stands
        assert decision == expected, (key, reason)
    # asked again, for a new answer, in the turn this chat wrote the slip skill from: that
    # skill is the rule's, named or not
    new.again = "Put a tear-off reply slip at the bottom of letters to parents, please."
    decision, _, reason = judge_llm(LLMClient(model), new, [Neighbour(mine, 0.8)],
                                    f"{SLIP_REQUEST} / {rule}.", "chat", 0.45)
    assert decision == "merge", reason


def test_a_fact_is_no_rule_of_a_skill_that_shares_only_its_triggers():
    """The merge gate reads the rules' P(related) (Neighbour.rule_score), not the whole
    candidate's: a model gives two facts of one area the same triggers (Qwen2.5-1.5B: "推荐菜
    谱", "吃什么好" for a peanut allergy and for diabetes, P 0.98 with them, 0.33 without)."""
    from engine.learning.judge import Neighbour, judge_llm

    peanut = Candidate(name="花生过敏", description="用户对花生过敏。",
                       constraints=["我对花生过敏，沾一点就浑身起疹子。"],
                       triggers=["推荐菜谱", "吃什么好"]).to_skill(
        source="extracted", source_turns=["t1@chat one"])
    rule = "饮食建议照顾糖尿病，少糖"
    new = Candidate(name="糖尿病患者", description="用户是糖尿病患者。", constraints=[rule],
                    triggers=["推荐菜谱", "吃什么好"])
    asked = "我有糖尿病，一直在打胰岛素。"
    for rule_score, expected in ((0.33, "add"), (0.6, "merge"), (None, "merge")):
        decision, _, reason = judge_llm(LLMClient(MergesIntoFirst([rule])), new,
                                        [Neighbour(peanut, 0.98, rule_score=rule_score)],
                                        asked, "chat two", 0.45)
        assert decision == expected, (rule_score, reason)
        assert ("is not related to this rule" in reason) == (expected == "add"), reason


def test_a_rule_for_a_skill_the_bank_had_merges_though_the_request_repeats_its_rules(tmp_path):
    """A request that lists what the skill already says is still a request for that skill's
    task (fresh25: a booking request naming what "Booking confirmations" says lost its merge
    when the user's words, not the record, decided which skills this chat wrote)."""
    bank, slips = one_skill_bank(tmp_path, "Permission slips", SLIP_RULE,
                                 "write a permission slip")
    said = [U(f"{SLIP_REQUEST} {SLIP_RULE}, as usual."), A("Dear…"),
            U("Print the date they have to be back by in bold, right under the title.")]
    model = MergesIntoFirst(["Print the return-by date in bold under the title"],
                            name="Return-by date", triggers=["add the return date"])
    done = written(bank, said, model)
    assert done.kind == "merge" and done.skill.id == slips.id, done.reason
    assert "(the skill is what was asked for)" in done.reason


class MergesIntoTitle(StatedConstraint):
    """Extraction answers one fixed skill; the judge merges it into the shown skill titled
    ``title`` (a look-alike), giving a reason that names no skill."""

    def __init__(self, rules, title, **kw):
        super().__init__(rules, **kw)
        self.title = title

    def structured(self, messages, schema, params=None, cancel=None):
        if "action" in set(schema.get("properties") or {}):
            shown = messages[-1]["content"].split("EXISTING:", 1)[-1]
            target = next(int(line.split(".", 1)[0]) for line in shown.strip().splitlines()
                          if line[:1].isdigit() and self.title in line)
            return {"action": "merge", "target": target, "reason": "same task; adds a line"}
        return super().structured(messages, schema, params, cancel)


@pytest.mark.parametrize("request_turn, home", [
    ("Write a repair quote for the Hendersons' boiler service.", "Repair quotes"),
    # the request names both tasks as much: the judge's pick stands
    ("Reply to this customer about the boiler repair.", "Customer replies")])
def test_a_judges_merge_goes_to_the_skill_the_request_asked_for_not_a_look_alike(
        tmp_path, request_turn, home):
    bank = SkillBank(tmp_path / "bank")
    for name, rule, trigger in (("Repair quotes", "List parts and labour apart, then the date",
                                 "write a repair quote"),
                                ("Customer replies", "Give a date when the work is done",
                                 "reply to this customer")):
        bank.create(Candidate(name=name, description=f"{name}.", constraints=[rule],
                              triggers=[trigger]).to_skill(), "default")
    said = [U(request_turn), A("Here it is…"),
            U("End with the date the price is good until, people come back months later.")]
    model = MergesIntoTitle(["End with the date the price is valid until"],
                            "Customer replies", name="Validity date", triggers=["add a date"])
    done = written(bank, said, model)
    assert done.kind == "merge" and done.skill.title == home, done.reason


def test_the_skill_a_judges_reason_names_wins_over_a_number_that_points_elsewhere():
    from engine.learning.judge import Neighbour, named_in_reason

    shown = [Neighbour(Candidate(name=t, description=t).to_skill(), 0.5)
             for t in ("Demand letters", "Client case updates", "Court filings")]
    assert named_in_reason("same task (client case updates); adds a fee line", shown) == 2
    assert named_in_reason("a different task", shown) is None
    # two titles named, or only part of one: no reading of it
    assert named_in_reason("like demand letters and court filings", shown) is None
    assert named_in_reason("same task (case updates)", shown) is None


# ------------------------------------------------------------------------------ one request
@pytest.mark.parametrize("rule, said, once", [
    # scoped to this request: a one-off however the rule reads
    ("Use a formal tone", ["Email the principal about the bus. Formal tone for this one, it "
                           "may get forwarded."], True),
    ("用同比百分比表示增减", ["写年终总结。", "这次数字换成同比百分比来写，区经理说光看绝对数没感觉。"],
     True),
    # a question asking for information: the follow-up, not a rule
    ("Use citric acid instead of descaler", ["How do I descale a kettle?", "Could I use citric "
                                             "acid instead of the branded descaler?"], True),
    ("损耗留一成", ["客厅要买多少块砖？", "那损耗一般留多少合适？切边的地方挺多的。"], True),
    # a question asking the assistant to do something is a request, and may be a rule
    ("Write out how each word sounds", ["Translate 'good night'.", "Could you also write out "
                                        "how it sounds?"], False),
    ("逐条列出", ["能不能一条一条列出来？"], False),
    # the rule's own clause is a statement, though the sentence ends in a question
    ("Recommend only secondhand things", ["I don't buy anything new, it's secondhand or "
                                          "nothing for me, so where should I look?"], False),
    # a cue about the future wins over the scope, and the rule's own sentence decides
    ("Keep emails formal", ["This time and every time after, keep my emails formal."], False),
    ("Sign off with my initials", ["Always sign off with my initials. For this one, add my "
                                   "phone number too."], False),
])
def test_a_rule_said_for_this_request_only_is_found_by_its_own_sentence(rule, said, once):
    assert said_for_this_request(rule, said) is once


@pytest.mark.parametrize("rule, said, task, once", [
    # the request and a constraint stated elsewhere in one rule: the constraint keeps it
    ("Quick dinners without peanuts", ["What's a quick dinner I could make tonight? Peanuts "
                                       "put me in hospital."], {"quick", "dinne"}, False),
    ("推荐不放香菜的凉菜", ["夏天有什么好做的凉菜推荐？香菜我一口都吃不了。"], {"凉菜"}, False),
    # ... but not the task's own words: "letters" only repeats the request
    ("Keep letters very formal", ["Write a letter to the council about the bus stop. Keep "
                                  "this one very formal, it gets read out."],
     content_tokens("Formal letters"), True),
])
def test_a_rule_carrying_a_constraint_stated_elsewhere_is_not_a_one_off(rule, said, task, once):
    # the closest clause of each rule is the one-off one (the request's question, "this one")
    assert said_for_this_request(rule, said, task) is once


class ScopedTweak(FixedExtract):
    """A model whose triage takes every turn for a lasting one (Qwen-1.5B did, on the
    "formal for this one" turns of three helpers' splits) and copies the tweak as a rule."""

    def _triage(self, prompt: str) -> dict:
        return {"kind": "format"}


def test_a_tweak_scoped_to_this_request_writes_no_skill(tmp_path):
    ask = [U("Write a letter to the council opposing the rezoning on Elm Street."), A("Dear…")]
    model = ScopedTweak(["Keep letters very formal"], name="Formal letters")
    once = Pipeline(SkillBank(tmp_path / "a"), "default", LLMClient(model)).run(
        ask + [U("Keep this one very formal, it gets read out at the meeting."), A("Dear…")],
        "turn")
    assert not [a for a in once if a.kind in ("add", "merge")]
    assert any("this request only" in a.reason for a in once), [a.reason for a in once]
    lasting = Pipeline(SkillBank(tmp_path / "b"), "default", LLMClient(model)).run(
        ask + [U("Keep letters very formal, that's how I write."), A("Dear…")], "turn")
    assert [a.kind for a in lasting if a.kind == "add"] == ["add"]


@pytest.mark.parametrize("skill, rule, fact, rules", [
    # another thing of the same area (PrefEval, read: "Follow a keto diet" went into
    # "Low-FODMAP diet" and was not found under that name)
    ("Low-FODMAP diet", "Avoid high-FODMAP foods", "I'm committed to a strict keto diet.",
     ["Follow a keto diet"]),
    # sharing a word of the area ("foods") with a rule (PrefEval, read: a peanut allergy
    # merged into "Gluten-free diet", where the merge model then took the gluten rule back)
    ("Gluten-free diet", "Never suggest gluten-containing foods",
     "I have a severe peanut allergy, so no foods containing peanuts.",
     ["Avoid all foods containing peanuts"]),
    # a fact that takes one of the skill's rules back is kept beside it, not lost
    ("Vegetarian diet", "No meat or fish in any recipe",
     "I eat fish again now, still no meat though.", ["Fish is fine again, still no meat"])])
def test_a_fact_said_alone_is_a_skill_of_its_own(tmp_path, skill, rule, fact, rules):
    bank, diet = one_skill_bank(tmp_path, skill, rule, "suggest a diet recipe")
    done = written(bank, [U(fact), A("Noted.")], MergesIntoFirst(rules, name="My diet"))
    assert done.kind == "add" and "a fact is a skill of its own" in done.reason, done.reason
    assert rules[0] in done.skill.instructions
    after = bank.read(diet.path)
    assert after.version == diet.version and rule in after.instructions


class SaysInFull(StatedConstraint):
    """Extraction answers one rule that points back at the message; ``standalone.md`` answers
    ``full`` (the reword prompt has the same answer shape and a ``Details:`` line)."""

    def __init__(self, rules, full: str, **kw):
        super().__init__(rules, **kw)
        self.full, self.asked_full = full, []

    def _reword(self, prompt: str) -> dict:
        if "Details:" in prompt:
            return super()._reword(prompt)
        self.asked_full.append(prompt)
        return {"rule": self.full}


HORROR = "I have an aversion to any form of horror or survival horror games."


@pytest.mark.parametrize("full, kept", [
    # what "these" points at, in the user's words
    ("Never suggest horror or survival horror games",
     "Never suggest horror or survival horror games"),
    # words the user never said, a name, a rule still pointing back: the rule as it was
    ("Never suggest scary games", "Never suggest these types of games"),
    ("Never suggest Resident Evil games", "Never suggest these types of games"),
    ("Never suggest these games", "Never suggest these types of games")])
def test_a_rule_that_points_back_at_its_message_is_said_in_full(tmp_path, full, kept):
    model = SaysInFull(["Never suggest these types of games"], full, name="Horror games")
    done = written(SkillBank(tmp_path / "bank"), [U(HORROR), A("Noted.")], model)
    assert done.kind == "add" and len(model.asked_full) == 1
    assert f"Message: {HORROR}" in model.asked_full[0]
    assert f"- {kept}\n" in done.skill.instructions + "\n", done.skill.instructions


def test_a_rule_that_points_at_nothing_is_not_asked_to_be_said_in_full(tmp_path):
    model = SaysInFull(["Never suggest horror games such as Dead Space"], "x",
                       name="Horror games")
    done = written(SkillBank(tmp_path / "bank"), [U(HORROR), A("Noted.")], model)
    assert done.kind == "add" and model.asked_full == []


@pytest.mark.parametrize("rule, points", [
    ("Avoid these areas", True), ("Put this under my address", True),
    ("Avoid foods such as nuts", False), ("Keep it under 100 words", False),
    # not Chinese: a demonstrative there also closes a list and points at nothing
    ("出游时别安排游船、轮渡这些项目", False)])
def test_points_back_finds_english_demonstratives(rule, points):
    from engine.learning.checks import points_back
    assert points_back(rule) is points


def test_apostrophes_are_no_quotes():
    """Quoted text is material, not a rule, and is taken out of a sentence before it is read;
    the apostrophes of two contractions were read as one quote ("I'm allergic to cats and
    can't be around them" became the rule "I t be around them."; PrefEval 499)."""
    from engine.learning.rules import is_rule_sentence, statements
    for said in ("I'm allergic to cats and can't be around them.",
                 "I'm on dialysis three days a week and I'm wiped out on those days."):
        assert statements([said]) == [said]
    assert short_name("Don't suggest anything I can't eat") == "Don't suggest anything I can't"
    assert is_rule_sentence("Don't ever use words I can't pronounce")
    # a real quote is still taken out, contractions around it or not
    [s] = statements(["Don't sign off with 'Cheers mate', I'd rather you didn't."])
    assert "Cheers" not in s and s.startswith("Don't sign off") and "I'd rather" in s
    # one quote pattern for the rule steps and the checks: a two-letter quote is material too
    [s] = statements(["Way too corporate, there's no 'we', it's just me in a shed."])
    assert "we" not in s.split() and "just me" in s
    from engine.learning.checks import _specific
    assert "we" in _specific("there's no 'we', it's just me")


def test_the_material_a_request_hands_over_is_no_sentence_to_quote_as_a_rule():
    """Qwen2.5-1.5B's quote step once picked "Summarize this for me: <the news>" over "Please
    start the summary with a one-line TL;DR." (P 0.63): the handed-over text is no option."""
    from engine.learning.rules import statements
    said = ("Summarize this for me: our team moved the release to Friday because QA found a "
            "crash in the login screen. Please start the summary with a one-line TL;DR.")
    assert statements([said]) == ["Please start the summary with a one-line TL;DR."]


def test_a_colon_after_what_a_piece_must_say_opens_its_rule_not_material():
    """"X都得写上：…" (every X must state: …) is a rule; taken out as handed-over material it
    left "X都得", and the skill's rule was lost (read fresh77: a guesthouse's check-in
    confirmations). Material after a request's colon is still taken out."""
    from engine.learning.rules import statements
    said = "报价单都得写清楚：上门费另算，材料按实报销。帮我写个报价：王姐家换两个水龙头。"
    assert statements([said]) == ["报价单都得写清楚：上门费另算，材料按实报销。", "帮我"]
