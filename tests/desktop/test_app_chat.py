"""Desktop app, chat side, on the real bundled model (SmolLM2-135M): a streamed answer, Stop,
and the skills used under the answer (the chat-flow UI runs on the scripted model in
test_app_chat_flow.py).
Offscreen, tmp SKILLDESK_HOME, tmp bank; short answers (max_tokens small)."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


from engine.bank.skill import Skill  # noqa: E402
from engine.bank.store import SkillBank  # noqa: E402

pytestmark = pytest.mark.model
SMALL = {"n_ctx": 1024, "temperature": 0.0}  # the bundled model, greedy
TURN_TIMEOUT_MS = 180_000


@pytest.fixture
def bank_with_skill(bank_dir):
    SkillBank(bank_dir).create(Skill(
        name="tldr", title="TL;DR summaries",
        description="Start every summary with a one-line TL;DR.",
        instructions="# Goal\nSummaries.\n\n# Constraints & Style\n- Start with `TL;DR:`\n",
        tags=["summaries"], triggers=["summarize this text"]), "default")
    return bank_dir


def send(w, qtbot, text: str) -> list[str]:
    chunks: list[str] = []
    w.session.chat.worker.chunk.connect(lambda _rid, t: chunks.append(t))
    w.chat.input.setPlainText(text)
    w.chat.send_btn.click()
    assert w.controller.busy and w.chat.stop_btn.isVisible()
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=TURN_TIMEOUT_MS)
    return chunks


def test_send_streams_an_answer_and_shows_it(qtbot, open_app, bank_with_skill,
                                             bundled_model_path):
    w = open_app(bank_with_skill, model=bundled_model_path, max_tokens=16, **SMALL)
    chunks = send(w, qtbot, "Please summarize this text: the meeting moved to Friday.")
    assert len(chunks) >= 2, chunks  # streamed, not one block
    answer = w.chat.bubbles[-1]
    assert answer.role == "assistant"
    assert answer.text == "".join(chunks) and answer.text.strip()
    assert "error" not in answer.meta, answer.meta
    assert "SmolLM2" in (answer.meta.get("model") or "")
    assert "tok/s" in w.speed_label.text()
    assert "SmolLM2" in w.model_label.text()
    # the skill used is listed under the answer and opens in the skill panel
    used = answer.meta.get("injected") or []
    assert [s["name"] for s in used] == ["tl-dr-summaries"], used
    assert "TL;DR summaries" in answer.footer.text()
    w.show_skill(f"skill:{used[0]['path']}")
    assert w.detail.skill is not None and w.detail.skill.name == "tl-dr-summaries"
    # stored: the user turn and the streamed answer with its metadata
    msgs = w.session.store.messages(w.controller.cid)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[1].content == answer.text and msgs[1].meta["injected"][0]["name"] == "tl-dr-summaries"


def test_stop_ends_the_answer_quickly(qtbot, open_app, bank_dir, bundled_model_path):
    w = open_app(bank_dir, model=bundled_model_path, max_tokens=400, **SMALL)
    stamps: list[float] = []
    w.session.chat.worker.chunk.connect(lambda _rid, _t: stamps.append(time.perf_counter()))
    w.chat.input.setPlainText("Write a long story about a lighthouse keeper and the sea.")
    w.chat.send_btn.click()
    qtbot.waitUntil(lambda: len(stamps) >= 4, timeout=TURN_TIMEOUT_MS)
    per_token = (stamps[-1] - stamps[0]) / (len(stamps) - 1)  # this machine, right now
    t0 = time.perf_counter()
    w.chat.stop_btn.click()
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=120_000)
    stop_s = time.perf_counter() - t0
    answer = w.chat.bubbles[-1]
    assert answer.meta.get("finish_reason") == "cancelled"
    assert "stopped" in answer.footer.text()
    # Stop lands within a token or two (on a loaded shared box one token can take seconds)
    assert stop_s < max(2.0, 3 * per_token), (stop_s, per_token)
    assert len(stamps) < 200
    assert not w.chat.stop_btn.isVisible() and w.chat.send_btn.isEnabled()
    print(f"\nStop → idle in {stop_s * 1000:.0f} ms after {len(stamps)} chunks "
          f"({per_token * 1000:.0f} ms per chunk before Stop)")
