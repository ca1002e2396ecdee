"""Is a skill about the user or about a task? The model's answer (``about.md``,
:mod:`engine.learning.about`) against labelled skills; nothing is written.

- ``bench/data/about.jsonl``: 100 skills, English and Chinese, labelled ``user`` (a diet, a fear,
  a dislike, a persona for every reply, written in the learning pipeline's style) or ``task``
  (written, and real corpus skills), each marked ``tune`` or ``check`` (the half not read while
  the prompt was written). Written before the prompt was run on it.
- ``--user-banks DIR ...``: every SKILL.md under each folder counts as about the user (kept
  PrefEval banks: each skill learned from one stated preference; the data stays outside the
  repository).
- ``--corpus DIR``: the 120 corpus skills of the off-topic set's user bank
  (``bench/data/offtopic_user_bank.txt``) count as tasks.

The table gives per group the share read as about the user at each bar, and the AUC of user
against task skills per language.

    skilldesk bench about --model recommended --corpus ../shared/corpora/autoskill-dev
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench._retrieval_data import DEFAULT_CORPUS
from bench._retrieval_sets import DATA, user_bank_paths
from bench.triage import auc

BARS = (0.3, 0.5, 0.7)


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="skilldesk bench about", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="recommended", help="registry key or .gguf path")
    p.add_argument("--user-banks", nargs="*", default=[], metavar="DIR",
                   help="folders whose SKILL.md files are all about the user")
    p.add_argument("--corpus", metavar="DIR", default=str(DEFAULT_CORPUS),
                   help="the autoskill-dev corpus: its 120 user-bank skills count as tasks")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", metavar="FILE", help="also write every scored skill as JSON")
    p.add_argument("--bank", help=argparse.SUPPRESS)
    p.add_argument("--user", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _from_file(path: Path, group: str, about: str) -> dict[str, Any]:
    from engine.bank.skillfile import read
    from engine.learning.candidate import Candidate
    c = Candidate.from_skill(read(path))
    lang = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in c.name + c.description) else "en"
    return {"id": str(path), "group": group, "lang": lang, "about": about, "split": "",
            "title": c.name, "description": c.description, "rules": c.constraints}


def rows(a: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    with open(DATA / "about.jsonl", encoding="utf-8") as fh:
        for line in (ln for ln in fh if ln.strip()):
            r = json.loads(line)
            src = "corpus" if r["source"].startswith("corpus:") else "written"
            out.append({**r, "group": f"{r['split']} {r['about']} {src}"})
    for d in a.user_banks:
        out += [_from_file(p, f"bank {Path(d).name}", "user")
                for p in sorted(Path(d).rglob("SKILL.md"))]
    if a.corpus:
        out += [_from_file(Path(a.corpus) / rel / "SKILL.md", "corpus user-bank 120", "task")
                for rel in user_bank_paths()]
    return out


def table(scored: list[dict[str, Any]]) -> str:
    lines = ["group                       lang   n   " + "   ".join(
                 f"user@{b:<4}" for b in BARS),
             "--------------------------  ----  ---  " + "   ".join("---------" for _ in BARS)]
    for g in dict.fromkeys(r["group"] for r in scored):
        for lang in ("en", "zh"):
            rs = [r["p"] for r in scored if r["group"] == g and r["lang"] == lang
                  and r["p"] is not None]
            if rs:
                lines.append(f"{g:<26}  {lang:<4}  {len(rs):>3}  " + "   ".join(
                    f"{sum(p >= b for p in rs) / len(rs):>9.2f}" for b in BARS))
    lines.append("")
    lines.append("AUC, user vs task skills (0.5 is chance)")
    for split in ("tune", "check", ""):
        for lang in ("en", "zh"):
            sel = [r for r in scored if r["split"] == split and r["lang"] == lang
                   and r["p"] is not None]
            a = auc([r["p"] for r in sel if r["about"] == "user"],
                    [r["p"] for r in sel if r["about"] == "task"])
            if a is not None:
                lines.append(f"  {split or 'banks + corpus'} {lang}: {a:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = _args(list(argv or []))
    from engine.learning.about import ABOUT_USER_MIN_P, p_about_user
    from engine.llm import registry
    from engine.llm.client import LLMClient
    from engine.llm.llama_backend import LlamaCppBackend
    from engine.llm.worker import BACKGROUND, ModelWorker

    scored = rows(a)
    spec = registry.resolve(a.model)
    worker = ModelWorker(LlamaCppBackend(spec, n_threads=a.threads))
    t0 = time.perf_counter()
    try:
        llm = LLMClient(worker, priority=BACKGROUND)
        for r in scored:
            try:
                r["p"] = p_about_user(llm, r["title"], r["description"], r["rules"])
            except (ValueError, KeyError):
                r["p"] = None
    finally:
        worker.close()
    seconds = time.perf_counter() - t0
    print(f"{spec.title}: {len(scored)} skills; 'user@bar' = share read as about the user "
          f"(the pipeline's bar: {ABOUT_USER_MIN_P})")
    print(table(scored))
    wrong = [r for r in scored if r["p"] is not None
             and (r["p"] >= ABOUT_USER_MIN_P) != (r["about"] == "user")]
    for r in wrong:
        print(f"  wrong {r['about']:<4} p={r['p']:.2f} {r['group']}: {r['title'][:50]!r}")
    print(f"seconds per skill: {seconds / max(1, len(scored)):.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(scored, indent=1, ensure_ascii=False), "utf-8")
    return 0
