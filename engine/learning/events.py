"""What the learning loop reports: actions (add / merge / discard), events, reports."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from engine.bank.skill import Skill
from engine.learning.candidate import Candidate

ACTION_KINDS = ("add", "merge", "discard", "error")
EVENT_KINDS = ("queued", "running", "add", "merge", "discard", "error", "done", "undo",
               "feedback", "disable", "enable")  # the last three: the user's, via desk.feedback


@dataclass
class Action:
    """One decision about one candidate (or one failed step)."""

    kind: str  # add | merge | discard | error
    skill: Skill | None = None  # the written skill (add, merge) or the skill it matched
    reason: str = ""
    candidate: Candidate | None = None
    step: str = ""  # gate | extract | check | judge | merge | write
    previous_version: str | None = None  # merge: the version before, for undo
    notes: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # merge: the skill's rules it took out


@dataclass
class LearningReport:
    actions: list[Action] = field(default_factory=list)
    job_id: str | None = None
    llm_calls: int = 0
    seconds: float = 0.0

    @property
    def added(self) -> list[Action]:
        return [a for a in self.actions if a.kind == "add"]

    @property
    def merged(self) -> list[Action]:
        return [a for a in self.actions if a.kind == "merge"]


@dataclass
class LearningEvent:
    id: str
    kind: str  # see EVENT_KINDS
    turn_id: str | None = None
    job_id: str | None = None
    skill_id: str | None = None
    skill_name: str | None = None
    title: str | None = None
    path: str | None = None
    version: str | None = None
    previous_version: str | None = None
    reason: str = ""
    time: float = field(default_factory=time.time)
    undone: bool = False
    undoes: str | None = None  # an undo event: the id of the event it undid
    replaced: list[str] = field(default_factory=list)  # merge: rules taken out (in the history)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}
