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
  requests are planned before retrieval (SkillX §4); consolidation merges with the model.

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
    consolidate_merge: Literal["llm", "union"]
    skill_chars: int  # characters of skill text the chat prompt may carry
    max_skills: int  # skills injected into one answer

    def steps(self) -> dict[str, str]:
        return {"triage": self.triage, "rewrite": self.rewrite, "extract": self.extract,
                "judge": self.judge, "merge": self.merge}


_CAPABLE = TierPolicy(triage="llm", rewrite="llm", extract="llm+rule", judge="llm", merge="llm", plan=True,
                      consolidate_merge="llm", skill_chars=1800, max_skills=3)
POLICIES: dict[str, TierPolicy] = {
    "tiny": TierPolicy(triage="rule", rewrite="rule", extract="rule", judge="rule", merge="rule", plan=False,
                       consolidate_merge="union", skill_chars=700, max_skills=2),
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


def policy(tier_or_target: Any) -> TierPolicy:
    """The policy of a tier name, or of whatever :func:`tier_of` accepts."""
    tier = tier_or_target if isinstance(tier_or_target, str) else tier_of(tier_or_target)
    return POLICIES.get(tier, POLICIES["unknown"])
