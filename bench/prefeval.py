"""``skilldesk bench prefeval --data FILE``: PrefEval's learn → ask protocol on SkillDesk.

PrefEval (Zhao et al., ICLR 2025; CC BY-NC 4.0, so the data is never copied into this
repository: the file is given on the command line) states a preference once and later asks a
multiple-choice question whose generic answer would violate it. The protocol
(``shared/benchmarks/prefeval-dev/README.md``):

1. **learn**: one bank for all items (a user with many preferences); each preference is said
   once in its own conversation ``[user: <preference>, assistant: "Got it, ..."]`` and goes
   through the normal learning pipeline (``desk.ingest(..., wait=True)``);
2. **ask**: each question in a NEW conversation, options shuffled (seeded), ``desk.chat(...,
   learn=False)`` with greedy decoding;
3. compare on the same questions and model: **none** (an empty bank), **reminder** (the
   preference pasted before the question: the upper bound) and **learned** (the bank of step
   1), plus, for ``learned``, how often the skill made from the item's own preference was
   injected and how many other skills were injected per question.

Items are drawn with a seeded shuffle; ``--offset``/``--limit`` pick a slice of it, so one
slice can be used while tuning and another, untouched one reported.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time
from pathlib import Path
from typing import Any

ACK = "Got it, thanks for telling me. I'll keep that in mind."
ASK = "Which of these fits me best? Answer with the letter only."
LETTERS = "ABCD"
CONDITIONS = ("none", "reminder", "learned")
_LETTER = re.compile(r"\b([ABCD])\b|^\W*([ABCD])(?=[).:\s]|$)")


def load_items(path: str | Path, *, seed: int = 16, offset: int = 0,
               limit: int | None = None) -> list[dict[str, Any]]:
    """The items of a PrefEval JSON-lines file, in a seeded order, sliced; each gets its index
    in the file (``_index``) and its shuffled options (``_order``: file positions by letter)."""
    rows = []
    for i, line in enumerate(Path(path).read_text("utf-8").splitlines()):
        if not line.strip():
            continue
        d = json.loads(line)
        if len(d.get("options") or []) != 4 or not d.get("preference") or not d.get("question"):
            continue
        rows.append({**d, "_index": i})
    rng = random.Random(seed)
    rng.shuffle(rows)
    rows = rows[offset: offset + limit if limit else None]
    for d in rows:
        order = list(range(4))
        random.Random(f"{seed}-{d['_index']}").shuffle(order)
        d["_order"] = order
    return rows


def question_text(item: dict[str, Any]) -> str:
    opts = "\n".join(f"{LETTERS[k]}) {item['options'][j]}" for k, j in enumerate(item["_order"]))
    return f"{item['question']}\n\n{ASK}\n{opts}"


def answer_letter(text: str) -> str | None:
    m = _LETTER.search((text or "").strip())
    return (m[1] or m[2]) if m else None


def is_right(item: dict[str, Any], letter: str | None) -> bool:
    """The preference-respecting option is the file's option 0 (``answer_index``)."""
    if letter is None:
        return False
    return item["_order"][LETTERS.index(letter)] == int(item.get("answer_index", 0))


def _desk(root: Path, embedder: Any, worker: Any):
    from engine.desk import SkillDesk
    from engine.settings import Settings

    desk = SkillDesk.open(root, user="default", config=Settings(), create=True,
                          embedder=embedder)
    desk.worker = worker
    return desk


def learn(desk: Any, items: list[dict[str, Any]], log=print) -> dict[str, Any]:
    """Step 1: every preference in its own conversation; which skills each one wrote."""
    own: dict[int, set[str]] = {}
    names: dict[int, set[str]] = {}  # the same skills by name (what the self-filter reports)
    kinds: dict[str, int] = {}
    why: list[dict[str, Any]] = []  # per preference: what learning did and why
    calls, t0 = 0, time.perf_counter()
    for n, d in enumerate(items, 1):
        report = desk.ingest([{"role": "user", "content": d["preference"]},
                              {"role": "assistant", "content": ACK}], wait=True)
        calls += report.llm_calls
        ids, named = set(), set()
        for a in report.actions:
            kinds[a.kind] = kinds.get(a.kind, 0) + 1
            if a.kind in ("add", "merge") and a.skill is not None:
                ids.add(a.skill.id)
                named.add(a.skill.name)
        own[d["_index"]] = ids
        names[d["_index"]] = named
        why.append({"item": d["_index"], "preference": d["preference"],
                    "actions": [[a.kind, a.step, a.reason, a.skill.title if a.skill else "",
                                 a.candidate.constraints if a.candidate else []]
                                for a in report.actions]})
        if n % 10 == 0 or n == len(items):
            log(f"  learned {n}/{len(items)}: {kinds}")
    secs = time.perf_counter() - t0
    return {"own": own, "names": names, "actions": kinds, "why": why, "seconds": secs, "calls": calls,
            "skills": len(desk.bank.load("default", scope="user").skills)}


def ask(desk: Any, items: list[dict[str, Any]], condition: str, params: Any,
        own: dict[int, set[str]] | None = None, names: dict[int, set[str]] | None = None,
        log=print) -> dict[str, Any]:
    """Step 2: each question in a new conversation, ``learn=False``; accuracy and injections
    (and how often the item's own skill was retrieved but dropped by the self-filter)."""
    right = own_hits = own_filtered = others = unparsed = 0
    answers = []
    t0 = time.perf_counter()
    for d in items:
        text = question_text(d)
        if condition == "reminder":
            text = f"{d['preference']}\n\n{text}"
        r = desk.chat([{"role": "user", "content": text}], learn=False, params=params)
        letter = answer_letter(r.text)
        unparsed += letter is None
        ok = is_right(d, letter)
        right += ok
        ids = {i.id for i in r.injected}
        mine = (own or {}).get(d["_index"], set())
        own_hits += bool(ids & mine)
        own_filtered += not ids & mine and bool(set(r.filtered_out) & (names or {}).get(
            d["_index"], set()))
        others += len(ids - mine)
        answers.append({"index": d["_index"], "letter": letter, "right": ok,
                        "injected": sorted(i.title for i in r.injected),
                        "filtered_out": sorted(r.filtered_out)})
        if len(answers) % 10 == 0:
            log(f"  {condition}: {len(answers)}/{len(items)} asked, {right} right, "
                f"{(time.perf_counter() - t0) / len(answers):.1f} s/question")
    n = max(1, len(items))
    out = {"accuracy": right / n, "own_injected": own_hits / n,
           "own_filtered": own_filtered / n, "others_per_q": others / n,
           "unparsed": unparsed, "s_per_q": (time.perf_counter() - t0) / n, "answers": answers}
    log(f"  {condition}: accuracy {out['accuracy']:.2f} ({right}/{len(items)})")
    return out


OWN_FILE = "prefeval-own.json"  # in a kept bank: which skills each item's preference wrote


def refuse_used(folder: Path, marker: str, flag: str) -> None:
    """A bank folder to learn into must be new (or hold ``marker``, what an earlier run kept):
    never learn into, or next to, files of someone else's."""
    if not (folder / marker).exists() and folder.exists() and any(folder.iterdir()):
        raise ValueError(f"{folder} holds files but no {marker}: {flag} takes a new folder, "
                         "or one an earlier run left")


def save_learning(path: Path, record: dict[str, Any]) -> None:
    """What :func:`learn` did, kept beside its bank (sets as sorted lists, keys as text)."""
    from engine.fsutil import atomic_write

    plain = {**record, **{key: {str(k): sorted(v) for k, v in record[key].items()}
                          for key in ("own", "names") if key in record}}
    atomic_write(path, json.dumps(plain, ensure_ascii=False, indent=1))


def _kept_learning(root: Path, items: list[dict[str, Any]]) -> dict[str, Any]:
    """The learning record of a bank kept by an earlier run (``--keep``), for these items."""
    path = root / OWN_FILE
    try:
        saved = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{root} is not a bank kept by 'bench prefeval --keep' ({exc})") from exc
    missing = [d["_index"] for d in items if str(d["_index"]) not in saved["own"]]
    if missing:
        raise ValueError(f"{root} did not learn item(s) {missing[:5]}: run with the same "
                         "--seed/--offset/--limit as the run that kept it")
    return {**saved, "own": {int(k): set(v) for k, v in saved["own"].items()},
            "names": {int(k): set(v) for k, v in saved["names"].items()}}


def run(worker: Any, embedder: Any, items: list[dict[str, Any]], *,
        conditions: tuple[str, ...] = CONDITIONS, max_tokens: int = 4,
        keep: Path | None = None, log=print) -> dict[str, Any]:
    """The whole protocol with one model worker; a dict per condition (+ ``learn``).
    ``keep``: the learned bank lives there (a new folder: learned into and kept, with
    :data:`OWN_FILE`; a folder an earlier ``keep`` run left: asked again without learning)."""
    from engine.llm.base import GenParams

    params = GenParams(max_tokens=max_tokens, temperature=0.0, seed=0)
    out: dict[str, Any] = {"n": len(items)}
    with tempfile.TemporaryDirectory(prefix="skilldesk-prefeval-") as tmp:
        empty = _desk(Path(tmp) / "empty", embedder, worker)
        try:
            for cond in ("none", "reminder"):
                if cond in conditions:
                    out[cond] = ask(empty, items, cond, params, log=log)
        finally:
            empty.close()
        if "learned" in conditions:
            root = keep or Path(tmp) / "learned"
            reuse = keep is not None and (keep / OWN_FILE).exists()
            if keep is not None:
                refuse_used(keep, OWN_FILE, "--keep")
            prior = _kept_learning(keep, items) if reuse else None
            desk = _desk(root, embedder, worker)
            try:
                out["learn"] = prior or learn(desk, items, log=log)
                if keep is not None and not reuse:
                    save_learning(keep / OWN_FILE, out["learn"])
                out["learned"] = ask(desk, items, "learned", params, own=out["learn"]["own"],
                                     names=out["learn"]["names"], log=log)
            finally:
                desk.close()
            for key in ("own", "names"):
                out["learn"][key] = {str(k): sorted(v) for k, v in out["learn"][key].items()}
    return out


def table(label: str, r: dict[str, Any]) -> str:
    rows = [["condition", "accuracy", "own skill injected", "own skill filtered out",
             "other skills / q", "unparsed", "s/question"]]
    for cond in CONDITIONS:
        if cond in r:
            c = r[cond]
            rows.append([cond, f"{c['accuracy']:.2f}",
                         f"{c['own_injected']:.2f}" if cond == "learned" else "-",
                         f"{c.get('own_filtered', 0):.2f}" if cond == "learned" else "-",
                         f"{c['others_per_q']:.2f}" if cond == "learned" else "-",
                         str(c["unparsed"]), f"{c['s_per_q']:.1f}"])
    widths = [max(len(x) for x in col) for col in zip(*rows, strict=False)]
    fmt = lambda row: "  ".join(x.ljust(w) for x, w in zip(row, widths, strict=False))  # noqa: E731
    lines = [f"PrefEval ({label}), n={r['n']}", fmt(rows[0]),
             fmt(["-" * w for w in widths]), *map(fmt, rows[1:])]
    if "learn" in r:
        lr = r["learn"]
        lines.append(f"learning: {lr['actions']}; {lr['skills']} skills in the bank; "
                     f"{lr['seconds'] / max(1, r['n']):.1f} s and "
                     f"{lr['calls'] / max(1, r['n']):.1f} model calls per preference")
    return "\n".join(lines)


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="skilldesk bench prefeval",
                                description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True,
                   help="PrefEval explicit MCQ file (.jsonl; kept outside the repository)")
    p.add_argument("--model", default="recommended", help="registry key or .gguf path")
    p.add_argument("--seed", type=int, default=16, help="seed of the item order and options")
    p.add_argument("--offset", type=int, default=0, help="skip this many items of the order")
    p.add_argument("--limit", type=int, default=20, help="at most N items")
    p.add_argument("--conditions", default=",".join(CONDITIONS),
                   help="comma-separated subset of none,reminder,learned")
    p.add_argument("--max-tokens", type=int, default=4, help="tokens per answer")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--embedder", default=None, help="embedder name (default: the settings')")
    p.add_argument("--json", metavar="FILE", help="also write the results (answers, not items)")
    p.add_argument("--keep", metavar="DIR",
                   help="learn into DIR (a new folder) and keep it; on a later run with the "
                        "same items, ask the 'learned' questions on it without learning again")
    p.add_argument("--bank", help=argparse.SUPPRESS)
    p.add_argument("--user", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = _args(list(argv or []))
    from engine.errors import SkillDeskError
    from engine.llm import registry
    from engine.llm.llama_backend import LlamaCppBackend
    from engine.llm.worker import ModelWorker
    from engine.retrieval.embedders import make_embedder
    from engine.settings import Settings

    conditions = tuple(c for c in a.conditions.split(",") if c)
    bad = [c for c in conditions if c not in CONDITIONS]
    if bad:
        print(f"unknown condition(s): {', '.join(bad)}; known: {', '.join(CONDITIONS)}")
        return 2
    try:
        items = load_items(a.data, seed=a.seed, offset=a.offset, limit=a.limit)
    except (OSError, ValueError) as exc:
        print(f"cannot read {a.data}: {exc}")
        return 2
    if not items:
        print(f"no usable items in {a.data} at offset {a.offset}")
        return 2
    try:
        spec = registry.resolve(a.model)
    except SkillDeskError as exc:
        print(exc)
        return 2
    print(f"{len(items)} items (seed {a.seed}, offset {a.offset}); model {spec.key} "
          f"({spec.tier}); conditions {', '.join(conditions)}")
    embedder = make_embedder(a.embedder or Settings.load().embedder)
    worker = ModelWorker(LlamaCppBackend(spec, n_threads=a.threads))
    try:
        r = run(worker, embedder, items, conditions=conditions, max_tokens=a.max_tokens,
                keep=Path(a.keep).resolve() if a.keep else None)
    except ValueError as exc:
        print(exc)
        return 2
    finally:
        worker.close()
    label = f"{spec.key}, seed {a.seed}, items {a.offset}..{a.offset + len(items) - 1}"
    print()
    print(table(label, r))
    if a.json:
        Path(a.json).write_text(json.dumps({"label": label, **r}, ensure_ascii=False, indent=1),
                                encoding="utf-8")
    return 0
