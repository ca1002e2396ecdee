"""``skilldesk bench fuzz``: the reader fuzzing of the test suite, run much longer.

Every reader of outside input (see bench/fuzz_targets.py: SKILL.md, bank load, history, zip
import, conversation/trajectory/document imports, settings, consolidation records, event log
and ledgers, the chat database) is fed ``--cases`` generated inputs (hypothesis strategies:
bytes, deep/wide/wrong-typed trees, huge strings, mutated real files), within ``--seconds``
per reader. Each reader runs in its own child process, so a reader that crashes the
interpreter (a C stack overflow, say) is reported as a failure instead of ending the bench.

The table: per reader, cases tried, unexpected exceptions (anything that is not a
``SkillDeskError`` with a one-line reason, or a broken promise such as a lost good skill),
the slowest case, and the first failures with their exception.

    skilldesk bench fuzz                      # 1,000 cases per reader, at most 120 s each
    skilldesk bench fuzz --cases 200 --reader settings
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

_BATCH = 100  # hypothesis runs in batches so the time budget is honoured between them


def run_reader(name: str, cases: int, seconds: float) -> dict:
    """Fuzz one reader in this process; the counts as a dict."""
    from hypothesis import HealthCheck, Phase, given, settings

    from bench.fuzz_targets import readers

    reader = next(r for r in readers() if r.name == name)
    stats = {"reader": name, "cases": 0, "failures": 0, "slowest_s": 0.0, "examples": []}
    t_end = time.monotonic() + seconds

    @settings(max_examples=_BATCH, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(reader.strategy)
    def batch(data):
        if stats["cases"] >= cases or time.monotonic() > t_end:
            return
        stats["cases"] += 1
        t = time.perf_counter()
        try:
            reader.target(data)
        except Exception as exc:  # counted, not raised: the bench keeps going
            stats["failures"] += 1
            if len(stats["examples"]) < 3:
                where = traceback.extract_tb(exc.__traceback__)[-1]
                stats["examples"].append(
                    f"{type(exc).__name__}: {str(exc)[:160]} "
                    f"({os.path.basename(where.filename)}:{where.lineno}; input {repr(data)[:80]})")
        stats["slowest_s"] = max(stats["slowest_s"], time.perf_counter() - t)

    while stats["cases"] < cases and time.monotonic() < t_end:
        before = stats["cases"]
        batch()
        if stats["cases"] == before:
            break
    return stats


def _child(name: str, cases: int, seconds: float, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "bench.fuzz", "--child", name, "--cases", str(cases),
           "--seconds", str(seconds)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"reader": name, "cases": 0, "failures": 1, "slowest_s": timeout,
                "examples": [f"hung: no result after {timeout:.0f} s"]}
    line = next((ln for ln in reversed(p.stdout.splitlines()) if ln.startswith("{")), "")
    if p.returncode != 0 or not line:
        why = f"signal {-p.returncode}" if p.returncode < 0 else f"exit {p.returncode}"
        tail = (p.stderr.strip().splitlines() or [""])[-1][:160]
        return {"reader": name, "cases": 0, "failures": 1, "slowest_s": 0.0,
                "examples": [f"the process died ({why}) {tail}"]}
    return json.loads(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="skilldesk bench fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1000, help="cases per reader (default 1000)")
    ap.add_argument("--seconds", type=float, default=120.0,
                    help="time budget per reader (default 120)")
    ap.add_argument("--reader", default="", help="only readers whose name contains this")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--bank", help=argparse.SUPPRESS)  # forwarded by `skilldesk bench`; unused
    ap.add_argument("--user", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(run_reader(args.child, args.cases, args.seconds)))
        return 0

    from bench.fuzz_inputs import CORPORA
    from bench.fuzz_targets import readers

    names = [r.name for r in readers() if args.reader.lower() in r.name.lower()]
    print(f"fuzzing {len(names)} readers: up to {args.cases} cases / {args.seconds:.0f} s each; "
          f"corpus {'found' if CORPORA.is_dir() else 'missing (built-in samples only)'}")
    rows, t0 = [], time.perf_counter()
    print(f"{'reader':32s} {'cases':>7s} {'failures':>9s} {'slowest':>9s}")
    for name in names:
        r = _child(name, args.cases, args.seconds, timeout=args.seconds * 3 + 120)
        rows.append(r)
        print(f"{name:32s} {r['cases']:7d} {r['failures']:9d} {r['slowest_s']:8.2f}s", flush=True)
        for ex in r["examples"]:
            print(f"    {ex}")
    total = sum(r["cases"] for r in rows)
    failures = sum(r["failures"] for r in rows)
    print(f"{'total':32s} {total:7d} {failures:9d}   ({time.perf_counter() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
