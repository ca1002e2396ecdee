"""Bootstrap a bank from history: old conversations, documents, agent trajectories.

Every item goes through the same learning pipeline as a live chat (extract → judge against the
nearest skills → add / merge / discard), so an import never creates a second copy of a skill the
bank already has. Progress is recorded per item in the bank's import ledger
(:class:`engine.imports.readers.Ledger`): an interrupted import continues where it stopped, and running
the same import again changes nothing.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.bank.store import SkillBank
from engine.errors import SkillDeskError
from engine.imports import readers, trajectories
from engine.imports.readers import Item, Ledger, Skipped
from engine.learning.candidate import Candidate
from engine.learning.checks import vet_candidate
from engine.learning.events import Action
from engine.learning.pipeline import Pipeline

KINDS = ("conversations", "documents", "trajectories")
Progress = Callable[[int, int, str], Any]  # (done, total, what)


@dataclass
class ImportSummary:
    kind: str
    read: int = 0  # items found in the input
    processed: int = 0  # items run through the pipeline this time
    already: int = 0  # items a previous run of this import already absorbed
    counts: Counter = field(default_factory=Counter)  # add / merge / discard / error
    skipped: list[Skipped] = field(default_factory=list)
    seconds: float = 0.0
    actions: list[tuple[str, Action]] = field(default_factory=list)  # (item source, action)
    cancelled: bool = False  # stopped by the user between two items (the rest resumes later)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "read": self.read, "processed": self.processed,
                "already_imported": self.already, "added": self.counts["add"],
                "merged": self.counts["merge"], "discarded": self.counts["discard"],
                "errors": self.counts["error"], "seconds": round(self.seconds, 2),
                "cancelled": self.cancelled,
                "skipped": [{"source": s.source, "reason": s.reason} for s in self.skipped],
                "skills": [{"source": src, "action": a.kind, "title": a.skill.title,
                            "path": str(a.skill.path)}
                           for src, a in self.actions if a.skill is not None
                           and a.kind in ("add", "merge")]}


def read_items(kind: str, path: str) -> tuple[list[Item], list[Skipped]]:
    if kind == "conversations":
        return readers.read_conversations(path)
    if kind == "documents":
        return readers.read_documents(path)
    if kind == "trajectories":
        return readers.read_trajectories(path)
    raise SkillDeskError(f"unknown import kind {kind!r}; use one of {', '.join(KINDS)}")


def preview(kind: str, path: str) -> dict[str, Any]:
    """What an import of ``path`` would read, without learning anything (``--dry-run``):
    ``{"conversations"|"documents"|"trajectories": N, "messages": N, "skipped": [...]}``."""
    items, skipped = read_items(kind, path)
    out: dict[str, Any] = {kind: len(items)}
    if kind == "conversations":
        out["messages"] = sum(len(i.messages) for i in items)
        out["user_messages"] = sum(1 for i in items for m in i.messages if m["role"] == "user")
    out["skipped"] = [{"source": s.source, "reason": s.reason} for s in skipped]
    out["items"] = [{"source": i.source, "title": i.title,
                     "messages": len(i.messages)} for i in items]
    return out


_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+(.*\S)")


def document_candidate(item: Item) -> Candidate:
    """A section of a document as a skill candidate: its heading, first sentence and rules."""
    lines = [ln.strip() for ln in item.text.splitlines() if ln.strip()]
    bullets = [m.group(1) for ln in lines if (m := _BULLET.match(ln))]
    prose = " ".join(ln for ln in lines if not _BULLET.match(ln))
    sentences = [s.strip() for s in re.split(r"(?<=[.!?。！？])\s*", prose) if s.strip()]
    rules = bullets or sentences[1:] or sentences
    title = item.title.split(" / ")[-1] if item.title else "Document rules"
    return Candidate(name=title[:60], description=(sentences[0] if sentences else title)[:240],
                     goal=sentences[0] if sentences else "", constraints=rules[:12],
                     triggers=[title], tags=["imported"], level="functional",
                     confidence=0.8)


def _process(pipeline: Any, kind: str, item: Item, require_success: bool) -> list[Action]:
    if kind == "conversations":
        return pipeline.run(item.messages, mode="conversation")
    if kind == "documents":
        c = document_candidate(item)
        why = vet_candidate(c, item.text)
        if why:
            return [Action("discard", reason=why, candidate=c, step="check")]
        return [pipeline.manage(c, None)]
    skills = trajectories.candidates_from_trajectory(item.raw, llm=None,
                                                     require_success=require_success)
    if not skills:
        return [Action("discard", reason="not a successful run (or no usable steps)",
                       step="extract")]
    return [pipeline.manage(Candidate.from_skill(s), None) for s in skills]


class ImportTarget(Protocol):
    """Where an import learns into (a :class:`~engine.desk.SkillDesk` is one)."""

    bank: SkillBank
    user: str

    def pipeline(self) -> Pipeline: ...


def run_import(desk: ImportTarget, kind: str, path: str, *, progress: Progress | None = None,
               require_success: bool = True, limit: int | None = None,
               cancel: Callable[[], bool] | None = None) -> ImportSummary:
    """Import everything under ``path`` into the desk's bank; see the module docstring.

    ``cancel()`` is asked before each item: True stops there (what was absorbed stays
    absorbed and is in the ledger; running the import again continues with the rest)."""
    t0 = time.perf_counter()
    items, skipped = read_items(kind, path)
    summary = ImportSummary(kind, read=len(items), skipped=list(skipped))
    ledger = Ledger(desk.bank.root, desk.user)
    todo = [i for i in items if i.key not in ledger]
    summary.already = len(items) - len(todo)
    if limit is not None:
        todo = todo[:limit]
    pipeline = None  # built at the first item: a cancelled or empty import loads no model
    for n, item in enumerate(todo, 1):
        if cancel is not None and cancel():
            summary.cancelled = True
            break
        if progress:
            progress(n - 1, len(todo), item.source)
        if pipeline is None:
            pipeline = desk.pipeline()
        actions = _process(pipeline, kind, item, require_success)
        for a in actions:
            summary.counts[a.kind] += 1
            summary.actions.append((item.source, a))
        summary.processed += 1
        if not any(a.kind == "error" for a in actions):  # errors are retried next time
            ledger.mark(item.key, {"source": item.source, "time": time.time(),
                                   "actions": [a.kind for a in actions]})
    if progress and not summary.cancelled:
        progress(len(todo), len(todo), "done")
    summary.seconds = time.perf_counter() - t0
    return summary
