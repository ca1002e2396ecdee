"""``skilldesk chat``'s terminal session on a scripted model: ``/remember`` learns from the
user's last message although the chat does not learn, and says so."""

from __future__ import annotations

import argparse
import time

from tests.support import DeskMaker, FixedExtract


def test_remember_in_the_terminal_chat_learns_from_the_last_message(tmp_path, embedder,
                                                                   monkeypatch, capsys):
    from cli import cmd_chat

    maker = DeskMaker(tmp_path, embedder)
    try:
        desk = maker(FixedExtract(["Sign cards from the whole team"], name="Card sign-offs",
                                  triggers=["write a card"]))
        lines = iter(["Sign cards from the whole team, not just from me.", "/remember"])

        def typed(prompt=""):
            try:
                return next(lines)
            except StopIteration:  # the last command: wait for the background job, then quit
                deadline = time.monotonic() + 30
                while desk.learning.state().get("queued") or desk.learning.state().get(
                        "running"):
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
                raise EOFError from None

        monkeypatch.setattr("builtins.input", typed)
        assert cmd_chat._repl(desk, argparse.Namespace(max_tokens=8), learn=False) == 0
        out = capsys.readouterr().out
        assert "remembering your last message" in out
        [skill] = desk.bank.load("default", scope="user").skills
        assert "whole team" in skill.instructions
    finally:
        maker.close()
