"""The self-filter (SkillX §4): the model decides which retrieved skills apply to a request.

Retrieval's relevance decision (engine/retrieval/relevance.py) is a calibrated score over
cosine and word coverage; it cannot tell a topical neighbour ("How do I install Rust?" beside a
skill that writes a lexer in Rust) from the task itself, and on the 120-skill user bank about
one English off-topic request in five got a skill that way (issue 15). On capable models one
short constrained call settles it after retrieval:

- it runs only when at least one retrieved skill passed η: a greeting, a thanks or any request
  nothing matched costs nothing (no call);
- the prompt (``resources/prompts/filter.md``; ``filter_user.md`` for a skill about the user,
  ``about: user``, see :func:`prompt_for`) holds a candidate's title and description only
  (not the rules), then the request: ~550 tokens of which all but the request and the
  answer's opening (~20) are the same each time the skill is judged. That part is kept in a
  KV snapshot of its own, one per skill judged recently (``per_call``, llama_backend.py), and
  ``desk.warm_up`` primes it for the skills used most; each candidate is judged alone, by the
  probability of the answer's first token after ``{"use":`` (`` [`` a list follows, `` []``
  none) in one forward pass, no decoding, kept at P(fits) >= ``FIT_MIN_P`` (fitted on the
  read splits). With 2-3 candidates in one prompt Qwen2.5-1.5B kept one of them, often the
  wrong one, rather than none; alone, on the tune halves, it dropped no right paraphrase
  target (served R@3 EN 0.53 -> 0.82) at 0.75x the joint call's time (18 requests, same
  load). A vocabulary where both answers share a first token gets the joint
  grammar-constrained ``{"use": [numbers]}`` call instead;
- always-on skills are never judged (the user asked for them on every answer);
- any failure (garbage JSON, a model error, a stop) keeps the hits as retrieval chose them: a
  broken filter must not cost the skill that applies.

:mod:`engine.llm.tiers` decides which tiers run it (capable: yes; tiny: no, a 135M model cannot
judge); ``retrieval.self_filter`` in the settings turns it off. The measurement is in the note
of issue 15b and ``skilldesk bench retrieval --filter-model``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import Cancelled, SkillDeskError
from engine.text import clip

log = logging.getLogger("skilldesk.filter")

MAX_CANDIDATES = 3       # the schema's enum: the chat injects at most 3 skills
DESCRIPTION_CHARS = 160  # per candidate: the prompt stays ~550 tokens with 1 candidate
REQUEST_CHARS = 400


@dataclass
class FilterResult:
    hits: list[Any]                      # what the answer gets: kept + the never-judged hits
    asked: bool = False                  # whether the model was called
    dropped: list[Any] = field(default_factory=list)
    answer: list[int] | None = None      # the model's numbers (1-based), None when not asked
    scores: list[float] = field(default_factory=list)  # P(fits) per judged candidate
    seconds: float = 0.0
    error: str = ""


def candidate_line(skill: Any, number: int = 1) -> str:
    """``1. Title: description`` (the rules are left out on purpose)."""
    title = (skill.title or skill.name or "").strip() or skill.name
    desc = clip(" ".join((skill.description or "").split()), DESCRIPTION_CHARS)
    return f"{number}. {clip(title, 80)}: {desc}"


def candidates_text(hits: list[Any]) -> str:
    """One :func:`candidate_line` per candidate."""
    return "\n".join(candidate_line(h.skill, i) for i, h in enumerate(hits, 1))


def ask(client: Any, request: str, hits: list[Any]) -> list[int]:
    """The model's answer: the 1-based numbers of the candidates that fit (raises on garbage)."""
    out = client.structured("filter", request=clip(" ".join(request.split()), REQUEST_CHARS),
                            skills=candidates_text(hits))
    use = out.get("use") if isinstance(out, dict) else None
    if not isinstance(use, list):
        raise SkillDeskError("the filter answer has no 'use' list")
    return sorted({int(n) for n in use if isinstance(n, int) and 1 <= n <= len(hits)})


# The answer's first decision: after '{"use":' the model writes ' []' (no skill fits) or ' ['
# (a list follows). Qwen's and most BPE vocabularies hold both as single tokens, so the
# probability that one candidate fits is one forward pass (LLMClient.score), no decoding.
FIT_PREFIX = '{"use":'
FIT_OPTIONS = {"no": " []", "yes": " ["}
# Kept when P(fits) reaches the bar, refitted on every read split pooled (tune, seen,
# fresh..fresh9: 266 English and 265 Chinese off-topic requests on each bank, 195 English and
# 196 Chinese paraphrases; `skilldesk bench retrieval --filter-model recommended --splits
# tune,heldout,fresh,…,fresh9`, its "bar refit" table) by the bar that maximises paraphrase
# served R@1 less the mean off-topic rate of the two banks, per language (a missed skill
# weighed as one wrong injection). Twenty-eighth round, the skill's line put before the
# request (so the part up to the request can be kept per skill), same data; off-topic on the
# starter / user bank, served R@1, objective:
#   English  best 0.65: 0.000 / 0.023, 0.646 (0.635); 0.55: 0.000 / 0.045, 0.646 (0.624).
#            Request first, at the bar then in use (0.5): 0.000 / 0.135, 0.672 (0.604)
#   Chinese  best 0.65: 0.004 / 0.023, 0.689 (0.676); 0.55: 0.004 / 0.049, 0.684 (0.657).
#            Request first, at the bar then in use (0.7, its best): 0.004 / 0.030, 0.714 (0.697)
# The bar is 0.55, not the best: the skill the loop learns from "From now on, always start
# every summary ... with a one-line TL;DR" ("Summary format: The user wants summaries to start
# with a TL;DR ...") scores 0.60 under "Summarize this: ..." (0.555 with the request first;
# the real-model end-to-end test), and the dev sets hold no learned skill about the user. As
# the twenty-fourth round did for a vegan diet under a dinner request (0.53 then, 0.73 now),
# the highest bar that keeps it with a margin. With the request first the model's P(fits) ran
# higher on Chinese requests, for the skill that fits and for a neighbour alike (bars 0.5 /
# 0.7, one per language); with the skill first both languages' best is the same, so one bar.
# Skills about the user in the real-model tests: a vegan diet under a dinner request 0.73,
# hands-on learning under a guitar question 0.73; a fear of heights under a holiday request,
# 0.20, is still dropped, as before.
# Showing the skill's first triggers beside its description made the model say "fits" more
# often to neighbours (AUC, target vs off-topic hits, English 0.955 -> 0.866): not done.
# On PrefEval (English, `bench prefeval`, the learned banks kept) the earlier 0.5 bar had:
# own skill filtered out 0.125 -> 0.025 on 420..459 (read), 0.10 -> 0.03 on 540..579.
# Thirty-fourth round: a PrefEval question as a person types it (the stem, without the answer
# options the protocol appends, which name the preference) kept its own learned skill about the
# user at this bar 0.18 / 0.11 / 0.21 of the time (kept banks 620 / 660 / 700): the model read
# "the user dislikes X" as "does not fit a request about X". The prompt now says such a skill
# fits in any area, even when it says what the user avoids, with a dislike and a fear example:
# 0.56 / 0.34 on the two banks it was written on, 0.44 on 700 (checked after) and 0.50 on
# 840..879 (untouched; 0.25 with the old prompt). The price, on the read off-topic
# splits (heldout, fresh..fresh9): the 120-skill user bank EN 11 -> 15 of 245, ZH 10 -> 11 of
# 244, starter 1 of 489 both. The bar table puts EN back at 0.048 with a bar of 0.6, but the
# facts drop to 0.51 / 0.24 / 0.36 / 0.39 there, and the learned TL;DR skill scored 0.60 (with
# the earlier prompt), so the bar stays. Thirty-fifth round: that prompt is now
# filter_user.md, asked only of skills about the user (``about: user``, which the learning
# pipeline records: engine/learning/about.py), and filter.md is again the prompt of
# 2f24c15 for every other skill, so tasks are judged as before that round (the 120-skill user
# bank, corpus skills: EN 11 of 245, ZH 10 of 244) and facts as after it (kept 0.56 / 0.34 /
# 0.44 / 0.50 on the PrefEval banks above: every one of their 141 skills reads as about the
# user).
FIT_MIN_P = 0.55
# Every judged hit costs a call (0.5-1 s on 2 cores; on the read paraphrase splits 1.73 hits
# were judged per request). Keeping a hit retrieval is sure of without asking would save some,
# but P(related) is as high for topical neighbours as for the skill that fits: kept unjudged at
# P(related) >= 0.9, it saved 0.06 of the 1.73 calls and let one more off-topic request in 21-25
# through on the 120-skill bank (tune EN, fresh3 EN); at 0.8 it saved 0.29 and let 1-2 more
# through on most read splits (`skilldesk bench retrieval --filter-model recommended`, the band
# tables, twentieth round). Not done.


def prompt_for(skill: Any) -> str:
    """The prompt that judges ``skill``: ``filter_user.md`` for a skill about the user
    (``about: user``, :mod:`engine.learning.about`), ``filter.md`` for a task."""
    return "filter_user" if skill.about_user else "filter"


def fit_probability(client: Any, request: str, hit: Any) -> float:
    """P(the model says this one candidate fits ``request``), judged alone."""
    probs = client.score(prompt_for(hit.skill), FIT_PREFIX, FIT_OPTIONS,
                         lambda out: "yes" if (out or {}).get("use") else "no",
                         per_call=("request",),
                         request=clip(" ".join(request.split()), REQUEST_CHARS),
                         skills=candidates_text([hit]))
    return float(probs["yes"])


def self_filter(client: Any, request: str, hits: list[Any],
                judged: Callable[[Any], bool] = lambda h: True) -> FilterResult:
    """Keep the hits the model says fit ``request``. ``judged(hit)``: False for hits that are
    never judged (always-on skills); they are kept and keep their place. Never raises except
    :class:`Cancelled` (a Stop of the whole turn).

    Each candidate is judged alone (with several in one prompt the 1.5B model kept one of them,
    often the wrong one, rather than none); when the tokenizer cannot score the answer's first
    token, the candidates are judged together in one constrained call."""
    cands = [h for h in hits if judged(h)][:MAX_CANDIDATES]
    res = FilterResult(hits=list(hits))
    if not cands:
        return res
    t0 = time.perf_counter()
    res.asked = True
    try:
        try:
            res.scores = [fit_probability(client, request, h) for h in cands]
            res.answer = [i for i, p in enumerate(res.scores, 1) if p >= FIT_MIN_P]
        except ValueError:  # the two answers share a first token in this vocabulary
            res.answer = ask(client, request, cands)
    except Cancelled:
        raise
    except (SkillDeskError, ValueError, TypeError, KeyError, RuntimeError) as exc:
        log.info("self-filter failed, the retrieved skills are kept: %s", exc)
        res.error = clip(str(exc), 160)
        res.seconds = time.perf_counter() - t0
        return res
    res.seconds = time.perf_counter() - t0
    keep = {id(cands[n - 1]) for n in res.answer}
    cand_ids = {id(h) for h in cands}
    res.dropped = [h for h in cands if id(h) not in keep]
    res.hits = [h for h in hits if id(h) not in cand_ids or id(h) in keep]
    return res
