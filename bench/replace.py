"""The replace check alone: does the model's P(a saved rule must go) separate the rules a
user's new message contradicts from the ones it leaves standing?

Pairs come from the scenario sets' merges (``outcome: merge`` into a seeded skill): the user
message holding the item's evidence, against every rule of the target skill. A rule is
*replaced* when it holds one of the item's ``absent`` words (a contradiction scenario's old
rule, "A reward star for each chore done" for "we've switched to pocket money"), and *kept*
otherwise — the other rules of a contradicted skill and every rule of a skill a plain merge
adds to. The table gives, per bar (``REPLACE_MIN_P``), the replaced rules found and the kept
rules wrongly dropped, with the AUC, for every rule over the bar and for the one the pipeline
may drop (the rule ranked first among its skill's). Nothing is written.

    skilldesk bench replace --model recommended --scenarios people,people_fresh,...
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.learning_scenarios import load_scenarios
from bench.triage import auc as roc_auc
from engine.text import normalize

BARS = (0.3, 0.5, 0.6, 0.62, 0.64, 0.7, 0.8, 0.9)


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="skilldesk bench replace",
                                description=__doc__.split("\n")[0])
    p.add_argument("--model", default="recommended", help="registry key or .gguf path")
    p.add_argument("--scenarios", default="people",
                   help="scenario file or set name, or several, comma-separated")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", metavar="FILE", help="also write every scored pair as JSON")
    p.add_argument("--bank", help=argparse.SUPPRESS)
    p.add_argument("--user", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def pairs(scenarios: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """(scenario, the user's message, a rule of the merge target, replaced?) for every merge."""
    out = []
    for sc in scenarios:
        for e in sc.get("expect") or []:
            if e.get("outcome") != "merge" or not e.get("evidence"):
                continue
            target = next((b for b in sc.get("bank") or [] if b["name"] == e["into"]), None)
            said = next((m["content"] for m in sc["messages"] if m["role"] == "user"
                         and normalize(e["evidence"]) in normalize(m["content"])), None)
            if target is None or said is None:
                continue
            absent = [normalize(a) for a in e.get("absent") or []]
            for rule in target.get("constraints") or []:
                out.append({"id": sc["id"], "said": said, "rule": rule,
                            "replaced": any(a in normalize(rule) for a in absent)})
    return out


def auc(rows: list[dict[str, Any]]) -> float | None:
    """How well P(replaces) ranks the replaced rules above the kept ones."""
    return roc_auc([r["p"] for r in rows if r["replaced"] and r["p"] is not None],
                   [r["p"] for r in rows if not r["replaced"] and r["p"] is not None])


def first_ranked(rows: list[dict[str, Any]]) -> set[int]:
    """Indices of the rows whose rule the replace check ranks first among its skill's rules
    (one merge: the same scenario and message), where the skill has two rules or more: what
    the pipeline may take back (:meth:`Pipeline.takes_back`)."""
    merges: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(rows):
        merges.setdefault((r["id"], r["said"]), []).append(i)
    return {max(ix, key=lambda i: rows[i]["p"] or 0.0) for ix in merges.values() if len(ix) > 1}


def table(rows: list[dict[str, Any]], bars: tuple[float, ...] = BARS) -> str:
    pos = sum(r["replaced"] for r in rows)
    neg = len(rows) - pos
    a = auc(rows)
    top = first_ranked(rows)
    lines = [f"{pos} replaced rules, {neg} kept rules; AUC "
             f"{'n/a' if a is None else f'{a:.3f}'}; 'first' = only the rule ranked first "
             "among its skill's (two rules or more) counts, as the pipeline decides",
             "bar    replaced found   kept dropped   first: found   first: dropped",
             "-----  --------------   ------------   ------------   --------------"]
    for bar in bars:
        hit = [i for i, r in enumerate(rows) if (r["p"] or 0.0) >= bar]
        tp = sum(1 for i in hit if rows[i]["replaced"])
        fp = len(hit) - tp
        ttp = sum(1 for i in hit if i in top and rows[i]["replaced"])
        tfp = sum(1 for i in hit if i in top and not rows[i]["replaced"])
        lines.append(f"{bar:<5}  {tp:>3}/{pos:<10}   {fp:>3}/{neg:<8}   {ttp:>3}/{pos:<8}   "
                     f"{tfp:>3}/{neg}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = _args(list(argv or []))
    from engine.llm import registry
    from engine.llm.client import LLMClient
    from engine.llm.llama_backend import LlamaCppBackend
    from engine.llm.worker import BACKGROUND, ModelWorker

    rows = pairs(load_scenarios(a.scenarios))
    spec = registry.resolve(a.model)
    worker = ModelWorker(LlamaCppBackend(spec, n_threads=a.threads))
    try:
        llm = LLMClient(worker, priority=BACKGROUND)
        for r in rows:
            t0 = time.perf_counter()
            try:
                r["p"] = llm.choice("replace", "replaces", said=r["said"], rule=r["rule"])["yes"]
            except (ValueError, KeyError):
                r["p"] = None
            r["s"] = time.perf_counter() - t0
    finally:
        worker.close()
    print(f"{spec.title}: {len(rows)} pairs from {a.scenarios}")
    print(table(rows))
    for r in rows:
        if r["replaced"] or (r["p"] or 0.0) >= 0.5:
            print(f"  {'REPL' if r['replaced'] else 'keep'} p={r['p']:.2f} {r['id']}: "
                  f"{r['rule'][:60]!r}")
    if rows:
        print(f"seconds per pair: {sum(r['s'] for r in rows) / len(rows):.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0
