"""The self-filter (engine/chat/skill_filter.py): after retrieval, on models able to judge, one
short constrained call keeps only the skills that fit the request. Scripted-model tests for its
logic in the turn, and one test on the recommended Qwen model."""

from __future__ import annotations

import shutil

import pytest

from engine.chat.skill_filter import candidates_text, self_filter
from engine.desk import SkillDesk
from engine.errors import StructuredOutputError
from engine.llm import tiers
from engine.llm.base import GenParams
from engine.settings import Settings
from tests.support import DeskMaker, RecordingOracle, U

TLDR = {"name": "Summary with TL;DR first", "level": "functional",
        "description": "How the user wants summaries of articles and texts written.",
        "constraints": ["Start summaries with a one-line TL;DR", "Then the key points as bullets"],
        "triggers": ["summarize this article", "give me a summary"], "tags": ["summary"]}
ARTICLE = "Summarize this article about the history of tea in China."


@pytest.fixture
def make_desk(tmp_path, embedder):
    maker = DeskMaker(tmp_path, embedder)
    yield lambda llm, skills=(): maker(llm, None, skills)
    maker.close()


class FakeHit:
    def __init__(self, name, desc):
        from engine.bank.skill import Skill

        self.skill = Skill(name=name, title=name.title(), description=desc)


class Scripted:
    """An LLMClient stand-in. ``fits``: candidate title -> P(fits) for the one-candidate score
    (or an exception to raise); ``answer``: the joint structured answer (or an exception)."""

    def __init__(self, fits=None, answer=None):
        self.fits, self.answer, self.asked = fits or {}, answer, []

    def score(self, name, prefix, options, pick, **values):
        self.asked.append(("score", name, prefix, dict(options), values))
        if isinstance(self.fits, Exception):
            raise self.fits
        title = values["skills"].split(". ", 1)[1].split(":", 1)[0]
        p = self.fits[title]
        return {"yes": p, "no": 1 - p}

    def structured(self, name, **values):
        self.asked.append(("structured", name, values))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


# ------------------------------------------------------------------------------ the logic
def test_a_skill_about_the_user_is_judged_with_its_own_prompt():
    """``about: user`` (engine/learning/about.py): a diet or a fear fits in any area; a task
    skill is judged by filter.md, which never tells the model that."""
    task, fact = FakeHit("tldr", "TL;DR first."), FakeHit("vegan", "The user is vegan.")
    fact.skill.about = "user"
    client = Scripted(fits={"Tldr": 0.8, "Vegan": 0.8})
    assert self_filter(client, "Dinner ideas?", [task, fact]).hits == [task, fact]
    assert [a[1] for a in client.asked] == ["filter", "filter_user"]


def test_the_filter_judges_each_candidate_alone_on_titles_and_descriptions_only():
    hits = [FakeHit("rust-lexer", "Tokenize Python in Rust."), FakeHit("tldr", "TL;DR first.")]
    client = Scripted(fits={"Rust-Lexer": 0.3, "Tldr": 0.8})
    res = self_filter(client, "Summarize   this", hits)
    assert res.asked and res.answer == [2] and res.hits == [hits[1]]
    assert res.dropped == [hits[0]] and res.scores == [0.3, 0.8]
    kinds = [a[0] for a in client.asked]
    assert kinds == ["score", "score"]  # one judgement per candidate, no joint call
    _, name, prefix, options, values = client.asked[0]
    assert name == "filter" and values["request"] == "Summarize this"
    assert values["skills"] == candidates_text(hits[:1]) == "1. Rust-Lexer: Tokenize Python in Rust."
    assert prefix == '{"use":' and options == {"no": " []", "yes": " ["}
    # the bar (an English request's) keeps what reaches it, drops what does not
    from engine.chat.skill_filter import FIT_MIN_P
    assert self_filter(Scripted(fits={"Tldr": FIT_MIN_P}), "x", [hits[1]]).hits == [hits[1]]
    assert self_filter(Scripted(fits={"Tldr": FIT_MIN_P - 0.01}), "x", [hits[1]]).hits == []


def test_a_vocabulary_that_cannot_score_falls_back_to_one_joint_call():
    hits = [FakeHit("rust-lexer", "Tokenize Python in Rust."), FakeHit("tldr", "TL;DR first.")]
    client = Scripted(fits=ValueError("options share a first token"), answer={"use": [2, 7, 0]})
    res = self_filter(client, "Summarize this", hits)
    assert res.answer == [2] and res.hits == [hits[1]]  # numbers outside 1..n are ignored
    _, name, values = client.asked[-1]
    assert name == "filter" and values["skills"] == candidates_text(hits) == (
        "1. Rust-Lexer: Tokenize Python in Rust.\n2. Tldr: TL;DR first.")


def test_the_filter_never_judges_always_on_hits_and_keeps_everything_when_it_fails():
    always, other = FakeHit("house-style", "Always."), FakeHit("tldr", "TL;DR first.")
    res = self_filter(Scripted(fits={"Tldr": 0.1}), "hi there", [always, other],
                      judged=lambda h: h is not always)
    assert res.hits == [always] and res.dropped == [other]
    # only always-on hits: no call at all
    client = Scripted()
    res = self_filter(client, "hi", [always], judged=lambda h: h is not always)
    assert not res.asked and res.hits == [always] and client.asked == []
    # garbage from the model: the retrieved skills stay (a broken filter must not cost a skill)
    res = self_filter(Scripted(fits=StructuredOutputError("not JSON")), "x", [other])
    assert res.asked and res.hits == [other] and res.error


def test_only_capable_tiers_run_the_filter():
    assert tiers.policy("capable").self_filter and tiers.policy("unknown").self_filter
    assert not tiers.policy("tiny").self_filter


# ------------------------------------------------------------------------------ in the turn
def test_a_skill_the_model_rejects_is_not_injected_and_the_turn_says_so(make_desk):
    llm = RecordingOracle(reply="Tea came from China.")
    llm.filter_answer = []
    desk = make_desk(llm, skills=[TLDR])
    assert desk.search(ARTICLE)  # retrieval alone would inject it
    r = desk.chat([U(ARTICLE)], learn=False)
    assert r.injected == [] and r.filtered_out == ["summary-with-tl-dr-first"]
    assert "filter_s" in r.timings and r.info()["filtered_out"] == r.filtered_out
    assert llm.calls.count("filter") == 1
    assert "TL;DR" not in llm.sent[-1][-1]["content"] and llm.sent[-1][-1]["content"] == ARTICLE
    # the model says it fits: injected as retrieval chose it
    llm.filter_answer = [1]
    r = desk.chat([U(ARTICLE)], learn=False)
    assert [i.title for i in r.injected] == ["Summary with TL;DR first"]
    assert r.filtered_out == [] and "one-line TL;DR" in llm.sent[-1][-1]["content"]


def test_the_filter_never_runs_when_nothing_passes_eta(make_desk):
    llm = RecordingOracle(reply="Hello!")
    llm.filter_answer = []
    desk = make_desk(llm, skills=[TLDR])
    for text in ("hi", "thanks!", "你好", "What is the capital of Peru?"):
        assert desk.search(text) == []
        r = desk.chat([U(text)], learn=False)
        assert r.injected == [] and "filter_s" not in r.timings
    assert "filter" not in llm.calls


def test_the_setting_and_the_tiny_tier_turn_the_filter_off(make_desk):
    tiny = RecordingOracle(tier="tiny")
    tiny.filter_answer = []
    desk = make_desk(tiny, skills=[TLDR])
    r = desk.chat([U(ARTICLE)], learn=False)
    assert r.injected and "filter" not in tiny.calls and "filter_s" not in r.timings
    capable = RecordingOracle()
    capable.filter_answer = []
    desk = make_desk(capable, skills=[TLDR])
    desk.config.retrieval.self_filter = False
    r = desk.chat([U(ARTICLE)], learn=False)
    assert r.injected and "filter" not in capable.calls
    assert not desk.chat([U(ARTICLE)], learn=False, self_filter=True).injected
    assert Settings.from_dict({"retrieval": {"self_filter": False}}).retrieval.self_filter is False


def test_a_turn_prepared_while_typing_is_not_decided_again(make_desk):
    """desk.prepare (the app calls it when the user pauses typing) decides the skills of the
    draft; the chat of exactly those messages starts from that decision (no second filter call)
    unless the bank changed meanwhile; anything else is decided afresh."""
    from tests.support import seed_skill

    llm = RecordingOracle(reply="Tea came from China.")
    llm.filter_answer = [1]
    desk = make_desk(llm, skills=[TLDR])
    desk.prepare([U(ARTICLE)]).join(30)
    assert llm.calls.count("filter") == 1
    r = desk.chat([U(ARTICLE)], learn=False)
    assert r.prepared and r.info()["prepared"] and "filter_s" in r.timings
    assert [i.title for i in r.injected] == ["Summary with TL;DR first"]
    assert llm.calls.count("filter") == 1 and "one-line TL;DR" in llm.sent[-1][-1]["content"]
    # used once: the same messages again are decided again
    assert not desk.chat([U(ARTICLE)], learn=False).prepared
    assert llm.calls.count("filter") == 2
    # the user sent something else than the draft
    desk.prepare([U("Summarize this article about coffee")]).join(30)
    r = desk.chat([U(ARTICLE)], learn=False)
    assert not r.prepared and llm.calls.count("filter") == 4
    # a skill was learned (or edited) between the draft and the send: decided again, and the
    # model says no this time
    desk.prepare([U(ARTICLE)]).join(30)
    desk.bank.create(seed_skill({
        "name": "Meeting minutes", "level": "functional", "triggers": ["write the minutes"],
        "description": "How the user wants minutes of a team meeting written.",
        "constraints": ["Decisions first, then action items with owners"], "tags": ["minutes"]}),
        "default")
    desk.refresh()
    llm.filter_answer = []
    r = desk.chat([U(ARTICLE)], learn=False)
    assert not r.prepared and r.injected == [] and llm.calls.count("filter") == 6
    # the skill was disabled meanwhile: decided again, and it is not used
    llm.filter_answer = [1]
    desk.prepare([U(ARTICLE)]).join(30)
    desk.disable("summary-with-tl-dr-first")
    r = desk.chat([U(ARTICLE)], learn=False)
    assert not r.prepared and r.injected == []


def test_an_always_on_skill_survives_the_filter(make_desk):
    llm = RecordingOracle()
    llm.filter_answer = []
    desk = make_desk(llm, skills=[TLDR])
    desk.set_always_on(desk.skills[0], True)
    r = desk.chat([U(ARTICLE)], learn=False)
    assert [i.title for i in r.injected] == ["Summary with TL;DR first"]
    assert "filter" not in llm.calls  # the only hit is always-on: nothing to judge


# ------------------------------------------------------------------------------ real model
NEIGHBOUR_BANK = [
    {"name": "Python lexer in Rust", "level": "functional",
     "description": "Implement a simple Python lexer in Rust that tokenizes input code, "
                    "handling indentation and dedentation tokens.",
     "constraints": ["Return Option<Token> from next_token", "Emit INDENT/DEDENT tokens"],
     "triggers": ["write a python lexer in rust", "tokenize python code in rust"],
     "tags": ["rust", "lexer"]},
    {"name": "Cover letters", "level": "functional",
     "description": "Cover letters for job applications in the user's preferred style.",
     "constraints": ["Keep it under 250 words", "Open with the role and one concrete result"],
     "triggers": ["write a cover letter", "cover letter for a job"], "tags": ["writing"]},
]


@pytest.fixture
def qwen_desk(qwen_path, tmp_path, embedder):
    """The recommended model (greedy) on a bank of NEIGHBOUR_BANK."""
    from tests.support import seed_skill

    cfg = Settings()
    cfg.model.model = str(qwen_path)
    cfg.model.n_threads = 2
    cfg.model.temperature = 0.0
    root = tmp_path / "bank"
    desk = SkillDesk.open(root, config=cfg, create=True, embedder=embedder)
    for d in NEIGHBOUR_BANK:
        desk.bank.create(seed_skill(d), "default")
    desk.refresh()
    yield desk
    desk.close()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.model
@pytest.mark.slow
def test_qwen_drops_a_topical_neighbour_and_keeps_a_paraphrase(qwen_desk):
    """On a small bank, a Rust question that is not about writing a lexer passes η (it shares
    the language) but the recommended model's self-filter drops it; a paraphrased cover-letter
    request keeps its skill."""
    desk = qwen_desk
    neighbour = "In Rust, how do I read a whole file into a String?"
    paraphrase = ("I'm applying for a barista job at a café; draft the letter that goes "
                  "with my résumé.")
    params = GenParams(max_tokens=8, temperature=0.0)
    assert [h.skill.title for h in desk.search(neighbour)] == ["Python lexer in Rust"]
    assert [h.skill.title for h in desk.search(paraphrase)] == ["Cover letters"]
    r = desk.chat([U(neighbour)], learn=False, params=params)
    assert r.injected == [] and r.filtered_out == ["python-lexer-in-rust"], r.info()
    assert r.timings["filter_s"] > 0
    r = desk.chat([U(paraphrase)], learn=False, params=params)
    assert [i.title for i in r.injected] == ["Cover letters"], r.info()


@pytest.mark.model
@pytest.mark.slow
def test_warm_up_primes_the_filter_prompt_for_the_first_skilled_answer(qwen_desk):
    """``desk.warm_up()`` (the app calls it once the model is loaded) evaluates the filter
    prompt's fixed part in the background, then the prompt with the line of each skill used
    most: the first answer that gets such a skill evaluates only its request in the filter
    call, not ~250 tokens cold nor the skill's line."""
    desk = qwen_desk
    letters = next(s for s in desk.index.skills.values() if s.title == "Cover letters")
    desk.state.record_uses([(letters.id, letters.key)])
    assert desk.most_used(1) == [letters]
    job = desk.warm_up()
    assert job is not None
    assert job.result(timeout=600) > 100  # prompt tokens evaluated
    backend = desk.worker.backend
    # another prompt in between (in the app: a learning call), so the live KV cache no
    # longer holds the warm-up and only its snapshots can
    desk.worker.submit(lambda b, c: b.prefill([U("Hello there, how are you today?")], c)
                       ).result(timeout=300)
    evaluated = []
    score = backend.choice_logprobs

    def spy(*args, **kw):
        out = score(*args, **kw)
        res = backend.last_result
        evaluated.append(res.usage.prompt_tokens - res.cached_tokens)
        return out

    backend.choice_logprobs = spy
    request = "Write a cover letter for a junior data analyst role."
    try:
        r = desk.chat([U(request)], learn=False, params=GenParams(max_tokens=4, temperature=0.0))
    finally:
        backend.choice_logprobs = score
    assert "filter_s" in r.timings, r.info()
    # the request, the end of its turn and the answer's opening: the skill's line was primed
    assert evaluated and evaluated[0] <= backend.count_tokens(request) + 16, evaluated
    desk.config.retrieval.self_filter = False
    assert desk.warm_up() is None  # off in the settings: nothing to prime


@pytest.mark.model
@pytest.mark.slow
def test_a_prepared_turn_answers_from_the_prompt_evaluated_while_typing(qwen_desk):
    """On the recommended model, desk.prepare evaluates the skilled prompt of the draft into
    the KV cache: the turn sent afterwards reuses all of it but the last token, where the same
    turn unprepared evaluates its skill block and request from scratch."""
    desk = qwen_desk
    text = "Write a cover letter for a junior data analyst role."
    params = GenParams(max_tokens=4, temperature=0.0)
    backend = desk.worker.wait_ready()
    desk.prepare([U(text)]).join(600)
    r = desk.chat([U(text)], learn=False, params=params)
    assert r.prepared and [i.title for i in r.injected] == ["Cover letters"], r.info()
    res = backend.last_result
    assert res.cached_tokens == res.usage.prompt_tokens - 1, (res.cached_tokens,
                                                               res.usage.prompt_tokens)
    # the same turn from a cold chat prompt: the skill block and the request are evaluated
    desk.worker.submit(lambda b, _c: (b.llm.reset(), b.drop_snapshots(("chat",)))).result()
    r = desk.chat([U(text)], learn=False, params=params)
    res = backend.last_result
    assert not r.prepared and res.cached_tokens < res.usage.prompt_tokens - 40
    cold = r.text
    # prepared, then another prompt in between (in the app: a learning call): the turn starts
    # from the prepared prompt's snapshot and answers exactly as the cold turn did
    desk.worker.submit(lambda b, _c: (b.llm.reset(), b.drop_snapshots(("chat",)))).result()
    desk.prepare([U(text)]).join(600)
    desk.worker.submit(lambda b, c: b.prefill([U("Hello there, how are you today?")], c)
                       ).result(timeout=300)
    r = desk.chat([U(text)], learn=False, params=params)
    res = backend.last_result
    assert r.prepared and r.text == cold, (r.text, cold)
    assert res.cached_tokens == res.usage.prompt_tokens - 1


@pytest.mark.model
@pytest.mark.slow
def test_qwen_keeps_a_skill_about_the_user_for_a_request_it_changes(qwen_path):
    """A skill about the user (a diet, a way of learning, a fear; ``about: user``, judged with
    filter_user.md) fits a request whose answer it should change, in any area, and no
    unrelated question. With the first prompt and its bar
    (0.6) the vegan skill was dropped from a dinner request (P 0.53); until the prompt said a
    fact fits in any area, even when it says what the user avoids, a fear of heights under a
    sightseeing request scored 0.25 (now 0.86). The 1.5B model still follows it only in part:
    "The user dislikes jazz music" under a request for a playlist scores 0.11."""
    from engine.chat.skill_filter import FIT_MIN_P, fit_probability
    from engine.llm.client import LLMClient
    from engine.llm.llama_backend import LlamaCppBackend
    from engine.llm.registry import resolve
    from engine.llm.worker import ModelWorker

    worker = ModelWorker(LlamaCppBackend(resolve(str(qwen_path)), n_threads=2, n_ctx=2048))
    try:
        client = LLMClient(worker)
        for (title, desc), fits, unrelated in [
                (("Vegan diet", "The user follows a vegan diet."),
                 "Can you suggest a recipe for dinner tonight?", "What year did the Berlin Wall fall?"),
                (("Hands-on learning", "The user learns best by doing, not by reading."),
                 "How should I go about learning to play the guitar?",
                 "Who wrote Pride and Prejudice?"),
                (("Afraid of heights", "The user is afraid of heights."),
                 "Plan a day of sightseeing in Paris for me.",
                 "How many bones are in the human body?")]:
            hit = FakeHit(title, desc)
            hit.skill.title, hit.skill.about = title, "user"
            assert fit_probability(client, fits, hit) >= FIT_MIN_P, title
            assert fit_probability(client, unrelated, hit) < FIT_MIN_P, title
    finally:
        worker.close()
