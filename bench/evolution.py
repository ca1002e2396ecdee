"""``skilldesk bench evolution``: how well the learning loop learns, per model.

Every scenario (``scenarios/evolution.jsonl``, English and Chinese) starts from a fresh bank
with its seed skills; the conversation is replayed turn by turn through the real queue and
pipeline (the app's path: one job after each assistant reply), with hybrid retrieval for the
judge. Runs: the scripted oracle (pipeline logic), the bundled model, and any ``--model``.
A model runs the steps its tier's policy says (tiny: rule-based extraction/judge/merge);
``--policy llm`` forces every step through the model, to measure it.

Table: extraction precision / recall, judge accuracy (right decision among recalled items),
right merges, duplicate and junk skills, scenarios passed, model calls and seconds per turn.
Then preference following: after the bank learned "always start summaries with a one-line
TL;DR", the share of answers to summary requests that do, with skills and without.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.learning_scenarios import SPLITS, Score, load_scenarios, score, seed_bank, skill_blob
from bench.triage import durable_turn

PROBES = [
    "Summarize this article: Remote work grew fast after 2020. Companies saved office costs, "
    "but some teams found collaboration harder and now mix office and home days.",
    "Give me a summary of this text: Coffee was first brewed in Yemen. It spread to Europe in "
    "the 1600s and coffee houses became places for news and debate.",
    "Summarize this article about electric cars: sales doubled in two years, batteries got "
    "cheaper, and charging networks are growing in cities.",
    "Summarize: The city council approved a new bike lane plan that adds 40 km of protected "
    "lanes over three years, paid for by the transport budget.",
    "Can you summarize this paragraph? Sleep helps memory. During deep sleep the brain replays "
    "what it learned, and people who sleep less remember less.",
    "Summarize this news: a heat wave hit southern Europe, with records in Spain and Italy and "
    "warnings to stay indoors at midday.",
]
RULE_SCENARIO = "en-tldr-once"
_TLDR = re.compile(r"^\W*tl\s*;?\s*dr", re.I)


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="skilldesk bench evolution",
                                description=__doc__.split("\n")[0])
    p.add_argument("--model", action="append", default=[],
                   help="also run this model (registry key or .gguf path); repeatable")
    p.add_argument("--no-oracle", action="store_true", help="skip the oracle run")
    p.add_argument("--no-bundled", action="store_true", help="skip the bundled model")
    p.add_argument("--policy", choices=["tier", "llm"], default="tier",
                   help="'tier': the steps the model's tier uses in the app; 'llm': every step "
                        "through the model")
    p.add_argument("--quick", action="store_true", help="a subset of 11 scenarios")
    p.add_argument("--ids", help="comma-separated scenario ids")
    p.add_argument("--limit", type=int, help="at most N scenarios")
    p.add_argument("--mode", choices=["turn", "conversation", "remember"], default="turn",
                   help="replay turn by turn (the app) or ingest whole conversations; "
                        "'remember': turn by turn, the user asking to remember each turn that "
                        "holds an expected rule (\"Remember this\" on the message)")
    p.add_argument("--probes", type=int, default=len(PROBES),
                   help="preference-following probes per arm (0 = skip)")
    p.add_argument("--max-tokens", type=int, default=48, help="tokens per probe answer")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--embedder", default=None, help="embedder name (default: the settings')")
    p.add_argument("--scenarios", help="another scenario file (.jsonl) or set name "
                                       "('people': conversations written like real users'), "
                                       "or several, comma-separated")
    p.add_argument("--kind", help="only scenarios of these kinds (comma-separated: "
                                  "'merge,contradict', 'two-tasks')")
    p.add_argument("--split", choices=SPLITS,
                   help="only the scenarios of this split (sets that have one; the fresh splits "
                        "are people_fresh*.jsonl, each read by nobody until its one run)")
    p.add_argument("--verbose", "-v", action="store_true", help="print every failed scenario")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--replay", metavar="DIR", type=Path,
                   help="development loop: answer every prompt seen before from DIR (model "
                        "calls are deterministic) and ask the model only new ones; for checks "
                        "that run after the model. Seconds per turn then mean nothing")
    p.add_argument("--bank", help=argparse.SUPPRESS)
    p.add_argument("--user", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _open_desk(root: Path, embedder: Any, worker: Any):
    from engine.desk import SkillDesk
    from engine.settings import Settings

    desk = SkillDesk.open(root, user="default", config=Settings(), create=True,
                          embedder=embedder)
    desk.worker = worker
    return desk


def _policy(worker: Any, policy: str) -> dict[str, str] | None:
    if policy == "llm":
        return {"extract": "llm", "judge": "llm", "merge": "llm"}
    return None


def run_scenarios(worker: Any, embedder: Any, scenarios: list[dict], *, policy: str,
                  mode: str, oracle: Any = None, log=print) -> dict[str, Any]:
    """Replay every scenario with one worker; returns totals and per-scenario notes."""
    from engine.learning.pipeline import Pipeline

    total, per, turns, calls, secs = Score(), [], 0, 0, 0.0
    step_calls: dict[str, int] = {}
    step_secs: dict[str, float] = {}
    for sc in scenarios:
        if oracle is not None:
            oracle.load(sc)
        with tempfile.TemporaryDirectory(prefix="skilldesk-bench-") as tmp:
            desk = _open_desk(Path(tmp) / "bank", embedder, worker)
            try:
                before = seed_bank(desk.bank, "default", sc)
                desk.refresh()
                pipe: Pipeline = desk.pipeline()
                if (pol := _policy(worker, policy)) is not None:
                    pipe.policy.update(pol)
                queue = desk.learning
                queue._pipeline = pipe
                actions = []
                msgs = sc["messages"]
                c0, t0 = pipe.llm.stats.calls, time.perf_counter()
                turn_of: list[int] = []  # the message index each action was learned at
                if mode == "conversation":
                    actions += queue.run(msgs, mode="conversation").actions
                for k, m in enumerate(msgs if mode in ("turn", "remember") else []):
                    if m["role"] != "user":
                        continue
                    end = k + 2 if k + 1 < len(msgs) and msgs[k + 1]["role"] == "assistant" \
                        else k + 1
                    how = "remember" if mode == "remember" and durable_turn(sc, m["content"]) \
                        else "turn"
                    actions += queue.run(msgs[:end], mode=how, turn_id=f"{sc['id']}-{k}").actions
                    turn_of += [k] * (len(actions) - len(turn_of))
                secs += time.perf_counter() - t0
                calls += pipe.llm.stats.calls - c0
                for step, ts in pipe.llm.stats.by_step.items():
                    step_calls[step] = step_calls.get(step, 0) + len(ts)
                    step_secs[step] = step_secs.get(step, 0.0) + sum(ts)
                turns += sum(1 for m in msgs if m["role"] == "user")
                after = desk.bank.load("default", scope="user").skills
                s = score(sc, before, after, actions)
                errors = [a.reason for a in actions if a.kind == "error"]
                s.notes += [f"error: {e}" for e in errors]
            finally:
                desk.close()
        total.add(s)
        per.append({"id": sc["id"], "passed": bool(s.passed), "notes": s.notes,
                    "actions": [(a.kind, a.reason, a.candidate.summary() if a.candidate else "")
                                for a in actions], "turns": turn_of})
        log(f"  {sc['id']:<28} {'ok ' if s.passed else 'FAIL'} {'; '.join(s.notes)[:90]}")
    return {"score": total, "scenarios": per, "turns": turns, "calls": calls, "seconds": secs,
            "step_calls": step_calls, "oneoffs": sum(1 for sc in scenarios if not sc["expect"]),
            "step_seconds": step_secs}


def preference_following(worker: Any, embedder: Any, n: int, max_tokens: int,
                         learned_by: Any = None) -> dict[str, Any]:
    """Share of summary answers starting with a TL;DR line, with the learned skill vs without."""
    from bench.oracle import OracleLLM
    from engine.llm.base import GenParams
    from engine.llm.worker import ModelWorker

    sc = next(s for s in load_scenarios() if s["id"] == RULE_SCENARIO)
    out: dict[str, Any] = {"n": n}
    with tempfile.TemporaryDirectory(prefix="skilldesk-follow-") as tmp:
        desk = _open_desk(Path(tmp) / "with", embedder, worker)
        bare = _open_desk(Path(tmp) / "without", embedder, worker)
        try:
            desk.ingest(sc["messages"])
            skills = desk.bank.load("default", scope="user").skills
            out["learned_by"] = "model"
            if not any("tl;dr" in skill_blob(s) for s in skills):
                oracle_worker = ModelWorker(OracleLLM(sc))
                try:
                    desk.worker = oracle_worker
                    desk.learning._pipeline = desk.pipeline()
                    desk.ingest(sc["messages"])
                finally:
                    desk.worker = worker
                    oracle_worker.close()
                out["learned_by"] = "oracle (the model learned no TL;DR skill)"
            params = GenParams(max_tokens=max_tokens, temperature=0.0, seed=0)
            for arm, d in (("with", desk), ("without", bare)):
                follows = injected = 0
                t0 = time.perf_counter()
                for q in PROBES[:n]:
                    r = d.chat([{"role": "user", "content": q}], learn=False, params=params,
                               plan=False)
                    follows += int(bool(_TLDR.search(r.text.strip())))
                    injected += int(any("tl;dr" in i.title.lower() or "summar" in i.title.lower()
                                        for i in r.injected))
                out[arm] = follows / max(1, n)
                out[f"{arm}_injected"] = injected / max(1, n)
                out[f"{arm}_s"] = (time.perf_counter() - t0) / max(1, n)
                out[f"{arm}_example"] = r.text.strip().splitlines()[0][:80] if r.text.strip() \
                    else ""
        finally:
            desk.close()
            bare.close()
    return out


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def _table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    head = ["run", "pass", "zh pass", "P cnt", "R cnt", "P cont", "R cont", "judge acc",
            "right merge", "stale out", "dup", "junk", "junk 1-off", "leaks", "2-task split",
            "examples", "calls/turn", "s/turn"]
    lines = []
    for name, r in rows:
        s: Score = r["score"]
        lines.append([name, f"{s.passed}/{s.scenarios}", f"{s.zh_passed}/{s.zh}",
                      _ratio(s.count_hits, s.writes), _ratio(s.count_hits, s.expected),
                      _ratio(s.good_writes, s.writes), _ratio(s.recalled, s.expected),
                      _ratio(s.right, s.recalled),
                      f"{s.merges_right}/{s.merges_expected}",
                      f"{s.stale_dropped}/{s.stale_expected}", str(s.duplicates), str(s.junk),
                      f"{s.junk_oneoff}/{r['oneoffs']}", str(s.leaks),
                      f"{s.two_task_split}/{s.two_task}",
                      f"{s.examples_kept}/{s.examples_expected}",
                      f"{r['calls'] / max(1, r['turns']):.2f}",
                      f"{r['seconds'] / max(1, r['turns']):.2f}"])
    widths = [max(len(x) for x in col) for col in zip(head, *lines, strict=False)]
    fmt = lambda row: "  ".join(x.ljust(w) for x, w in zip(row, widths, strict=False))  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths]), *map(fmt, lines)])


def main(argv: list[str] | None = None) -> int:
    a = _args(list(argv or []))
    from bench._replay import ReplayBackend
    from bench.oracle import OracleLLM
    from engine.llm import registry
    from engine.llm.llama_backend import LlamaCppBackend
    from engine.llm.worker import ModelWorker
    from engine.retrieval.embedders import make_embedder
    from engine.settings import Settings

    scenarios = load_scenarios(a.scenarios, a.ids.split(",") if a.ids else None, a.quick,
                               a.limit, a.split, a.kind.split(",") if a.kind else None)
    print(f"{len(scenarios)} scenarios ({sum(s['lang'] == 'zh' for s in scenarios)} Chinese), "
          f"replay: {a.mode}, policy: {a.policy}")
    embedder = make_embedder(a.embedder or Settings.load().embedder)
    runs: list[tuple[str, Any, Any]] = []
    if not a.no_oracle:
        oracle = OracleLLM()
        runs.append(("oracle", ModelWorker(oracle), oracle))
    refs = ([] if a.no_bundled else ["bundled"]) + list(a.model)
    rows, follow = [], []
    for name, worker, oracle in runs:
        print(f"\n== {name}")
        rows.append((name, run_scenarios(worker, embedder, scenarios, policy="tier",
                                         mode=a.mode, oracle=oracle)))
        worker.close()
    for ref in refs:
        spec = registry.resolve(ref)
        backend = LlamaCppBackend(spec, n_threads=a.threads)
        if a.replay:
            backend = ReplayBackend(backend, a.replay)
        worker = ModelWorker(backend)
        label = f"{spec.key} ({spec.tier}{', llm steps' if a.policy == 'llm' else ''})"
        print(f"\n== {label}: {spec.title}")
        try:
            rows.append((label, run_scenarios(worker, embedder, scenarios, policy=a.policy,
                                              mode=a.mode)))
            if a.probes:
                follow.append((label, preference_following(worker, embedder, a.probes,
                                                           a.max_tokens)))
        finally:
            worker.close()
            if a.replay:
                print(f"  replay: {backend.hits} answers replayed, {backend.misses} asked")
    print("\nEvolution (extraction P/R by keywords; judge acc = right decisions among learned "
          "items)")
    print(_table(rows))
    for name, r in rows:
        if r["step_calls"]:
            print(f"  {name}: model calls by step {r['step_calls']}; seconds per user turn by "
                  "step " + ", ".join(f"{k} {v / max(1, r['turns']):.2f}"
                                       for k, v in r["step_seconds"].items()))
    if follow:
        print("\nPreference following: answers to summary requests that start with a TL;DR "
              "line")
        for name, f in follow:
            print(f"  {name}: with skills {f['with']:.0%} (skill injected {f['with_injected']:.0%}"
                  f", {f['with_s']:.1f} s/answer) vs without {f['without']:.0%} "
                  f"({f['without_s']:.1f} s/answer); n={f['n']}; learned by {f['learned_by']}")
            print(f"    e.g. with: {f['with_example']!r}  without: {f['without_example']!r}")
    if a.verbose:
        for name, r in rows:
            for s in r["scenarios"]:
                if not s["passed"]:
                    print(f"{name} {s['id']}: {s['notes']} {s['actions']}")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "runs": [{"name": n, **{k: (v.__dict__ if k == "score" else v)
                                    for k, v in r.items()}} for n, r in rows],
            "following": [{"name": n, **f} for n, f in follow]}, ensure_ascii=False, indent=1,
            default=str), encoding="utf-8")
    return 0
