"""The issue-15 dev sets, measured on what the chat injects (bench/data/RETRIEVAL_SETS.md).

- **Off-topic**: requests that no skill applies to, searched on the starter bank
  (``resources/starter``) and on a 120-skill user bank taken from the corpus; the
  injection rate is the share of requests for which :meth:`SkillIndex.search` (the chat's
  search, default settings) returns anything.
- **Paraphrase**: requests that need one corpus skill and share almost no words with it,
  searched on the whole corpus; R@1 as served (the target is the first injected skill) and
  R@1 / R@5 / MRR of the ranking without any relevance cut.

Every row carries ``split``: "tune" (fitted on), "heldout" (looked at once during issue 15,
so tables label it "seen") or "fresh" (issue 15b: written before the self-filter, measured
once at the end); ``--splits`` picks the halves a table prints. ``features``
collects the per-candidate features a relevance model is fitted on (tune split only, see
``bench/_retrieval_fit.py``).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from engine.bank.store import SkillBank
from engine.retrieval import DEFAULT_PARAMS
from engine.retrieval.fusion import FusionParams, params_for, rank
from engine.retrieval.index import SkillIndex
from engine.settings import RESOURCES

DATA = Path(__file__).resolve().parent / "data"
STARTER = RESOURCES / "starter"  # the starter skills a new bank receives
USER = "bench"
SPLITS = ("tune", "heldout")
# "seen": the old held-out half
LABELS = {"heldout": "seen"}


def label(split: str) -> str:
    return LABELS.get(split, split)
LANGS = ("en", "zh")


def load(name: str) -> list[dict]:
    with open(DATA / name, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def user_bank_paths() -> list[str]:
    lines = (DATA / "offtopic_user_bank.txt").read_text("utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def missing(corpus: Path) -> list[str]:
    """Dev-set skills (user bank, paraphrase targets) that ``corpus`` lacks."""
    need = user_bank_paths() + [r["target"] for r in load("paraphrase.jsonl")]
    return [rel for rel in dict.fromkeys(need) if not (Path(corpus) / rel / "SKILL.md").is_file()]


def _user_folder(rel: str) -> str:
    parts = Path(rel).parts
    return f"{parts[-2]}--{parts[-1]}"


def build_bank(kind: str, corpus: Path, dest: Path) -> Path:
    """``starter``: the shipped starter skills; ``user``: the 120 listed corpus skills as one
    user's skills. Returns the bank root (a copy: nothing is written into the corpus)."""
    if kind == "starter":
        shutil.copytree(STARTER, dest / "Common" / "starter")
    elif kind == "user":
        for rel in user_bank_paths():
            target = dest / "Users" / USER / _user_folder(rel)
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(corpus) / rel / "SKILL.md", target / "SKILL.md")
    else:
        raise ValueError(kind)
    return dest


def open_index(root: Path, embedder, params: FusionParams | None = None) -> SkillIndex:
    idx = SkillIndex(embedder, None, params or DEFAULT_PARAMS, persist=False)
    idx.sync(SkillBank(root).load(USER, "all").skills)
    return idx


def target_key(idx: SkillIndex, bank_root: Path, rel: str) -> str | None:
    """The index key of a corpus skill copied by ``corpus_bank`` (ConvSkill -> Users)."""
    parts = Path(rel).parts
    if parts[0] == "Common":
        path = bank_root / rel / "SKILL.md"
    else:
        path = bank_root / "Users" / USER / _user_folder(rel) / "SKILL.md"
    return idx.key_for_path(path)


@dataclass
class Served:
    row: dict
    hits: list[str]          # keys injected (as served)
    ranking: list[str]       # the pool ranked by the fused score, no cut
    ms: float = 0.0          # the served search, query embedding(s) included
    scores: list[float] = field(default_factory=list)  # P(related) of each hit
    filtered: list[str] | None = None  # the hits the self-filter kept (None: not run)
    filter_s: float = 0.0    # the self-filter's model call (0 when nothing passed η)
    asked: bool = False      # whether the self-filter called the model
    fit: dict[str, float] = field(default_factory=dict)  # P(fits) of each judged hit

    def with_band(self, above: float | None, bar: float | None = None) -> list[str]:
        """What a filter that judges only the hits with P(related) < ``above`` serves (a hit
        retrieval is surer of is kept without a call; each hit is judged alone, so skipping
        one does not change the others' answers); ``bar``: what it serves when a judged hit
        must reach P(fits) >= ``bar`` (instead of the filter's own ``FIT_MIN_P``)."""
        if self.filtered is None:
            return self.hits
        sure = self._sure(above)
        if bar is not None and self.fit:
            return [k for k in self.hits if k in sure or self.fit.get(k, 1.0) >= bar]
        return [k for k in self.hits if k in sure or k in self.filtered]

    def calls(self, above: float | None) -> int:
        """The filter's model calls (one per judged hit) when hits >= ``above`` are sure."""
        return 0 if self.filtered is None else len(self.hits) - len(self._sure(above))

    def _sure(self, above: float | None) -> set[str]:
        """The hits kept without a call: P(related) >= ``above`` (none when ``above`` is None)."""
        if above is None:
            return set()
        return {k for k, sc in zip(self.hits, self.scores, strict=False) if sc >= above}


def serve(idx: SkillIndex, rows: Iterable[dict], params: FusionParams | None = None,
          client=None, splits=None) -> list[Served]:
    """Every request as the chat serves it; with ``client`` (an LLMClient) also through the
    self-filter (engine/chat/skill_filter.py), exactly as the turn calls it, on the rows of
    ``splits`` only (each call costs seconds)."""
    from engine.chat.skill_filter import self_filter
    from engine.retrieval.index import skill_key

    out = []
    for r in rows:
        t0 = time.perf_counter()
        hits = idx.search(r["query"], params=params)
        ms = (time.perf_counter() - t0) * 1000
        p = params_for(params or idx.params, r["query"], idx.embedder.multilingual)
        c = idx.candidates(r["query"], pool=50, segments=p.relevance)
        ranking = [c.keys[i] for i, *_ in rank(c, p.with_(threshold=0.0))]
        s = Served(r, [skill_key(h.skill) for h in hits], ranking, ms,
                   [float(h.score) for h in hits])
        if client is not None and (splits is None or r["split"] in splits):
            res = self_filter(client, r["query"], hits)
            s.filtered = [skill_key(h.skill) for h in res.hits]
            s.fit = {skill_key(h.skill): p for h, p in zip(hits, res.scores, strict=False)}
            s.filter_s, s.asked = res.seconds, res.asked
        out.append(s)
    return out


def pick(s: Served, served: str, above: float | None = None,
         bar: float | None = None) -> list[str]:
    """``served``: "hits" (as served without the filter) or "filtered" (with it)."""
    return s.hits if served == "hits" else s.with_band(above, bar)


def injection_rows(results: list[Served], bank: str, splits=SPLITS, served: str = "hits",
                   above: float | None = None, bar: float | None = None) -> list[list]:
    rows = []
    for split in splits:
        for lang in LANGS:
            sel = [s for s in results if s.row["split"] == split and s.row["lang"] == lang]
            n = len(sel)
            got = [pick(s, served, above, bar) for s in sel]
            bad = sum(bool(g) for g in got)
            rows.append([f"{bank} {label(split)} {lang.upper()}", n, bad, bad / max(1, n),
                         sum(len(g) for g in got) / max(1, n)])
    return rows


def paraphrase_rows(results: list[Served], targets: dict[str, str | None],
                    splits=SPLITS, served: str = "hits", above: float | None = None,
                    bar: float | None = None) -> list[list]:
    rows = []
    for split in splits:
        for lang in LANGS:
            sel = [s for s in results if s.row["split"] == split and s.row["lang"] == lang]
            n = max(1, len(sel))
            got = {id(s): pick(s, served, above, bar) for s in sel}
            served1 = sum(bool(got[id(s)]) and got[id(s)][0] == targets[s.row["id"]]
                          for s in sel)
            served_any = sum(targets[s.row["id"]] in got[id(s)] for s in sel)
            ranks = [s.ranking.index(targets[s.row["id"]]) + 1
                     if targets[s.row["id"]] in s.ranking else None for s in sel]
            rows.append([f"{label(split)} {lang.upper()}", len(sel), served1 / n, served_any / n,
                         sum(bool(got[id(s)]) for s in sel) / n,
                         sum(r == 1 for r in ranks) / n,
                         sum(r is not None and r <= 5 for r in ranks) / n,
                         sum(1.0 / r for r in ranks if r) / n])
    return rows


def offenders(results: list[Served], limit: int = 8, splits=SPLITS, served: str = "hits"
              ) -> list[str]:
    return [f"{s.row['query']!r} -> {', '.join(k.rsplit('/', 1)[-1] for k in pick(s, served))}"
            for s in results if pick(s, served) and s.row["split"] in splits][:limit]
