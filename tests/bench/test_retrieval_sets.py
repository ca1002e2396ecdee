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
