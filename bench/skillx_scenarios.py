"""Plan-aware vs. plain retrieval on the scenario bank of ``scenarios/skillx_plan.json``.

The bank is written into a temporary folder and opened as a real :class:`SkillDesk` (default
embedder, vectors cached). Per request, three injected sets of at most ``cap`` skills:

- ``plain``: ``desk.search(request, cap)``;
- ``plan (scripted)``: :func:`engine.chat.plan.plan_search` with the request's hand-written plan
  (the retrieval side alone: what a perfect planner would get);
- ``plan (model)``: the same with the model writing the plan (the bundled model by default).

Recall = expected skills found in the injected set / expected skills. Latency = the whole
retrieval call (the model's plan included). Short requests must stay on plain retrieval.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from bench._retrieval_data import pct, table
from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.chat.plan import is_complex, plan_search
from engine.learning.candidate import render_body


def build_bank(root: Path, skills: list[dict], user: str = "default") -> SkillBank:
    bank = SkillBank(root)
    for s in skills:
        bank.create(Skill(name=s["name"], title=s["name"], description=s["description"],
                          instructions=render_body(s["description"], s["rules"], []),
                          triggers=s.get("triggers", []), level=s["level"]), user)
    return bank


def _recall(hits, expected) -> float:
    got = {h.skill.title for h in hits}
    return sum(e in got for e in expected) / max(1, len(expected))


def run(scenarios: Path, embedder, *, cap: int, llm=None, out=None) -> dict:
    from engine.desk import SkillDesk

    data = json.loads(Path(scenarios).read_text("utf-8"))
    reqs = data["requests"]
    methods = ["plain", "plan (scripted)"] + (["plan (model)"] if llm is not None else [])
    res: dict[str, dict[str, list]] = {m: {"recall": [], "lat": [], "lang": [], "planned": []}
                                       for m in methods}
    heuristic_ok = 0
    steps_seen: list[int] = []
    with tempfile.TemporaryDirectory(prefix="skilldesk-plan-") as tmp:
        build_bank(Path(tmp) / "bank", data["skills"])
        desk = SkillDesk.open(Path(tmp) / "bank", "default", embedder=embedder)
        try:
            desk.search("warm up", cap)
            for r in reqs:
                heuristic_ok += is_complex(r["query"]) == (not r.get("simple"))
                for m in methods:
                    t0 = time.perf_counter()
                    if m == "plain":
                        hits, planned = desk.search(r["query"], cap), False
                    else:
                        pr = plan_search(desk, r["query"], llm, cap=cap,
                                         plan_steps=r["plan"] if m == "plan (scripted)" and
                                         r.get("plan") else None)
                        hits, planned = pr.hits, pr.mode == "plan"
                        if m == "plan (model)" and planned:
                            steps_seen.append(len(pr.steps))
                    lat = time.perf_counter() - t0
                    d = res[m]
                    d["recall"].append(_recall(hits, r["expected"]))
                    d["lat"].append(lat)
                    d["lang"].append(r["lang"])
                    d["planned"].append(planned)
        finally:
            desk.close()
    rows = []
    summary = {}
    multi = [not r.get("simple") for r in reqs]
    for m in methods:
        d = res[m]

        def mean(xs):
            return sum(xs) / max(1, len(xs))

        rec_multi = [x for x, ok in zip(d["recall"], multi, strict=True) if ok]
        by_lang = {lg: mean([x for x, ln, ok in zip(d["recall"], d["lang"], multi, strict=True)
                             if ln == lg and ok]) for lg in ("en", "zh")}
        simple = [x for x, ok in zip(d["recall"], multi, strict=True) if not ok]
        rows.append([m, by_lang["en"], by_lang["zh"], mean(rec_multi), mean(simple),
                     sum(d["planned"]), pct(d["lat"], 50) * 1000, pct(d["lat"], 95) * 1000])
        summary[m] = {"recall_multi": mean(rec_multi), "recall_en": by_lang["en"],
                      "recall_zh": by_lang["zh"], "recall_simple": mean(simple),
                      "planned": sum(d["planned"]), "p50_ms": pct(d["lat"], 50) * 1000,
                      "p95_ms": pct(d["lat"], 95) * 1000}
    n_multi = sum(multi)
    title = (f"Plan-aware retrieval: {n_multi} multi-step requests + {len(reqs) - n_multi} "
             f"short ones, {len(data['skills'])} skills, cap {cap} injected skills; "
             f"heuristic right on {heuristic_ok}/{len(reqs)}")
    print(table(["method", "EN recall", "ZH recall", "recall (multi)", "recall (short)",
                 "planned", "p50 ms", "p95 ms"], rows, title), file=out)
    if steps_seen:
        print(f"model plans: {len(steps_seen)} used, mean {sum(steps_seen) / len(steps_seen):.1f}"
              f" steps; {n_multi - len(steps_seen)} multi-step request(s) stayed on plain "
              "retrieval (heuristic said simple, or the plan was unusable)", file=out)
    summary["heuristic_ok"] = [heuristic_ok, len(reqs)]
    return summary
