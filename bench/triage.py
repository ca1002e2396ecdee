"""Triage alone: how well the model's durable-vs-one-off score separates the user turns of a
scenario set, and which bar (``DURABLE_MIN_P``) it supports.

Every user turn is replayed as the app does after a chat turn (``triage.windows``, turn mode):
turns cue words find are counted apart (the app asks triage alone of them: ``--lasting``
prints what it says there); every other turn gets the model's
probability of a durable kind (:meth:`Pipeline.triage_score`, one forward pass). A turn is
*durable* when it holds the evidence of one of the scenario's expected items; every other turn
(and every turn of a one-off scenario) is not. The table gives, per bar: the durable turns let
through (recall), the other turns let through (false yes), and the one-off scenarios with at
least one false yes (each would cost an extraction, and possibly a junk skill). Nothing is
written. ``--extract`` adds extraction's first decision on the turns triage lets through;
``--rules`` runs that extraction and scores each extracted rule with the keep check
(``keep.md``) beside word-overlap grounding, labelled from the scenario (:func:`rule_label`).
``--again [FILE]`` scores labelled pairs instead (``bench/data/asked_again.jsonl``): the
asked-again check (:meth:`Pipeline.asked_again`) per split and language. ``--story`` scores
the sentences of the later turns that hold an expected rule (:func:`story_sentences`) with the
story check (``part.md``, :meth:`Pipeline.without_story`) and tabulates ``STORY_MIN_P`` bars.

    skilldesk bench triage --model recommended --scenarios people --split tune
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.learning_scenarios import SPLITS, load_scenarios
from engine.text import language, normalize

BARS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)
AGAIN_DATA = Path(__file__).parent / "data" / "asked_again.jsonl"


def _splits(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in names if v not in SPLITS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown split {', '.join(unknown) or value!r}; "
                                         f"choose from {', '.join(SPLITS)}")
    return names


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="skilldesk bench triage", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="recommended", help="registry key or .gguf path")
    p.add_argument("--scenarios", default="people", help="scenario file or set name")
    p.add_argument("--split", type=_splits, metavar="SPLIT[,SPLIT…]",
                   help="only these splits (comma-separated; pooled in the tables): "
                        + ", ".join(SPLITS))
    p.add_argument("--limit", type=int, help="at most N scenarios")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", metavar="FILE", help="also write every scored turn as JSON")
    p.add_argument("--no-snapshot", action="store_true",
                   help="do not keep the triage prompt's KV cells between calls (cost baseline)")
    p.add_argument("--between", action="store_true",
                   help="evaluate the extraction prompt between two triage calls, as the app "
                        "does (its cost is not counted), so the KV cache holds another prompt")
    p.add_argument("--extract", action="store_true",
                   help="also score extraction's first decision (P(a skill), one forward pass) "
                        "on every scored turn (also those triage stops), and tabulate "
                        "EXTRACT_MIN_P bars on the turns triage lets through")
    p.add_argument("--rules", action="store_true",
                   help="with --extract: run extraction where it decides to write, and score "
                        "every extracted rule with the keep check (P(keep), one forward pass) "
                        "beside word-overlap grounding; tabulate KEEP_MIN_P bars")
    p.add_argument("--lasting", action="store_true",
                   help="also score the lasting check (P(about every future piece of that "
                        "work), one forward pass) on every scored later turn, also those triage "
                        "stops, and compare the gates that can be built from the two reads")
    p.add_argument("--openings", action="store_true",
                   help="score only each conversation's opening message (with --extract "
                        "--lasting: the opening gate's three reads, its AUCs, and a logistic "
                        "fit of OPENING_FIT on them)")
    p.add_argument("--cued", action="store_true",
                   help="score only the turns cue words find (with --lasting: the cued table "
                        "at the cost of those turns alone)")
    p.add_argument("--again", nargs="?", const=str(AGAIN_DATA), metavar="FILE",
                   help="instead of scenarios: how well the asked-again check (again.md) "
                        "tells a request asked again for a new answer from another "
                        f"follow-up, on labelled pairs (default {AGAIN_DATA.name})")
    p.add_argument("--story", action="store_true",
                   help="instead of turns: how well the story check (part.md) tells the "
                        "sentences of a later turn that say its rule from those that tell "
                        "the story (labelled from each scenario's evidence and forbidden "
                        "words)")
    p.add_argument("--clauses", action="store_true",
                   help="with --story: the comma clauses of the sentences that hold a rule "
                        "(a story told inside the rule's own sentence), not whole sentences")
    p.add_argument("--replay", metavar="DIR", type=Path,
                   help="answer prompts seen before from DIR (as bench evolution --replay); "
                        "the seconds then mean nothing")
    p.add_argument("--bank", help=argparse.SUPPRESS)
    p.add_argument("--user", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def durable_turn(sc: dict[str, Any], text: str) -> bool:
    """The turn holds the evidence of one of the scenario's expected items."""
    t = normalize(text)
    return any(e.get("evidence") and normalize(e["evidence"]) in t for e in sc["expect"])


def score_turns(pipe: Any, sc: dict[str, Any], between: Any = None,
                extract: bool = False, rules: bool = False,
                lasting: bool = False, openings: bool = False,
                cued: bool = False) -> list[dict[str, Any]]:
    """One row per user turn: found by cue words (triage's P as ``pc``: the app asks it
    alone there), or the model's probability. ``between()`` runs before each triage call
    (another prompt in the KV cache, as in the app). With ``extract``, every scored turn also
    gets ``pe``: extraction's P(a skill) — also on the turns triage stops, to see what
    extraction's score alone would decide (:func:`extract_table`); with ``lasting`` every
    scored later turn (and every later turn cue words found) gets ``pl``: the lasting check's
    P(about every future piece of that work), the turn read alone, as
    :meth:`Pipeline._lasting` reads it, and every scored turn ``ps``: triage's P of its
    likeliest sentence read alone (:meth:`Pipeline.likeliest_sentence`), the opening gate's
    second read (:func:`opening_p`), and every opening ``reads``: each sentence's triage P
    alone and P(it is the writer's own, :meth:`Pipeline.mine_score`), the gate's third
    (:meth:`Pipeline.opening_reads`); its ``ps`` and ``pw`` are the sentence the gate picks.
    ``openings``: only each conversation's opening message is scored; ``cued``: only the
    turns cue words find (the cued table's rows)."""
    from engine.learning import triage
    from engine.learning.pipeline import earlier_requests, opening_pick

    msgs, rows = sc["messages"], []
    first = next((k for k, m in enumerate(msgs) if m["role"] == "user"), -1)
    for k, m in enumerate(msgs):
        if m["role"] != "user" or (openings and k != first) or (
                cued and not triage.windows(msgs[:k + 1], "turn", lambda seg: None)):
            continue
        seen: list[tuple[float | None, float]] = []

        def decide(seg: list[Any], seen: list[tuple[float | None, float]] = seen) -> None:
            if between is not None:
                between(seg)
            t0 = time.perf_counter()
            p, kind = pipe.triage_score(seg)
            seen.append((p, time.perf_counter() - t0))
            return kind if extract and p is not None else None

        passed = triage.windows(msgs[:k + 1], "turn", decide)
        row = {"id": sc["id"], "turn": k, "opening": k == first, "oneoff": not sc["expect"],
               "durable": durable_turn(sc, m["content"]),
               "cued": bool(passed) and not seen, "p": seen[0][0] if seen else None,
               "s": seen[0][1] if seen else 0.0}
        users = triage.user_turns(msgs[:k + 1])
        if row["cued"]:  # cue words found it: the app asks triage alone (Pipeline._confirm)
            seg = next(w for w in passed if w.turns[-1].index == users[-1].index).turns
            row["pc"] = pipe.triage_score(seg)[0]
        if lasting and row["p"] is not None and (passed or not row["opening"]):
            # an opening's P is its one read alone, as the gate reuses it; a later turn's is
            # the mean of two reads, so its one sentence is read alone again
            if row["opening"]:  # every sentence's two reads; the gate's pick is ps, pw
                reads = pipe.opening_reads(users[-1].text, row["p"])
                row["reads"] = [[s.p, mine] for s, mine in reads] if reads else None
                if reads:
                    _, best, row["pw"] = opening_pick(row["p"], reads)
                    row["ps"] = best.p
            else:
                best = pipe.likeliest_sentence(users[-1].text)
                row["ps"] = best.p if best else row["p"]
        if lasting and (row["p"] is not None or row.get("pc") is not None) \
                and not row["opening"]:
            row["pl"] = pipe.lasting_score(users[-1])
        if extract and passed:
            earlier = earlier_requests(msgs[:k + 1], passed[-1])  # as Pipeline.run reads them
            row["pe"] = pipe.extract_score(pipe.extract_values(passed[-1], earlier))
            if rules and row["pe"] is not None and let_through(row):
                row["rules"] = score_rules(pipe, sc, passed[-1])
        rows.append(row)
    return rows


def let_through(row: dict[str, Any]) -> bool:
    """Triage lets the turn through: its P reaches the bar (on a later turn scored with
    ``--lasting``, cue words' or not, the lasting check's P reaches ``LASTING_MIN_P``, as
    :meth:`Pipeline._lasting` and :meth:`Pipeline._confirm` decide; on an opening cue words
    found, triage's P alone)."""
    from engine.learning import triage
    from engine.learning.pipeline import LASTING_MIN_P

    if row.get("pl") is not None:
        return row["pl"] >= LASTING_MIN_P
    if row["p"] is None:
        return row.get("pc") is None or row["pc"] >= triage.DURABLE_MIN_P
    return row["p"] >= triage.DURABLE_MIN_P


def rule_label(sc: dict[str, Any], rule: str) -> bool | None:
    """Whether a rule should be kept, from the scenario's expectations: no (a one-off, or it
    holds a case detail the scenario forbids), yes (it holds a keyword of an expected add or
    merge), or unknown (anything else: not counted)."""
    t = normalize(rule)
    items = sc["expect"]
    if not items or any(normalize(f) in t for e in items for f in e.get("forbid") or []):
        return False
    for e in items:
        if e["outcome"] != "known" and any(
                normalize(alt) in t for k in e["keywords"] for alt in k.split("|")):
            return True
    return None


def score_rules(pipe: Any, sc: dict[str, Any], w: Any) -> list[dict[str, Any]]:
    """Extract from window ``w`` as the app does, then for every rule: word-overlap grounding,
    the model's P(keep), the label (:func:`rule_label`)."""
    from engine.learning.checks import grounded
    from engine.text import content_tokens

    cands, _ = pipe.extract(w)
    toks = content_tokens(w.user_text)
    return [{"rule": r, "lexical": grounded(r, toks, w.user_text),
             "pk": pipe.keep_score(w, r), "label": rule_label(sc, r)}
            for c in cands for r in c.constraints]


def rules_table(rows: list[dict[str, Any]], bars: tuple[float, ...] = BARS) -> str:
    """Extracted rules with a label: what word-overlap grounding keeps, what P(keep) >= bar
    keeps, and the two combined (either one)."""
    rs = [r for row in rows for r in row.get("rules") or []
          if r["label"] is not None and r["pk"] is not None]
    pos = [r for r in rs if r["label"]]
    neg = [r for r in rs if not r["label"]]

    def line(name: str, keep: Any) -> str:
        tp, fp = sum(map(keep, pos)), sum(map(keep, neg))
        bal = (tp / max(1, len(pos)) + 1 - fp / max(1, len(neg))) / 2
        return f"{name:<22}| {tp}/{len(pos)}{'':<10}| {fp}/{len(neg)}{'':<8}| {bal:.2f}"

    lines = [f"extracted rules with a label: {len(rs)} ({len(pos)} wanted, {len(neg)} not; "
             f"{sum(r['label'] is None for row in rows for r in row.get('rules') or [])} "
             "unlabelled)",
             "kept by               | wanted kept   | others kept | balanced acc",
             "----------------------|---------------|-------------|-------------",
             line("word overlap", lambda r: r["lexical"])]
    for b in bars:
        lines.append(line(f"P(keep) >= {b}", lambda r, b=b: r["pk"] >= b))
    for b in bars:
        lines.append(line(f"overlap or P >= {b}", lambda r, b=b: r["lexical"] or r["pk"] >= b))
    return "\n".join(lines)


def extract_table(rows: list[dict[str, Any]], bars: tuple[float, ...] = BARS) -> str:
    """Which extraction bars keep the durable turns: among the turns triage let through (what
    the app does), and among every scored turn (extraction's score as the only gate)."""
    oneoffs = {r["id"] for r in rows if r["oneoff"]}
    lines = []
    for name, scored in (("triage let through", [r for r in rows if r.get("pe") is not None
                                                 and let_through(r)]),
                         ("every scored turn", [r for r in rows if r.get("pe") is not None])):
        pos = [r for r in scored if r["durable"]]
        neg = [r for r in scored if not r["durable"]]
        lines += [f"extraction on the {len(scored)} turns of {name} ({len(pos)} durable, "
                  f"{len(neg)} not): P(a skill) >= bar",
                  "bar   | durable written | others written | one-off scenarios written",
                  "------|-----------------|----------------|--------------------------"]
        for b in bars:
            tp = sum(r["pe"] >= b for r in pos)
            fp = sum(r["pe"] >= b for r in neg)
            bad = {r["id"] for r in neg if r["oneoff"] and r["pe"] >= b}
            lines.append(f"{b:<5} | {tp}/{len(pos)}{'':<12}| {fp}/{len(neg)}{'':<11}| "
                         f"{len(bad)}/{len(oneoffs)}")
    return "\n".join(lines)


def auc(pos: list[float], neg: list[float]) -> float | None:
    """P(a random positive scores above a random negative), ties half; None without both."""
    if not pos or not neg:
        return None
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def bar_cells(pos: list[float], neg: list[float], bars: tuple[float, ...],
              width: int) -> list[str]:
    """Per bar, the positives and the negatives scoring at or above it ("n/N m/M")."""
    return [f"{sum(p >= b for p in pos):>{width}}/{len(pos):<{width}} "
            f"{sum(p >= b for p in neg):>{width}}/{len(neg):<{width}}" for b in bars]


def separation(rows: list[dict[str, Any]]) -> str:
    """How well each score separates durable turns from the others (AUC), for a
    conversation's opening message and for its later turns apart: the two are different
    questions (a request with a fact beside it; a tweak, a follow-up, a format asked again),
    and a pooled AUC hides a score that decides one of them at chance."""
    lines = ["separation of durable turns from the others (AUC; 0.5 is chance)",
             "score                   | openings (durable/other)  | later turns (durable/other)",
             "------------------------|---------------------------|----------------------------"]
    for name, key in (("triage P(durable)", "p"), ("extraction P(a skill)", "pe")):
        cells = []
        for first in (True, False):
            sel = [r for r in rows if r.get(key) is not None and r["opening"] is first]
            pos = [r[key] for r in sel if r["durable"]]
            neg = [r[key] for r in sel if not r["durable"]]
            a = auc(pos, neg)
            cells.append(f"{'n/a' if a is None else f'{a:.2f}'} ({len(pos)}/{len(neg)})")
        if any(not c.startswith("n/a (0/0)") for c in cells):
            lines.append(f"{name:<24}| {cells[0]:<26}| {cells[1]}")
    return "\n".join(lines)


def lasting_table(rows: list[dict[str, Any]]) -> str:
    """The later turns with both reads: how each separates durable turns (AUC), and what the
    gates built from them let through: the app's (the lasting check's bar), the two reads at
    even odds, triage's bar alone, and the lasting check at other bars (to fit
    ``LASTING_MIN_P``)."""
    from engine.learning import triage
    from engine.learning.pipeline import LASTING_MIN_P

    sel = [r for r in rows if r.get("pl") is not None and r["p"] is not None]
    pos = [r for r in sel if r["durable"]]
    neg = [r for r in sel if not r["durable"]]
    oneoffs = {r["id"] for r in rows if r["oneoff"]}
    lines = [f"later turns with both reads: {len(sel)} ({len(pos)} durable, {len(neg)} not)",
             "score                         | AUC",
             "------------------------------|-----"]
    for name, f in (("triage P(durable)", lambda r: r["p"]),
                    ("lasting P(every piece)", lambda r: r["pl"]),
                    ("mean of the two", lambda r: (r["p"] + r["pl"]) / 2),
                    ("triage P, likeliest sentence", lambda r: r.get("ps"))):
        if any(f(r) is None for r in sel):
            continue
        a = auc([f(r) for r in pos], [f(r) for r in neg])
        lines.append(f"{name:<30}| {'n/a' if a is None else f'{a:.2f}'}")
    lines += ["gate                                   | durable let through | others let through "
              "| one-off scenarios with a yes",
              "---------------------------------------|---------------------|-------------------"
              "-|-----------------------------"]
    bars = sorted({LASTING_MIN_P, 0.25, 0.3, 0.35, 0.4, 0.5})
    for name, ok in (
            (f"lasting >= {LASTING_MIN_P} (app)", lambda r: r["pl"] >= LASTING_MIN_P),
            ("even odds, triage and lasting", lambda r: r["p"] >= 1 - r["pl"]),
            (f"triage >= {triage.DURABLE_MIN_P} alone", lambda r: r["p"] >= triage.DURABLE_MIN_P),
            *((f"lasting >= {b}", lambda r, b=b: r["pl"] >= b)
              for b in bars if b != LASTING_MIN_P)):
        tp, fp = sum(map(ok, pos)), sum(map(ok, neg))
        bad = {r["id"] for r in sel if r["oneoff"] and ok(r)}
        lines.append(f"{name:<39}| {tp}/{len(pos)} ({tp / max(1, len(pos)):.2f}){'':<6}| "
                     f"{fp}/{len(neg)} ({fp / max(1, len(neg)):.2f}){'':<5}| "
                     f"{len(bad)}/{len(oneoffs)}")
    return "\n".join(lines)


def opening_table(rows: list[dict[str, Any]]) -> str:
    """The openings triage scored (cue words found none) with the gate's three reads (of the
    sentence the gate picks, ``ps`` and ``pw``): how each separates the durable ones (AUC;
    extraction's P(a skill) beside them where scored), what the app's gate (:func:`opening_p`
    at ``OPENING_MIN_P``) lets through of those triage's bar lets on and of all of them (what
    triage's bar costs a long story that reads low whole), and a logistic fit of
    ``OPENING_FIT`` on these rows (Newton's method, a light L2 on the weights) with what its
    bars would let through of those triage's bar lets on and of all."""
    import math

    import numpy as np

    from engine.learning import triage
    from engine.learning.pipeline import OPENING_MIN_P, opening_p

    keys = ("p", "ps", "pw")
    sel = [r for r in rows if r["opening"] and all(r.get(k) is not None for k in keys)]
    if not sel:
        return "openings with the gate's three reads: none"
    gate = lambda r: opening_p(r["p"], r["ps"], r["pw"])  # noqa: E731
    pos = [r for r in sel if r["durable"]]
    neg = [r for r in sel if not r["durable"]]
    lines = [f"openings with the gate's three reads: {len(sel)} ({len(pos)} durable, "
             f"{len(neg)} not)", "score                                | AUC",
             "-------------------------------------|-----"]
    for name, f in (("triage P(durable), whole message", lambda r: r["p"]),
                    ("extraction P(a skill) (not a read)", lambda r: r.get("pe")),
                    ("triage P, the gate's sentence alone", lambda r: r["ps"]),
                    ("P(the writer's own), that sentence", lambda r: r["pw"]),
                    ("their product", lambda r: r["ps"] * r["pw"]),
                    ("the app's gate (opening_p)", gate)):
        if any(f(r) is None for r in sel):
            continue
        a = auc([f(r) for r in pos], [f(r) for r in neg])
        lines.append(f"{name:<37}| {'n/a' if a is None else f'{a:.3f}'}")
    on = [r for r in sel if r["p"] >= triage.DURABLE_MIN_P]

    def through(among: list[dict[str, Any]]) -> str:
        return (f"the gate at {OPENING_MIN_P} lets through "
                f"{sum(gate(r) >= OPENING_MIN_P for r in among if r['durable'])} durable, "
                f"{sum(gate(r) >= OPENING_MIN_P for r in among if not r['durable'])} others")

    lines.append(f"triage's bar lets on {len(on)} ({sum(r['durable'] for r in on)} durable); "
                 + through(on))
    lines.append("without triage's bar, " + through(sel))
    lg = lambda p: math.log(min(max(p, 1e-6), 1 - 1e-6) / (1 - min(max(p, 1e-6), 1 - 1e-6)))  # noqa: E731
    y = np.array([1.0 if r["durable"] else 0.0 for r in sel])
    x = np.array([[lg(r["p"]), lg(r["ps"] * r["pw"]), 1.0] for r in sel])
    w, reg = np.zeros(3), np.diag([0.01, 0.01, 0.0]) * len(sel)
    for _ in range(50):
        q = 1 / (1 + np.exp(-x @ w))
        hess = x.T @ (x * (q * (1 - q))[:, None]) + reg
        w -= np.linalg.solve(hess, x.T @ (q - y) + reg @ w)
    fit = 1 / (1 + np.exp(-x @ w))
    lines.append("fit on these rows: OPENING_FIT = (" + ", ".join(f"{v:.2f}" for v in w)
                 + ")  (x logit P whole, x logit (P sentence x P(the writer's own)), "
                 "+ intercept)")
    def bars(keep: Any) -> str:
        return "  ".join(f"{b}: {int(sum((fit >= b) & keep & (y == 1)))}/"
                         f"{int(sum((fit >= b) & keep & (y == 0)))}"
                         for b in (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5))

    lines.append("its bars (durable / others through, of those triage's bar lets on): "
                 + bars(np.array([r["p"] >= triage.DURABLE_MIN_P for r in sel])))
    lines.append("its bars without triage's bar (durable / others through): "
                 + bars(np.ones(len(sel), dtype=bool)))
    return "\n".join(lines)


def cued_table(rows: list[dict[str, Any]]) -> str:
    """The turns cue words found, with what triage (and, on later turns, the lasting check)
    says of them: the app lets a later one on by the lasting check, an opening at triage's
    bar (then the opening's gate); before the forty-eighth round every one at triage's bar."""
    from engine.learning import triage
    from engine.learning.pipeline import LASTING_MIN_P

    sel = [r for r in rows if r.get("pc") is not None]
    pos = [r for r in sel if r["durable"]]
    neg = [r for r in sel if not r["durable"]]
    a = auc([r["pc"] for r in pos], [r["pc"] for r in neg])
    lines = [f"turns cue words found: {len(sel)} ({len(pos)} durable, {len(neg)} not, "
             f"{sum(r['oneoff'] for r in sel)} in one-off scenarios); triage P AUC "
             f"{'n/a' if a is None else f'{a:.2f}'}",
             "gate on cued turns                           | durable let through | others let through",
             "---------------------------------------------|---------------------|-------------------"]
    for name, ok in (
            ("cue words alone", lambda r: True),
            (f"triage >= {triage.DURABLE_MIN_P}",
             lambda r: r["pc"] >= triage.DURABLE_MIN_P),
            (f"lasting >= {LASTING_MIN_P} (later turns), else triage (app)", let_through)):
        tp, fp = sum(map(ok, pos)), sum(map(ok, neg))
        lines.append(f"{name:<45}| {tp}/{len(pos)}{'':<14}| {fp}/{len(neg)}")
    for r in sel:
        lines.append(f"  {'durable' if r['durable'] else 'other  '} {r['id']} turn {r['turn']}: "
                     f"triage {r['pc']:.2f}" + (f", lasting {r['pl']:.2f}"
                                                if r.get("pl") is not None else ""))
    return "\n".join(lines)


def story_sentences(sc: dict[str, Any]) -> list[dict[str, Any]]:
    """The labelled sentences of the later user turns that hold an expected item's evidence:
    "rule" where the sentence holds the evidence and no word the item forbids, "story" where
    it holds a forbidden word (a name, number or detail of this case) and not the evidence;
    the request is the user turn before. Other sentences are left out (unlabelled)."""
    from engine.learning.rules import statements

    users = [m["content"] for m in sc["messages"] if m["role"] == "user"]
    out: dict[str, dict[str, Any]] = {}
    for e in sc["expect"]:
        ev = normalize(e.get("evidence") or "")
        forbid = [f.lower() for f in e.get("forbid", [])]
        for k, text in enumerate(users[1:], 1):
            if not ev or ev not in normalize(text):
                continue
            for sent in statements([text]):
                said = normalize(sent) in ev or ev in normalize(sent)
                bad = any(f in sent.lower() for f in forbid)
                if said != bad:
                    out[sent] = {"id": sc["id"], "lang": sc.get("lang", "en"),
                                 "split": sc.get("split", ""), "sentence": sent,
                                 "request": users[k - 1], "label": "rule" if said else "story"}
    return list(out.values())


def _overlap(a: str, b: str) -> bool:
    """``a`` and ``b`` (normalized) share a run of at least 12 characters (4 for Chinese), or
    all of the shorter one."""
    from difflib import SequenceMatcher

    m = SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b))
    return m.size >= min(4 if language(a) == "zh" else 12, len(a), len(b))


def story_clauses(sc: dict[str, Any]) -> list[dict[str, Any]]:
    """The labelled comma clauses (:func:`~engine.learning.pipeline.comma_clauses`) of the
    sentences of later user turns that hold part of an expected item's evidence, where the
    sentence has two or more: "rule" where the clause shares a run of the evidence
    (:func:`_overlap`) and holds no word the item forbids, "story" where it holds a forbidden
    word and shares none; "other" for the rest (a clause of the rule past the evidence's end,
    a reason that names nothing of the case). A story told inside the rule's own sentence
    ("…say cash only, the card machine never connects") is what the sentence-level set
    (:func:`story_sentences`) leaves out."""
    from engine.learning.pipeline import comma_clauses
    from engine.learning.rules import statements

    users = [m["content"] for m in sc["messages"] if m["role"] == "user"]
    out: dict[str, dict[str, Any]] = {}
    for e in sc["expect"]:
        ev = normalize(e.get("evidence") or "")
        forbid = [f.lower() for f in e.get("forbid", [])]
        for k, text in enumerate(users[1:], 1):
            if not ev or ev not in normalize(text):
                continue
            for sent in statements([text]):
                parts = comma_clauses(sent)
                if len(parts) < 2 or not _overlap(normalize(sent), ev):
                    continue
                for part in parts:
                    said = _overlap(normalize(part.strip(" ,，;；")), ev)
                    bad = any(f in part.lower() for f in forbid)
                    out[f"{sent}\n{part}"] = {
                        "id": sc["id"], "lang": sc.get("lang", "en"),
                        "split": sc.get("split", ""), "sentence": part.strip(" ,，;；"),
                        "whole": sent, "request": users[k - 1],
                        "label": "other" if said == bad else "rule" if said else "story"}
    return list(out.values())


def story_table(rows: list[dict[str, Any]],
                bars: tuple[float, ...] = (0.36, 0.38, 0.4, 0.42, 0.44, 0.46, 0.48)) -> str:
    """The story check on labelled sentences (``p``: its P(story)), per language: the AUC,
    and per bar the story sentences and the rule sentences it would leave out (``*``: the
    app's bar, ``STORY_MIN_P``)."""
    from engine.learning.pipeline import STORY_MIN_P

    lines = ["lang  story  rule  AUC   " + "  ".join(
        f"@{b}{'*' if b == STORY_MIN_P else ' '} story / rule out" for b in bars)]
    for lang in ("en", "zh", "all"):
        sel = [r for r in rows if r["p"] is not None and lang in ("all", r["lang"])]
        pos = [r["p"] for r in sel if r["label"] == "story"]
        neg = [r["p"] for r in sel if r["label"] == "rule"]
        if not pos or not neg:
            continue
        lines.append(f"{lang:<5} {len(pos):<6} {len(neg):<5} {auc(pos, neg):.3f} "
                     + "  ".join(f"{c:<23}" for c in bar_cells(pos, neg, bars, 3)))
    other = [r["p"] for r in rows if r["p"] is not None and r["label"] == "other"]
    if other:  # unlabelled clauses (--clauses): a clause of the rule or a plain reason
        lines.append(f"other {len(other):<12}      " + "  ".join(
            f"{sum(p >= b for p in other):>3}/{len(other):<3} out{'':<15}" for b in bars))
    return "\n".join(lines)


def again_table(rows: list[dict[str, Any]], bars: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8)
                ) -> str:
    """The asked-again check on labelled pairs (``p``: its P(yes); ``label``: "yes" where
    the newest message asks again what the earlier one asked), per split and language: the
    AUC, and per bar the repeats found and the other follow-ups taken for one (``*``: the
    app's bar, ``AGAIN_MIN_P``)."""
    from engine.learning.pipeline import AGAIN_MIN_P

    lines = ["split    lang  pairs  AUC   " + "  ".join(
                 f"@{b}{'*' if b == AGAIN_MIN_P else ' '} found / taken" for b in bars)]
    for split in sorted({r.get("split", "") for r in rows}):
        for lang in ("en", "zh", "all"):
            sel = [r for r in rows if r.get("split", "") == split and r["p"] is not None
                   and lang in ("all", r["lang"])]
            pos = [r["p"] for r in sel if r["label"] == "yes"]
            neg = [r["p"] for r in sel if r["label"] != "yes"]
            if not pos or not neg:
                continue
            lines.append(f"{split or '-':<8} {lang:<5} {len(sel):<6} {auc(pos, neg):.2f}  "
                         + "  ".join(f"{c:<19}" for c in bar_cells(pos, neg, bars, 2)))
    return "\n".join(lines)


def table(rows: list[dict[str, Any]], bars: tuple[float, ...] = BARS) -> str:
    scored = [r for r in rows if r["p"] is not None]
    pos = [r for r in scored if r["durable"]]
    neg = [r for r in scored if not r["durable"]]
    oneoffs = {r["id"] for r in rows if r["oneoff"]}
    lines = [f"turns {len(rows)}: found by cue words {sum(r['cued'] for r in rows)}, scored "
             f"{len(scored)} ({len(pos)} durable, {len(neg)} not); one-off scenarios "
             f"{len(oneoffs)}",
             "bar   | durable let through | others let through | one-off scenarios with a yes",
             "------|---------------------|--------------------|-----------------------------"]
    for b in bars:
        tp = sum(r["p"] >= b for r in pos)
        fp = sum(r["p"] >= b for r in neg)
        bad = {r["id"] for r in scored if r["oneoff"] and r["p"] >= b}
        lines.append(f"{b:<5} | {tp}/{len(pos)} ({tp / max(1, len(pos)):.2f})"
                     f"{'':<6}| {fp}/{len(neg)} ({fp / max(1, len(neg)):.2f}){'':<5}| "
                     f"{len(bad)}/{len(oneoffs)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = _args(list(argv or []))
    from engine.bank.store import SkillBank
    from engine.learning.pipeline import Pipeline
    from engine.llm import registry
    from engine.llm.client import LLMClient
    from engine.llm.llama_backend import LlamaCppBackend
    from engine.llm.worker import BACKGROUND, ModelWorker

    scenarios = [] if a.again and not a.story else [
        sc for sp in (a.split or [None])
        for sc in load_scenarios(a.scenarios, None, False, a.limit, sp)]
    spec = registry.resolve(a.model)
    backend = LlamaCppBackend(spec, n_threads=a.threads)
    backend.keep_snapshots = not a.no_snapshot
    if a.replay:
        from bench._replay import ReplayBackend
        backend = ReplayBackend(backend, a.replay)
    worker = ModelWorker(backend)
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="skilldesk-triage-") as tmp:
            pipe = Pipeline(SkillBank(Path(tmp)), "default", LLMClient(worker,
                                                                     priority=BACKGROUND))
            pipe.checkpoint = lambda: None
            between = None
            if a.between:
                from engine.llm.base import GenParams

                def between(seg: list[Any]) -> None:
                    turns = "\n".join(f"{i}. {t.text}" for i, t in enumerate(seg, 1))
                    msgs = pipe.llm.prompt("extract").render(user_turns=turns, context="")
                    worker.submit_chat(msgs, GenParams(max_tokens=1, temperature=0),
                                       priority=BACKGROUND).result()
            if a.again:
                pairs = [json.loads(line) for line in
                         Path(a.again).read_text(encoding="utf-8").splitlines() if line.strip()]
                for r in pairs:
                    r["p"] = pipe.again_score(r["earlier"], r["newest"])
            if a.story:
                label = story_clauses if a.clauses else story_sentences
                rows = [r for sc in scenarios for r in label(sc)]
                for r in rows:
                    r["p"] = pipe.story_score(r["request"], r["sentence"])
                scenarios = []
            for sc in scenarios:
                rows += score_turns(pipe, sc, between, a.extract, a.rules, a.lasting,
                                    a.openings, a.cued)
    finally:
        worker.close()
    where = f" (split {', '.join(a.split)})" if a.split else ""
    if a.again or a.story:  # labelled items, not turns
        items = pairs if a.again else rows
        print(f"{spec.title}: " + (f"{len(pairs)} pairs ({a.again})" if a.again
                                   else f"{len(rows)} labelled sentences{where}"))
        print(again_table(items) if a.again else story_table(items))
        if a.json:
            Path(a.json).write_text(json.dumps(items, indent=1, ensure_ascii=False),
                                    encoding="utf-8")
        return 0
    print(f"{spec.title}: {len(scenarios)} scenarios{where}")
    print(table(rows))
    print(separation(rows))
    if a.extract:
        print(extract_table(rows))
    if a.rules:
        print(rules_table(rows))
    if a.lasting:
        print(lasting_table(rows))
        print()
        print(cued_table(rows))
        print()
        print(opening_table(rows))
    secs = [r["s"] for r in rows if r["p"] is not None]
    if secs:
        print(f"seconds per scored turn: {sum(secs) / len(secs):.2f} (prefix snapshot "
              f"{'off' if a.no_snapshot else 'on'}, {backend.snapshot_hits} hits; another "
              f"prompt between calls: {'yes' if a.between else 'no'})")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0
