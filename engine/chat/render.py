"""The skill block of a chat turn: the one renderer (the chat, ``desk.render_context`` and the
proxy all use it), and :class:`InjectedSkill`, what the answer's "Skills used" line names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.learning.candidate import Candidate
from engine.text import clip

DEFAULT_SKILL_CHARS = 1800


@dataclass
class InjectedSkill:
    id: str
    name: str
    title: str
    version: str
    path: str
    score: float
    dense: float | None = None
    lexical: float | None = None



def render_skills(hits: list[Any], budget: int = DEFAULT_SKILL_CHARS) -> str:
    """A compact block of the chosen skills for the system prompt, within ``budget`` chars."""
    blocks: list[str] = []
    for h in hits:
        c = Candidate.from_skill(h.skill)
        lines = [f'Skill "{h.skill.title or h.skill.name}": {clip(c.goal or c.description, 160)}']
        lines += [f"- {clip(r, 160)}" for r in c.constraints[:6]]
        if c.workflow:
            lines.append("Steps: " + " ".join(f"{i}. {clip(s, 80)}" for i, s in
                                               enumerate(c.workflow[:6], 1)))
        block = "\n".join(lines)
        if sum(len(b) for b in blocks) + len(block) > budget:
            break
        blocks.append(block)
    return "\n\n".join(blocks)


def injected(hits: list[Any]) -> list[InjectedSkill]:
    return [InjectedSkill(id=h.skill.id, name=h.skill.name, title=h.skill.title,
                          version=h.skill.version, path=str(h.skill.path or ""),
                          score=float(h.score), dense=getattr(h, "dense", None),
                          lexical=getattr(h, "lexical", None)) for h in hits]
