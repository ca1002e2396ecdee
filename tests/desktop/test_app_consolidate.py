"""Desktop app, consolidation (issue 9): the dialog computes the dry-run plan off the GUI thread,
shows clusters and flags, applies with the deterministic union merge, the tree follows, and one
Undo puts every original back byte for byte. Shared (Common) skills are never changed. Runs
offscreen with a tmp SKILLDESK_HOME and a tmp bank; the real (numpy) sentence embedder."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QTreeWidgetItem  # noqa: E402

from engine.bank.skill import Skill  # noqa: E402
from engine.bank.store import SkillBank  # noqa: E402
from engine.learning.candidate import render_body  # noqa: E402

REPORT = "How the user wants weekly status reports written for the team."


def _skill(title: str, desc: str, rules: list[str], triggers: list[str]) -> Skill:
    return Skill(name=title, title=title, description=desc, level="functional",
                 instructions=render_body(desc, rules, []), triggers=triggers, tags=["reports"])


def snapshot(root: Path) -> dict[str, bytes]:
    """Every SKILL.md under Users/ and Common/, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes()
            for top in ("Users", "Common") for p in sorted((root / top).rglob("SKILL.md"))}


@pytest.fixture
def window(qtbot, open_app, bank_dir):
    bank = SkillBank(bank_dir)
    bank.create(_skill("Weekly report", REPORT,
                       ["Use three sections: done, next, blockers", "At most 200 words"],
                       ["write my weekly report"]))
    bank.create(_skill("Weekly status report", REPORT,
                       ["Use three sections: done, next, blockers", "No emojis in the report"],
                       ["weekly status report"]))
    bank.create(_skill("Python type hints", "How the user wants Python functions annotated.",
                       ["Annotate every public function", "Prefer list[str] over List[str]"],
                       ["add type hints"]))
    bank.create(Skill(name="Notes", title="Notes", description="", instructions="# Goal\nx\n",
                      level="atomic"))  # flagged: no rules
    lib = bank_dir / "Common" / "starter" / "weekly-report"
    lib.mkdir(parents=True)
    (lib / "SKILL.md").write_text(textwrap.dedent(f"""\
        ---
        name: weekly-report
        description: {REPORT}
        metadata:
          version: 1.0.0
          level: functional
          tags:
          - reports
        ---
        """) + render_body(REPORT, ["Use three sections: done, next, blockers",
                                    "At most 200 words"], []), encoding="utf-8")
    w = open_app(bank_dir, engine=False)
    qtbot.waitUntil(lambda: len(w.tree.items()) == 5, timeout=10000)
    yield w
    w.close()


def children(item: QTreeWidgetItem) -> list[tuple[str, str]]:
    return [(item.child(i).text(0), item.child(i).text(2)) for i in range(item.childCount())]


def test_consolidate_dialog_plan_apply_undo(window, qtbot, bank_dir):
    w = window
    before = snapshot(bank_dir)
    assert len(before) == 5
    user_dir = bank_dir / "Users" / "default"
    assert w.tree.consolidate_btn.isVisible()
    assert w.consolidate_action.text() == "Consolidate skills…"

    w.tree.consolidate_btn.click()  # opens the dialog and starts the plan in the pool
    dlg = w.consolidate_dialog
    assert dlg is not None and dlg.isVisible()
    assert dlg.busy == "plan" and not dlg.apply_btn.isEnabled()  # GUI free while it computes
    qtbot.waitUntil(lambda: dlg.plan is not None, timeout=120000)
    plan = dlg.plan
    assert plan.n_skills == 4 and plan.merges == 1
    assert dlg.clusters.topLevelItemCount() == 1
    head = dlg.clusters.topLevelItem(0)
    assert float(head.text(1)) >= 0.9 and head.text(2) == "merge"
    kept = [t for t, a in children(head) if a.startswith("kept")]
    assert len(kept) == 1 and kept[0].startswith("Weekly")
    assert sorted(t for t, _ in children(head)) == ["Weekly report", "Weekly status report"]
    flagged = {dlg.flags.topLevelItem(i).text(0): (dlg.flags.topLevelItem(i).text(1),
                                                   dlg.flags.topLevelItem(i).text(2))
               for i in range(dlg.flags.topLevelItemCount())}
    assert list(flagged) == ["Notes"]  # kind + reason; flags never delete
    assert flagged["Notes"][0] == "empty" and "rules" in flagged["Notes"][1]
    assert snapshot(bank_dir) == before  # the dry run wrote nothing

    # Compare with the shared skills too: the Common twin joins the group, read-only.
    dlg.include_shared.setChecked(True)
    dlg.compute()
    qtbot.waitUntil(lambda: dlg.plan is not None and not dlg.busy, timeout=120000)
    assert dlg.plan.scope == "all" and dlg.plan.merges == 1
    actions = dict(children(dlg.clusters.topLevelItem(0)))
    assert "shared, read-only" in actions.values()
    assert not any(a.startswith("kept") and t == "weekly-report" for t, a in actions.items())

    dlg.merge_mode.setCurrentIndex(dlg.merge_mode.findData("union"))
    assert dlg.apply_btn.isEnabled()
    dlg.apply_btn.click()
    assert dlg.busy == "apply"
    qtbot.waitUntil(lambda: dlg.record is not None and not dlg.busy, timeout=60000)
    rec = dlg.record
    assert rec.merged == 1 and len(rec.clusters) == 1
    assert dlg.undo_btn.isVisible() and dlg.undo_btn.isEnabled()
    assert not dlg.apply_btn.isEnabled()
    assert "Merged 1 skill(s) into 1 kept skill(s)" in dlg.result.text()
    qtbot.waitUntil(lambda: len(w.tree.items()) == 4, timeout=10000)  # the tree followed
    after = snapshot(bank_dir)
    assert len(after) == 4
    common = "Common/starter/weekly-report/SKILL.md"
    assert after[common] == before[common]  # shared skills are never modified
    keeper = Path(rec.clusters[0]["keeper"]["path"])
    text = keeper.read_text("utf-8")
    assert "At most 200 words" in text and "No emojis in the report" in text  # the union
    assert "consolidated" in text
    assert any(it.text(1) == "v0.1.1" for it in w.tree.items())
    assert (bank_dir / "Users" / "default").is_dir() and len(list(user_dir.iterdir())) == 3

    dlg.undo_btn.click()
    assert dlg.busy == "undo"
    qtbot.waitUntil(lambda: dlg.record is None and dlg.plan is not None and not dlg.busy,
                    timeout=120000)
    assert "undone" in dlg.result.text() and not dlg.undo_btn.isVisible()
    assert snapshot(bank_dir) == before  # every original, byte for byte
    qtbot.waitUntil(lambda: len(w.tree.items()) == 5, timeout=10000)
    assert not any(it.text(1) == "v0.1.1" for it in w.tree.items())
    assert dlg.apply_btn.isEnabled()  # planned again on the restored bank
    qtbot.wait(1500)  # past the watcher's debounce: the restore is not taken for a hand edit
    assert snapshot(bank_dir) == before

    dlg.close_btn.click()
    assert not dlg.isVisible()
    assert w.open_consolidate() is dlg  # reopening reuses the dialog and plans again
    assert dlg.busy == "plan"
    qtbot.waitUntil(lambda: not dlg.busy, timeout=120000)
    assert dlg.plan.merges == 1 and snapshot(bank_dir) == before
