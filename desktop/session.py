"""The app's engine session: settings, the bank, chat history, the chat thread, the bank
watcher and learning events, with signals the window listens to.

Threads: the skill engine (``SkillDesk.open`` loads or builds the index, then every chat turn)
runs on the chat QThread; skill evolution jobs run in the learning QThreadPool (one thread, see
views/learning.py); bank loads, reindexing after hand edits, reverts and undos run in the global
QThreadPool; the watcher and the learning queue report through queued signals. The GUI thread
only renders.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication, QWidget

from engine.bank.starter import seed_starter
from engine.bank.store import SkillBank
from engine.chat.conversations import ConversationStore
from engine.errors import SkillDeskError
from engine.settings import Settings

from . import theme
from .chat_worker import ChatThread
from .first_run import WelcomeDialog, recommended_missing
from .views.learning import LearningBridge
from .watch import WatchBridge
from .workers import run_async


def open_engine(bank_dir: Path, user: str, settings: Settings) -> Any:
    """Runs on the chat thread: import and open the engine (heavy: embeddings, index)."""
    from engine.desk import SkillDesk

    return SkillDesk.open(bank_dir, user=user, config=settings)


Opener = Callable[[Path, str, Settings], Any]


class Session(QObject):
    usage_loaded = Signal(dict)  # skill id -> SkillUsage (sent just before skills_loaded)
    skills_loaded = Signal(list)
    load_errors = Signal(list)  # LoadError(path, reason) of the files that cannot be read
    files_changed = Signal(list)
    engine_ready = Signal(object)
    engine_failed = Signal(str)
    model_ready = Signal(str)
    model_failed = Signal(str)
    learning_event = Signal(object)
    message = Signal(str)
    _index_changed = Signal()

    def __init__(self, settings: Settings | None = None, bank_dir: str | Path | None = None,
                 parent: QObject | None = None, opener: Opener = open_engine):
        """``opener(bank_dir, user, settings)`` opens the engine on the chat thread (tests give
        the desk a scripted model this way; the app always uses :func:`open_engine`)."""
        super().__init__(parent)
        self._opener = opener
        self.settings = settings or Settings.load()
        self._bank_override = bank_dir
        self.bank = SkillBank(self.bank_dir())
        self.store = ConversationStore()
        self.chat = ChatThread(self)
        self.desk: Any = None
        self.starter_created = False
        self.learning = LearningBridge(self)
        self.learning.event.connect(self.learning_event)
        self.watcher: WatchBridge | None = None
        self._loading = False
        self._reload_again = False
        self._unlisten = None
        self._index_changed.connect(self.load_skills)
        w = self.chat.worker
        w.opened.connect(self._on_opened)
        w.open_failed.connect(self._on_open_failed)
        w.model_ready.connect(self.model_ready)
        w.model_failed.connect(self.model_failed)

    # ------------------------------------------------------------------ lifecycle
    def notices(self) -> list[str]:
        """What could not be used at start: settings problems, a damaged chat history."""
        return [*getattr(self.settings, "problems", []),
                *([self.store.notice] if self.store.notice else [])]

    def bank_dir(self) -> Path:
        return self.settings.bank_dir(self._bank_override)

    def start(self, engine: bool = True) -> None:
        """Starter bank (first run), skill tree, watcher, engine — everything but the GUI.

        ``engine=False`` leaves the engine closed (the skill views work on the bank alone).
        """
        self.starter_created = seed_starter(self.bank_dir(), self.settings.user)
        self.bank = SkillBank(self.bank_dir())
        self.load_skills()
        self._start_watcher()
        if engine:
            self.open_engine()

    def _start_watcher(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        self.watcher = WatchBridge(self.bank, self)
        self.watcher.changed.connect(self._on_disk_change)
        desk = self.desk
        if not self.watcher.start(getattr(desk, "is_current", None)):
            self.message.emit("Cannot watch the bank folder: press F5 after editing skills")

    def open_engine(self) -> None:
        self._detach_desk()
        bank_dir, user, settings = self.bank_dir(), self.settings.user, self.settings
        opener = self._opener
        self.chat.open_engine(lambda: opener(bank_dir, user, settings))

    def shutdown(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
        self._detach_desk()
        self.chat.stop()  # closes the engine: its learning queue stops the running job
        self.learning.pool.waitForDone(5000)

    def _detach_desk(self) -> None:
        self.learning.detach()
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if self.watcher is not None:
            self.watcher.set_is_current(None)
        self.desk = None

    def _on_opened(self, desk: Any) -> None:
        self.desk = desk
        self.learning.attach(desk)
        # refreshes by anyone (learning, the CLI's writes noticed here) → reload the views
        self._unlisten = desk.add_listener(lambda _report: self._index_changed.emit())
        if self.watcher is not None:
            self.watcher.set_is_current(desk.is_current)
        self.engine_ready.emit(desk)

    def _on_open_failed(self, message: str) -> None:
        self.desk = None
        self.engine_failed.emit(message)

    # ------------------------------------------------------------------ skills
    def load_skills(self) -> None:
        """Reload the bank in the pool; coalesces requests that arrive while one runs."""
        if self._loading:
            self._reload_again = True
            return
        self._loading = True
        bank, user = self.bank, self.settings.user

        def load() -> tuple[Any, dict]:
            from engine.bank.state import SkillState
            from engine.desk_skills import usage_of

            result = bank.load(user)
            state = SkillState(bank.root, user).all()
            usage = {}
            for s in result.skills:
                s.version = bank.effective_version(s)  # a hand edit's recorded version
                usage[s.id] = usage_of(s, state.get(s.id) or {})
            return result, usage

        def done(out: Any) -> None:
            result, usage = out
            self._loading = False
            self.load_errors.emit(list(result.errors))
            self.usage_loaded.emit(usage)
            self.skills_loaded.emit(result.skills)
            if self._reload_again:
                self._reload_again = False
                self.load_skills()

        def failed(message: str) -> None:
            self._loading = False
            self.message.emit(f"Cannot read the skill bank: {message}")

        run_async(load, done, failed)

    def _on_disk_change(self, paths: list[str]) -> None:
        self.skills_changed(paths)

    def skills_changed(self, paths: list[str]) -> None:
        """Files changed (a hand edit, a revert): reindex off-thread, reload the views."""
        desk = self.desk
        if desk is not None:
            files = [Path(p) for p in paths]
            run_async(lambda: desk.refresh(files), None,
                      lambda m: self.message.emit(f"Reindex failed: {m}"))
        self.load_skills()
        self.files_changed.emit(list(paths))

    def run_desk(self, fn: Any, on_done: Any = None, *, what: str = "That",
                 paths: list[str] | None = None) -> bool:
        """Run ``fn(desk)`` in the pool (a write: the desk reindexes), then reload the views.

        ``on_done(result)`` runs on the GUI thread. False when the engine is not open yet."""
        desk = self.desk
        if desk is None:
            self.message.emit("The skill engine is still starting; try again in a moment")
            return False

        def done(out: Any) -> None:
            self.load_skills()
            changed = list(paths or [])
            path = getattr(out, "path", None)
            if path is not None:
                changed.append(str(path))
            if changed:
                self.files_changed.emit(changed)
            if on_done is not None:
                on_done(out)

        run_async(lambda: fn(desk), done, lambda m: self.message.emit(f"{what} failed: {m}"))
        return True

    # ------------------------------------------------------------------ learning
    def learning_history(self, n: int = 50) -> list[Any]:
        """The newest ``n`` events of the engine's learning log (from earlier sessions too)."""
        queue = self.learning.queue
        return list(getattr(queue, "events", []) or [])[-n:] if queue is not None else []

    def learning_state(self) -> dict[str, Any]:
        st = self.learning.state()
        st["disabled"] = not self.settings.learning
        return st

    def pause_learning(self, paused: bool) -> None:
        queue = self.learning.queue
        if queue is None:
            return
        queue.pause() if paused else queue.resume()
        self.message.emit("Learning paused everywhere" if paused else "Learning resumed")

    def undo_event(self, ev: Any) -> None:
        desk = self.desk
        if desk is None or ev is None:
            return

        def done(out: Any) -> None:
            self.message.emit(getattr(out, "reason", "") or "Undone")
            self.load_skills()
            if ev.path:
                self.files_changed.emit([ev.path])

        run_async(lambda: desk.undo(ev.id), done,
                  lambda m: self.message.emit(f"Undo failed: {m}"))

    # ------------------------------------------------------------------ settings
    def model_title(self) -> str:
        m = self.settings.model
        if m.backend == "openai":
            return f"{m.api_model or 'server'} @ {m.base_url}"
        from engine.llm import registry

        try:
            spec = registry.resolve(self.settings.model_ref(), check=False)
        except SkillDeskError as exc:
            return f"unavailable ({exc})"
        return spec.title if spec.available else f"{spec.title} (not installed)"

    def set_theme(self, name: str) -> None:
        app = QApplication.instance()
        self.settings.theme = theme.apply_theme(app, name)
        self.settings.save()

    def open_settings(self, parent: QWidget) -> bool:
        from .views.settings_dialog import SettingsDialog

        before = self.settings
        dlg = SettingsDialog(before, parent, install_recommended=lambda: self.show_welcome(parent))
        if not dlg.exec() or dlg.result_settings is None:
            return False
        after = dlg.result_settings
        self.settings = after
        theme.apply_theme(QApplication.instance(), after.theme)
        model_before = dataclasses.replace(before.model, system_prompt="")
        model_after = dataclasses.replace(after.model, system_prompt="")
        reopen = (after.bank_dir() != before.bank_dir() or after.user != before.user
                  or model_after != model_before or after.retrieval != before.retrieval
                  or after.embedder != before.embedder)
        if not reopen and self.desk is not None:
            self.desk.config = after  # learning on/off, system prompt: read on every turn
        if reopen:
            if after.bank_dir() != before.bank_dir() or after.user != before.user:
                self._bank_override = None
                seed_starter(self.bank_dir(), after.user)
                self.bank = SkillBank(self.bank_dir())
                self._start_watcher()
                self.load_skills()
            self.open_engine()
            self.message.emit("Settings saved; reopening the skill engine…")
        else:
            self.message.emit("Settings saved")
        return True

    def show_welcome(self, parent: QWidget) -> None:
        dlg = WelcomeDialog(parent, offer_model=recommended_missing())
        dlg.exec()
        if dlg.installed is not None and not self.settings.model.model:
            self.open_engine()  # the default now resolves to the recommended model
