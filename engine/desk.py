"""``SkillDesk``: one bank, one user, one index — the engine's front door.

``SkillDesk.open`` loads the bank's skills (the user's and the Common ones), adopts the vector
cache under ``<bank>/vectors/`` when it is valid (else rebuilds it), and embeds only skills
whose retrieval text changed. ``search`` is hybrid retrieval (engine.retrieval);
``render_context`` is the compact block the chat prompt carries; ``refresh`` picks up changed
files (the watcher calls it); ``watch`` starts that watcher.

``chat()`` and ``ingest()`` (the foreground turn and background evolution) are not defined
here: engine/turn.py and engine/evolution/ add them.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from .bank import LoadError, SkillBank
from .errors import SkillDeskError, SkillFormatError, UnsafePathError
from .fsutil import check_component
from .retrieval import DEFAULT_PARAMS, SkillHit, SkillIndex, SyncReport
from .retrieval.embedders import Embedder, make_embedder
from .retrieval.index import SCOPE_VALUES, skill_dir_of, skill_key
from .settings import Settings
from .skill import Skill

# The context block: small models have small windows, so it stays short.
CONTEXT_MAX_CHARS = 1500
SKILL_MAX_CHARS = 600
_SECTION = re.compile(r"^\s{0,3}#{1,6}\s*(.+?)\s*#*\s*$", re.M)
_KEEP = re.compile(r"goal|objective|constraint|style|rule|preference|目标|约束|风格|规则", re.I)


class SkillDesk:
    """Skills of ``user`` in ``bank``, searchable; see the module docstring."""

    def __init__(self, bank: SkillBank, user: str, config: Settings, index: SkillIndex):
        self.bank = bank
        self.user = user
        self.config = config
        self.index = index
        self.load_errors: list[LoadError] = []
        self._listeners: list[Callable[[SyncReport], object]] = []
        self._refresh_lock = threading.Lock()
        self._watcher = None
        self.last_report = SyncReport()
        self.closed = False

    # ------------------------------------------------------------------ open / close
    @classmethod
    def open(cls, bank_dir: str | os.PathLike | None = None, user: str | None = "default",
             config: Settings | None = None, *, create: bool = False,
             embedder: Embedder | str | None = None, watch: bool = False) -> SkillDesk:
        """Open ``bank_dir`` (default: the settings' bank) for ``user`` and build its index.

        ``create``: make the bank folder if it does not exist (else NotFoundError).
        ``embedder``: an Embedder, a name ("minilm", "use") or a model folder; default: the
        settings' choice, else the measured default. ``watch``: start the file watcher.
        """
        config = config or Settings.load()
        user = check_component(user or config.user or "default", "user")
        bank = SkillBank(config.bank_dir(bank_dir), create=create)
        if not isinstance(embedder, Embedder):
            embedder = make_embedder(embedder or config.embedder)
        r = config.retrieval
        if r.scope not in SCOPE_VALUES:
            raise SkillDeskError(f"retrieval scope must be one of {', '.join(SCOPE_VALUES)}, "
                                 f"not {r.scope!r} (check the settings)")
        params = DEFAULT_PARAMS.with_(top_k=int(r.top_k), threshold=float(r.threshold))
        desk = cls(bank, user, config,
                   SkillIndex(embedder, bank.vectors_dir, params, name=user))
        desk.refresh()
        if watch:
            desk.watch()
        return desk

    def close(self) -> None:
        """Stop the watcher and save the vectors. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        from . import learning

        learning.close(self)
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        self.index.save()

    def __enter__(self) -> SkillDesk:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ retrieval
    @property
    def skills(self) -> list[Skill]:
        return list(self.index.skills.values())

    def search(self, query: str, top_k: int | None = None, *, scope: str | None = None,
               threshold: float | None = None) -> list[SkillHit]:
        """The skills that apply to ``query``, best first (at most ``top_k``)."""
        return self.index.search(query or "", top_k, scope=scope or self.config.retrieval.scope,
                                 threshold=threshold)

    def render_context(self, query: str, *, hits: list[SkillHit] | None = None,
                       max_chars: int = CONTEXT_MAX_CHARS) -> str:
        """The chosen skills as a compact block for the chat prompt ("" when none applies)."""
        hits = self.search(query) if hits is None else hits
        if not hits:
            return ""
        blocks, used = [], 0
        head = "Skills that apply to this request (follow them):"
        for h in hits:
            block = render_skill(h.skill)
            room = max_chars - len(head) - used - 2
            if room < 80:
                break
            if len(block) > room:
                block = block[: room - 1].rstrip() + "…"
            blocks.append(block)
            used += len(block) + 2
        return head + "\n\n" + "\n\n".join(blocks)

    # ------------------------------------------------------------------ changes
    def refresh(self, paths: Iterable[str | os.PathLike] | None = None) -> SyncReport:
        """Re-read the bank (``paths=None``) or just the given SKILL.md files / skill folders.

        Unchanged skills are not re-embedded. Listeners get the report when something changed.
        """
        with self._refresh_lock:
            rep = self._refresh_all() if paths is None else self._refresh_paths(paths)
            self.last_report = rep
            if rep.changed:
                self.index.save()
        if rep.changed:
            for fn in list(self._listeners):
                fn(rep)
        return rep

    def _refresh_all(self) -> SyncReport:
        result = self.bank.load(self.user, "all")
        self.load_errors = list(result.errors)
        return self.index.sync(result.skills)

    def _in_scope(self, d: Path) -> bool | None:
        """True: a skill folder of this desk; False: not ours; None: a bigger folder."""
        try:
            rel = d.resolve().relative_to(self.bank.root).parts
        except (ValueError, OSError):
            return False
        if not rel or rel[0] not in ("Users", "Common"):
            return False
        if rel[0] == "Users" and len(rel) >= 2 and rel[1] != self.user:
            return False
        return True if len(rel) == 3 else None if len(rel) < 3 else False

    def _refresh_paths(self, paths: Iterable[str | os.PathLike]) -> SyncReport:
        changed: list[Skill] = []
        removed: list[str] = []
        errors = {e.path: e for e in self.load_errors}
        for raw in paths:
            d = skill_dir_of(raw)
            scope = self._in_scope(d)
            if scope is None:  # a user or library folder appeared or vanished
                return self._refresh_all()
            if not scope:
                continue
            f = self.bank.skill_file(d)
            old = self.index.keys_under(d)
            if f is None:
                removed += old
                errors = {p: e for p, e in errors.items() if Path(p).parent != d}
                continue
            try:
                skill = self.bank.read(f)
            except (SkillFormatError, UnsafePathError) as exc:
                removed += old
                errors[str(f)] = LoadError(str(f), getattr(exc, "reason", str(exc)))
                continue
            errors.pop(str(f), None)
            if self.index.indexed_hash(skill_key(skill)) != skill.content_hash:
                changed.append(skill)
        self.load_errors = list(errors.values())
        return self.index.update(changed, removed)

    def is_current(self, path: str | os.PathLike, content_hash: str | None) -> bool:
        """Whether the index already holds this content for this SKILL.md (own writes).

        Waits for a refresh in progress (the app refreshing right after its own write).
        """
        with self._refresh_lock:
            key = self.index.key_for_path(path)
            return key is not None and content_hash is not None and (
                self.index.indexed_hash(key) == content_hash)

    def add_listener(self, fn: Callable[[SyncReport], object]) -> Callable[[], None]:
        """``fn(report)`` after every refresh that changed something; returns unsubscribe."""
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn) if fn in self._listeners else None

    def watch(self, *, debounce: float | None = None, record_hand_edits: bool = True):
        """Start the file watcher (hand edits become searchable within a second)."""
        from .watcher import DEBOUNCE_S, SkillWatcher

        if self._watcher is None:
            self._watcher = SkillWatcher(
                self.bank.root, lambda paths: self.refresh(paths), bank=self.bank,
                is_current=self.is_current, record_hand_edits=record_hand_edits,
                debounce=DEBOUNCE_S if debounce is None else debounce,
                accept=lambda p: self._in_scope(skill_dir_of(p)) is not False).start()
        return self._watcher

    # ------------------------------------------------------------------ chat / ingest
    # The learning loop lives in engine/learning.py, engine/turn.py and engine/evolution/.
    @property
    def worker(self):
        """The ModelWorker of the configured model (built on first use; assignable)."""
        from . import learning

        return learning.get_worker(self)

    @worker.setter
    def worker(self, value) -> None:
        from . import learning

        learning.set_worker(self, value)

    @property
    def evolution(self):
        """The background EvolutionQueue (see engine/evolution/queue.py)."""
        from . import learning

        return learning.get_evolution(self)

    def chat(self, messages, stream=False, cancel=None, learn=True, **kwargs):
        """One turn: rewrite, retrieve, answer (a TurnResult, or a TurnStream when stream)."""
        from . import learning

        return learning.chat(self, messages, stream=stream, cancel=cancel, learn=learn, **kwargs)

    def ingest(self, messages, wait=True, timeout=None):
        """Learn from a whole conversation now; an EvolutionReport of add/merge/discard."""
        from . import learning

        return learning.ingest(self, messages, wait=wait, timeout=timeout)


def _sections(text: str) -> list[tuple[str, str]]:
    marks = list(_SECTION.finditer(text))
    if not marks:
        return [("", text)]
    out = [("", text[: marks[0].start()])] if marks[0].start() > 0 else []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out.append((m.group(1), text[m.end():end]))
    return out


def _squash(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines()]
    return "\n".join(ln for ln in lines if ln)


def render_skill(skill: Skill, max_chars: int = SKILL_MAX_CHARS) -> str:
    """One skill for the prompt: title, description, then its Goal / Constraints essentials."""
    kept = [_squash(body) for head, body in _sections(skill.instructions) if _KEEP.search(head)]
    body = "\n".join(k for k in kept if k) or _squash(skill.instructions)
    text = f"## {skill.display_name}\n{skill.description.strip()}\n{body}".strip()
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"
