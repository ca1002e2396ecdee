"""The whole person flow in the real app, on the recommended model (Qwen2.5-Coder-1.5B).

A person states a preference in two chats → a skill appears in the tree (toast, "Show") → they
open it in their own editor (the configured editor command; here a script that edits the file
the way an editor saves it: a temp file renamed over SKILL.md) and change the rule → the app
reindexes and shows the new version → the next answer, in a new chat, follows the changed rule.

Everything is real: the window (offscreen), the model, the hybrid index, the watcher, the
background learning in the app's QThreadPool. Screenshots of the three moments are written to
``$SKILLDESK_SHOT_DIR`` when it is set (else into the test's tmp dir).
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


from engine.settings import Settings  # noqa: E402

pytestmark = [pytest.mark.model, pytest.mark.slow]

TURN_MS = 240_000
LEARN_MS = 400_000

# The user's editor: opens SKILL.md, rewrites the TL;DR rule wherever it is stated (front
# matter description, goal, constraint bullets), saves like vim/VS Code do.
NEW_RULE = 'Start every summary with a line that begins with "In short:"'
EDITOR = textwrap.dedent(f"""\
    import os, sys, pathlib
    p = pathlib.Path(sys.argv[1])
    new = {NEW_RULE!r}
    out = []
    for line in p.read_text("utf-8").splitlines():
        if "tl;dr" in line.lower():
            if line.startswith("description:"):
                line = "description: " + new
            elif line.startswith("- "):
                line = "- " + new
            elif not line.startswith((" ", "title:", "name:")):
                line = new
        out.append(line)
    tmp = p.with_name(".SKILL.md.swp")
    tmp.write_text("\\n".join(out) + "\\n", "utf-8")
    os.replace(tmp, p)
""")



def shoot(w, name: str, fallback: Path) -> Path:
    out = Path(os.environ.get("SKILLDESK_SHOT_DIR") or fallback)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"person-flow-{name}.png"
    w.grab().save(str(path))
    return path


def send(w, qtbot, text: str) -> str:
    w.chat.input.setPlainText(text)
    w.chat.send_btn.click()
    assert w.controller.busy
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=TURN_MS)
    answer = w.chat.bubbles[-1]
    assert answer.role == "assistant" and "error" not in answer.meta, answer.meta
    return answer.text


def test_state_a_preference_twice_edit_the_skill_and_the_next_answer_follows(
        qtbot, open_app, tmp_path, bank_dir, qwen_path):
    editor = tmp_path / "editor.py"
    editor.write_text(EDITOR, encoding="utf-8")
    w = open_app(bank_dir, settings=Settings(editor_command=f"{sys.executable} {editor} {{path}}"),
                 model=qwen_path, temperature=0.0, max_tokens=200, wait="model_ready")
    w.resize(1440, 860)
    assert w.session.starter_created  # first run: the starter bank, no learned skill yet
    events = []
    w.session.learning_event.connect(events.append)

    # 1. the preference, stated in two chats
    first = send(w, qtbot, "Summarize this for me: our team moved the release to Friday because "
                           "QA found a crash in the login screen. Please start the summary with "
                           "a one-line TL;DR.")
    assert first.strip()
    w.conversations.new_btn.click()
    send(w, qtbot, "Summarize: the office will be closed on Monday for maintenance, and the "
                   "cleaners come on Tuesday. Again, I always want summaries to start with a "
                   "one-line TL;DR.")
    qtbot.waitUntil(lambda: any(e.kind in ("add", "merge") for e in events), timeout=LEARN_MS)
    assert w.session.desk.learning.wait_idle(LEARN_MS / 1000)
    learned = next(e for e in events if e.kind in ("add", "merge"))
    assert "/Users/default/" in learned.path.replace(os.sep, "/")
    skill_md = Path(learned.path)
    assert "tl;dr" in skill_md.read_text("utf-8").lower()
    assert w.toast.isVisible() and w.toast.show_btn.isVisible()
    qtbot.waitUntil(lambda: any(it.data(0, 0x0100) == learned.path for it in w.tree.items()),
                    timeout=10_000)
    w.toast.show_btn.click()  # "Show": the skill opens in the skill panel
    assert w.detail.skill is not None and str(w.detail.skill.path) == learned.path
    version_before = w.detail.skill.version
    shoot(w, "1-learned", tmp_path)

    # 2. "Open in editor": the user's editor changes the rule and saves
    w.detail.open_btn.click()
    qtbot.waitUntil(lambda: "In short:" in w.detail.view.toPlainText(), timeout=20_000)
    rules = [ln for ln in skill_md.read_text("utf-8").splitlines() if ln.startswith("- ")]
    assert f"- {NEW_RULE}" in rules and not any("tl;dr" in ln.lower() for ln in rules), rules
    qtbot.waitUntil(lambda: w.detail.history.versions
                    and w.detail.history.versions[-1].source == "user-edit", timeout=20_000)
    version_after = w.detail.skill.version
    assert version_after != version_before
    shoot(w, "2-edited", tmp_path)

    # 3. the next answer, in a new chat, follows the changed rule
    w.conversations.new_btn.click()
    text = send(w, qtbot, "Please summarize: Anna fixed the login bug, Ben is still testing the "
                          "payment page, and the release is planned for Thursday if tests pass.")
    answer = w.chat.bubbles[-1]
    used = answer.meta.get("injected") or []
    assert [(s["path"], s["version"]) for s in used if s["path"] == learned.path] == [
        (learned.path, version_after)], used
    assert f"v{version_after}" in answer.footer.text()
    assert text.strip().lower().startswith("in short"), text
    assert re.search(r"login|payment|Thursday", text), text  # a summary, not the rule echoed
    shoot(w, "3-follows", tmp_path)
    w.close()
