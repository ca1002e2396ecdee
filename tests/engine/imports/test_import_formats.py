"""Issue 18: conversation exports of other apps import (or each skipped one says why).

The AutoSkill web UI's own session export is read from copies of the three published samples
(``shared/corpora/autoskill-sessions-sample``) made in tmp dirs; the other formats are small
files shaped as those apps write them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.imports.bootstrap import preview
from engine.imports.readers import read_conversations
from tests.conftest import SESSIONS as SAMPLES  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def sessions(tmp_path) -> Path:
    if not SAMPLES.is_dir():
        pytest.skip(f"samples not found at {SAMPLES}")
    d = tmp_path / "web_sessions"
    shutil.copytree(SAMPLES, d)
    for f in d.iterdir():
        f.chmod(0o644)
    return d


def test_autoskill_web_ui_exports_import_every_session(sessions):
    expected = 0
    for f in sorted(sessions.glob("*.json")):
        data = json.loads(f.read_text("utf-8"))
        expected += len(data["sessions"])
    items, skipped = read_conversations(sessions)
    assert len(items) + len(skipped) == expected and len(items) == expected == 3
    assert skipped == []
    for it in items:
        assert it.messages[0]["role"] == "user" and len(it.messages) >= 4
        assert it.title  # the session's meta.title
        assert " session " in it.source


def test_autoskill_sessions_empty_or_trace_only_are_handled(tmp_path):
    msgs = [{"role": "user", "content": "以后报告都用三段式"}, {"role": "assistant", "content": "好"}]
    export = {"version": 1, "user_id": "u1", "sessions": [
        {"id": "a", "meta": {"title": "full"}, "state": {"messages": msgs, "pending": False}},
        {"id": "b", "meta": {"title": "empty"}, "state": {"messages": [], "pending": False}},
        {"id": "c", "meta": {"title": "trace only"}, "state": {"messages": []},
         "trace": {"turns": [{"id": "turn_1", "chat_append": msgs}]}},
    ]}
    (tmp_path / "u1.json").write_text(json.dumps(export, ensure_ascii=False), "utf-8")
    items, skipped = read_conversations(tmp_path)
    assert [i.title for i in items] == ["full", "trace only"]
    assert [(s.source.rsplit(" ", 2)[-2:], s.reason) for s in skipped] == [
        (["session", "1"], "empty conversation (no messages)")]


def test_claude_open_webui_and_plain_exports(tmp_path):
    claude = [{"uuid": "c1", "name": "Units", "chat_messages": [
        {"uuid": "m1", "sender": "human", "text": "Always use metric units.", "content": []},
        {"uuid": "m2", "sender": "assistant", "text": "",
         "content": [{"type": "text", "text": "Sure, metric from now on."}]}]}]
    webui = [{"id": "w1", "title": "Emoji", "chat": {"title": "Emoji", "messages": [
        {"role": "user", "content": "Never use emoji in commit messages."},
        {"role": "assistant", "content": "Noted."}]}},
        {"id": "w2", "title": "Tree", "chat": {"messages": [], "history": {
            "currentId": "b", "messages": {
                "a": {"id": "a", "parentId": None, "role": "user",
                      "content": "Write dates as YYYY-MM-DD.", "childrenIds": ["b", "x"]},
                "x": {"id": "x", "parentId": "a", "role": "assistant", "content": "old branch",
                      "childrenIds": []},
                "b": {"id": "b", "parentId": "a", "role": "assistant", "content": "Will do.",
                      "childrenIds": []}}}}}]
    (tmp_path / "claude.json").write_text(json.dumps(claude), "utf-8")
    (tmp_path / "webui.json").write_text(json.dumps(webui), "utf-8")
    (tmp_path / "plain.jsonl").write_text(
        json.dumps([{"role": "user", "content": "Answer in British English."},
                    {"role": "assistant", "content": "Right."}]) + "\n" + "not json\n", "utf-8")
    items, skipped = read_conversations(tmp_path)
    by_title = {i.title: i.messages for i in items}
    assert by_title["Units"] == [
        {"role": "user", "content": "Always use metric units."},
        {"role": "assistant", "content": "Sure, metric from now on."}]
    assert by_title["Emoji"][0]["content"].startswith("Never use emoji")
    assert [m["content"] for m in by_title["Tree"]] == ["Write dates as YYYY-MM-DD.", "Will do."]
    assert any(m[0]["content"] == "Answer in British English." for m in by_title.values())
    assert len(skipped) == 1 and skipped[0].reason.startswith("invalid JSON")


def test_preview_counts_without_learning(sessions):
    out = preview("conversations", str(sessions))
    assert out["conversations"] == 3 and out["messages"] == 26 and out["skipped"] == []


def test_cli_import_dry_run_json(sessions, tmp_path):
    bank = tmp_path / "bank"
    (sessions / "junk.json").write_text('{"hello": 1}', "utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "cli.main", "import", "conversations",
                          str(sessions), "--dry-run", "--json", "--bank", str(bank)],
                         capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["conversations"] == 3 and out["messages"] == 26
    assert [s["reason"] for s in out["skipped"]] == [
        "not a conversation (no role/content messages)"]
    assert not bank.exists()  # nothing learned, nothing written
