"""``skilldesk bench instance``: does the instance check find each scenario's case details?

No model: for every expected skill of the learning scenarios, the turn holding its evidence is
the rule's turn and up to two user turns before it are the requests the model would read as
context (the pipeline's window in turn mode); the scenario's own rules stand in for the
model's. :func:`engine.learning.checks.case_details` then names the instance. Reported per
set: the share of the scenario's ``forbid`` words (what must never reach the skill) it finds,
and how many words of the expected name, description (checked against the topic) and triggers
(against the case details) it would wrongly strip. The model's rules are often worded apart
from the user's; ``skilldesk bench evolution`` measures the whole loop.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench._retrieval_data import table
from bench.learning_scenarios import load_scenarios
from engine.learning.checks import case_details
from engine.learning.pipeline import ASKED_TURNS
from engine.text import content_tokens


def window(sc: dict[str, Any], item: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the rule's turn, the requests before it) for one expected skill of ``sc``."""
    users = [m["content"] for m in sc["messages"] if m["role"] == "user"]
    ev = (item.get("evidence") or "").lower()
    i = next((k for k, u in enumerate(users) if ev and ev in u.lower()), len(users) - 1)
    return users[i:i + 1], users[max(0, i - ASKED_TURNS):i]


def score(scenarios: list[dict[str, Any]]) -> dict[str, int]:
    out = {"forbid": 0, "found": 0, "words": 0, "stripped": 0}
    for sc in scenarios:
        for item in sc["expect"]:
            rules = item.get("constraints") or []
            if not rules:
                continue
            turns, requests = window(sc, item)
            topic = case_details(turns, rules, topic=True, requests=requests)
            case = case_details(turns, rules, requests=requests)
            for w in item.get("forbid", []):
                toks = content_tokens(w)
                if toks:
                    out["forbid"] += 1
                    out["found"] += bool(toks & topic)
            good = content_tokens(" ".join([item.get("name", ""), item.get("description", "")]))
            trig = content_tokens(" ".join(item.get("triggers", [])))
            out["words"] += len(good) + len(trig)
            out["stripped"] += len((good & topic) | (trig & case))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="skilldesk bench instance", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--scenarios", default="people,people_fresh,people_fresh2,people_fresh3,"
                   "people_fresh4,people_fresh5,people_fresh6,people_fresh7,people_fresh8,"
                   "people_fresh9,people_fresh10,people_fresh11,people_fresh12,people_fresh13",
                   help="comma-separated scenario sets, one row each")
    p.add_argument("--bank", help=argparse.SUPPRESS)
    p.add_argument("--user", help=argparse.SUPPRESS)
    a = p.parse_args(list(argv or []))
    rows, total = [], {"forbid": 0, "found": 0, "words": 0, "stripped": 0}
    for name in a.scenarios.split(","):
        s = score(load_scenarios(name))
        rows.append([name, f"{s['found']}/{s['forbid']}", s["found"] / max(1, s["forbid"]),
                     f"{s['stripped']}/{s['words']}"])
        total = {k: total[k] + s[k] for k in total}
    rows.append(["all", f"{total['found']}/{total['forbid']}",
                 total["found"] / max(1, total["forbid"]), f"{total['stripped']}/{total['words']}"])
    print(table(["set", "case words found", "share", "expected words stripped"], rows,
                "Instance check on the scenarios' expected rules (no model)"))
    return 0
