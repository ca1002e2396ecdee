"""Candidate skills and the SKILL.md body they become.

A model answers with fields (goal, constraints, workflow...), never with Markdown: the body is
rendered here, always with ``# Goal``, ``# Constraints & Style`` and, when there are steps,
``# Workflow``. :func:`parse_body` reads such a body back (and keeps any other section a user
wrote by hand, so a merge never loses it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from engine.bank.skill import Skill, normalize_level
from engine.text import clip, content_tokens, dedupe, language, scrub

_HEADING = re.compile(r"^#{1,3}\s+(.+?)\s*$", re.M)
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)、])\s*")
GOAL, RULES, WORKFLOW = "Goal", "Constraints & Style", "Workflow"
_ALIASES = {"goal": GOAL, "目标": GOAL, "constraints & style": RULES, "constraints": RULES,
            "constraints and style": RULES, "rules": RULES, "约束": RULES, "约束与风格": RULES,
            "workflow": WORKFLOW, "steps": WORKFLOW, "流程": WORKFLOW, "步骤": WORKFLOW}


@dataclass
class Candidate:
    """One skill proposed by extraction (or the result of a merge), before it is written."""

    name: str
    description: str
    goal: str = ""
    constraints: list[str] = field(default_factory=list)
    workflow: list[str] = field(default_factory=list)
    triggers: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    level: str = "functional"
    confidence: float = 0.0
    extra_sections: str = ""  # hand-written sections of an existing body, kept verbatim
    level_guessed: bool = False  # rule-based extraction: the judge may merge across levels
    fixing: bool = False  # extracted from a correction of the last answer ("No, I said…")
    # the words only the request had (its topic, checks.generalize): the triggers a skill
    # gets from this candidate, new or merged into, lose them (:meth:`general_triggers`).
    # Finding, judging and merging use ``triggers``, whose task words tie a rule to the skill
    # it belongs to
    topic: frozenset[str] = frozenset()
    # the user's message it came from: a merge asks the model whether it replaces a rule the
    # skill had (:meth:`Pipeline.replace_score`)
    said: str = ""
    # the name is not a name the model gave but Chinese cut by characters: the request's topic
    # taken out of it (checks.generalize) or a rule clipped (rules.short_name); a model that
    # can name it names it again from its rules when the skill is written (Pipeline.add).
    # English cuts keep whole words (two content words at least, a rule's first four), and on
    # the read splits Qwen's English renames were worse more often than better ("No credit
    # card" -> "No payment options"); Chinese cuts leave a bare verb or half a word ("安排",
    # "馈要求", "我膝盖做过半月")
    name_cut: bool = False
    # the earlier turn the evidence asked for again (Pipeline.asked_again): a skill this
    # conversation wrote from that turn is this rule's skill (judge.judge_llm)
    again: str = ""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Candidate:
        def strs(key: str, n: int, width: int) -> list[str]:
            raw = d.get(key) or []
            raw = [raw] if isinstance(raw, str) else raw
            return dedupe([clip(scrub(str(x)), width) for x in raw if str(x).strip()])[:n]

        return cls(name=clip(scrub(str(d.get("name") or "")), 60),
                   description=clip(scrub(str(d.get("description") or "")), 240),
                   goal=clip(scrub(str(d.get("goal") or "")), 240),
                   constraints=strs("constraints", 12, 200), workflow=strs("workflow", 10, 200),
                   triggers=strs("triggers", 8, 100), tags=strs("tags", 8, 30),
                   examples=strs("examples", 4, 200),
                   level=normalize_level(d.get("level")),
                   confidence=_float(d.get("confidence"), 0.5))

    @classmethod
    def from_skill(cls, skill: Skill) -> Candidate:
        goal, rules, steps, extra = parse_body(skill.instructions)
        return cls(name=skill.title or skill.name, description=skill.description, goal=goal,
                   constraints=rules, workflow=steps, triggers=list(skill.triggers),
                   tags=list(skill.tags),
                   examples=[e if isinstance(e, str) else str(e.get("input", e))
                             if isinstance(e, dict) else str(e) for e in skill.examples],
                   level=skill.level, confidence=1.0, extra_sections=extra)

    def body(self) -> str:
        return render_body(self.goal or self.description, self.constraints, self.workflow,
                           self.extra_sections)

    def summary(self, n_rules: int = 4) -> str:
        """One line for the judge prompt: ``name | rule; rule``."""
        rules = "; ".join(self.constraints[:n_rules]) or self.goal or self.description
        return f"{clip(self.name, 60)} | {clip(rules, 240)}"

    def fields_text(self) -> str:
        """The candidate as the merge prompt shows it: its triggers less the request's topic
        (the model copied what it was shown into the merged skill)."""
        return "\n".join([f"description: {self.description}", f"goal: {self.goal}",
                          "constraints: " + " | ".join(self.constraints),
                          *(["workflow: " + " | ".join(self.workflow)] if self.workflow else []),
                          "triggers: " + " | ".join(self.general_triggers()[:4])])

    def general_triggers(self, triggers: list[str] | None = None) -> list[str]:
        """``triggers`` (default: the candidate's) less the request's topic
        (:func:`general_trigger`): what a skill written or extended from it gets."""
        out = (general_trigger(t, self.topic) for t in
               (self.triggers if triggers is None else triggers))
        return dedupe([t for t in out if t])

    def to_skill(self, **changes: Any) -> Skill:
        """The new skill this candidate writes: its triggers less the request's topic (the
        name where none is left)."""
        triggers = self.general_triggers() or self.triggers and [self.name]
        skill = Skill(name=self.name, title=self.name, description=self.description,
                      instructions=self.body(), level=self.level, triggers=triggers,
                      tags=self.tags, examples=[{"input": e} for e in self.examples])
        return skill.copy(**changes) if changes else skill

    @property
    def text(self) -> str:
        """Everything a retrieval query or a junk check should see."""
        return "\n".join([self.name, self.description, self.goal, *self.constraints,
                          *self.workflow, *self.triggers])


def general_trigger(trigger: str, topic: frozenset[str] | set[str]) -> str | None:
    """``trigger`` without the request's topic words, or None when nothing general is left.

    A trigger names the kind of request a skill is for ("write a cover letter"); the topic of
    the one request it was learned from ("nephew" in "games for my nephew", "下午茶点心推荐",
    "budgeting app for VoiceOver") is the instance, which names and descriptions already lose:
    in the runs of fresh5 … fresh10, 8 of the 17 scenarios with a leak leaked in a new skill's
    triggers only. English triggers lose those words and stay when two content words are
    left; others are dropped."""
    if not topic or not content_tokens(trigger) & topic:
        return trigger
    if language(trigger) != "en":
        return None
    rest = " ".join(w for w in trigger.split() if not content_tokens(w) & topic)
    return rest if len(content_tokens(rest)) >= 2 else None


def _float(v: Any, default: float) -> float:
    try:
        return max(0.0, min(1.0, float(v)))
    except (TypeError, ValueError):
        return default


def render_body(goal: str, rules: list[str], steps: list[str], extra: str = "") -> str:
    parts = [f"# {GOAL}\n\n{goal.strip()}", f"# {RULES}\n\n" + "\n".join(f"- {r}" for r in rules)]
    if steps:
        parts.append(f"# {WORKFLOW}\n\n" + "\n".join(f"{i}. {s}" for i, s in
                                                       enumerate(steps, 1)))
    if extra.strip():
        parts.append(extra.strip())
    return "\n\n".join(parts) + "\n"


def _items(text: str) -> list[str]:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if any(_BULLET.match(ln) for ln in lines):
        return [_BULLET.sub("", ln).strip() for ln in lines if _BULLET.match(ln)]
    return lines


def parse_body(body: str) -> tuple[str, list[str], list[str], str]:
    """``(goal, constraints, workflow steps, other sections verbatim)`` of a skill body.

    A body without our headings (an imported or hand-written skill) becomes: no goal, each
    bullet or line a constraint — so a merge can still keep every rule.
    """
    heads = list(_HEADING.finditer(body or ""))
    if not heads:
        return "", _items(body or ""), [], ""
    goal, rules, steps, extra = "", [], [], []
    pre = body[: heads[0].start()].strip()
    if pre:
        rules += _items(pre)
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(body)
        content = body[m.end():end].strip("\n")
        key = _ALIASES.get(m[1].strip().lower())
        if key == GOAL:
            goal = " ".join(content.split())
        elif key == RULES:
            rules += _items(content)
        elif key == WORKFLOW:
            steps += _items(content)
        else:
            extra.append(body[m.start():end].strip("\n"))
    return goal, rules, steps, "\n\n".join(extra)
