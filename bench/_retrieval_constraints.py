"""The constraints set (bench/data/constraints.jsonl): a lasting fact about the user, said once
("I'm vegan", "我对海鲜过敏"), must reach the later requests it governs, which never name it
("What should I cook for my birthday dinner?"), and stay out of the requests it does not.

The skills are the ones SkillDesk itself writes: every statement goes through the real learning
pipeline in its own conversation (PrefEval's protocol, :func:`bench.prefeval.learn`) into a bank
folder that is kept (``--learned-bank DIR``: learned once, about 20 s a statement on the
recommended model, reused by later runs). Then every request is served as the chat serves it
(:func:`bench._retrieval_sets.serve`, with ``--filter-model`` also through the self-filter):

- related requests: the statement's own skill served (recall), and its rank without any cut;
- unrelated requests (the same user, a neighbouring area the fact does not change): the own
  skill injected (it should not be), any skill injected;
- the off-topic set (offtopic.jsonl) on this bank: the injection rate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import _retrieval_sets as D
from bench._retrieval_data import table

# beside the kept bank: what learning did with each statement (bench.prefeval.learn's record,
# keyed by statement id: "own" = the skills its conversation wrote, "why", "actions")
OWN_FILE = "constraints-learning.json"


def rows() -> list[dict]:
    return D.load("constraints.jsonl")


def requests(cons: list[dict]) -> list[dict]:
    """One served row per related / unrelated request (``own``: the statement's id)."""
    out = []
    for c in cons:
        for kind in ("related", "unrelated"):
            for i, q in enumerate(c[kind]):
                out.append({"id": f"{c['id']}/{kind}{i}", "query": q, "split": c["split"],
                            "lang": c["lang"], "own": c["id"], "kind": kind})
    return out


def learn_bank(dest: Path, embedder: Any, make_worker, log=print) -> dict[str, list[str]]:
    """Learn every statement into ``dest`` (a new folder) with the real pipeline on the
    worker ``make_worker()`` returns; kept there with :data:`OWN_FILE`. A folder an earlier
    run left is reused as it is (no model is loaded)."""
    from bench import prefeval
    from engine.desk import SkillDesk
    from engine.settings import Settings

    if (dest / OWN_FILE).exists():
        return json.loads((dest / OWN_FILE).read_text("utf-8"))["own"]
    prefeval.refuse_used(dest, OWN_FILE, "--learned-bank")
    cons = rows()
    worker = make_worker()
    try:
        desk = SkillDesk.open(dest, user=D.USER, config=Settings(), create=True,
                              embedder=embedder)
        desk.worker = worker
        try:
            got = prefeval.learn(desk, [{"preference": c["statement"], "_index": i}
                                        for i, c in enumerate(cons)], log=log)
        finally:
            desk.close()
    finally:
        worker.close()
    ids = [c["id"] for c in cons]
    got = {**got, "own": {ids[i]: v for i, v in got["own"].items()},
           "names": {ids[i]: v for i, v in got["names"].items()},
           "why": [{**w, "item": ids[w["item"]]} for w in got["why"]]}
    prefeval.save_learning(dest / OWN_FILE, got)
    return {k: sorted(v) for k, v in got["own"].items()}


def _skill_keys(idx, root: Path) -> dict[str, str]:
    """skill id -> index key, for the learned bank's skills."""
    from engine.bank.store import SkillBank
    from engine.retrieval.index import skill_key

    return {s.id: skill_key(s) for s in SkillBank(root).load(D.USER, "all").skills
            if skill_key(s) in idx.skills}


def measure(root: Path, own: dict[str, list[str]], embedder, splits, client=None,
            params=None) -> dict[str, Any]:
    idx = D.open_index(root, embedder, params)
    keys = _skill_keys(idx, root)
    own_keys = {cid: {keys[i] for i in ids if i in keys} for cid, ids in own.items()}
    reqs = requests(rows())
    served = D.serve(idx, reqs, params, client=client, splits=splits)
    off = D.serve(idx, D.load("offtopic.jsonl"), params, client=client, splits=splits)
    try:
        actions = json.loads((root / OWN_FILE).read_text("utf-8"))["actions"]
    except (OSError, ValueError, KeyError):
        actions = None
    return {"skills": len(idx), "learned": sum(bool(v) for v in own_keys.values()),
            "n": len(own_keys), "own": own_keys, "served": served, "off": off,
            "actions": actions}


def _rows(m: dict[str, Any], splits, how: str) -> list[list]:
    out = []
    for split in splits:
        for lang in D.LANGS:
            sel = [s for s in m["served"] if s.row["split"] == split and s.row["lang"] == lang]
            rel = [s for s in sel if s.row["kind"] == "related" and m["own"][s.row["own"]]]
            unrel = [s for s in sel if s.row["kind"] == "unrelated"]
            off = [s for s in m["off"] if s.row["split"] == split and s.row["lang"] == lang]
            got = lambda s: D.pick(s, how)  # noqa: E731
            mine = lambda s: m["own"][s.row["own"]]  # noqa: E731
            first = [next((s.ranking.index(k) + 1 for k in s.ranking if k in mine(s)), None)
                     for s in rel]
            n = max(1, len(rel))
            out.append([f"{split} {lang.upper()}", len(rel),  # its own halves: none "seen"
                        sum(bool(set(got(s)) & mine(s)) for s in rel) / n,
                        sum(r == 1 for r in first) / n,
                        sum(len(set(got(s)) - mine(s)) for s in rel) / n,
                        len(unrel),  # own injected: where the statement wrote a skill
                        sum(bool(set(got(s)) & mine(s)) for s in unrel)
                        / max(1, sum(bool(mine(s)) for s in unrel)),
                        sum(bool(got(s)) for s in unrel) / max(1, len(unrel)),
                        len(off), sum(bool(got(s)) for s in off) / max(1, len(off))])
    return out


HEADER = ["split / language", "related", "own served", "own R@1 no cut", "others / related",
          "unrelated", "own injected", "any injected", "off-topic", "off-topic injected"]


def report(m: dict[str, Any], splits, filter_model: str = "", out=None) -> None:
    import sys

    out = out or sys.stdout
    intro = (f"\nConstraints (bench/data/constraints.jsonl): {m['learned']} of {m['n']} "
             f"statements learned into {m['skills']} skills by the real pipeline"
             + (f" ({m['actions']})" if m.get("actions") else "")
             + "; related requests counted where the statement wrote a skill")
    print(table(HEADER, _rows(m, splits, "hits"), intro + " (served without the self-filter)"),
          file=out)
    if filter_model:
        print(table(HEADER, _rows(m, splits, "filtered"),
                    f"\nConstraints, served WITH the self-filter ({filter_model})"), file=out)
