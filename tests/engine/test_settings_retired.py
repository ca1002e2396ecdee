"""A settings file written by an older SkillDesk loads quietly: a retired key is dropped."""

from __future__ import annotations

import json

from engine.settings import Settings


def test_retired_threshold_is_dropped_without_a_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLDESK_HOME", str(tmp_path))
    Settings.path().write_text(json.dumps({"retrieval": {"threshold": 0.2, "top_k": 5}}),
                               "utf-8")
    s = Settings.load()
    assert s.problems == [] and s.retrieval.top_k == 5 and s.retrieval.min_relevance == 0.45
    s.save()
    assert "threshold" not in json.loads(Settings.path().read_text("utf-8"))["retrieval"]
    assert not list(tmp_path.glob("settings.json.bad-*"))  # nothing was set aside as broken
