"""The retrieval bench's served-set arithmetic (no model, no index)."""

from __future__ import annotations

from bench import _retrieval_sets as D


def _served(split: str, hits: list[str], fit: dict[str, float], filtered: list[str]):
    s = D.Served({"id": split + "1", "split": split, "lang": "en"}, hits, hits)
    s.filtered, s.fit = filtered, fit
    return s


def test_a_fit_bar_serves_the_judged_hits_that_reach_it_and_the_unjudged_ones():
    s = _served("tune", ["a", "b", "c"], {"a": 0.9, "b": 0.55}, ["a", "b", "c"])
    assert D.pick(s, "filtered") == ["a", "b", "c"]  # the filter's own answer
    assert D.pick(s, "filtered", bar=0.6) == ["a", "c"]  # c was not judged: kept
    assert D.pick(s, "filtered", bar=0.95) == ["c"]
    assert D.pick(s, "hits", bar=0.95) == ["a", "b", "c"]  # without the filter: untouched
    rows = D.injection_rows([s, _served("tune", ["a"], {"a": 0.4}, [])], "user", ("tune",),
                            "filtered", bar=0.5)
    assert rows[0][1:4] == [2, 1, 0.5]  # EN: one of two requests still gets a skill


def test_a_band_keeps_the_hits_retrieval_is_sure_of_without_a_call_and_judges_the_rest():
    s = _served("tune", ["a", "b", "c"], {"a": 0.2, "b": 0.3, "c": 0.9}, ["c"])
    s.scores = [0.95, 0.7, 0.5]  # P(related) of a, b, c
    assert D.pick(s, "filtered") == ["c"]  # every hit judged: the filter's answer
    assert D.pick(s, "filtered", above=0.9) == ["a", "c"]  # a is sure: kept unjudged
    assert D.pick(s, "filtered", above=0.6) == ["a", "b", "c"]
    assert [s.calls(x) for x in (None, 0.9, 0.6, 0.4)] == [3, 2, 1, 0]
    assert D.Served({"split": "tune"}, ["a"], ["a"], scores=[0.1]).calls(None) == 0  # no filter


def test_the_bar_refit_picks_per_language_the_bar_that_serves_most_with_fewest_injections():
    """English: the paraphrase target scores 0.6 and the off-topic neighbour 0.45, so every bar
    from 0.5 to 0.6 serves the target and injects nothing (the lowest marked); Chinese: the
    neighbour scores 0.65 and the target 0.8, so the bar must climb above 0.65."""
    from bench.retrieval import refit_table

    def served(rid, lang, hits, fit):
        s = D.Served({"id": rid, "split": "tune", "lang": lang}, hits, hits)
        s.filtered, s.fit = hits, fit
        return s

    offtopic = {
        "starter": [served("o1", "en", [], {}), served("o2", "zh", [], {})],
        "user": [served("o3", "en", ["n"], {"n": 0.45}), served("o4", "zh", ["n"], {"n": 0.65})]}
    paraphrase = [served("p1", "en", ["t", "x"], {"t": 0.6, "x": 0.2}),
                  served("p2", "zh", ["t"], {"t": 0.8})]
    lines = refit_table(("tune",), offtopic, paraphrase, {"p1": "t", "p2": "t"}).splitlines()
    best = [ln.split() for ln in lines if ln.endswith("*")]
    assert [(b[0], b[1]) for b in best] == [("EN", "0.5"), ("ZH", "0.7")]
    en = {ln.split()[1]: ln.split() for ln in lines if ln.startswith("EN ")}
    # columns: starter, user off-topic, served R@1, R@1 less the mean off-topic
    assert en["0.3"][2:] == ["0.000", "1.000", "1.000", "0.500"]  # the neighbour injected
    assert en["0.65"][2:] == ["0.000", "0.000", "0.000", "0.000"]  # the target lost as well


def test_constraints_section_learns_each_statement_once_and_scores_its_requests(
        tmp_path, embedder):
    """The constraints section on a scripted learner: each statement writes one skill whose
    trigger is its first related request; that request is served its own skill, the bank is
    kept and a second run loads no model."""
    from bench import _retrieval_constraints as C
    from bench.oracle import OracleLLM
    from engine.llm.worker import ModelWorker

    cons = C.rows()
    assert len(cons) >= 72 and {c["lang"] for c in cons} == {"en", "zh"}
    oracle = OracleLLM({"expect": [{"outcome": "add", "name": f"User fact {i}",
                                    "evidence": c["statement"][:12],
                                    "constraints": [c["statement"]],
                                    "triggers": [c["related"][0]]}
                                   for i, c in enumerate(cons)]})
    made = []

    def worker():
        made.append(ModelWorker(oracle))
        return made[-1]

    own = C.learn_bank(tmp_path / "bank", embedder, worker, log=lambda *_: None)
    assert len(made) == 1 and sum(bool(v) for v in own.values()) >= 0.9 * len(cons)
    assert C.learn_bank(tmp_path / "bank", embedder, worker) == own and len(made) == 1
    m = C.measure(tmp_path / "bank", own, embedder, ("tune",))
    first = [s for s in m["served"] if s.row["id"].endswith("/related0")
             and s.row["split"] == "tune" and m["own"][s.row["own"]]]
    assert first and sum(bool(set(s.hits) & m["own"][s.row["own"]]) for s in first) \
        >= 0.8 * len(first)  # its own trigger finds it
    rows = C._rows(m, ("tune",), "hits")
    assert [r[0] for r in rows] == ["tune EN", "tune ZH"] and all(0 <= r[2] <= 1 for r in rows)
