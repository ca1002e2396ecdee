"""Helpers shared by the engine tests: message builders, a recording scripted model, desks on
the scripted model (the real engine: real bank, index and worker)."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.learning_scenarios import seed_bank, seed_skill
from bench.oracle import OracleLLM
from engine.desk import SkillDesk
from engine.llm.worker import ModelWorker
from engine.settings import Settings

# ``python -m llama_cpp.server`` (the stand-in for a user's OpenAI-compatible server) loading
# its model the way the backend does: on an AMX CPU llama.cpp's AMX matmul crashes the server
# on its first prompt (:func:`engine.llm.llama_backend.loading`)
LLAMA_SERVER = [sys.executable, "-c", "import runpy; from engine.llm.llama_backend import "
                "loading; held = loading(); held.__enter__(); runpy.run_module("
                "'llama_cpp.server', run_name='__main__', alter_sys=True)"]


def U(t: str) -> dict:
    return {"role": "user", "content": t}


def A(t: str) -> dict:
    return {"role": "assistant", "content": t}


class RecordingOracle(OracleLLM):
    """The scripted model, remembering the messages of every chat call."""

    def __init__(self, *a, tier: str = "capable", **kw):
        super().__init__(*a, **kw)
        self.tier = tier
        self.sent: list[list[dict]] = []

    def stream_chat(self, messages, params=None, cancel=None):
        self.sent.append([dict(m) for m in messages])
        return super().stream_chat(messages, params, cancel)


class FixedExtract(OracleLLM):
    """The scripted model whose extraction always answers one skill with these ``rules``
    (what a small model wrote in a reported case), whatever the user said."""

    def __init__(self, rules: list[str], *, name: str = "Summary format",
                 examples: list[str] = (), triggers: list[str] = ("write a summary",),
                 sc: dict | None = None):
        super().__init__(sc)
        self.skill = {"name": name, "description": f"{name}.", "constraints": list(rules),
                      "goal": "", "workflow": [], "triggers": list(triggers), "tags": [],
                      "examples": list(examples), "level": "functional", "confidence": 0.9}

    def _extract(self, prompt: str) -> dict:
        return {"skills": [dict(self.skill)]}


class DeskMaker:
    """``make(llm, scenario=None, skills=(), starter=None)``: a desk in a fresh folder on the
    scripted ``llm``; ``close()`` closes every desk and worker it made."""

    def __init__(self, root: Path, embedder):
        self.root, self.embedder, self.made = root, embedder, []

    def __call__(self, llm=None, scenario=None, skills=(), starter: Path | None = None):
        import shutil

        root = self.root / f"bank{len(self.made)}"
        if starter is not None:
            shutil.copytree(starter, root / "Common" / "starter")
        worker = ModelWorker(llm or RecordingOracle())
        desk = SkillDesk.open(root, config=Settings(), create=True, embedder=self.embedder)
        desk.worker = worker
        if scenario:
            seed_bank(desk.bank, "default", scenario)
        for d in skills:
            desk.bank.create(seed_skill(d), "default")
        desk.refresh()
        self.made.append((desk, worker))
        return desk

    def close(self) -> None:
        for desk, worker in self.made:
            desk.close()
            worker.close()


def open_desk(root: Path, embedder, worker) -> SkillDesk:
    """A desk in ``root`` (created) on ``worker``."""
    desk = SkillDesk.open(root, config=Settings(), create=True, embedder=embedder)
    desk.worker = worker
    return desk


def replay(desk: SkillDesk, messages: list[dict]) -> list:
    """The app's path: one learning job after each assistant reply (or the last user turn)."""
    actions = []
    for k, m in enumerate(messages):
        if m["role"] == "user":
            end = k + 2 if k + 1 < len(messages) and messages[k + 1]["role"] == "assistant" \
                else k + 1
            actions += desk.learning.run(messages[:end], mode="turn").actions
    return actions
