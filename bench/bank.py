"""``skilldesk bench bank``: how fast a bank loads, how much memory it takes, and the crash test.

Load: the real corpus (2,167 SKILL.md files) and the corpus replicated to 10k and 100k skills,
each loaded in a fresh child process (so peak RSS is the loader's own), best of N runs.
Crash: a child writing and merging skills is SIGKILLed at random points; afterwards every
SKILL.md must parse and no committed version may be missing from the history.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import crash
from engine.settings import ROOT

CORPUS = Path(os.environ.get("SKILLDESK_CORPUS", ROOT.parent / "shared" / "corpora" /
                             "autoskill-dev"))

_LOAD_CHILD = """
import json, resource, sys, time
from engine.bank.store import SkillBank
t = time.perf_counter()
r = SkillBank(sys.argv[1]).load(user=None)
dt = time.perf_counter() - t
print(json.dumps({"skills": len(r.skills), "errors": len(r.errors), "seconds": dt,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def replicate(corpus: Path, dest: Path, n: int) -> int:
    """Fill ``dest/Common/copyK/`` with copies of the corpus until it holds ``n`` skills."""
    files = sorted(corpus.rglob("SKILL.md"))
    count, k = 0, 0
    while count < n:
        lib = dest / "Common" / f"copy{k}"
        for f in files:
            if count >= n:
                break
            d = lib / f"{f.parent.parent.name}-{f.parent.name}"
            d.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, d / "SKILL.md")
            count += 1
        k += 1
    return count


def bench_load(sizes: list[int], runs: int, work: Path) -> list[dict]:
    rows = []
    for n in sizes:
        bank = work / f"bank{n}"
        if not bank.exists():
            replicate(CORPUS, bank, n)
        best = None
        for _ in range(runs):
            out = subprocess.run([sys.executable, "-c", _LOAD_CHILD, str(bank)],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout)
            best = r if best is None or r["seconds"] < best["seconds"] else best
        best["n"] = n
        rows.append(best)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="skilldesk bench bank", description=__doc__)
    ap.add_argument("--sizes", default="2167,10000,100000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not CORPUS.is_dir():
        print(f"corpus not found: {CORPUS} (set SKILLDESK_CORPUS)", file=sys.stderr)
        return 1
    sizes = [int(s) for s in args.sizes.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="skilldesk-bench-bank-") as tmp:
        rows = bench_load(sizes, args.runs, Path(tmp))
        crash_rep = crash.run(Path(tmp) / "crash", kills=args.kills) if args.kills else None
    if args.json:
        print(json.dumps({"load": rows, "crash": crash_rep.__dict__ if crash_rep else None}))
        return 0
    print(f"Bank load (fresh process per run, best of {args.runs}; page cache warm)")
    print(f"{'skills':>8} {'loaded':>8} {'errors':>7} {'seconds':>8} {'ms/1k':>7} {'peak RSS MB':>12}")
    for r in rows:
        print(f"{r['n']:>8} {r['skills']:>8} {r['errors']:>7} {r['seconds']:>8.3f} "
              f"{1000 * r['seconds'] / max(1, r['n']) * 1000:>7.1f} {r['rss_mb']:>12.1f}")
    if crash_rep:
        print(f"\nSIGKILL crash test: {crash_rep.kills} kills, {crash_rep.commits} committed "
              f"writes over {crash_rep.skills} skills in {crash_rep.seconds:.1f}s")
        print(f"  unreadable SKILL.md after kills: {len(crash_rep.unreadable)}")
        print(f"  committed versions missing from history: {len(crash_rep.lost_versions)}")
        print("  RESULT:", "PASS" if crash_rep.ok else "FAIL")
    return 0 if crash_rep is None or crash_rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
