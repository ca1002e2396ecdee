"""What each model tier may do: the one place that decides it.

A model's tier comes from the registry (``models/registry.json``: ``tier``) or from the backend
object (``backend.tier``); a model nobody classified is ``unknown`` and treated like a capable
one. Two tiers exist because the bundled SmolLM2-135M cannot produce usable structured output
(measured with ``skilldesk bench evolution``: its extractions and judgements are mostly junk),
while Qwen2.5-1.5B and up can:

- ``tiny``: every structured step is done by rules (triage by cue words, rewrite, extract,
  judge, merge), no plan-aware retrieval, a short skill block (its context is small and it
  copies long prompts).
- ``capable`` / ``unknown``: the model triages (a short prompt with a one-word constrained
  answer decides whether the newest user turns hold anything durable; cue words only
  fast-track, never veto: on conversations written outside the project the keyword gate let
  through 1 of 100 PrefEval preferences), rewrites, extracts (the user's own rule sentences
  back it up when none of its candidates survives the checks), judges and merges; complex
  requests are planned before retrieval (SkillX §4); consolidation merges with the model;
  after retrieval, the model checks which of the 1-3 candidates fit the request (the
  self-filter, SkillX §4, engine/chat/skill_filter.py) whenever one passed η.

Every caller asks :func:`policy` (or :func:`tier_of`); nobody compares tier names itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Tier = Literal["tiny", "capable", "unknown"]
TIERS: tuple[str, ...] = ("tiny", "capable", "unknown")
Step = Literal["llm", "rule", "llm+rule", "off"]


@dataclass(frozen=True)
class TierPolicy:
    """The steps of one tier: ``llm`` (the model), ``rule`` (no model call), ``llm+rule``
    (the model, then the user's own rule sentences when nothing it found survives)."""

    triage: Step  # "llm": cue words fast-track, the model decides the rest; "rule": cues only
    rewrite: Step
    extract: Step
    judge: Step
    merge: Step
    plan: bool  # plan-aware retrieval for complex requests
    self_filter: bool  # the model checks which retrieved skills fit (chat/skill_filter.py);
    # off for tiny: SmolLM2-135M answers such a question at chance
    consolidate_merge: Literal["llm", "union"]
    skill_chars: int  # the most characters of skill text the chat prompt may carry (a cap:
    # skill_budget() gives less when the model's context is small)
    max_skills: int  # skills injected into one answer

    def steps(self) -> dict[str, str]:
        return {"triage": self.triage, "rewrite": self.rewrite, "extract": self.extract,
                "judge": self.judge, "merge": self.merge}


_CAPABLE = TierPolicy(triage="llm", rewrite="llm", extract="llm+rule", judge="llm", merge="llm",
                      plan=True, self_filter=True, consolidate_merge="llm", skill_chars=6000,
                      max_skills=3)
POLICIES: dict[str, TierPolicy] = {
    "tiny": TierPolicy(triage="rule", rewrite="rule", extract="rule", judge="rule", merge="rule",
                       plan=False, self_filter=False, consolidate_merge="union", skill_chars=1000,
                       max_skills=2),
    "capable": _CAPABLE,
    "unknown": _CAPABLE,
}


def tier_of(target: Any) -> str:
    """The tier of a worker, a backend or a model spec (``unknown`` when nothing says)."""
    backend = getattr(target, "backend", target)
    for obj in (backend, getattr(backend, "spec", None), target):
        t = getattr(obj, "tier", None)
        if isinstance(t, str) and t in TIERS:
            return t
    return "unknown"


# The skill block may take this share of the model's context window, at this many characters
# per token (Qwen2.5 / SmolLM2 tokenizers: ~4 for English prose, ~1.4 for Chinese; 2.5 keeps a
# mixed block inside its share). Qwen2.5-Coder-1.5B at n_ctx 4096: 3,072 characters; the
# tiny tier's cap (1,000) stays below that: a 135M model copies long prompts back.
SKILL_CONTEXT_SHARE = 0.3
CHARS_PER_TOKEN = 2.5
MIN_SKILL_CHARS = 400


def skill_budget(target: Any, context_tokens: int | None = None) -> int:
    """Characters of skill text one answer's prompt may carry: the tier's cap, or less when
    ``context_tokens`` (default: the backend's ``context_length``) is small."""
    pol = policy(target)
    n = context_tokens
    if n is None and not isinstance(target, str):
        backend = getattr(target, "backend", target)
        try:
            n = int(getattr(backend, "context_length", 0) or 0)
        except (TypeError, ValueError, RuntimeError, AttributeError):
            n = 0
    if not n:
        return pol.skill_chars
    return max(MIN_SKILL_CHARS, min(pol.skill_chars,
                                    int(n * SKILL_CONTEXT_SHARE * CHARS_PER_TOKEN)))


def policy(tier_or_target: Any) -> TierPolicy:
    """The policy of a tier name, or of whatever :func:`tier_of` accepts."""
    tier = tier_or_target if isinstance(tier_or_target, str) else tier_of(tier_or_target)
    return POLICIES.get(tier, POLICIES["unknown"])
