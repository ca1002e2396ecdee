"""Plan-aware retrieval (SkillX §4): for a multi-step request, plan first, then retrieve per step.

::

    hits = plan_retrieve(desk, query, llm)            # list of SkillHit, at most ``cap``
    res = plan_search(desk, query, llm)               # the same, with the plan and timings

1. :func:`is_complex` (no model): short or single-step requests go straight to plain retrieval.
2. Planning skills (``level: planning``) for the whole request are retrieved first.
3. The model writes a short pseudo-plan (``resources/prompts/plan.md``, JSON schema
   ``plan.schema.json``, structured decoding) from the request and those planning skills. Steps
   that share no content word with the request (a small model copying the prompt's examples)
   are dropped. The plan is only used as queries: never shown to the user, never injected.
4. Each step is a query for functional/atomic skills; hits are deduplicated across steps and
   interleaved (each step's best first), after the planning skill and the whole request's best
   hit, and capped at ``cap`` so the context stays small. The whole request competes as one
   more step (``hedge``), so a poor plan costs little: measured on the scenario set, +0.05
   recall for the bundled model's plans, +0.015 for hand-written ones (cap 4).

Any failure of the plan step (garbage JSON, a schema violation, a model error, no steps) falls
back to plain retrieval; it never raises. ``llm`` may be an ``LLMClient`` (the learning loop's:
``structured(prompt_name, **inputs)``), a ``ModelWorker``, a backend with
``structured(messages, schema, params)``, or a plain function ``(messages, schema) -> dict|str``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine import prompts
from engine.errors import Cancelled, SkillDeskError
from engine.learning.candidate import parse_body
from engine.llm.structured import parse_and_validate
from engine.text import cjk_count, clip, content_tokens, dedupe, language

log = logging.getLogger("skilldesk.plan")

DEFAULT_CAP = 4        # skills injected for a planned request
PER_STEP = 2           # hits asked for per plan step
MAX_STEPS = 5
PLANNING_PER_QUERY = 1
MIN_WORDS_EN, MIN_CHARS_ZH = 9, 14   # below this a request is never "complex"
LONG_WORDS_EN, LONG_CHARS_ZH = 20, 25  # long enough that three clauses mean three actions
_EN_CUES = re.compile(
    r"\b(then|after that|afterwards|finally|lastly|next|first|second|third|followed by|"
    r"once (?:that|it|this) is|step \d|and also|as well as|before (?:that|you)|so that i can)\b",
    re.I)
_ZH_CUES = re.compile(r"然后|接着|之后|最后|首先|其次|再把|再用|再帮|并且|同时|第[一二三四五]|步骤|以及|并把")
_ENUM = re.compile(r"(?:^|\s)(?:\d[.)、]|[-*•])\s+\S", re.M)
_CLAUSE_SPLIT = re.compile(r"[,;，；。\n、]|\band\b|\bthen\b|然后|接着|最后|并且|再")


@dataclass
class PlanResult:
    """What plan-aware retrieval did: ``mode`` is "plain" or "plan" (and why, if plain)."""

    hits: list[Any]
    mode: str = "plain"
    reason: str = ""
    steps: list[str] = field(default_factory=list)
    planning: list[Any] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # plan_s, retrieve_s, total_s


def complexity(text: str) -> dict[str, int]:
    """The signals :func:`is_complex` uses: words/characters, step cues, clauses, list items."""
    t = " ".join((text or "").split())
    zh = language(t) == "zh"
    size = cjk_count(t) if zh else len(t.split())
    cues = len(_ZH_CUES.findall(t)) + len(_EN_CUES.findall(t))
    clauses = sum(1 for part in _CLAUSE_SPLIT.split(t) if len(content_tokens(part)) >= 2)
    return {"size": size, "cues": cues, "clauses": clauses,
            "items": len(_ENUM.findall(text or "")), "zh": int(zh)}


# "Summarize this: <pasted text>", "翻译成英文：<文本>": a short instruction, then the material it
# works on. The material's clauses are not steps of the request.
_HEAD = re.compile(r"^\s*([^:：\n]{1,80})[:：]\s*\S")
MAX_HEAD_WORDS = 6


def instruction(text: str) -> str:
    """The request without the material it was pasted with: the head of "<instruction>:
    <material>" when the head is short (at most MAX_HEAD_WORDS words or 2x as many CJK
    characters) and the material is not itself the request (a step cue or a list: "Sales
    report: load…, clean…, and then email…"), else the whole text."""
    m = _HEAD.match(text or "")
    if m is None:
        return text or ""
    head, rest = m.group(1), (text or "")[m.end(1) + 1:]
    size = (cjk_count(head) / 2 if language(head) == "zh"
            else len(head.split()))
    steps = complexity(rest)
    if size > MAX_HEAD_WORDS or steps["cues"] >= 1 or steps["items"] >= 2:
        return text
    return head


def is_complex(text: str) -> bool:
    """True for a multi-step request (several actions chained), False for a short one; judged
    on the instruction, not on material pasted after it (see :func:`instruction`)."""
    s = complexity(instruction(text))
    if s["size"] < (MIN_CHARS_ZH if s["zh"] else MIN_WORDS_EN):
        return False
    long = s["size"] >= (LONG_CHARS_ZH if s["zh"] else LONG_WORDS_EN)
    return (s["items"] >= 2 or s["cues"] >= 2 or (s["cues"] >= 1 and s["clauses"] >= 3)
            or s["clauses"] >= 4 or (long and s["clauses"] >= 3))


# ------------------------------------------------------------------------------ the model call
def _ask(llm: Any, request: str, planning: str) -> dict[str, Any]:
    """The plan prompt's validated JSON answer (raises SkillDeskError on any failure)."""
    if hasattr(llm, "structured") and hasattr(llm, "prompt"):  # the learning loop's LLMClient
        return llm.structured("plan", request=request, planning=planning)
    p = prompts.load("plan")
    messages = p.render(request=request, planning=planning)
    schema = p.schema or {}
    from engine.llm.base import GenParams

    params = GenParams(max_tokens=p.max_tokens, temperature=p.temperature or 0.0, seed=0)
    if hasattr(llm, "submit_structured"):  # a ModelWorker
        from engine.llm.worker import FOREGROUND

        out: Any = llm.submit_structured(messages, schema, params, priority=FOREGROUND).result()
    elif hasattr(llm, "structured"):  # a backend
        out = llm.structured(messages, schema, params)
    elif callable(llm):
        out = llm(messages, schema)
    else:
        raise SkillDeskError("no model to plan with")
    if isinstance(out, str):
        return parse_and_validate(out, schema)
    if not isinstance(out, dict):
        raise SkillDeskError("the plan answer is not a JSON object")
    return parse_and_validate(json.dumps(out), schema)


def draft_plan(llm: Any, request: str, planning_hits: list[Any] = ()) -> list[str]:
    """The pseudo-plan's steps (cleaned, deduplicated, at most MAX_STEPS); raises on garbage."""
    notes = []
    for h in planning_hits:
        s = h.skill
        _goal, _rules, steps, _extra = parse_body(s.instructions)
        line = f"{s.title}: " + ("; ".join(clip(x, 60) for x in steps[:6]) or clip(
            s.description, 160))
        notes.append(clip(line, 400))
    out = _ask(llm, clip(request, 600), "\n".join(notes) or "(none)")
    steps = [clip(str(x), 140) for x in out.get("steps") or [] if isinstance(x, str)]
    # a step must be about the request: small models copy the prompt's examples or drift off
    asked = content_tokens(request)
    steps = [s for s in dedupe(steps) if content_tokens(s) & asked]
    if not steps:
        raise SkillDeskError("the plan has no step about the request")
    return steps[:MAX_STEPS]


# ------------------------------------------------------------------------------ retrieval
class Searcher(Protocol):
    """What plan-aware retrieval needs (a :class:`~engine.desk.SkillDesk` is one)."""

    def search(self, query: str, top_k: int | None = None) -> list[Any]: ...

    def search_many(self, queries: list[str], top_k: int) -> list[list[Any]]: ...


def _search(desk: Searcher | Callable[[str, int], list[Any]], query: str, k: int) -> list[Any]:
    fn = desk.search if hasattr(desk, "search") else desk
    return list(fn(query, k) or [])


def _search_many(desk: Searcher | Callable[[str, int], list[Any]], queries: list[str],
                 k: int) -> list[list[Any]]:
    """One search per query; one embedding batch when the searcher offers ``search_many``."""
    many = getattr(desk, "search_many", None)
    if many is None:
        return [_search(desk, q, k) for q in queries]
    return [list(h) for h in many(list(queries), k)]


def _key(hit: Any) -> str:
    s = hit.skill
    return str(s.path) if s.path is not None else f"{s.key}/{s.id}"


def plan_search(desk: Searcher, query: str, llm: Any, *, top_k: int | None = None,
                cap: int = DEFAULT_CAP, per_step: int = PER_STEP, force: bool | None = None,
                plan_steps: list[str] | None = None, hedge: bool = True) -> PlanResult:
    """Plan-aware retrieval with its details (see the module docstring).

    ``desk``: anything with ``search(query, top_k)`` (or such a function). ``force``: True
    plans whatever the heuristic says, False never plans. ``plan_steps``: use these steps
    instead of asking the model (a scripted plan; the benchmark's control).
    """
    t0 = time.perf_counter()
    res = PlanResult(hits=[])
    if force is False or (force is None and not is_complex(query)):
        res.hits = _search(desk, query, top_k or cap)
        res.reason = "off" if force is False else "simple request"
        res.timings["total_s"] = time.perf_counter() - t0
        return res
    cap = max(1, cap)
    whole = _search(desk, query, max(8, cap * 2))
    res.planning = [h for h in whole if h.skill.level == "planning"][:PLANNING_PER_QUERY]
    t1 = time.perf_counter()
    try:
        steps = list(plan_steps) if plan_steps is not None else draft_plan(llm, query,
                                                                          res.planning)
        if not steps:
            raise SkillDeskError("empty plan")
    except Cancelled:
        raise
    except (SkillDeskError, ValueError, TypeError, KeyError, RuntimeError) as exc:
        log.info("plan-aware retrieval fell back to plain retrieval: %s", exc)
        res.timings["plan_s"] = time.perf_counter() - t1
        res.hits = whole[: top_k or cap]
        res.reason = f"plan failed: {clip(str(exc), 120)}"
        res.timings["total_s"] = time.perf_counter() - t0
        return res
    res.timings["plan_s"] = time.perf_counter() - t1
    res.steps, res.mode = steps, "plan"
    t2 = time.perf_counter()
    per = [[h for h in hits if h.skill.level != "planning"][:per_step]
           for hits in _search_many(desk, steps, per_step + 2)]
    res.timings["retrieve_s"] = time.perf_counter() - t2
    chosen: dict[str, Any] = {}

    def take(h: Any) -> None:
        k = _key(h)
        if k not in chosen and len(chosen) < cap:
            chosen[k] = h

    for h in res.planning:
        take(h)
    non_planning = [h for h in whole if h.skill.level != "planning"]
    if non_planning:
        take(non_planning[0])
    if hedge:  # the whole request competes as one more "step": a poor plan costs less
        per.append(non_planning[1:per_step + 1])
    for rank in range(per_step):
        for hits in per:
            if rank < len(hits):
                take(hits[rank])
    res.hits = list(chosen.values())
    res.timings["total_s"] = time.perf_counter() - t0
    return res


def plan_retrieve(desk: Searcher, query: str, llm_call: Any, *, top_k: int | None = None,
                  cap: int = DEFAULT_CAP, force: bool | None = None) -> list[Any]:
    """The skills to inject for ``query``: plan-aware when it is complex, else plain."""
    return plan_search(desk, query, llm_call, top_k=top_k, cap=cap, force=force).hits
