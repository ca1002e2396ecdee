"""The foreground turn and the background queue: skill injection, rewrite, streaming and Stop,
learning after the turn, pause/undo/events, the hand-edit race, and chat pre-empting learning."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.learning_scenarios import load_scenarios, seed_bank
from bench.oracle import OracleLLM
from engine.chat.turn import needs_rewrite, rule_rewrite
from engine.desk import SkillDesk
from engine.learning import Pipeline
from engine.llm.client import LLMClient
from engine.settings import Settings
from tests.support import A, DeskMaker, RecordingOracle, U

SCENARIOS = {s["id"]: s for s in load_scenarios()}
TLDR = {"name": "Summary with TL;DR first", "level": "functional",
        "description": "How the user wants summaries of articles and texts written.",
        "constraints": ["Start summaries with a one-line TL;DR", "Then the key points as bullets"],
        "triggers": ["summarize this article", "give me a summary"], "tags": ["summary"]}


@pytest.fixture
def make_desk(tmp_path, embedder):
    maker = DeskMaker(tmp_path, embedder)
    yield lambda llm, scenario=None, skills=(): maker(llm, scenario, skills)
    maker.close()


# ------------------------------------------------------------------------------ rewrite
def test_rewrite_is_considered_for_every_possible_follow_up():
    # whether a follow-up depends on the conversation is decided by retrieval
    # (tests/test_relevance.py); only a first message and an explicit switch are never rewritten
    assert not needs_rewrite([U("Write a cover letter for a data analyst job.")])
    convo = [U("Write a cover letter for a data analyst job."), A("Dear...")]
    assert needs_rewrite(convo + [U("make it shorter")])
    assert needs_rewrite(convo + [U("把它改短一点")])
    assert needs_rewrite(convo + [U("Make the tone warmer and add a closing line")])
    assert rule_rewrite(convo + [U("make it shorter")]) == (
        "Write a cover letter for a data analyst job. make it shorter")
    switched = convo + [U("By the way, how does DNS caching work?")]
    assert not needs_rewrite(switched)


# ------------------------------------------------------------------------------ the turn
def test_chat_injects_the_matching_skill_beside_the_request_after_a_stable_prefix(make_desk):
    llm = RecordingOracle(reply="TL;DR: tea came from China.")
    desk = make_desk(llm, skills=[TLDR])
    first = "Summarize this article about the history of tea in China."
    r = desk.chat([U(first)], learn=False)
    assert r.text == "TL;DR: tea came from China." and r.finish_reason == "stop"
    assert [i.title for i in r.injected] == ["Summary with TL;DR first"]
    i = r.injected[0]
    assert 0 < i.score <= 1 and i.dense is not None and i.lexical is not None
    assert i.version == "0.1.0" and Path(i.path).is_file()
    assert not r.rewritten and r.query.startswith("Summarize this article")
    system = {"role": "system", "content": desk.config.model.system_prompt}
    assert llm.sent[-1][0] == system and [m["role"] for m in llm.sent[-1]] == ["system", "user"]
    # the skill block goes with the request it is for, the request last
    ask = llm.sent[-1][-1]["content"]
    assert "one-line TL;DR" in ask and "Never quote, list or mention the skills" in ask
    assert ask.endswith(first) and ask.index("one-line TL;DR") < ask.index(first)
    # next turn, same skill: everything before the newest request is what the caller sent,
    # the same tokens whatever skills this turn injects (the KV prefix stays valid)
    # (issue 15: "Summarize this article about coffee in Yemen." alone gets P(related) 0.40 in
    # this one-skill bank, below η: USE's cosine is dominated by the article's topic)
    desk.chat([U(first), A(r.text), U("Give me a summary of this article about coffee in Yemen.")],
              learn=False)
    assert llm.sent[-1][:3] == [system, U(first), A(r.text)] and len(llm.sent[-1]) == 4
    assert "one-line TL;DR" in llm.sent[-1][-1]["content"]
    # an unrelated request scores lower (whether it passes η is retrieval's business)
    r2 = desk.chat([U("What is the boiling point of water at sea level?")], learn=False)
    assert all(x.score < i.score for x in r2.injected)
    assert ("TL;DR" in llm.sent[-1][-1]["content"]) == bool(r2.injected)
    # no skill applies: the system prompt and the request as the user wrote it
    desk.index.params = desk.index.params.with_(threshold=0.99)
    desk.chat([U("What is the boiling point of water at sea level?")], learn=False)
    assert llm.sent[-1] == [system, U("What is the boiling point of water at sea level?")]


COVER = {"name": "Cover letters", "level": "functional",
         "description": "How the user wants cover letters for job applications written.",
         "constraints": ["Three short paragraphs"], "triggers": ["write a cover letter"],
         "tags": ["cover letter"]}


def test_llm_rewrite_on_capable_models(make_desk):
    llm = RecordingOracle(tier="capable")
    desk = make_desk(llm, skills=[COVER])
    r = desk.chat([U("Write a cover letter for a data analyst job."), A("Dear..."),
                   U("make it shorter")], learn=False, plan=False)
    assert r.rewritten and r.query == "make it shorter"  # the oracle echoes the latest message
    assert "rewrite" in llm.calls and "rewrite_s" in r.timings


def test_stream_and_stop(make_desk):
    llm = RecordingOracle(reply=" ".join(["word"] * 400), token_delay_s=0.005)
    desk = make_desk(llm)
    stream = desk.chat([U("Tell me a long story.")], stream=True, learn=False)
    got = []
    for chunk in stream:
        got.append(chunk)
        if len(got) == 5:
            stream.cancel()
    assert 5 <= len(got) < 400
    assert stream.result.finish_reason == "cancelled" and stream.result.text == "".join(got)


def test_chat_queues_learning_after_the_turn_unless_told_not_to(make_desk):
    sc = SCENARIOS["en-tldr-once"]
    desk = make_desk(RecordingOracle(sc, reply="Understood."))
    r = desk.chat(sc["messages"][:3], learn=False)
    assert r.learning_job is None and desk.learning.state()["done"] == 0
    r = desk.chat(sc["messages"][:3])
    assert r.learning_job is not None
    assert desk.learning.wait_idle(30)
    kinds = [e.kind for e in desk.learning.events if e.job_id == r.learning_job]
    assert kinds == ["queued", "running", "add", "done"]
    assert [s.title for s in desk.bank.load("default", scope="user").skills] == [
        "Summary with TL;DR first"]


# ------------------------------------------------------------------------------ the queue
def test_queue_pause_resume_events_and_undo(make_desk):
    sc = SCENARIOS["en-correct-indent"]
    desk = make_desk(OracleLLM(sc), scenario=sc)
    q = desk.learning
    seen = []
    unsubscribe = q.subscribe(seen.append)
    q.pause()
    job = q.submit(sc["messages"], mode="conversation")
    assert not q.wait_idle(0.3) and q.state() == {"queued": 1, "running": 0, "done": 0,
                                                    "paused": True}
    q.resume()
    assert q.wait_idle(30)
    report = q.result(job)
    [merge] = [a for a in report.actions if a.kind == "merge"]
    assert merge.skill.title == "Python code style" and merge.skill.version == "0.1.1"
    assert "four spaces" in merge.skill.instructions.lower()
    assert [e.kind for e in seen] == ["queued", "running", "merge", "done"]
    ev = next(e for e in seen if e.kind == "merge")
    assert ev.previous_version == "0.1.0" and ev.reason
    undo = q.undo(ev.id)
    restored = desk.bank.read(ev.path)
    assert "four spaces" not in restored.instructions.lower()
    assert "two spaces" in restored.instructions.lower() and restored.version == "0.1.2"
    assert undo.kind == "undo" and undo.undoes == ev.id and seen[-1] is undo
    with pytest.raises(Exception, match="already undone"):
        q.undo(ev.id)
    unsubscribe()
    # an add is undone by moving the skill to the trash
    sc2 = SCENARIOS["en-no-emoji"]
    q.pipeline.llm.target.backend.load(sc2)
    report = desk.ingest(sc2["messages"])
    [add] = report.added
    ev_add = next(e for e in q.events if e.kind == "add" and e.path == str(add.skill.path))
    q.undo(ev_add.id)
    assert not Path(ev_add.path).exists() and any(desk.bank.trash_dir.iterdir())
    assert all(h.skill.id != add.skill.id for h in desk.search("emoji", 5, threshold=0.0))
    assert len(seen) == 5  # unsubscribed: nothing after the first undo


def test_jobs_run_one_at_a_time_on_the_given_executor_and_release_it_when_idle(make_desk):
    """The app hands the queue its QThreadPool: every job runs through that executor, jobs
    never overlap, and a paused or empty queue holds no executor thread."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    sc = SCENARIOS["en-tldr-once"]
    desk = make_desk(OracleLLM(sc))
    q = desk.learning
    pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="app-pool")
    drains, running, overlap, threads = [], [], [], []
    lock = threading.Lock()

    def executor(fn):
        drains.append(fn)
        return pool.submit(fn)

    def on_event(ev):
        if ev.kind == "running":
            with lock:
                overlap.append(len(running))
                running.append(threading.current_thread().name)
                threads.append(threading.current_thread().name)
        elif ev.kind == "done":
            with lock:
                running.pop()

    q.set_executor(executor)
    q.subscribe(on_event)
    q.pause()
    jobs = [q.submit(sc["messages"], mode="conversation") for _ in range(3)]
    assert drains == [] and not q.wait_idle(0.2)  # paused: nothing handed to the pool
    q.resume()
    assert q.wait_idle(30)
    assert len(drains) == 1  # one drain ran the three queued jobs in order
    assert overlap == [0, 0, 0]
    ran_on = {e.job_id for e in q.events if e.kind == "done"}
    assert set(jobs) <= ran_on
    assert q.result(jobs[0]).added and not q.result(jobs[1]).added  # 2nd, 3rd: known rule
    # the drain returned: the pool thread is free, and a later job starts a new drain
    pool.submit(lambda: None).result(5)
    q.submit(sc["messages"], mode="conversation")
    assert q.wait_idle(30) and len(drains) == 2
    q.close()
    pool.shutdown(wait=True)
    assert len(threads) == 4 and all(n.startswith("app-pool") for n in threads), threads


def test_event_log_survives_a_restart(make_desk, tmp_path):
    sc = SCENARIOS["en-british"]
    desk = make_desk(OracleLLM(sc))
    desk.ingest(sc["messages"])
    ev = next(e for e in desk.learning.events if e.kind == "add")
    desk.learning.undo(ev.id)
    again = SkillDesk.open(desk.bank.root, config=Settings(), embedder=desk.index.embedder)
    try:
        kinds = [e.kind for e in again.learning.events]
        assert kinds == ["add", "done", "undo"]
        assert again.learning.events[0].undone
    finally:
        again.close()


class HandEditDuringMerge(OracleLLM):
    """While the first merge is being computed, the user saves the file in an editor."""

    def __init__(self, scenario, path_holder):
        super().__init__(scenario)
        self.path_holder = path_holder
        self.merges = 0

    def _merge(self, prompt):
        self.merges += 1
        if self.merges == 1:
            p = self.path_holder["path"]
            text = p.read_text(encoding="utf-8")
            p.write_text(text.replace("- Add a docstring to every function",
                                      "- Add a docstring to every function\n- Prefer f-strings"),
                         encoding="utf-8")
        return super()._merge(prompt)


def test_hand_edit_during_a_merge_is_kept_and_the_merge_is_redone(tmp_path):
    from engine.bank.store import SkillBank

    sc = SCENARIOS["en-correct-indent"]
    bank = SkillBank(tmp_path / "bank")
    seeded = seed_bank(bank, "default", sc)
    path = seeded["Python code style"].path
    llm = HandEditDuringMerge(sc, {"path": path})
    actions = Pipeline(bank, "default", LLMClient(llm)).run(sc["messages"], "conversation")
    [merge] = actions
    assert merge.kind == "merge" and llm.merges == 2, actions
    assert "redone after a hand edit" in merge.notes
    text = path.read_text(encoding="utf-8")
    assert "Prefer f-strings" in text  # the hand edit survived
    assert "four spaces" in text.lower()  # and the merge happened on top of it
    # the hand edit became a version of its own: undoing the merge returns to it
    assert merge.previous_version == "0.1.1" and merge.skill.version == "0.1.2"
    assert "Prefer f-strings" in bank.history.text(merge.skill.id, "0.1.1")


def test_chat_stays_responsive_while_learning_runs(make_desk):
    sc = SCENARIOS["en-tldr-once"]
    slow = RecordingOracle(sc, delay_s=2.0, reply="Fast answer.")
    desk = make_desk(slow, skills=[])
    job = desk.learning.submit(sc["messages"], mode="conversation")
    t0 = time.perf_counter()
    while "extract" not in slow.calls:  # the background extraction is now running
        assert time.perf_counter() - t0 < 10
        time.sleep(0.01)
    started = time.perf_counter()
    r = desk.chat([U("What is the capital of France?")], learn=False)
    latency = time.perf_counter() - started
    assert r.text == "Fast answer." and latency < 1.0, latency
    assert desk.learning.wait_idle(30)
    report = desk.learning.result(job)
    assert [a.kind for a in report.actions] == ["add"]  # the pre-empted call was redone
    assert slow.calls.count("extract") == 2


def test_many_turns_while_learning_never_wait_for_it(make_desk):
    sc = SCENARIOS["en-tldr-once"]
    slow = RecordingOracle(sc, delay_s=0.5, reply="ok")
    desk = make_desk(slow)
    for _ in range(3):
        desk.learning.submit(sc["messages"], mode="conversation")
    latencies = []
    for _ in range(5):
        t0 = time.perf_counter()
        desk.chat([U("Quick question: what is 2 + 2?")], learn=False)
        latencies.append(time.perf_counter() - t0)
    assert max(latencies) < 1.0, latencies
    assert desk.learning.wait_idle(60)


class SlowPlanner(RecordingOracle):
    """Answers every structured call (the plan) only after ``delay_s``, cancellably."""

    def structured(self, messages, schema, params=None, cancel=None):
        self.planned = True
        return super().structured(messages, schema, params, cancel)


def test_stop_interrupts_the_plan_step(make_desk):
    llm = SlowPlanner(delay_s=20.0, reply="never")
    desk = make_desk(llm)
    request = ("First collect the sales figures from the three regional spreadsheets, then "
               "merge them into one table, after that compute the quarterly growth per region, "
               "and finally write a short summary email for the managers.")
    from engine.chat.plan import is_complex

    assert is_complex(request)  # so the turn plans before it retrieves
    stream = desk.chat([U(request)], stream=True, learn=False, plan=True)
    import threading

    threading.Timer(0.5, stream.cancel).start()
    t0 = time.perf_counter()
    text = "".join(stream)
    assert time.perf_counter() - t0 < 5.0  # not the 20 s the plan call would take
    assert getattr(llm, "planned", False)
    assert text == "" and stream.result.finish_reason == "cancelled"
    assert not llm.sent  # the answer never started


def test_undo_needs_no_model(make_desk, tmp_path):
    sc = SCENARIOS["en-british"]
    desk = make_desk(OracleLLM(sc))
    desk.ingest(sc["messages"])
    ev = next(e for e in desk.learning.events if e.kind == "add")
    settings = Settings()
    settings.model.model = str(tmp_path / "no-such-model.gguf")  # building a worker would fail
    again = SkillDesk.open(desk.bank.root, config=settings, embedder=desk.index.embedder)
    try:
        out = again.undo(ev.id)
        assert out.kind == "undo" and not Path(ev.path).exists()
        assert again._worker is None  # the model was never loaded
        assert all(h.skill.path != ev.path for h in again.search("British spelling", 5))
    finally:
        again.close()
