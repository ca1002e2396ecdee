"""Scenarios of ``skilldesk bench evolution``: loading, seeding a bank, scoring the outcome.

A scenario (one JSON line of ``scenarios/evolution.jsonl``) holds a conversation, the skills
the bank starts with, and the expected outcome: a list of items, each ``add`` (a new skill
holding the item's ``keywords``), ``merge`` (the skill ``into`` holds them, version bumped, no
new skill does) or ``known`` (nothing may be written: the bank already says it). An empty list
means nothing may be learned (a one-off conversation).

Scoring is by keywords (case-insensitive substrings; ``a|b`` accepts either), so a model's own
wording counts. Two views: **by count** (a write where one was expected, whatever it says) and
**by content** (the write holds the expected keywords). Optional item fields: ``forbid`` (case
details: names, numbers, topic nouns of this one request; none may appear in a written skill's
name, description, goal, rules or triggers — a *leak*), ``absent`` (an old rule a contradicting
merge must replace), ``examples`` (the skill should carry an example). A scenario may carry a
``split`` (:data:`SPLITS`): the held-out half is never looked at while tuning; each fresh split
(``fresh``, ``fresh2``, ``fresh3``…) lives in its own file, ``people_<split>.jsonl``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.learning.candidate import Candidate
from engine.learning.events import Action
from engine.text import normalize

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
SCENARIOS = SCENARIO_DIR / "evolution.jsonl"
# the people set's halves, then one fresh split per people_fresh<N>.jsonl file, in order (a
# file named otherwise is no split)
_FRESH = [m for f in SCENARIO_DIR.glob("people_fresh*.jsonl")
          if (m := re.fullmatch(r"people_(fresh(\d*))", f.stem))]
SPLITS = ("tune", "heldout", *(m[1] for m in sorted(_FRESH, key=lambda m: int(m[2] or 1))))
QUICK = ["en-tldr-once", "zh-formal-tone", "en-repeat-bullets", "en-oneoff-always-question",
         "zh-oneoff-dont", "en-correct-indent", "zh-correct-weekly", "en-add-then-correct",
         "en-two-tasks", "zh-switch", "en-known"]


def scenario_path(path: str | Path | None) -> Path:
    """A file, or the name of a set in ``bench/scenarios/`` ("people", "evolution")."""
    if path is None:
        return SCENARIOS
    p = Path(path)
    if not p.exists() and (SCENARIO_DIR / f"{path}.jsonl").exists():
        return SCENARIO_DIR / f"{path}.jsonl"
    return p


def load_scenarios(path: str | Path | None = None, ids: list[str] | None = None,
                   quick: bool = False, limit: int | None = None,
                   split: str | None = None,
                   kinds: list[str] | None = None) -> list[dict[str, Any]]:
    """The scenarios of one set, or of several (``path`` "people,people_fresh5"); only
    ``split``, ``kinds`` ("merge,contradict"), ``ids`` where given."""
    if split and split.startswith("fresh") and path in (None, "people"):
        path = f"people_{split}"  # each fresh set lives in its own file
    paths = str(path).split(",") if path is not None and "," in str(path) else [path]
    rows = [json.loads(line) for p in paths
            for line in scenario_path(p).read_text("utf-8").splitlines() if line.strip()]
    if split:
        rows = [r for r in rows if r.get("split") == split]
    if kinds:
        rows = [r for r in rows if r.get("kind") in kinds]
    if quick:
        rows = [r for r in rows if r["id"] in QUICK]
    if ids:
        rows = [r for r in rows if r["id"] in ids]
    return rows[:limit] if limit else rows


def seed_skill(d: dict[str, Any]) -> Skill:
    c = Candidate(name=d["name"], description=d.get("description", d["name"]),
                  goal=d.get("goal") or d.get("description", ""),
                  constraints=list(d.get("constraints") or []),
                  workflow=list(d.get("workflow") or []), triggers=list(d.get("triggers") or []),
                  tags=list(d.get("tags") or []), level=d.get("level", "functional"))
    return c.to_skill(source="imported", about=d.get("about", ""))


def seed_bank(bank: SkillBank, user: str, scenario: dict[str, Any]) -> dict[str, Skill]:
    """Write the scenario's starting skills; returns them by title."""
    return {d["name"]: bank.create(seed_skill(d), user, source="imported")
            for d in scenario.get("bank") or []}


def skill_blob(s: Skill) -> str:
    return normalize("\n".join([s.title, s.description, s.instructions, *s.triggers]))


def has_keywords(text: str, item: dict[str, Any]) -> bool:
    kws = item.get("keywords") or []
    t = normalize(text)
    return bool(kws) and all(any(normalize(a) in t for a in k.split("|")) for k in kws)


def general_parts(s: Skill) -> dict[str, str]:
    """What must stay free of case details: everything but the examples, by part."""
    return {"name": normalize(s.title), "description": normalize(s.description),
            "body": normalize(s.instructions), "triggers": normalize("\n".join(s.triggers))}


def leaks(scenario: dict[str, Any], skills: list[Skill]) -> list[str]:
    """Case details (the items' ``forbid`` strings) found in the written skills, with the part
    that holds them ("'bristol' in Driving route (description)")."""
    forbid = {normalize(f) for it in scenario.get("expect") or [] for f in it.get("forbid") or []}
    return sorted({f"{f!r} in {s.title} ({part})" for s in skills
                   for part, text in general_parts(s).items() for f in forbid if f in text})


@dataclass
class Score:
    """Counts for one scenario (summed over scenarios for the table)."""

    expected: int = 0  # add + merge items
    recalled: int = 0  # of those, written somewhere
    right: int = 0  # of those, written the right way (add → new skill; merge → into X)
    merges_expected: int = 0
    merges_right: int = 0
    writes: int = 0  # add + merge actions
    good_writes: int = 0  # writes whose candidate matches an expected item
    duplicates: int = 0
    junk: int = 0
    junk_oneoff: int = 0
    known_items: int = 0
    known_right: int = 0
    count_hits: int = 0  # writes matched to an expected item by count (not by content)
    leaks: int = 0  # scenarios with a case detail in a written skill
    two_task: int = 0  # two-task scenarios
    two_task_split: int = 0  # ... whose two items ended in two different skills
    stale_expected: int = 0  # contradicting merges (an old rule must go)
    stale_dropped: int = 0
    examples_expected: int = 0
    examples_kept: int = 0
    zh: int = 0
    zh_passed: int = 0
    passed: int = 0
    scenarios: int = 0
    notes: list[str] = field(default_factory=list)

    def add(self, other: Score) -> None:
        for k, v in other.__dict__.items():
            if isinstance(v, int):
                setattr(self, k, getattr(self, k) + v)


def score(scenario: dict[str, Any], before: dict[str, Skill], after: list[Skill],
          actions: list[Action]) -> Score:
    sc = Score(scenarios=1)
    items = scenario.get("expect") or []
    before_ids = {s.id: s for s in before.values()}
    new = [s for s in after if s.id not in before_ids]
    changed = [s for s in after if s.id in before_ids and s.version != before_ids[s.id].version]
    writes = [a for a in actions if a.kind in ("add", "merge")]
    sc.writes = len(writes)
    sc.count_hits = min(len(writes), sum(1 for it in items if it["outcome"] != "known"))
    leaked = leaks(scenario, new + changed)
    if leaked:
        sc.leaks = 1
        sc.notes.append(f"leak: {'; '.join(leaked)[:120]}")
    for a in writes:
        text = a.candidate.text if a.candidate is not None else skill_blob(a.skill)
        if any(has_keywords(text, it) for it in items if it["outcome"] != "known"):
            sc.good_writes += 1
        else:
            sc.junk += 1
            sc.junk_oneoff += int(not items)
            sc.notes.append(f"junk {a.kind}: {a.skill.title if a.skill else '?'}")
    created_for: dict[str, Skill] = {}
    for it in items:
        if it["outcome"] == "known":
            sc.known_items += 1
            ok = not any(has_keywords(skill_blob(s), it) for s in new + changed)
            sc.known_right += int(ok)
            if not ok:
                sc.notes.append(f"known rule written again: {it['keywords']}")
            continue
        sc.expected += 1
        holders_new = [s for s in new if has_keywords(skill_blob(s), it)]
        if it.get("examples") and holders_new:
            sc.examples_expected += 1
            sc.examples_kept += int(bool(holders_new[0].examples))
        if it["outcome"] == "add":
            ok = len(holders_new) >= 1
            sc.recalled += int(ok)
            sc.right += int(len(holders_new) == 1)
            sc.duplicates += max(0, len(holders_new) - 1)
            if holders_new:
                created_for[it.get("name", "")] = holders_new[0]
            else:
                holders_old = [s for s in changed if has_keywords(skill_blob(s), it)]
                sc.recalled += int(bool(holders_old))  # learned, but merged where it is not
                sc.notes.append(f"add {it.get('name')!r}: " + (
                    f"merged into {holders_old[0].title}" if holders_old else "not learned"))
            continue
        sc.merges_expected += 1
        target = before.get(it["into"]) or created_for.get(it["into"])
        target_now = next((s for s in after if target is not None and s.id == target.id), None)
        in_target = target_now is not None and has_keywords(skill_blob(target_now), it) and (
            target.id not in before_ids or target_now.version != target.version)
        extra_new = [s for s in holders_new if target is None or s.id != target.id]
        recalled = in_target or bool(extra_new) or any(
            has_keywords(skill_blob(s), it) for s in changed)
        sc.recalled += int(recalled)
        ok = in_target and not extra_new
        stale = []
        if it.get("absent") and target_now is not None:
            sc.stale_expected += 1
            stale = [a for a in it["absent"] if normalize(a) in skill_blob(target_now)]
            sc.stale_dropped += int(not stale)
        if stale and ok:
            ok = False
            sc.notes.append(f"merge into {it['into']!r}: the old rule {stale[0]!r} stayed")
            stale = ["noted"]
        sc.right += int(ok)
        sc.merges_right += int(ok)
        sc.duplicates += len(extra_new)
        if not ok and not stale:
            sc.notes.append(f"merge into {it['into']!r}: " + (
                f"added as new skill {extra_new[0].title!r}" if extra_new
                else "not learned" if not recalled else "merged elsewhere"))
    if scenario.get("kind") == "two-tasks":
        adds = [it for it in items if it["outcome"] == "add"]
        homes = [{s.id for s in after if has_keywords(skill_blob(s), it)} for it in adds]
        sc.two_task = 1
        sc.two_task_split = int(len(homes) == 2 and all(homes) and not homes[0] & homes[1])
        if all(homes) and not sc.two_task_split:
            sc.notes.append("two tasks ended in one skill")
    sc.passed = int(sc.right == sc.expected and sc.known_right == sc.known_items
                    and sc.junk == 0 and sc.duplicates == 0 and not sc.leaks
                    and sc.two_task_split == sc.two_task)
    sc.zh = int(scenario.get("lang") == "zh")
    sc.zh_passed = sc.zh * sc.passed
    return sc
