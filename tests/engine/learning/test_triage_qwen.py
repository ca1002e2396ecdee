"""The model's triage on the recommended model (Qwen2.5-Coder-1.5B-Instruct), kept short: a
firm personal constraint and a rule said without cue words get through, a one-off question and a
"just this once" request do not; the decision is the model's probability of a durable kind (one
forward pass) against a bar fitted on the tune half, and the triage prefix is kept between calls.

The sentences are not from the benchmark sets (bench/scenarios/people.jsonl, PrefEval)."""

from __future__ import annotations

import pytest

from engine.bank.store import SkillBank
from engine.learning import Pipeline
from engine.learning.pipeline import LASTING_MIN_P, OPENING_MIN_P, STORY_MIN_P
from engine.learning.triage import DURABLE_MIN_P, Window, user_turns
from engine.llm.base import GenParams
from engine.llm.client import LLMClient
from engine.llm.llama_backend import LlamaCppBackend
from engine.llm.registry import resolve
from engine.llm.worker import BACKGROUND, ModelWorker

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def pipeline(qwen_path, tmp_path_factory):
    worker = ModelWorker(LlamaCppBackend(resolve(str(qwen_path)), n_threads=2, n_ctx=2048))
    worker.wait_ready()
    bank = SkillBank(tmp_path_factory.mktemp("bank"))
    p = Pipeline(bank, "default", LLMClient(worker, priority=BACKGROUND))
    p.checkpoint = lambda: None
    yield p
    worker.close()


def decide(pipeline, *said: str) -> str | None:
    return pipeline._triage(user_turns([{"role": "user", "content": s} for s in said]))


def test_qwen_triage_is_a_probability_that_ranks_what_lasts_above_a_question(pipeline):
    turns = lambda s: user_turns([{"role": "user", "content": s}])  # noqa: E731
    firm, kind = pipeline.triage_score(turns("I never eat meat, I'm vegetarian for life."))
    question, _ = pipeline.triage_score(turns("What's the capital of Australia?"))
    assert 0.0 <= question < firm <= 1.0 and kind in {"constraint", "preference", "rule"}
    worker = pipeline.llm.target
    hits = worker.backend.snapshot_hits
    worker.submit_chat([{"role": "user", "content": "Say hi."}],  # another prompt in the cache
                       GenParams(max_tokens=2, temperature=0)).result()
    probs = pipeline.llm.choice("triage", "kind", user_turns="1. What's the capital of Australia?")
    assert abs(sum(probs.values()) - 1.0) < 1e-6
    # the same answer from the kept prefix, up to the noise of another batch split (measured
    # 0.03: the first call reused the previous prompt's prefix, this one the snapshot)
    assert abs(1.0 - probs["none"] - question) < 0.1
    assert worker.backend.snapshot_hits == hits + 1


def test_qwen_triage_keeps_what_lasts(pipeline):
    assert pipeline.policy["triage"] == "llm"
    assert decide(pipeline, "I'm allergic to shellfish, so keep that in mind for food ideas.")
    assert decide(pipeline, "Draft a note to my neighbour about the fence.",
                  "Notes to neighbours: friendly, and no more than three sentences.")


@pytest.mark.parametrize("said", [
    # a strict xfail until triage became a score (then "How many minutes should I boil an
    # egg?", too close to an example the triage prompt got in the fifth round)
    "How long does it take to walk five kilometres?",
    "Just this once, reply in Italian: my cousin is reading along."])
def test_qwen_triage_drops_one_offs(pipeline, said):
    assert decide(pipeline, said) is None


def test_qwen_extraction_decides_by_a_probability_and_then_writes(pipeline, monkeypatch):
    """Extraction's first decision on the recommended model, on a turn triage let through: a
    lasting rule reaches the bar and the answer then holds a skill in the user's words (the
    checks still run); with the bar out of reach nothing is generated. (Its probability is no
    gate on its own: a plain unit conversion scored 0.64 here. Triage comes first.)"""
    from engine.learning import pipeline as pipeline_module
    from engine.learning import triage

    said = ["Check the grammar of this paragraph.",
            "When you fix my writing, list each change you made under the text."]
    rule = triage.Window(turns=triage.user_turns([{"role": "user", "content": s} for s in said]),
                         cues=["model:rule"], focus=1)
    p_rule = pipeline.extract_score(pipeline.extract_values(rule))
    assert pipeline_module.EXTRACT_MIN_P <= p_rule <= 1.0
    found, failed = pipeline.extract(rule)
    assert failed is None and found  # decided: the schema asked for at least one skill
    assert any("change" in r.lower() for c in found for r in c.constraints)
    monkeypatch.setattr(pipeline_module, "EXTRACT_MIN_P", 1.01)
    calls = pipeline.llm.stats.snapshot()
    assert pipeline.extract(rule) == ([], None)
    assert pipeline.llm.stats.snapshot()[0] == calls[0] + 1  # the score only, no generation


def test_qwen_keep_check_ranks_a_reworded_constraint_above_the_restated_request(pipeline):
    """The keep check (keep.md) on the recommended model: a constraint the user stated, in
    the extractor's own words, scores above the request itself restated as a rule; the bar
    (KEEP_MIN_P) is fitted on four read splits (`bench triage --extract --rules`)."""
    from engine.learning import triage

    said = "I'm allergic to shellfish. What could I cook for dinner tonight?"
    w = triage.Window(turns=triage.user_turns([{"role": "user", "content": said}]),
                      cues=["model:constraint"])
    reworded = pipeline.keep_score(w, "Suggest only dishes without shrimp, crab or mussels")
    request = pipeline.keep_score(w, "Cook dinner tonight")
    assert 0.0 <= request < reworded <= 1.0


@pytest.mark.parametrize("said", [
    # scoped to this one request, in the middle of a task: a one-off however it is worded
    ["Write a short note asking my landlord to fix the dripping kitchen tap.",
     "Make this one a bit more formal, he is rather old-fashioned."],
    # a follow-up question asking for information: no rule
    ["How do I get candle wax out of a wool rug?",
     "Could I use a hair dryer instead of an iron for that?"]])
def test_qwen_learns_nothing_from_a_scoped_tweak_or_a_follow_up_question(pipeline, said):
    """The whole learning run on the recommended model (triage, extraction, the checks): a
    tweak said of this one request, or a question asking for information, writes no skill."""
    messages = []
    for s in said:
        messages += [{"role": "user", "content": s}, {"role": "assistant", "content": "Sure."}]
    actions = pipeline.run(messages, "conversation")
    assert not [a for a in actions if a.kind in ("add", "merge")], \
        [(a.kind, a.reason) for a in actions]


def test_qwen_learns_nothing_from_a_one_off_errand_with_a_dont_in_it(pipeline):
    """A request for this one errand, with a "别…" (don't) cue word in it, on the recommended
    model: extraction wrote a rule of its own wording, no sentence of the user's grounds it,
    and the model, asked which sentence should last (quote.md), answers none; the keep check
    then may not save the model's wording (it did: "跟物业沟通", before the quote step's "none"
    counted) and the cue-word fallback may not write the whole message as the rule."""
    said = "帮我跟物业的王师傅说一声，明天上午家里没人，修水管改到下午三点以后，别让他白跑一趟"
    actions = pipeline.run([{"role": "user", "content": said}], "turn")
    assert not [a for a in actions if a.kind in ("add", "merge")], \
        [(a.kind, a.reason) for a in actions]


@pytest.mark.parametrize("said, word", [("I'm strictly vegan.", "vegan"),
                                        ("I keep kosher.", "kosher"),
                                        ("I'm a wheelchair user.", "wheelchair")])
def test_qwen_learns_a_lone_firm_fact_in_the_users_words(pipeline, tmp_path, said, word):
    """A firm fact said alone, as a conversation's first message: the model's own rule shares
    none of its words ("Avoid all animal products"), and the quote step, offered the one
    sentence, leans to "none" (P 0.60-0.73 when written) where triage is sure (0.91-0.98); the
    opening check let it on, so the sentence is the rule (before, the keep check refused the
    model's wording and nothing was learned)."""
    learner = Pipeline(SkillBank(tmp_path), "default", pipeline.llm)
    actions = learner.run([{"role": "user", "content": said}], "turn")
    added = [a.skill for a in actions if a.kind == "add"]
    assert len(added) == 1, [(a.kind, a.reason) for a in actions]
    assert f"- {said}" in added[0].instructions.splitlines()
    assert word in added[0].display_name.lower() + added[0].description.lower()


@pytest.mark.parametrize("said, word, story", [
    ("We're off to Cornwall for a week in August with the kids, what should we book? I'm deaf "
     "in one ear since a motorbike crash in 2012, so I can't follow anything in noisy places.",
     "deaf", ["cornwall", "august", "kids", "motorbike", "2012"])])
def test_qwen_learns_an_openings_fact_said_without_its_story(pipeline, tmp_path, said, word,
                                                              story):
    """A fact beside the opening's request, with the story of how it came about: the skill's
    rule and description are the fact said without that story (fact.md), even where the
    model's own rule would have passed the checks, and nothing of the trip is written."""
    learner = Pipeline(SkillBank(tmp_path), "default", pipeline.llm)
    actions = learner.run([{"role": "user", "content": said}], "turn")
    added = [a.skill for a in actions if a.kind == "add"]
    assert len(added) == 1, [(a.kind, a.reason) for a in actions]
    s = added[0]
    rules = [line[2:] for line in s.instructions.splitlines() if line.startswith("- ")]
    assert rules == [s.description] and word in s.description.lower(), (rules, s.description)
    written = "\n".join([s.display_name, s.description, s.instructions, *s.triggers]).lower()
    assert not [w for w in story if w in written], written


def test_qwen_learns_the_rule_a_cue_word_fast_tracked_not_the_request_before_it(
        pipeline, tmp_path):
    """A chat turn a cue word ("wrong") let through is the extraction's evidence alone and
    the request before it context: numbered as evidence, the long request was what Qwen-1.5B
    made the skill of ("Referral to Rheumatology" with "Specify the patient's age, symptoms,
    and medications" on a read split), and its rules were dropped as ungrounded."""
    from engine.learning import triage

    messages = [
        {"role": "user", "content": "Write a complaint to the letting agent for flat 4: the "
                                    "boiler has failed three times since October and the "
                                    "engineer they sent never came back."},
        {"role": "assistant", "content": "Dear Sir or Madam, I am writing about the boiler in "
                                         "flat 4, which has failed three times since October…"},
        {"role": "user", "content": "You buried the point, that's the wrong order. Put what I "
                                    "want them to do and by when in the first line, before any "
                                    "of the history."}]
    [w] = triage.windows(messages, "turn")
    assert w.cues and not any(c.startswith("model:") for c in w.cues) and w.focus == 1
    learner = Pipeline(SkillBank(tmp_path), "default", pipeline.llm)
    actions = learner.run(messages, "turn")
    added = [a.skill for a in actions if a.kind == "add"]
    assert added, [(a.kind, a.reason) for a in actions]
    # a skill of the rule ("Put what the user wants first"), none of the complaint
    assert any("first" in s.instructions.lower() for s in added)
    assert not any(w in (s.display_name + s.instructions).lower()
                   for s in added for w in ("boiler", "flat 4", "october"))


def test_qwen_judge_merges_a_follow_up_rule_into_the_skill_of_the_request_it_was_said_for(
        pipeline):
    """The judge reads ASKED, the request a rule was said for: "Put the minutes next to each
    item" names no task, and three look-alike skills are shown; the agenda it was said for
    decides."""
    from engine.learning.candidate import Candidate
    from engine.learning.judge import Neighbour, judge_llm

    shown = [Neighbour(Candidate(name=t, description=d).to_skill(), 0.3) for t, d in [
        ("Newsletters to parents", "How the user wants the monthly newsletter to parents."),
        ("Meeting agendas", "How the user wants agendas for meetings written."),
        ("Staff rota messages", "How the user wants the weekly staff rota sent out.")]]
    rule = Candidate(name="Item timings", description="Minutes next to each item.",
                     constraints=["Put how many minutes each item takes next to it"])
    asked = ("Write the agenda for Thursday's evening with the nursery parents: welcome, the "
             "new garden, fees for next term. / Put how many minutes each item takes next to "
             "it, people want to know when they can leave.")
    decision, target, reason = judge_llm(pipeline.llm, rule, shown, asked)
    assert decision == "merge" and target is shown[1], reason


def test_qwen_replace_check_ranks_the_contradicted_rule_above_the_ones_that_stand(pipeline):
    """The replace check (replace.md) on the recommended model: the saved rule the user's new
    message takes back scores above the bar (REPLACE_MIN_P, fitted on the read tune splits,
    `skilldesk bench replace`), the rules it leaves standing below."""
    from engine.learning.pipeline import REPLACE_MIN_P

    said = ("Nobody reads the long version on their phone. From now on send the minutes as "
            "five bullet points instead of full paragraphs.")
    gone = pipeline.replace_score(said, "Write the minutes as full paragraphs")
    stays = [pipeline.replace_score(said, r) for r in
             ("List who attended at the top", "Put the action items last")]
    assert gone >= REPLACE_MIN_P and all(p < REPLACE_MIN_P for p in stays), (gone, stays)


def test_qwen_merge_of_another_fact_keeps_the_old_rule_and_the_skills_description(pipeline):
    """A merge on the recommended model, the whole path (merge prompt, repair, write): a
    second fact of the same area, said alone, judged the same task. The replace check would
    read the new message as taking the old fact back (P 0.72 at 19985b8, which dropped it): a
    fact said alone is not asked, and the old rule stays. The skill's description stays its
    own."""
    from engine.learning.candidate import Candidate

    bank = pipeline.bank
    media = bank.create(Candidate(
        name="No social media", description="The user does not use social media.",
        goal="Keep every suggestion within this.", constraints=["Never suggest social media"],
        triggers=["how can I promote this"]).to_skill(), "default")
    new = Candidate(name="No smartphone", description="The user has no smartphone.",
                    goal="Keep every suggestion within this.",
                    constraints=["Never suggest phone apps"], triggers=["suggest a tool"],
                    said="I don't own a smartphone and don't want one.")
    done = pipeline.merge(new, media, None, "same task", asked=new.said)
    assert done.kind == "merge", done.reason
    written = bank.read(done.skill.path)
    assert "social media" in written.instructions and "phone apps" in written.instructions, (
        written.instructions, done.notes)
    assert written.description == "The user does not use social media."


def test_qwen_another_fact_said_alone_is_learned_beside_the_first_never_into_it(
        pipeline, tmp_path):
    """The whole learning path on the recommended model (triage, extraction, judge, write)
    for a second fact of an area said alone (PrefEval, read: a peanut allergy merged into
    "Gluten-free diet", where the merge model then took the gluten rule back): the fact is
    learned as a skill of its own and the first skill is not written. (The judge's decision
    itself, merge or not, is the scripted tests' in test_learning_triage.py: asked alone
    here, the 1.5B judge answers "already says it", which is overruled to an add.)"""
    from engine.bank.store import SkillBank
    from engine.learning.candidate import Candidate
    from engine.learning.judge import Neighbour

    bank = SkillBank(tmp_path / "bank")
    gluten = bank.create(Candidate(
        name="Gluten-free diet", description="The user has celiac disease.",
        goal="Keep every suggestion gluten-free.",
        constraints=["Never suggest gluten-containing foods"],
        triggers=["what should I eat", "suggest a snack"]).to_skill(), "default")
    p = Pipeline(bank, "default", pipeline.llm, eta=0.45,
                 search=lambda q, k: [Neighbour(bank.read(gluten.path), 0.8)])
    p.checkpoint = lambda: None
    said = "I have a severe peanut allergy, so I must avoid any foods containing peanuts."
    done = [a for a in p.run([{"role": "user", "content": said},
                              {"role": "assistant", "content": "Noted."}], "turn")
            if a.kind in ("add", "merge")]
    assert [a.kind for a in done] == ["add"], [(a.kind, a.reason) for a in done]
    assert "peanut" in done[0].skill.instructions.lower()
    after = bank.read(gluten.path)
    assert after.version == gluten.version and after.instructions == gluten.instructions


@pytest.mark.parametrize("said, rule, word", [
    ("Please never put olives in anything you suggest for me, the taste makes me gag.",
     "Never suggest dishes with these", "olives"),
    ("Boat trips make me horribly seasick, so keep ferries and cruises out of any plans.",
     "Keep these out of travel plans", "ferries")])
def test_qwen_says_a_rule_that_points_back_in_full(pipeline, said, rule, word):
    """``standalone.md`` on the recommended model: what "these" points at, in the user's
    words (the rule as extracted would say nothing in a later conversation)."""
    [full] = pipeline.standalone([rule], said)
    assert word in full and full != rule, full


def test_qwen_merge_of_a_follow_up_takes_back_the_rule_it_contradicts(pipeline):
    """The whole merge path on the recommended model for a rule said for a request (a
    follow-up in a task): the replace check is asked of every old rule, and the one the new
    rule contradicts goes, whether the merge model kept it or not; the others stay."""
    from engine.learning.candidate import Candidate

    bank = pipeline.bank
    minutes = bank.create(Candidate(
        name="Meeting minutes", description="Minutes of the residents' meetings.",
        constraints=["List who attended at the top", "Write the minutes as full paragraphs",
                     "Put the action items last"],
        triggers=["write up the minutes"]).to_skill(), "default")
    # the message of the replace check's own test above (this wording without "From now on"
    # scored 0.56 on the contradicted rule: under the bar, so nothing went)
    said = ("Nobody reads the long version on their phone. From now on send the minutes as "
            "five bullet points instead of full paragraphs.")
    new = Candidate(name="Meeting minutes", description="Minutes of the residents' meetings.",
                    constraints=["Send the minutes as five bullet points"],
                    triggers=["write up the minutes"], said=said)
    done = pipeline.merge(new, minutes, None, "same task",
                          asked=f"Write up the minutes of tonight's residents' meeting. / {said}")
    assert done.kind == "merge", done.reason
    body = bank.read(done.skill.path).instructions
    assert "full paragraphs" not in body and "bullet points" in body, (body, done.notes)
    assert "who attended" in body and "action items" in body, (body, done.notes)
    assert done.replaced == ["Write the minutes as full paragraphs"]


@pytest.mark.parametrize("rule, words", [
    ("Open every invoice for Harlow Plumbing with the job number", ["Harlow", "Plumbing"]),
    ("给张经理的周报里把 12 个待办放在最前面", ["12"])])
def test_qwen_rewords_a_rule_without_the_requests_case(pipeline, rule, words):
    """The reword step (reword.md) on the recommended model: the rule comes back without the
    case's names and numbers and keeps what it asks for (checks.reworded)."""
    from engine.learning.checks import reworded
    from engine.text import content_tokens

    new = pipeline.reword(rule, words)
    assert new is not None and reworded(rule, new, content_tokens(" ".join(words))), new


FACTS = [  # (a fact told with the story of one occasion, the fact's word, the story's words)
    ("I'm registered blind, so on the train to Bristol last week a stranger had to read the "
     "departure board for me", "blind", ["bristol", "stranger", "last week"]),
    ("I'm vegan, so at my work christmas do last year I ate chips all night", "vegan",
     ["christmas", "last year"]),
    ("我对猫毛过敏，去年去朋友家住了一晚上，第二天眼睛肿得睁不开", "过敏", ["朋友家", "去年", "眼睛肿"]),
    ("我晕车很厉害，上个月去黄山坐大巴吐了一路", "晕车", ["黄山", "上个月"])]


def test_qwen_says_a_fact_without_the_story_of_its_occasion(pipeline):
    """The fact step (fact.md, fact.zh.md) on the recommended model: for at least three of the
    four facts it says the fact in words the user's ground (where it does not, the sentence
    stays the rule), and of those at most one keeps the story it was told with (on the read
    fresh44-63 the answers kept a case detail in 5 of 80 facts)."""
    from engine.learning.checks import grounded
    from engine.text import content_tokens

    used, told = [], []
    for said, fact, story in FACTS:
        new = pipeline.fact(said)
        if new is None or not grounded(new, content_tokens(said), said):
            continue
        assert fact in new.lower(), new
        used.append(new)
        told += [new] if [w for w in story if w in new.lower()] else []
    assert len(used) >= 3 and len(told) <= 1, (used, told)


@pytest.mark.parametrize("description, rules", [
    ("How the user wants job adverts written.",
     ["Put the pay and the hours in the first line", "Keep it under 80 words"]),
    ("用户对会议纪要的要求", ["先写结论，再写讨论过程", "每条待办写上负责人"])])
def test_qwen_names_a_skill_from_its_rules(pipeline, description, rules):
    """The naming step (name.md) on the recommended model: a short name that passes
    checks.good_name, in the rules' language, and not one of the rules. (Not the topic of the
    prompt's examples: Qwen copies an example's answer whole when the rules are about the same
    thing, which good_name refuses.)"""
    from engine.learning.candidate import Candidate
    from engine.learning.checks import good_name
    from engine.text import language

    c = Candidate(name="x", description=description, constraints=rules)
    name = pipeline.name_skill(c)
    assert name is not None and good_name(name, c), name
    assert name not in rules and language(name) == language(rules[0]), name


def test_qwen_quote_points_at_the_persona_sentence_and_at_none_for_a_tweak(pipeline):
    """The quote step (quote.md) on the recommended model, where its paraphrase of the user
    could not be grounded: of a persona turn it picks the sentence naming the voice (not the
    opener, not the "whatever I ask" one); of a tweak of the last answer, nothing."""
    from engine.learning import triage

    def quote(*said: str) -> str | None:
        turns = triage.user_turns([{"role": "user", "content": s} for s in said])
        w = triage.Window(turns=turns, cues=["test"], focus=len(turns) - 1)  # no triage bar
        return pipeline.quote(w, list(said[:-1]))

    persona = quote("How do I get limescale off a shower head?",
                    "Meh. Explain it like an overexcited horse racing commentator. "
                    "Whatever I ask, that's how I want you to answer.")
    assert persona is not None and "commentator" in persona
    assert quote("Write a leaving card message for my colleague Ruth.",
                 "Too stiff. Warmer than that, and mention her allotment.") is None



def opening_gate(pipeline, said: str) -> tuple[float, float]:
    """Triage's P of the opening ``said`` and the opening's gate on it
    (:meth:`Pipeline.opening_score`), as a run reads them."""
    turns = user_turns([{"role": "user", "content": said}])
    p = pipeline.triage_score(turns)[0]
    pipeline.users, pipeline.triaged = turns, {turns[0].index: p}
    return p, pipeline.opening_score(said)[0]


def test_qwen_opening_gate_stops_a_question_triage_let_through_but_not_a_stated_fact(
        pipeline):
    """The opening message's gate (:func:`opening_p`, fitted on triage's P of the whole and,
    of a sentence, its P alone times P(it is the writer's own)): a question about the
    user's plant, which triage's bar lets through (P 0.54 when written), goes no further; a
    firm fact beside a request goes on."""
    basil = "My basil smells of aniseed now and the leaves are going black at the edges. " \
            "Did I overwater it?"
    coeliac = "Plan three dinners for this week. I'm coeliac, so everything has to be " \
              "gluten-free, no exceptions."
    (p_basil, basil_p), (_, coeliac_p) = opening_gate(pipeline, basil), \
        opening_gate(pipeline, coeliac)
    assert p_basil >= DURABLE_MIN_P
    assert basil_p < OPENING_MIN_P <= coeliac_p, (basil_p, coeliac_p)


EN_DINNER = ("A few friends are coming round for dinner on Saturday, can you suggest a menu? "
             "{} badly allergic to peanuts, even a trace means hospital.")
ZH_DINNER = "周末要请几个朋友来家里吃饭，帮我想个菜单。{}对花生严重过敏，沾一点就得去医院。"


@pytest.mark.parametrize("said, mine", [
    (EN_DINNER.format("I'm"), True), (EN_DINNER.format("One of the guests is"), False),
    (ZH_DINNER.format("我"), True), (ZH_DINNER.format("其中一位客人"), False)])
def test_qwen_opening_gate_tells_the_writers_fact_from_someone_elses(pipeline, said, mine):
    """The same fact beside the same request, the writer's own or a guest's: the opening's
    gate lets the writer's on and stops the guest's (triage alone reads both as a lasting
    constraint; read fresh70: "my colleague is very quiet" became "The user is quiet")."""
    p, q = opening_gate(pipeline, said)
    assert (q >= OPENING_MIN_P) is mine, (p, q)


@pytest.mark.parametrize("said, own", [
    ("My sister's coming to stay next week and she's badly allergic to nuts, even a trace sets "
     "her off. I've been lactose intolerant since I was a teenager, one milky coffee and I'm "
     "wrecked for the day. Can you plan the meals for her visit?", "lactose"),
    ("Our new lodger is strictly vegan and very particular about it. I get migraines from red "
     "wine, had one last Christmas that floored me for two days. Ideas for a welcome dinner?",
     "migraines"),
    ("下周末我表哥一家来住，他家小孩对鸡蛋严重过敏，一点都不能碰。我自己胃不好，吃不了生冷的，"
     "去年夏天吃了块冰西瓜疼了一宿。帮我安排下这几天的菜。", "胃不好")])
def test_qwen_opening_gate_goes_on_with_the_writers_own_fact_in_a_story(pipeline, said, own):
    """A story with someone else's firm fact first (which triage, reading each sentence
    alone, finds likelier to last when written: 0.90-0.97) and the writer's own after it:
    the gate weighs every sentence (:meth:`Pipeline.opening_reads`), goes on, and the
    sentence it goes on with is the writer's."""
    p, _ = opening_gate(pipeline, said)
    q, best = pipeline.opening_score(said)
    assert q >= OPENING_MIN_P and own in best.text, (p, q, best)


@pytest.mark.parametrize("said, lasting", [
    ("I normally just send my team a two-line update on a Friday, nothing fancy. Just this "
     "once I want a proper write-up, we hit our biggest target of the year. Can you draft it?",
     False),
    ("我平时在业主群里发消息就一两句话。这次不一样，物业费要涨了，大家意见很大，帮我写个详细点的说明。", False),
    ("Normally I'd just get a takeaway on my birthday, but this year I'm cooking for six. I'm "
     "coeliac, so nothing with gluten at all. What could I make?", True)])
def test_qwen_opening_gate_stops_the_usual_way_set_aside_this_once(pipeline, said, lasting):
    """How the writer usually does it, told before "just this once" (``mine.md``'s "usual"),
    is no lasting fact of theirs: the gate stops it (read fresh73: "平时在家长群发通知就几句话
    的事。这次不一样…" went on and wrote a junk skill), and goes on with a firm fact beside it."""
    p, q = opening_gate(pipeline, said)
    assert (q >= OPENING_MIN_P) is lasting, (p, q)


@pytest.mark.parametrize("said", [
    "Can you draft a reply to the council about the bins? And for anything you write for me, "
    "keep it in plain English with no jargon.",
    "帮我写个周报。我让你写的东西段落都别超过三行，我在手机上看。"])
def test_qwen_opening_gate_lets_a_standing_instruction_on(pipeline, said):
    """A standing instruction beside the opening's request is about no fact of the writer's
    life, but it is theirs and lasts (``mine.md``'s "always"): the gate lets it on."""
    p, q = opening_gate(pipeline, said)
    assert q >= OPENING_MIN_P, (p, q)


@pytest.mark.parametrize("said, lasting", [
    ("五一打算带我闺女去重庆玩四天，她十岁了特别爱吃辣，我恐高恐得厉害，上回在张家界的玻璃栈道上腿软得直接"
     "蹲下了，所以那种高空的项目都别排，帮我弄个行程", True),
    ("下个月我们公司组织去杭州团建两天，二十来个人，我是负责订餐的，我乳糖不耐受，一喝牛奶就闹肚子，帮我看看"
     "附近有什么适合聚餐的馆子", True),
    ("我大舅今年七十了，三年前做过心脏搭桥，一天要吃好几种药，这周末来我家住两天，帮我想想这两天做点什么吃的",
     False)])
def test_qwen_opening_gate_reads_a_chinese_run_on_sentence_clause_by_clause(pipeline, said,
                                                                            lasting):
    """A Chinese opening that runs the writer's fact and the request together with "，" (one
    sentence): read whole, the fact drowned in the request and the story (gate 0.01 and
    0.12 when written); read clause by clause (:func:`topic_chain`) it goes on. A clause
    without its subject is read after the one that starts its chain: alone, the uncle's
    "一天要吃好几种药" read as the writer's own (gate 0.64)."""
    p, q = opening_gate(pipeline, said)
    assert (q >= OPENING_MIN_P) is lasting, (p, q)


@pytest.mark.parametrize("tweak, rule, tweak_stops", [
    (("Write a short poem for my grandad's 80th birthday.",
      "Bit sad that, he's a cheerful old boy. Make it jollier and put his allotment in."),
     ("Write up the minutes of tonight's allotment committee meeting.",
      "Put the action points and who is doing them at the very top. Half the committee only "
      "reads the first few lines."), True),
    # read alone (fifty-fourth round), this Chinese tweak reads 0.39, over the bar: without
    # the notice it follows, "再口语化一点" may be said of every notice (the rule 0.42 above it;
    # read after the request, as before, the rule had read 0.14, under the bar of then)
    (("帮我写个周六小区停车位调整的通知。", "太官方了，邻居们会觉得我在打官腔，再口语化一点。"),
     ("帮我写个下周二小区停水的通知。", "通知最后加上物业的电话，大家有问题都是直接打电话问的。"), False)])
def test_qwen_lasting_check_ranks_a_rule_for_the_next_piece_above_a_tweak(pipeline, tweak, rule,
                                                                           tweak_stops):
    """The later-turn check (lasting.md), the turn read alone: asked whether what the newest
    message says is about this answer only or about every future piece of that work, the
    model puts a rule with a reason about how such pieces are used above a tweak of the answer
    just given, the rule at the app's bar, and the tweak below it."""
    score = lambda said: pipeline.lasting_score(  # noqa: E731  (the request is not read)
        user_turns([{"role": "user", "content": said[1]}])[0])
    every_tweak, every_rule = score(tweak), score(rule)
    assert 0.0 <= every_tweak < every_rule <= 1.0, (every_tweak, every_rule)
    assert every_rule >= LASTING_MIN_P, every_rule
    assert every_tweak < LASTING_MIN_P or not tweak_stops, every_tweak


def test_qwen_remembers_a_firm_fact_the_user_asked_it_to_remember(pipeline, tmp_path):
    """"Remember this" on an opening that holds a firm fact beside the request: no gate asks
    whether it lasts (the opening check had answered "no sentence is meant to last", P 0.82,
    over triage's 0.48, when this was written), and the skill keeps the rule, not the trip."""
    said = [{"role": "user", "content": "Planning a weekend in York with my brother, what "
             "should we do? I've been teetotal for ten years, so nothing that's basically a "
             "pub crawl."},
            {"role": "assistant", "content": "Walk the city walls, visit the Minster, the "
             "railway museum, and the Shambles."}]
    fresh = Pipeline(SkillBank(tmp_path / "bank"), "default", pipeline.llm)
    fresh.checkpoint = lambda: None
    [add] = [a for a in fresh.run(said, "remember") if a.kind == "add"]
    text = (add.skill.display_name + add.skill.instructions).lower()
    assert "pub" in text and not any(w in text for w in ("york", "brother", "minster")), text


def test_qwen_cue_words_that_describe_a_problem_do_not_take_a_question_through(pipeline, tmp_path):
    """"以后" is also "after", "总是"/"一直" a problem that keeps happening: cue words find these
    turns, triage (asked alone there, at its bar) stops them; a rule with the same cue goes on
    (measured: 0.30 / 0.23 against 0.79 / 0.94)."""
    said = lambda s: user_turns([{"role": "user", "content": s}])  # noqa: E731
    assert not pipeline._confirm(said("洗完澡以后浴室的镜子一直起雾，擦了又起，怎么办"))
    assert not pipeline._confirm(said("吃完饭以后胃总是胀气，要不要去看医生"))
    assert pipeline._confirm(said("以后给我写周报，都先写风险，再写进度。"))
    assert pipeline._confirm(said("Never use exclamation marks in emails you write for me."))
    fresh = Pipeline(SkillBank(tmp_path / "bank"), "default", pipeline.llm)
    fresh.checkpoint = lambda: None
    actions = fresh.run([{"role": "user", "content": "洗完澡以后浴室的镜子一直起雾，擦了又起，怎么办"},
                         {"role": "assistant", "content": "可以开排气扇，或者在镜子上抹一点洗洁精。"}],
                        "turn")
    assert not [a for a in actions if a.kind in ("add", "merge")], actions


def test_qwen_triage_tells_a_fact_beside_a_request_from_a_rule_for_that_request(pipeline):
    """The durable kind triage finds likeliest for an opening's lasting sentence decides
    whether it is read apart from its request (a fact about the user: "constraint") or with
    it (a rule about the request's own task). All three facts read "constraint"; of the
    three task rules at most one does (on the read scenario sets: 216 of 250 firm facts, 39
    of the 45 that share a word with their request, and 2 of 26 task rules, a cover letter's
    length among them)."""
    facts = ["Find me a weekend away in the Lakes for the two of us. I've been vegan for ten "
             "years, so no farm stays or steakhouses.",
             "Plan a week of packed lunches for work. I'm coeliac, so nothing with gluten, and "
             "I mean nothing.",
             "帮我推荐几家周末吃饭的地方。我对海鲜过敏，吃一口就起疹子，海鲜馆子就别推荐了。"]
    rules = ["Draft a cover letter for a barista job at a café near me. Every cover letter "
             "you write for me should fit on one page.",
             "Write up this week's report for my manager. Reports go in three parts: what got "
             "done, what's blocked, what's next.",
             "帮我写一份这周的周报。周报都按完成事项、遇到的问题、下周计划三段写。"]
    fact_kinds = [pipeline.likeliest_sentence(t).kind for t in facts]
    rule_kinds = [pipeline.likeliest_sentence(t).kind for t in rules]
    assert fact_kinds == ["constraint"] * 3, fact_kinds
    assert rule_kinds.count("constraint") <= 1, rule_kinds


WINES = [{"role": "user", "content": "Recommend three red wines for a barbecue at my sister's."},
         {"role": "assistant", "content": "1. Malbec 2. Zinfandel 3. Shiraz"},
         {"role": "user", "content": "can you say roughly what a bottle of each one costs? I'm "
                                     "skint till payday"},
         {"role": "assistant", "content": "Malbec £8-12, Zinfandel £10-15, Shiraz £7-10."},
         {"role": "user", "content": "Now three white wines for a fish supper on Friday."},
         {"role": "assistant", "content": "1. Albariño 2. Picpoul 3. Muscadet"}]


@pytest.mark.parametrize("newest, again", [
    ("and same for these, what's a bottle of each going to set me back", True),
    ("which of them is the driest?", False)])
def test_qwen_reads_a_turn_that_asks_again_for_a_new_answer_with_the_turn_it_repeats(
        pipeline, tmp_path, newest, again):
    """Asked, for the white wines, what a bottle of each costs, as the user asked for the
    reds: the model finds the earlier turn (P 0.98 when this was written), and extraction
    reads both turns as the evidence, the requests as context. A question about the new
    answer is no repeat (0.52, below AGAIN_MIN_P 0.7)."""
    said = [*WINES, {"role": "user", "content": newest}]
    fresh = Pipeline(SkillBank(tmp_path / "bank"), "default", pipeline.llm)
    fresh.checkpoint = lambda: None
    fresh.users = user_turns(said)
    found = fresh.asked_again(fresh.users[-1])
    assert (found is not None and "costs" in found.text) == again, found
    w, earlier = fresh.with_asked_again(said, Window(turns=fresh.users[-2:], focus=1),
                                        [WINES[0]["content"]])
    evidence = [t.text for t in w.turns[w.focus:]]
    assert evidence == ([WINES[2]["content"], newest] if again else [newest])
    assert any("white wines" in t for t in [*earlier, *(t.text for t in w.turns[:w.focus])])


@pytest.mark.parametrize("request_, rule, story", [
    ("Write an order confirmation for the Dunn birthday cake.",
     "Put the pickup time in bold at the top of every order confirmation.",
     "Last Friday Mrs Dunn came two hours early and the cake wasn't even iced."),
    ("帮我给三楼的周阿姨写个装修告知。",
     "装修告知里都得写上每天几点开工几点收工，中午不干活。",
     "上回隔壁单元的老李拿着拖鞋上来敲门，说他孙子刚睡着就被电钻吵醒了。")])
def test_qwen_story_check_leaves_the_story_out_of_a_later_turns_rule(pipeline, request_, rule,
                                                                      story):
    """A rule said in a later turn with a story after it: the story check (part.md) reads the
    story's sentence at or above STORY_MIN_P and the rule's below, so the rule keeps only its
    own sentence."""
    assert pipeline.story_score(request_, story) >= STORY_MIN_P
    assert pipeline.story_score(request_, rule) < STORY_MIN_P
    sep = "" if rule.endswith("。") else " "
    assert pipeline.without_story([rule + sep + story], request_) == [rule]
