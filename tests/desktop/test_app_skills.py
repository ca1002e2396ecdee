"""Desktop app, skill side: the tree follows files edited by another process, history + revert,
filter and counts, the starter bank. Runs offscreen with a tmp SKILLDESK_HOME and tmp banks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


from engine.bank.skill import Skill  # noqa: E402
from engine.bank.store import SkillBank  # noqa: E402


def make_skill(bank: SkillBank, title: str, description: str, tags=(), level="functional",
               user: str = "default") -> Skill:
    return bank.create(Skill(name=title, title=title, description=description,
                             instructions=f"# Goal\n{description}\n\n# Constraints & Style\n- Be brief\n",
                             tags=list(tags), level=level), user)


@pytest.fixture
def window(qtbot, open_app, bank_dir):
    bank = SkillBank(bank_dir)
    make_skill(bank, "TL;DR first", "Start every summary with a one-line TL;DR.", ["summaries"])
    make_skill(bank, "周报格式", "用正式的商务语气写周报。", ["写作"], level="planning")
    lib = bank_dir / "Common" / "starter" / "commit-messages"
    lib.mkdir(parents=True)
    (lib / "SKILL.md").write_text(textwrap.dedent("""\
        ---
        name: commit-messages
        description: Write conventional commit messages.
        metadata:
          version: 1.0.0
          tags:
          - git
        ---
        # Goal
        Commit messages.
        """), encoding="utf-8")
    w = open_app(bank_dir, engine=False)
    qtbot.waitUntil(lambda: len(w.tree.items()) == 3, timeout=10000)
    yield w
    w.close()


def item_texts(w) -> list[str]:
    return sorted(it.text(0) for it in w.tree.items())


def test_tree_groups_counts_and_filter(window):
    w = window
    assert item_texts(w) == ["TL;DR first", "commit-messages", "周报格式"]
    tops = [w.tree.tree.topLevelItem(i).text(0) for i in range(w.tree.tree.topLevelItemCount())]
    assert tops == ["Users/default (2)", "Common/starter (1)"]
    levels = [tops_item.text(0) for tops_item in
              (w.tree.tree.topLevelItem(0).child(i)
               for i in range(w.tree.tree.topLevelItem(0).childCount()))]
    assert levels == ["Planning (1)", "Functional (1)"]
    w.tree.filter.setText("写作")
    assert item_texts(w) == ["周报格式"]
    assert w.tree.count_label.text() == "1 of 3"
    w.tree.filter.setText("")
    assert len(w.tree.items()) == 3


def test_tree_updates_when_another_process_edits_a_skill(window, qtbot, bank_dir):
    w = window
    path = bank_dir / "Users" / "default" / "tl-dr-first" / "SKILL.md"
    assert path.is_file()
    assert w.tree.select_path(str(path))
    qtbot.waitUntil(lambda: w.detail.skill is not None and w.detail.skill.path == path)
    # Another process rewrites the file the way editors do: temp file, then rename over it.
    script = textwrap.dedent(f"""
        import os, pathlib
        p = pathlib.Path({str(path)!r})
        text = p.read_text("utf-8").replace("title: TL;DR first", "title: TL;DR always")
        text = text.replace("- Be brief", "- Be brief\\n- Bold the TL;DR line")
        tmp = p.with_name("SKILL.md.swp")
        tmp.write_text(text, "utf-8")
        os.replace(tmp, p)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    qtbot.waitUntil(lambda: "TL;DR always" in item_texts(w), timeout=10000)
    # the open detail view refreshed too
    qtbot.waitUntil(lambda: "Bold the TL;DR line" in w.detail.view.toPlainText(), timeout=5000)
    assert w.detail.skill.title == "TL;DR always"
    # the hand edit was kept as a new version (engine watcher → history), and the view shows it
    qtbot.waitUntil(lambda: [v.version for v in w.detail.history.versions] == ["0.1.0", "0.1.1"],
                    timeout=10000)
    assert w.detail.history.versions[-1].source == "user-edit"

    # A new skill folder created by another process appears as well.
    new = bank_dir / "Users" / "default" / "tabs-not-spaces"
    subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import pathlib
        d = pathlib.Path({str(new)!r}); d.mkdir()
        (d / "SKILL.md").write_text("---\\nname: tabs-not-spaces\\ndescription: Indent with tabs.\\n---\\n# Goal\\nTabs.\\n", "utf-8")
    """)], check=True, timeout=60)
    qtbot.waitUntil(lambda: "tabs-not-spaces" in item_texts(w), timeout=10000)
    assert w.tree.count_label.text() == "4 skills"


def test_a_hand_edit_that_breaks_the_yaml_is_shown_not_dropped(window, qtbot, bank_dir):
    """The user saves a SKILL.md whose front matter no longer parses: the skill does not vanish
    from the tree; it is listed under "Can't read" with the reason, a toast says so, the detail
    view shows the error and the text as saved, and fixing the file brings the skill back."""
    w = window
    path = bank_dir / "Users" / "default" / "tl-dr-first" / "SKILL.md"
    good = path.read_text("utf-8")
    assert w.tree.select_path(str(path))
    qtbot.waitUntil(lambda: w.detail.skill is not None and w.detail.skill.path == path)
    # "description: Start with a Bottom line: …" — a second ": " makes the YAML invalid
    broken = good.replace("description: Start every summary with a one-line TL;DR.",
                          "description: Start with a Bottom line: one sentence.")
    assert broken != good
    tmp = path.with_name(".SKILL.md.tmp")
    tmp.write_text(broken, "utf-8")
    os.replace(tmp, path)
    qtbot.waitUntil(lambda: w.tree.error_for(str(path)) is not None, timeout=10000)
    tops = [w.tree.tree.topLevelItem(i).text(0) for i in range(w.tree.tree.topLevelItemCount())]
    assert tops[0] == "Can't read (1)"
    assert [it.text(0) for it in w.tree.items() if it.text(1) == "error"] == ["tl-dr-first"]
    assert "TL;DR first" not in item_texts(w)
    assert w.toast.isVisible() and "Can't read “tl-dr-first”" in w.toast.label.text()
    # the open detail view now explains, and shows the file as saved (nothing rewritten)
    qtbot.waitUntil(lambda: w.detail.error_path == str(path), timeout=5000)
    text = w.detail.view.toPlainText()
    assert "cannot be read" in text and "line" in text and "Bottom line: one sentence" in text
    assert w.detail.open_btn.isEnabled()
    assert path.read_text("utf-8") == broken
    # the user fixes it in the editor: the skill is back, the error gone
    path.write_text(good.replace("one-line TL;DR.", "one-line TL;DR, bold."), "utf-8")
    qtbot.waitUntil(lambda: "TL;DR first" in item_texts(w) and not w.tree.errors, timeout=10000)
    qtbot.waitUntil(lambda: w.detail.skill is not None and w.detail.error_path is None,
                    timeout=5000)
    assert "bold" in w.detail.view.toPlainText()


def test_history_diff_and_revert(window, qtbot, bank_dir):
    w = window
    bank = w.session.bank
    skill = bank.find("tl-dr-first")
    v2 = skill.copy(description="Start every summary with TL;DR in bold.",
                    instructions=skill.instructions.replace("Be brief", "Be very brief"))
    v2 = bank.write(v2, expected_hash=skill.content_hash, source="merged")
    assert v2.version == "0.1.1"
    qtbot.waitUntil(lambda: any(it.text(1) == "v0.1.1" for it in w.tree.items()), timeout=10000)
    assert w.tree.select_path(str(v2.path))
    qtbot.waitUntil(lambda: w.detail.skill is not None and w.detail.skill.version == "0.1.1")
    hist = w.detail.history
    assert [v.version for v in hist.versions] == ["0.1.0", "0.1.1"]
    hist.select("0.1.0", "0.1.1")
    diff = hist.diff.toPlainText()
    assert "-- Be brief" in diff and "+- Be very brief" in diff
    assert hist.revert_btn.isEnabled()

    w.detail.revert("0.1.0")  # what the confirmed button does
    qtbot.waitUntil(lambda: "Be very brief" not in Path(v2.path).read_text("utf-8"), timeout=10000)
    current = bank.read(v2.path)
    assert current.version == "0.1.2"
    assert current.description == "Start every summary with a one-line TL;DR."
    assert current.extra_metadata.get("reverted_from") == "0.1.0"
    qtbot.waitUntil(lambda: [v.version for v in w.detail.history.versions][-1] == "0.1.2",
                    timeout=10000)
    qtbot.waitUntil(lambda: any(it.text(1) == "v0.1.2" for it in w.tree.items()), timeout=10000)


def test_common_skills_cannot_be_reverted(window, qtbot, bank_dir):
    w = window
    path = bank_dir / "Common" / "starter" / "commit-messages" / "SKILL.md"
    assert w.tree.select_path(str(path))
    qtbot.waitUntil(lambda: w.detail.skill is not None and w.detail.skill.scope == "common")
    assert not w.detail.history.revert_btn.isEnabled()
    assert "shared" in w.detail.info.text()


def test_open_in_editor_runs_the_configured_command(tmp_path, qtbot):
    from desktop.views.skill_detail import open_in_editor

    marker = tmp_path / "opened.txt"
    target = tmp_path / "SKILL.md"
    target.write_text("x", encoding="utf-8")
    cmd = f"{sys.executable} -c \"import sys,pathlib; pathlib.Path(sys.argv[1]).write_text(sys.argv[2])\" {marker} {{path}}"
    msg = open_in_editor(target, cmd)
    assert msg.startswith("Opened in")
    # the editor creates the file before it writes to it: wait for what it wrote
    qtbot.waitUntil(lambda: marker.exists() and marker.read_text() == str(target),
                    timeout=10000)


def test_starter_bank_on_first_run(tmp_path):
    from engine.bank.starter import bank_has_skills, seed_starter

    src = tmp_path / "shipped"
    d = src / "hello"
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text("---\nname: hello\ndescription: Say hello.\n---\nHi\n", "utf-8")
    bank = tmp_path / "newbank"
    assert seed_starter(bank, "alice", source=src)
    assert (bank / "Common" / "starter" / "hello" / "SKILL.md").is_file()
    assert (bank / "Users" / "alice").is_dir()
    assert bank_has_skills(bank)
    assert not seed_starter(bank, "alice", source=src)  # never twice, never overwrites
