"""Is a skill about the user or about a task? One forward pass of the model (``about.md``).

A skill about the user ("No caffeine: the user cannot have caffeine", "Afraid of heights")
applies to any request whose answer it should change, in any area; a skill about a task
("Cover letter style") applies when that task is asked for. The self-filter
(:mod:`engine.chat.skill_filter`) judges the two with their own prompt: one prompt for both
either dropped the facts from plain questions (a dislike of puzzle games read as not fitting
"recommend some puzzle games") or, told to keep them, let more task skills into unrelated
requests (the thirty-fourth round's note); and the chat puts such a skill under "About me"
rather than among the skills to apply (:mod:`engine.chat.render`). The learning pipeline asks
this when it writes a new skill and records the answer as ``about: user`` in the skill's
metadata; a merge keeps the target's. Skills written by hand or imported carry it only when
their author wrote it.
"""

from __future__ import annotations

from typing import Any

from engine.text import clip

# P("user") after '{"about": "' at which a skill counts as about the user. The argmax: the
# bench (`skilldesk bench about`) reports the split by bar.
ABOUT_USER_MIN_P = 0.5
RULES_SHOWN = 2


def skill_line(title: str, description: str, rules: list[str]) -> str:
    """The skill as the prompt shows it: ``Title: description`` and its first rules."""
    head = f"{clip(' '.join(title.split()), 80)}: {clip(' '.join(description.split()), 200)}"
    return "\n".join([head, *(f"- {clip(' '.join(r.split()), 160)}"
                              for r in rules[:RULES_SHOWN] if r.strip())])


def p_about_user(client: Any, title: str, description: str, rules: list[str]) -> float:
    """P(the model says the skill is about the user)."""
    return float(client.choice("about", "about",
                               skill=skill_line(title, description, rules))["user"])
