"""The same-task check alone: how well the model's P(a rule belongs in a skill) separates the
right merge target from its look-alikes, and which bar (``SAME_TASK_MIN_P``) it supports.

Pairs come from the scenario sets, labelled by the scenario: every merge (and contradiction)
item's rule against each skill of its bank — the ``into`` skill is the right one, the other
look-alikes (same area, another task) are not — and, in a conversation with two tasks, each
task's rule against a skill made of the other task. The user's messages up to the item's
evidence are shown, as the app shows the window it learned from. Nothing is written.

    skilldesk bench judge --model recommended --scenarios people --split tune
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.learning_scenarios import SPLITS, load_scenarios, seed_skill
from engine.text import normalize

BARS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="skilldesk bench judge", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="recommended", help="registry key or .gguf path")
    p.add_argument("--scenarios", default="people", help="scenario file or set name")
    p.add_argument("--split", choices=SPLITS, action="append",
                   help="only this split (repeatable)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", metavar="FILE", help="also write every scored pair as JSON")
    p.add_argument("--turns", choices=["window", "last", "none"], default="window",
                   help="the user's messages shown: up to the evidence (as the app), only the "
                        "evidence turn, or none")
    return p.parse_args(argv)


def _turns(sc: dict[str, Any], evidence: str) -> list[Any]:
    """The user turns up to the one holding ``evidence`` (at most four), as triage cuts them."""
    from engine.learning.triage import TRIAGE_TURNS, UserTurn, signal

    out: list[Any] = []
    for k, m in enumerate(sc["messages"]):
        if m["role"] != "user":
            continue
        out.append(UserTurn(index=k, text=m["content"], signal=signal(m["content"])))
        if evidence and normalize(evidence) in normalize(m["content"]):
            break
    return out[-TRIAGE_TURNS:]


def _candidate(e: dict[str, Any]) -> Any:
    """The item as a candidate, without the name of its merge target (which would give the
    answer away): its rules, and for an add its own name, triggers and tags."""
    from engine.learning.candidate import Candidate

    name = e.get("name") or "rule"
    return Candidate(name=name, description=e.get("description") or "",
                     goal=e.get("description") or "", constraints=list(e["constraints"]),
                     triggers=list(e.get("triggers") or []), tags=list(e.get("tags") or []))


def pairs(sc: dict[str, Any]) -> list[dict[str, Any]]:
    """Labelled (turns, candidate, skill) pairs of one scenario (see the module doc)."""
    out = []
    items = [e for e in sc["expect"] if e.get("constraints")]
    bank = {d["name"]: d for d in sc.get("bank") or []}
    for e in items:
        if e["outcome"] == "merge" and e.get("into") in bank:
            for name, d in bank.items():
                out.append({"id": sc["id"], "e": e, "skill": d, "same": name == e["into"]})
        elif e["outcome"] == "add":
            for other in items:
                if other is not e and other["outcome"] == "add":
                    out.append({"id": sc["id"], "e": e, "skill": other, "same": False})
    return out


def score_pairs(pipe: Any, sc: dict[str, Any], show: str = "window") -> list[dict[str, Any]]:
    rows = []
    for p in pairs(sc):
        c, skill = _candidate(p["e"]), seed_skill(p["skill"])
        t0 = time.perf_counter()
        turns = _turns(sc, p["e"].get("evidence") or "")
        turns = {"window": turns, "last": turns[-1:], "none": []}[show]
        ps = pipe.same_task_score(turns, c, skill)
        rows.append({"id": sc["id"], "lang": sc.get("lang"), "rule": c.constraints[0],
                     "skill": skill.title, "same": p["same"], "p": ps,
                     "s": time.perf_counter() - t0})
    return rows


def table(rows: list[dict[str, Any]], bars: tuple[float, ...] = BARS) -> str:
    scored = [r for r in rows if r["p"] is not None]
    pos = [r for r in scored if r["same"]]
    neg = [r for r in scored if not r["same"]]

    def line(name: str, yes: Any) -> str:
        tp, fp = sum(map(yes, pos)), sum(map(yes, neg))
        bal = (tp / max(1, len(pos)) + 1 - fp / max(1, len(neg))) / 2
        return f"{name:<20}| {tp}/{len(pos)}{'':<9}| {fp}/{len(neg)}{'':<9}| {bal:.2f}"

    lines = [f"pairs {len(rows)}: scored {len(scored)} ({len(pos)} same task, {len(neg)} not)",
             "says same task      | right target | look-alikes | balanced acc",
             "--------------------|--------------|-------------|-------------"]
    lines += [line(f"P(same) >= {b}", lambda r, b=b: r["p"] >= b) for b in bars]
    # per merge item: is the right target the one with the highest P among its bank?
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in scored:
        by.setdefault((r["id"], r["rule"]), []).append(r)
    groups = [g for g in by.values() if any(r["same"] for r in g) and len(g) > 1]
    top = sum(max(g, key=lambda r: r["p"])["same"] for g in groups)
    lines.append(f"right target ranked first by P(same): {top}/{len(groups)} merge items")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = _args(list(argv or []))
    from engine.bank.store import SkillBank
    from engine.learning.pipeline import Pipeline
    from engine.llm import registry
    from engine.llm.client import LLMClient
    from engine.llm.llama_backend import LlamaCppBackend
    from engine.llm.worker import BACKGROUND, ModelWorker

    scenarios = [sc for split in (a.split or [None])
                 for sc in load_scenarios(a.scenarios, None, False, None, split)]
    spec = registry.resolve(a.model)
    worker = ModelWorker(LlamaCppBackend(spec, n_threads=a.threads))
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="skilldesk-judge-") as tmp:
            pipe = Pipeline(SkillBank(Path(tmp)), "default",
                            LLMClient(worker, priority=BACKGROUND))
            pipe.checkpoint = lambda: None
            for sc in scenarios:
                rows += score_pairs(pipe, sc, a.turns)
    finally:
        worker.close()
    splits = f" (splits {', '.join(a.split)})" if a.split else ""
    print(f"{spec.title}: {len(scenarios)} scenarios{splits}")
    print(table(rows))
    secs = [r["s"] for r in rows if r["p"] is not None]
    if secs:
        print(f"seconds per scored pair: {sum(secs) / len(secs):.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0
