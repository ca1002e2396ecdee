"""The skill block of a chat turn: the one renderer (the chat, ``desk.render_context`` and the
proxy all use it), and :class:`InjectedSkill`, what the answer's "Skills used" line names.

Every rule of an injected skill reaches the model: each line of the body (a bullet, a numbered
step, a sentence; a fenced code block counts as one rule), under the heading of its section
(Goal, Constraints & Style, Workflow, Output Format, Anti-Patterns, Role... whatever the file
has), compacted to one line each. Only when the block would exceed the model's budget (see
:func:`engine.llm.tiers.skill_budget`) are rules left out, and then by a stated order: the rules
the user wrote by hand first, then the newest (a merge appends at the end, so the last lines of
a body are its newest), the oldest last. What was cut is named in the block ("N more rules
not shown") and in :attr:`InjectedSkill.cut`, so the turn's details show it; a skill of which
not even the title fits is not injected and not named.

A skill about the user (``about: user``: a diet, a fear, a dislike; engine/learning/about.py)
is rendered apart, as one line of what the user said about themselves (its description, then
its rules; its goal, which only restates them, is left out), in :attr:`Rendered.about`: the chat
puts those lines under "About me" before the request (``chat_about.md``, ``chat_both.md``),
not among the skills to apply when they fit. PrefEval, the learned banks kept (so retrieval
and the self-filter chose the same skills), Qwen2.5-Coder-1.5B, facts among the skills ->
under "About me": items 840..879 (whose failures were read) 20/40 -> 23/40 (3 fixed, none
broken; among the skills, "Never suggest living in hot or humid climates" led it to Houston),
700..739 (not read) 21/40 -> 22/40 (3 fixed, 2 broken).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.bank.skill import Skill
from engine.text import clip

DEFAULT_SKILL_CHARS = 4000  # render_context's default (a capable model's; tiers.py decides)
RULE_CHARS = 400            # one rule longer than this is clipped (a pasted log is not a rule)
DESC_CHARS = 240

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)、])\s+")
_SKIP_HEADINGS = {"prompt"}  # AutoSkill's wrapper heading above the real sections


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
    rules_total: int = 0   # rules in the skill's body
    rules_shown: int = 0   # rules the model saw
    cut: list[str] = field(default_factory=list)  # rules left out for the budget


@dataclass
class Rule:
    section: str
    text: str
    pos: int


@dataclass
class Rendered:
    text: str                    # the task skills' blocks
    skills: list[InjectedSkill]  # exactly the skills in ``text`` and ``about``, in order
    about: str = ""              # the skills about the user, one line each

    @property
    def block(self) -> str:
        """Both parts as one text (a caller with no prompt of its own: render_context)."""
        return "\n\n".join(t for t in (self.about, self.text) if t)


def _fact_rules(skill: Skill) -> list[Rule]:
    return [r for r in skill_rules(skill) if r.section.strip().lower() != "goal"]


def skill_rules(skill: Skill) -> list[Rule]:
    """Every rule of the body, in order, with its section ('' before the first heading)."""
    title = (skill.title or skill.name or "").strip().lower()
    desc = " ".join((skill.description or "").split()).lower()
    rules: list[Rule] = []
    section, fence = "", None
    for raw in (skill.instructions or "").splitlines():
        line = raw.rstrip()
        if fence is not None:  # inside a code block: one rule
            fence.append(line)
            if line.strip().startswith("```"):
                rules.append(Rule(section, "\n".join(fence), len(rules)))
                fence = None
            continue
        if line.strip().startswith("```"):
            fence = [line]
            continue
        m = _HEADING.match(line)
        if m:
            name = m.group(1).strip()
            section = "" if name.lower() in _SKIP_HEADINGS or name.lower() == title else name
            continue
        text = " ".join(_BULLET.sub("", line).split())
        if not text or (not rules and text.lower() == desc):
            continue
        rules.append(Rule(section, text, len(rules)))
    if fence:
        rules.append(Rule(section, "\n".join(fence), len(rules)))
    return rules


def rule_lines(text: str) -> set[str]:
    """The normalised rule texts of a SKILL.md body (what :func:`user_written` compares)."""
    return {r.text for r in skill_rules(Skill(name="x", description="", instructions=text))}


def user_written(versions: list[tuple[str, str]], current: Skill) -> set[str]:
    """Rules of ``current`` that first appeared in a hand edit.

    ``versions``: ``(source, body)`` of each recorded version, oldest first (the history).
    """
    seen: set[str] = set()
    mine: set[str] = set()
    for source, body in versions:
        lines = rule_lines(body)
        if source == "user-edit":
            mine |= lines - seen
        seen |= lines
    now = {r.text for r in skill_rules(current)}
    if current.source == "user-edit":
        mine |= now - seen
    return mine & now


def _header(skill: Skill) -> str:
    if skill.about_user:
        return f"- {_sentence(clip(skill.description or skill.title or skill.name, DESC_CHARS))}"
    return f'Skill "{skill.title or skill.name}": {clip(skill.description or "", DESC_CHARS)}'


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if not text or text[-1] in ".!?。！？…" else text + "."


def _line(r: Rule) -> str:
    return f"- {r.text if r.text.startswith('```') else clip(r.text, RULE_CHARS)}"


def _note(cut: int) -> str:
    return (f"({cut} more rule{'s' if cut > 1 else ''} of this skill not shown: over the "
            "context budget)")


def _block(header: str, rules: list[Rule], cut: int, fact: bool = False) -> str:
    if fact:  # one line: what the user said about themselves
        return " ".join([header, *(_sentence(clip(r.text, RULE_CHARS)) for r in rules),
                         *([_note(cut)] if cut else [])])
    lines, section = [header], None
    for r in rules:
        if r.section != section:
            section = r.section
            if section:
                lines.append(f"{section}:")
        lines.append(_line(r))
    if cut:
        lines.append(_note(cut))
    return "\n".join(lines)


def _fit(skill: Skill, budget: int, edited: set[str]) -> tuple[str, list[Rule], list[Rule]]:
    """``(block, kept, cut)``: every rule if it fits, else by priority (hand-written first,
    then newest first), shown in the body's order. ``kept`` empty and block "" when not even
    the title and the cut note fit."""
    fact = skill.about_user
    rules = _fact_rules(skill) if fact else skill_rules(skill)
    header = _header(skill)
    full = _block(header, rules, 0, fact)
    if len(full) <= budget:
        return full, rules, []
    room = budget - len(header) - len(_note(len(rules))) - 2
    if room < 0:
        return "", [], rules
    kept_ids: set[int] = set()
    sections: set[str] = set()
    for r in sorted(rules, key=lambda r: (r.text not in edited, -r.pos)):
        cost = len(_line(r)) + 1 + (len(r.section) + 2 if r.section and
                                    r.section not in sections else 0)
        if cost <= room:
            room -= cost
            kept_ids.add(r.pos)
            sections.add(r.section)
    kept = [r for r in rules if r.pos in kept_ids]
    cut = [r for r in rules if r.pos not in kept_ids]
    return _block(header, kept, len(cut), fact), kept, cut


def _shares(sizes: list[int], budget: int) -> list[int]:
    """Water-filling: a skill smaller than an equal share gets all it needs; the rest is split
    equally among the larger ones."""
    out = [0] * len(sizes)
    left, todo = budget, sorted(range(len(sizes)), key=lambda i: sizes[i])
    for n, i in enumerate(todo):
        out[i] = min(sizes[i], left // (len(todo) - n))
        left -= out[i]
    return out


def render(hits: list[Any], budget: int = DEFAULT_SKILL_CHARS,
           edited: Callable[[Skill], set[str]] | None = None) -> Rendered:
    """The skill block for the system prompt within ``budget`` characters, and what it holds.

    The budget is shared out by water-filling (a short skill takes what it needs, the long
    ones split the rest); ``edited(skill)``: the skill's hand-written rules (kept first).
    """
    seps = 2 * max(0, len(hits) - 1)
    fulls = [len(_block(_header(h.skill), _fact_rules(h.skill), 0, True)) if h.skill.about_user
             else len(_block(_header(h.skill), skill_rules(h.skill), 0)) for h in hits]
    shares = _shares(fulls, max(0, budget - seps))
    blocks: list[str] = []
    facts: list[str] = []
    shown: list[InjectedSkill] = []
    for h, share in zip(hits, shares, strict=True):
        mine = edited(h.skill) if edited is not None else set()
        block, kept, cut = _fit(h.skill, share, mine)
        if not block:
            continue  # not even the title fits: not injected, not named
        (facts if h.skill.about_user else blocks).append(block)
        shown.append(_injected(h, len(kept) + len(cut), len(kept), [r.text for r in cut]))
    return Rendered("\n\n".join(blocks), shown, "\n".join(facts))


def render_skills(hits: list[Any], budget: int = DEFAULT_SKILL_CHARS) -> str:
    """The skill block alone (``desk.render_context``, the proxy)."""
    return render(hits, budget).block


def _injected(h: Any, total: int, kept: int, cut: list[str]) -> InjectedSkill:
    return InjectedSkill(id=h.skill.id, name=h.skill.name, title=h.skill.title,
                         version=h.skill.version, path=str(h.skill.path or ""),
                         score=float(h.score), dense=getattr(h, "dense", None),
                         lexical=getattr(h, "lexical", None), rules_total=total,
                         rules_shown=kept, cut=cut)


def injected(hits: list[Any]) -> list[InjectedSkill]:
    """Every hit as an InjectedSkill (callers that render nothing, e.g. a search listing)."""
    return [_injected(h, 0, 0, []) for h in hits]
