"""The Learning panel's rows, without a model: a merge that took a rule out of the skill says
which (the old wording is in the skill's history, one Undo away)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from desktop.views.learning import LearningPanel  # noqa: E402
from engine.learning.events import LearningEvent  # noqa: E402


def test_a_merge_row_names_the_rule_it_replaced(qtbot):
    panel = LearningPanel()
    qtbot.addWidget(panel)
    panel.add_event(LearningEvent("e1", "merge", title="Chore charts", version="0.2.0",
                                  path="/x/SKILL.md",
                                  replaced=["A reward star for each chore done"]))
    panel.add_event(LearningEvent("e2", "merge", title="Meeting notes", version="0.3.0",
                                  path="/y/SKILL.md"))
    rows = [panel.log.item(i).text() for i in range(panel.log.count())]
    assert rows[1].endswith("“Chore charts” v0.2.0 — replaced “A reward star for each chore "
                            "done”")
    assert rows[0].endswith("“Meeting notes” v0.3.0")  # nothing taken out, nothing said
