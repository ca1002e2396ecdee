"""What a user does to their skills through :class:`~engine.desk.SkillDesk` (issue 18).

A mixin of the desk, kept apart so the front door stays readable: new from a template,
disable / enable, "always apply", move between levels and out of / into a folder the user names,
the trash, usage (times injected, last used, last changed) and "didn't fit" feedback.

Bookkeeping lives in :class:`~engine.bank.state.SkillState` (``<bank>/.skilldesk/<user>.json``),
never in a SKILL.md: disabling a skill, marking it always-on or counting its uses writes nothing
into the file the user may have open. Writes that do change a skill (new, level, move) go
through the bank like every other SkillDesk write and reindex.

Retrieval honours the bookkeeping here, at the desk, not inside engine/retrieval: disabled
skills are dropped from every search (the chat's, the CLI's, the learning judge's neighbours,
so nothing is merged into a disabled skill); a skill the user said "didn't fit" is dropped for
requests similar to the one it did not fit (cosine of the bundled sentence embedder
>= ``FEEDBACK_SIM``) and kept for the others; always-on skills lead the chat's skill block.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.bank.skill import LEVELS, Skill, now_iso
from engine.bank.state import SkillState
from engine.bank.transfer import ImportReport, export_skills, import_skills
from engine.errors import NotFoundError, ReadOnlyError, SkillDeskError
from engine.retrieval import SkillHit

if TYPE_CHECKING:
    from engine.bank.store import SkillBank
    from engine.retrieval import SkillIndex

# Requests at least this similar to one a skill "didn't fit" do not get that skill again.
# Bundled all-MiniLM-L6-v2 cosine on request pairs written for this (notes/issue-18.md):
# dev (5 paraphrase pairs, 5 different-request pairs, EN+ZH): paraphrases 0.80-0.88, different
# requests 0.17-0.68 (the 0.68 a Chinese pair, "weekly report" vs "resignation letter") -> 0.7;
# held-out (5 + 5, not looked at before): 3/5 paraphrases caught (0.72-0.83; missed 0.55,
# 0.64), 0/5 different requests dropped (max 0.53). A miss only means the skill comes back for
# that request (the user can then disable it); a false drop would hide a skill that fits.
FEEDBACK_SIM = 0.7
ALWAYS_SCORE = 1.0  # an always-on skill's hit score: it applies to every request

TEMPLATE = """# Goal
{goal}

# Constraints & Style
{rules}
"""
TEMPLATE_RULES = "- (one rule per line, e.g. \"Answer in British English\")"


@dataclass(frozen=True)
class SkillUsage:
    """What the tree and the detail pane show about one skill's use."""

    uses: int = 0  # times injected into an answer
    last_used: str = ""  # ISO time of the last injection ("" = never)
    last_changed: str = ""  # ISO time the SKILL.md last changed (a hand edit included)
    disabled: bool = False
    always_on: bool = False
    didnt_fit: int = 0  # "didn't fit" feedback given on answers

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Review:
    """What the Review view lists; nothing here is ever deleted automatically."""

    days: float
    unused: list[tuple[Skill, SkillUsage]]  # not used (nor changed) in the last ``days``
    clusters: list[Any]  # engine.consolidate.Cluster: near-duplicates that could merge
    flags: list[Any]  # engine.consolidate.Flag: junk by the consolidation filter
    plan: Any = None  # the consolidation plan the clusters came from (for merge)


_TRASHED = re.compile(r"^(\d{4}-\d\d-\d\dT\d{6}Z)-(.+)$")  # <stamp>-<slug>
_TRASHED_OLD = re.compile(r"^\d{4}-\d\d-\d\dT\d{6}Z-")


@dataclass(frozen=True)
class TrashEntry:
    path: Path  # the folder in .trash/
    name: str  # the skill's folder name before it was deleted
    title: str
    deleted: str  # ISO time


def _iso_of(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).replace(microsecond=0).isoformat().replace(
        "+00:00", "Z")


def age_days(stamp: str, now: float | None = None) -> float:
    """Days since an ISO time ("" = infinitely long ago)."""
    try:
        t = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return float("inf")
    return ((now or time.time()) - t) / 86400


def usage_of(skill: Skill, entry: dict[str, Any]) -> SkillUsage:
    """A skill's usage from its state entry (``SkillState.entry``) and its file's time."""
    try:
        changed = _iso_of(Path(skill.path).stat().st_mtime) if skill.path else ""
    except OSError:
        changed = ""
    return SkillUsage(uses=int(entry.get("uses") or 0),
                      last_used=str(entry.get("last_used") or ""),
                      last_changed=changed or skill.updated,
                      disabled=bool(entry.get("disabled")),
                      always_on=bool(entry.get("always_on")),
                      didnt_fit=sum(1 for f in entry.get("feedback") or []
                                    if f.get("kind") == "didnt_fit"))


def unused_for(skill: Skill, usage: SkillUsage, days: float, now: float | None = None) -> bool:
    """Not injected in the last ``days`` days, and not changed in them either (a skill just
    written or edited has not had its chance yet)."""
    return (age_days(usage.last_used, now) > days
            and age_days(usage.last_changed or skill.created, now) > days)


class SkillManagement:
    """Mixed into SkillDesk; relies on its ``bank``, ``user``, ``index``, ``refresh``,
    ``_reindex``, ``create``, ``update``, ``delete`` and ``learning``."""

    bank: SkillBank
    user: str
    index: SkillIndex

    def _init_state(self) -> None:
        self.state = SkillState(self.bank.root, self.user)
        self._feedback_vecs: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ lookups
    def _skill(self, ref: Skill | str) -> Skill:
        return ref if isinstance(ref, Skill) else self.find(ref)  # type: ignore[attr-defined]

    def usage(self, skill: Skill) -> SkillUsage:
        return usage_of(skill, self.state.entry(skill.id))

    def usages(self) -> dict[str, SkillUsage]:
        """``skill id -> usage`` for every indexed skill (one read of the state file)."""
        state = self.state.all()
        return {s.id: usage_of(s, state.get(s.id) or {}) for s in self.index.skills.values()}

    def most_used(self, n: int) -> list[Skill]:
        """The ``n`` skills injected most often, then most recently, that the self-filter
        judges (neither disabled nor always on): those ``warm_up`` primes."""
        uses = self.usages()
        live = [s for s in self.index.skills.values()
                if not (uses[s.id].disabled or uses[s.id].always_on)]
        live.sort(key=lambda s: (uses[s.id].uses, uses[s.id].last_used), reverse=True)
        return live[:n]

    # ------------------------------------------------------------------ flags
    def disable(self, skill: Skill | str) -> Skill:
        """Keep the skill on disk but never inject it or merge into it until enabled."""
        skill = self._skill(skill)
        self.state.set_flag(skill.id, "disabled", True, skill.key)
        return skill

    def enable(self, skill: Skill | str) -> Skill:
        skill = self._skill(skill)
        self.state.set_flag(skill.id, "disabled", False, skill.key)
        return skill

    def set_always_on(self, skill: Skill | str, on: bool = True) -> Skill:
        """Inject ``skill`` in every chat (first, within the skill budget) while ``on``."""
        skill = self._skill(skill)
        self.state.set_flag(skill.id, "always_on", on, skill.key)
        return skill

    def is_disabled(self, skill: Skill) -> bool:
        return self.state.is_disabled(skill.id)

    def always_on(self) -> list[Skill]:
        """The enabled always-on skills this desk can see, in title order."""
        ids = self.state.ids_where("always_on") - self.state.ids_where("disabled")
        found = [s for s in self.index.skills.values() if s.id in ids]
        return sorted(found, key=lambda s: s.display_name.casefold())

    # ------------------------------------------------------------------ retrieval filters
    def _filter_hits(self, query: str, hits: list[SkillHit], k: int | None) -> list[SkillHit]:
        """Drop disabled skills and skills that "didn't fit" a similar request."""
        disabled = self.state.ids_where("disabled")
        out = [h for h in hits if h.skill.id not in disabled]
        flagged = {h.skill.id: self.state.feedback(h.skill.id) for h in out}
        flagged = {i: [f["query"] for f in fb if f.get("kind") == "didnt_fit" and f.get("query")]
                   for i, fb in flagged.items()}
        flagged = {i: qs for i, qs in flagged.items() if qs}
        if flagged and query:
            qvec = self.index.embedder.encode_query(query)
            out = [h for h in out if h.skill.id not in flagged
                   or max(float(np.dot(qvec, self._fb_vec(q))) for q in flagged[h.skill.id])
                   < FEEDBACK_SIM]
        return out[:k] if k is not None else out

    def _fb_vec(self, text: str) -> np.ndarray:
        v = self._feedback_vecs.get(text)
        if v is None:
            v = self._feedback_vecs[text] = self.index.embedder.encode_query(text)
        return v

    def _extra(self) -> int:
        """How many more hits to ask the index for, so filtering still leaves ``top_k``."""
        st = self.state.all()
        return sum(1 for e in st.values() if e.get("disabled") or e.get("feedback"))

    def with_always_on(self, hits: list[SkillHit], query: str = "") -> list[SkillHit]:
        """The chat's hits: the always-on skills first, then ``hits`` without repeats. An
        always-on skill the user said "didn't fit" a request like ``query`` is left out too."""
        always = [SkillHit(s, ALWAYS_SCORE, 0.0, 0.0) for s in self.always_on()]
        if always and query:
            always = self._filter_hits(query, always, None)
        ids = {h.skill.id for h in always}
        return always + [h for h in hits if h.skill.id not in ids]

    def versioned(self, hits: list[SkillHit]) -> list[SkillHit]:
        """The hits with each skill's effective version (a hand edit's recorded one), so the
        answer's "Skills used" line names the version the history and the detail pane show."""
        out = []
        for h in hits:
            v = self.bank.effective_version(h.skill) if h.skill.scope == "user" else None
            out.append(h if not v or v == h.skill.version else
                       SkillHit(h.skill.copy(version=v), h.score, h.dense, h.lexical))
        return out

    # ------------------------------------------------------------------ usage and feedback
    def record_use(self, injected: list[Any]) -> None:
        """One more use for each skill injected into an answer (``InjectedSkill`` or Skill)."""
        keys = {s.id: s.key for s in self.index.skills.values()}
        self.state.record_uses([(s.id, keys.get(s.id, "")) for s in injected if s.id])

    def feedback(self, skill: Skill | str, query: str, *, kind: str = "didnt_fit",
                 turn_id: str = "") -> Any:
        """The user said ``skill`` did not fit the answer to ``query``: remember it (similar
        requests no longer get it), log it in the learning log; returns the log event."""
        skill = self._skill(skill)
        self.state.add_feedback(skill.id, {"kind": kind, "query": query[:1000],
                                           "time": now_iso(), "turn": turn_id}, skill.key)
        return self.learning.note(  # type: ignore[attr-defined]
            "feedback", turn_id=turn_id or None, skill_id=skill.id, skill_name=skill.name,
            title=skill.display_name, path=str(skill.path or ""), version=skill.version,
            reason=f"didn't fit: {query[:120]}")

    # ------------------------------------------------------------------ writes
    def new_skill(self, title: str, *, description: str = "", level: str = "functional",
                  rules: list[str] | None = None) -> Skill:
        """A new skill of this user from the template (the app then opens it in the editor)."""
        title = " ".join((title or "").split())
        if not title:
            raise SkillDeskError("a new skill needs a title")
        if level not in LEVELS:
            raise SkillDeskError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
        body = TEMPLATE.format(goal=description or title,
                               rules="\n".join(f"- {r}" for r in rules) if rules
                               else TEMPLATE_RULES)
        skill = Skill(name=title, title=title, description=description or title,
                      instructions=body, level=level, triggers=[title])
        return self.create(skill, source="user")  # type: ignore[attr-defined]

    def set_level(self, skill: Skill | str, level: str) -> Skill:
        """Move a skill to another level (planning / functional / atomic): a new version."""
        skill = self._skill(skill)
        if level not in LEVELS:
            raise SkillDeskError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
        if skill.scope != "user":
            raise ReadOnlyError(f"{skill.display_name} is a shared (Common) skill")
        current = self.bank.read(skill.path)  # the file as it is now (a hand edit wins)
        if current.level == level:
            return current
        return self.update(current.copy(level=level),  # type: ignore[attr-defined]
                           expected_hash=current.content_hash, source="user")

    def move_out(self, skill: Skill | str, folder: str | os.PathLike) -> Path:
        """Move a skill of this user into ``folder`` (outside the bank): written there as a
        spec skill folder, then the bank's copy goes to the trash (restorable). Returns the
        new folder."""
        skill = self._skill(skill)
        if skill.scope != "user":
            raise ReadOnlyError(f"{skill.display_name} is a shared (Common) skill")
        folder = Path(folder).expanduser().resolve()
        if folder == self.bank.root or self.bank.root in folder.parents:
            raise SkillDeskError(f"{folder} is inside the bank; choose a folder outside it")
        before = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        export_skills([self.bank.read(skill.path)], folder)
        new = sorted({p.name for p in folder.iterdir()} - before)
        self.delete(skill)  # type: ignore[attr-defined]
        return folder / new[0] if new else folder

    def move_in(self, src: str | os.PathLike) -> ImportReport:
        """Bring the skills in a folder (or .zip) the user names into this user's skills.

        They are copied: SkillDesk never deletes anything outside its bank."""
        rep = import_skills(self.bank, src, self.user)
        self.refresh()  # type: ignore[attr-defined]
        return rep

    # ------------------------------------------------------------------ review
    def review(self, days: float = 30, *, threshold: float | None = None) -> Review:
        """Skills not used in ``days`` days, near-duplicates (engine/consolidate clustering)
        and flagged junk (engine/consolidate/flags.py), for the user to act on."""
        from engine.consolidate import DEFAULT_THRESHOLD, make_plan

        skills = self.bank.load(self.user, "user").skills
        state = self.state.all()
        unused = []
        for s in skills:
            u = usage_of(s, state.get(s.id) or {})
            if unused_for(s, u, days):
                unused.append((s, u))
        unused.sort(key=lambda p: (p[1].last_used or "", p[0].display_name.casefold()))
        plan = make_plan(self, scope="user", skills=skills,
                         threshold=threshold or DEFAULT_THRESHOLD)
        clusters = [c for c in plan.clusters if len(c.mergeable) >= 2 and not c.skipped]
        return Review(days, unused, clusters, list(plan.flags), plan)

    def merge_cluster(self, review: Review, cluster: Any) -> Any:
        """Merge one near-duplicate group of a review (undoable: engine.consolidate.undo)."""
        import dataclasses

        from engine.consolidate import apply_plan

        sub = dataclasses.replace(review.plan, clusters=[cluster])
        return apply_plan(self.bank, sub, refresh=lambda: self.refresh())  # type: ignore

    # ------------------------------------------------------------------ trash
    def trash(self) -> list[TrashEntry]:
        """This user's deleted skills, newest first (``restore(entry.path)`` brings one back)."""
        out = []
        entries: list[tuple[os.DirEntry, str]] = []
        with contextlib.suppress(OSError):  # entries of older versions: <stamp>-<owner>-<slug>
            prefix = f"-{self.user}-"
            entries += [(e, e.name[:18] + "-" + e.name[18 + len(prefix):]) for e in os.scandir(
                self.bank.trash_dir) if _TRASHED_OLD.match(e.name)
                and e.name[18:].startswith(prefix)]
        mine = self.bank.trash_dir / self.user
        with contextlib.suppress(OSError):
            entries += [(e, e.name) for e in os.scandir(mine)]  # <stamp>-<slug>
        for e, name in entries:
            m = _TRASHED.match(name)
            if m is None or not e.is_dir():
                continue
            stamp, rest = m.group(1), m.group(2)
            title = rest
            f = self.bank.skill_file(Path(e.path))
            if f is not None:
                try:
                    from engine.bank import skillfile

                    title = skillfile.read(f).display_name
                except SkillDeskError:
                    pass
            deleted = stamp[:13] + ":" + stamp[13:15] + ":" + stamp[15:]
            out.append(TrashEntry(Path(e.path), rest, title, deleted))
        return sorted(out, key=lambda t: t.deleted, reverse=True)

    def find_trashed(self, ref: str) -> TrashEntry:
        """A trashed skill by its folder in .trash/, its old name or its title (newest)."""
        for t in self.trash():
            if ref in (str(t.path), t.path.name, t.name, t.title):
                return t
        raise NotFoundError(f"no deleted skill {ref!r} in {self.bank.trash_dir}")
