"""Merging one cluster of near-duplicate skills into its keeper.

Two ways, both keeping the keeper's identity (id, name, folder, level, language):

- :func:`union_merge` (deterministic, no model): the union of every field — rules, triggers,
  tags, examples deduplicated (the keeper's wording wins), the keeper's goal and workflow (the
  first member's when the keeper has none), and every other Markdown section merged item by
  item, so an imported body (``# Role & Objective``, ``# Core Workflow``…) loses nothing.
- :func:`llm_merge`: the learning pipeline's merge step, folded over the cluster — the merge
  prompt (``resources/prompts/merge.md``) through :class:`engine.llm.client.LLMClient`,
  then :func:`engine.learning.checks.repair_merge` (no lost rules, no dropped triggers). An
  unusable answer for one member falls back to the union for that member, with a note.

A merge function is ``merge(keeper, others) -> (merged Skill, notes)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from engine.bank.skill import Skill
from engine.errors import Cancelled, SkillDeskError
from engine.learning.candidate import Candidate, render_body
from engine.learning.checks import repair_merge
from engine.text import dedupe, normalize

MergeFn = Callable[[Skill, list[Skill]], tuple[Skill, list[str]]]
MAX_RULES, MAX_TRIGGERS, MAX_TAGS, MAX_EXAMPLES = 24, 16, 10, 6
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$", re.M)
_ORDERED = ("workflow", "steps", "core workflow", "流程", "步骤", "goal", "目标",
            "role & objective", "role and objective")


def _blocks(text: str) -> list[str]:
    """Items of a section: bullet/numbered lines, paragraphs, fenced code blocks kept whole."""
    out, para, fence = [], [], None
    for line in text.splitlines():
        if fence is not None:
            fence.append(line)
            if line.strip().startswith("```"):
                out.append("\n".join(fence))
                fence = None
            continue
        stripped = line.strip()
        if stripped.startswith("```"):
            if para:
                out.append("\n".join(para))
                para = []
            fence = [line]
        elif not stripped:
            if para:
                out.append("\n".join(para))
                para = []
        elif re.match(r"^\s*(?:[-*+•]|\d+[.)、])\s+", line):
            if para:
                out.append("\n".join(para))
                para = []
            out.append(line.rstrip())
        else:
            para.append(line.rstrip())
    if fence is not None:
        out.append("\n".join(fence))
    if para:
        out.append("\n".join(para))
    return out


def _sections(text: str) -> list[tuple[str, str]]:
    """``[(heading line or "", content)]`` in order."""
    heads = list(_HEADING.finditer(text or ""))
    out = []
    pre = (text or "")[: heads[0].start()] if heads else (text or "")
    if pre.strip():
        out.append(("", pre.strip("\n")))
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        out.append((m.group(0).strip(), text[m.end():end].strip("\n")))
    return out


def _key(heading: str) -> str:
    return normalize(_HEADING.sub(r"\2", heading)).strip(" :：")


def union_sections(base: str, others: list[str]) -> str:
    """``base`` with every section of ``others`` merged in, item by item, without duplicates.

    Sections that carry an order (goal, workflow, role) keep the base's content when it has
    any; a heading the base lacks is appended whole.
    """
    merged = [(h, _blocks(c)) for h, c in _sections(base)]
    index = {_key(h): i for i, (h, _b) in enumerate(merged)}
    for other in others:
        for h, content in _sections(other):
            items = _blocks(content)
            k = _key(h)
            if k not in index:
                index[k] = len(merged)
                merged.append((h, items))
                continue
            head, have = merged[index[k]]
            if have and any(word in k for word in _ORDERED):
                continue
            norm_have = [normalize(x) for x in have]
            new = dedupe(have + [x for x in items if normalize(x) not in norm_have],
                         threshold=0.85)
            merged[index[k]] = (head, new)
    parts = []
    for h, items in merged:
        sep = "\n" if items and all(re.match(r"^\s*(?:[-*+•]|\d+[.)、])\s+", x) for x in items) \
            else "\n\n"
        body = sep.join(items)
        parts.append(f"{h}\n\n{body}".strip() if h else body)
    return "\n\n".join(p for p in parts if p.strip()) + "\n"


def _examples(skills: list[Skill]) -> list[Any]:
    seen, out = set(), []
    for s in skills:
        for e in s.examples:
            key = normalize(str(e))
            if key and key not in seen:
                seen.add(key)
                out.append(e)
    return out[:MAX_EXAMPLES]


def _finish(keeper: Skill, others: list[Skill], description: str, instructions: str,
            triggers: list[str], tags: list[str]) -> Skill:
    extra = dict(keeper.extra_metadata)
    extra["consolidated_from"] = sorted(
        {*map(str, extra.get("consolidated_from") or []), *(o.id for o in others)})
    return keeper.copy(description=description or keeper.description,
                       instructions=instructions.strip("\n"),
                       triggers=dedupe(triggers, threshold=1.01)[:MAX_TRIGGERS],
                       tags=dedupe(tags)[:MAX_TAGS], examples=_examples([keeper, *others]),
                       source_turns=dedupe([*keeper.source_turns,
                                            *(t for o in others for t in o.source_turns)]),
                       extra_metadata=extra)


def union_merge(keeper: Skill, others: list[Skill]) -> tuple[Skill, list[str]]:
    """The deterministic merge: the union of every field (see the module docstring)."""
    if not others:
        return keeper, []
    body = union_sections(keeper.instructions, [o.instructions for o in others])
    triggers = [*keeper.triggers, *(t for o in others for t in o.triggers)]
    tags = [*keeper.tags, *(t for o in others for t in o.tags)]
    return _finish(keeper, others, keeper.description or next(
        (o.description for o in others if o.description), ""), body, triggers, tags), []


def llm_merge(client: Any) -> MergeFn:
    """A merge function that asks the model (an ``LLMClient``: ``.structured(name, **values)``)
    to merge each member into the keeper, one at a time, repairing every answer."""

    def merge(keeper: Skill, others: list[Skill]) -> tuple[Skill, list[str]]:
        notes: list[str] = []
        current = Candidate.from_skill(keeper)
        extras = [current.extra_sections]
        for other in others:
            new = Candidate.from_skill(other)
            extras.append(new.extra_sections)
            try:
                out = client.structured("merge", existing=current.fields_text(),
                                        candidate=new.fields_text())
            except Cancelled:
                raise
            except SkillDeskError as exc:
                notes.append(f"{other.title}: model merge unusable ({exc}); used the union")
                current = _union_candidates(current, new)
                continue
            merged = Candidate.from_json({**out, "name": current.name, "level": current.level})
            notes += repair_merge(merged, current, new)
            merged.constraints = dedupe(merged.constraints)[:MAX_RULES]
            current = merged
        extra = union_sections(extras[0], [e for e in extras[1:] if e.strip()]) \
            if any(e.strip() for e in extras) else ""
        body = render_body(current.goal or current.description, current.constraints,
                           current.workflow, extra)
        return _finish(keeper, others, current.description, body,
                       [*keeper.triggers, *current.triggers,
                        *(t for o in others for t in o.triggers)],
                       [*keeper.tags, *current.tags]), notes

    return merge


def _union_candidates(a: Candidate, b: Candidate) -> Candidate:
    return Candidate(name=a.name, description=a.description or b.description,
                     goal=a.goal or b.goal,
                     constraints=dedupe(a.constraints + b.constraints, threshold=0.75)[:MAX_RULES],
                     workflow=a.workflow or b.workflow, triggers=dedupe(a.triggers + b.triggers),
                     tags=dedupe(a.tags + b.tags), examples=dedupe(a.examples + b.examples),
                     level=a.level, confidence=1.0, extra_sections=a.extra_sections)
