"""The "Consolidate skills…" dialog: dry-run plan, apply, one-step undo (issue 9, SkillX).

Every engine call runs in the pool (``desktop.workers.run_async``); the GUI thread only renders:

1. ``make_plan`` (embedding + clustering, writes nothing) → the clusters (titles, similarity,
   which skill is kept) and the flagged skills (kinds + reasons; flags never delete anything);
2. Apply → ``apply_plan`` with the chosen merge (the model's merge prompt, or the deterministic
   union of fields), progress per cluster, the flags report saved;
3. Undo consolidation → ``undo(bank, record.id)``: every original back byte for byte.

Only the user's own skills are written; shared (Common) members are shown as read-only.
``bank_changed(paths)`` tells the window which files changed, so it reloads the tree.
"""

from __future__ import annotations

import html
from typing import Any

import shiboken6
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDoubleSpinBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTabWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.consolidate import DEFAULT_MAX_SIZE, DEFAULT_THRESHOLD, apply_plan, make_plan
from engine.consolidate import undo as undo_consolidation
from engine.consolidate.flags import save_report

from .. import theme
from ..workers import run_async

INTRO = ("Finds your skills that say nearly the same thing and merges each group into the one "
         "marked <i>kept</i>; the others go to the trash. Every original stays in the history "
         "and <b>Undo consolidation</b> puts all of them back. Shared (Common) skills are never "
         "changed. Flagged skills are only suggestions to review: nothing is deleted.")
MERGES = [("auto", "Automatic (model, or union with the tiny model)"),
          ("llm", "Model: the merge prompt"),
          ("union", "Union of rules (deterministic, no model)")]


def choose_merge(mode: str, desk: Any, settings: Any) -> tuple[Any, str]:
    """``(merge function, label)``; runs in the pool (may start the model worker)."""
    from engine.consolidate import llm_merge, union_merge

    if mode == "union" or (mode == "auto" and desk is None):
        return union_merge, "union"
    if desk is None:
        from engine.errors import SkillDeskError

        raise SkillDeskError("the model merge needs the skill engine; wait until it has "
                             "started, or choose the union merge")
    if mode == "auto" and settings.model.backend == "local":
        from engine.llm import tiers
        from engine.llm.registry import resolve

        if tiers.policy(resolve(settings.model_ref(), check=False)).consolidate_merge == "union":
            return union_merge, "union"
    from engine.llm.client import LLMClient

    return llm_merge(LLMClient(desk.worker)), "llm"  # background priority: chat pre-empts it


def compute_plan(session: Any, threshold: float, scope: str) -> Any:
    """The dry run for the session's bank and user; runs in the pool."""
    desk, user = session.desk, session.settings.user
    if desk is not None:
        return make_plan(desk, user=user, scope=scope, threshold=threshold,
                         max_size=DEFAULT_MAX_SIZE)
    from engine.retrieval.embedders import make_embedder

    return make_plan(bank=session.bank, user=user, scope=scope, threshold=threshold,
                     max_size=DEFAULT_MAX_SIZE, embedder=make_embedder(session.settings.embedder))


class ConsolidateDialog(QDialog):
    bank_changed = Signal(list)
    _progress = Signal(int, int)  # emitted from the pool, delivered on the GUI thread

    def __init__(self, session: Any, parent: QWidget | None = None,
                 threshold: float = DEFAULT_THRESHOLD):
        super().__init__(parent)
        self.session = session
        self.plan: Any = None
        self.record: Any = None
        self.busy = ""  # "" | "plan" | "apply" | "undo"
        self._generation = 0
        self.setWindowTitle("Consolidate skills")
        self.setWindowIcon(theme.icon("merged"))
        self.resize(760, 560)
        lay = QVBoxLayout(self)
        intro = QLabel(INTRO, objectName="Hint", wordWrap=True)
        lay.addWidget(intro)
        opts = QHBoxLayout()
        opts.addWidget(QLabel("Similarity ≥"))
        self.threshold = QDoubleSpinBox(decimals=2, singleStep=0.01)
        self.threshold.setRange(0.5, 1.0)
        self.threshold.setValue(threshold)
        self.threshold.setToolTip("Cosine similarity that makes two skills duplicates "
                                  "(SkillX uses 0.90)")
        opts.addWidget(self.threshold)
        self.include_shared = QCheckBox("Compare with shared skills too")
        self.include_shared.setToolTip("Shared (Common) skills are shown but never changed")
        opts.addWidget(self.include_shared)
        opts.addStretch(1)
        opts.addWidget(QLabel("Merge:"))
        self.merge_mode = QComboBox()
        for key, text in MERGES:
            self.merge_mode.addItem(text, key)
        opts.addWidget(self.merge_mode)
        self.replan_btn = QPushButton(theme.icon("regenerate"), "Recompute")
        self.replan_btn.clicked.connect(self.compute)
        opts.addWidget(self.replan_btn)
        lay.addLayout(opts)
        self.status = QLabel(objectName="PanelTitle", wordWrap=True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.status)
        self.tabs = QTabWidget()
        self.clusters = self._tree(["Skill", "Similarity", "Action"])
        self.flags = self._tree(["Skill", "Kind", "Reason"])
        self.tabs.addTab(self.clusters, theme.icon("merged"), "Duplicates")
        self.tabs.addTab(self.flags, theme.icon("stop"), "Flagged")
        lay.addWidget(self.tabs, 1)
        self.result = QLabel(wordWrap=True)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.result.hide()
        lay.addWidget(self.result)
        self.progress = QProgressBar()
        self.progress.hide()
        lay.addWidget(self.progress)
        row = QHBoxLayout()
        self.apply_btn = QPushButton(theme.icon("merged"), "Apply")
        self.undo_btn = QPushButton(theme.icon("regenerate"), "Undo consolidation")
        self.close_btn = QPushButton("Close")
        self.apply_btn.clicked.connect(self.apply)
        self.undo_btn.clicked.connect(self.undo)
        self.close_btn.clicked.connect(self.reject)
        row.addStretch(1)
        for b in (self.apply_btn, self.undo_btn, self.close_btn):
            row.addWidget(b)
        lay.addLayout(row)
        self.undo_btn.hide()
        self._progress.connect(self._on_progress)
        self._sync()

    @staticmethod
    def _tree(headers: list[str]) -> QTreeWidget:
        t = QTreeWidget()
        t.setColumnCount(len(headers))
        t.setHeaderLabels(headers)
        t.setUniformRowHeights(True)
        t.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for i in range(1, len(headers)):
            t.header().setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
        return t

    # ------------------------------------------------------------------ state
    def _guard(self, fn):
        """``fn`` for a pool result, dropped if the dialog was destroyed (window closed)."""
        return lambda arg: fn(arg) if shiboken6.isValid(self) else None

    def _sync(self) -> None:
        idle = not self.busy
        mergeable = bool(self.plan is not None and self.plan.merges and self.record is None)
        self.apply_btn.setEnabled(idle and mergeable)
        self.undo_btn.setEnabled(idle and self.record is not None)
        self.replan_btn.setEnabled(idle)
        for w in (self.threshold, self.include_shared, self.merge_mode):
            w.setEnabled(idle)
        self.close_btn.setEnabled(self.busy in ("", "plan"))

    def reject(self) -> None:
        if self.busy in ("apply", "undo"):  # the bank is being written: let it finish
            self.status.setText("Please wait: the bank is being changed…")
            return
        self._generation += 1  # a plan still computing is ignored when it arrives
        self.busy = ""
        super().reject()

    # ------------------------------------------------------------------ plan
    def compute(self) -> None:
        """Compute the dry-run plan in the pool (nothing is written)."""
        if self.busy:
            return
        self.busy = "plan"
        self._generation += 1
        gen = self._generation
        self.plan = None
        self.clusters.clear()
        self.flags.clear()
        self.status.setText("Computing the plan (embedding and comparing your skills)…")
        self._sync()
        session, threshold = self.session, self.threshold.value()
        scope = "all" if self.include_shared.isChecked() else "user"
        run_async(lambda: compute_plan(session, threshold, scope),
                  self._guard(lambda plan: gen == self._generation and self._show_plan(plan)),
                  self._guard(lambda msg: gen == self._generation and self._failed("plan", msg)))

    def _show_plan(self, plan: Any) -> None:
        self.busy = ""
        self.plan = plan
        self._fill_clusters(plan)
        self._fill_flags(plan)
        n_merge = sum(1 for c in plan.clusters if not c.skipped)
        self.status.setText(
            f"{plan.n_skills} skills compared: {len(plan.clusters)} group(s) of near-duplicates "
            f"at similarity ≥ {plan.threshold:.2f}; applying merges {plan.merges} skill(s) into "
            f"{n_merge} kept one(s). {len(plan.flags)} skill(s) flagged for review."
            if plan.clusters or plan.flags else
            f"{plan.n_skills} skills compared: no near-duplicates at similarity ≥ "
            f"{plan.threshold:.2f} and nothing flagged.")
        self.tabs.setTabText(0, f"Duplicates ({len(plan.clusters)})")
        self.tabs.setTabText(1, f"Flagged ({len(plan.flags)})")
        if not plan.clusters and plan.flags:
            self.tabs.setCurrentWidget(self.flags)
        self._sync()

    def _fill_clusters(self, plan: Any) -> None:
        self.clusters.clear()
        for n, c in enumerate(plan.clusters, 1):
            head = QTreeWidgetItem(self.clusters, [
                f"Group {n}: {c.keeper.title} ({len(c.skills)} skills, {c.level})",
                f"{c.similarity:.3f}", f"skipped: {c.skipped}" if c.skipped else "merge"])
            head.setToolTip(0, f"lowest pair {c.similarity:.3f}, mean {c.mean_similarity:.3f}")
            head.setIcon(0, theme.icon("level"))
            for s in c.skills:
                if s.scope != "user":
                    action, icon = "shared, read-only", "common"
                elif s is c.keeper:
                    action, icon = "kept (absorbs the others)", "skill"
                else:
                    action, icon = ("left as is" if c.skipped else "merged into the kept one",
                                    "merged")
                item = QTreeWidgetItem(head, [s.title or s.name, "", action])
                item.setIcon(0, theme.icon(icon))
                item.setToolTip(0, f"{s.path}\n{s.description}")
                item.setData(0, Qt.ItemDataRole.UserRole, str(s.path))
            head.setExpanded(True)

    def _fill_flags(self, plan: Any) -> None:
        self.flags.clear()
        for f in plan.flags:
            item = QTreeWidgetItem(self.flags, [f.title or f.name, ", ".join(f.kinds),
                                                "; ".join(f.reasons)])
            item.setToolTip(2, "\n".join(f.reasons))
            item.setToolTip(0, f.path)
            item.setData(0, Qt.ItemDataRole.UserRole, f.path)

    # ------------------------------------------------------------------ apply / undo
    def apply(self) -> None:
        """Merge every mergeable group of the plan, in the pool."""
        if self.busy or self.plan is None or not self.plan.merges:
            return
        self.busy = "apply"
        self.progress.setRange(0, max(1, sum(1 for c in self.plan.clusters if not c.skipped)))
        self.progress.setValue(0)
        self.progress.show()
        self.status.setText("Merging…")
        self._sync()
        session, plan, mode = self.session, self.plan, self.merge_mode.currentData()
        emit = self._progress.emit

        def work() -> tuple[Any, str]:
            desk = session.desk
            merge, label = choose_merge(mode, desk, session.settings)
            save_report(session.bank.root, plan.user, plan.flags)
            if desk is not None:
                rec = desk.consolidate(plan, merge=merge, progress=emit)
            else:  # the engine is not open: no index to keep in step yet
                rec = apply_plan(session.bank, plan, merge=merge, progress=emit)
            return rec, label

        run_async(work, self._guard(self._applied),
                  self._guard(lambda msg: self._failed("apply", msg)))

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)

    def _applied(self, out: tuple[Any, str]) -> None:
        rec, label = out
        self.busy = ""
        self.record = rec
        self.progress.hide()
        how = "the model's merge prompt" if label == "llm" else "the union of their rules"
        lines = [f"Merged {rec.merged} skill(s) into {len(rec.clusters)} kept skill(s) with "
                 f"{how} (consolidation {rec.id})."]
        lines += [f"Skipped: {s['reason']}" for s in rec.skipped]
        self.status.setText("Done. Undo consolidation puts every original back.")
        self._show_result(lines)
        self.undo_btn.show()
        self._sync()
        self.bank_changed.emit(_record_paths(rec))

    def undo(self, force: bool = False) -> None:
        """Undo the consolidation this dialog applied (one step, byte for byte), in the pool."""
        if self.busy or self.record is None:
            return
        self.busy = "undo"
        self.status.setText("Undoing…")
        self._sync()
        session, rid = self.session, self.record.id
        force = bool(force) or self.undo_btn.text().startswith("Undo anyway")

        def work() -> Any:
            desk = session.desk
            if desk is not None:
                return desk.undo_consolidation(rid, force=force)
            return undo_consolidation(session.bank, rid, force=force)

        run_async(work, self._guard(self._undone),
                  self._guard(lambda msg: self._failed("undo", msg)))

    def _undone(self, rec: Any) -> None:
        self.busy = ""
        paths = _record_paths(rec)
        if rec.conflicts:
            self.status.setText("Undone in part: some kept skills were edited after the merge.")
            self._show_result([*rec.conflicts, "Undo anyway keeps those edits in the history "
                                               "and restores the originals."])
            self.undo_btn.setText("Undo anyway")
            self.record = rec
            self._sync()
        else:
            self.record = None
            self.undo_btn.hide()
            self.undo_btn.setText("Undo consolidation")
            self._show_result([f"Consolidation {rec.id} undone: every original is back."])
            self.status.setText("Undone.")
            self._sync()
            self.compute()  # the plan again, for the restored bank
        self.bank_changed.emit(paths)

    def _show_result(self, lines: list[str]) -> None:
        self.result.setText("<br>".join(html.escape(x) for x in lines))
        self.result.show()

    def _failed(self, what: str, message: str) -> None:
        self.busy = ""
        self.progress.hide()
        verb = {"plan": "compute the plan", "apply": "apply the plan", "undo": "undo"}[what]
        self.status.setText(f"Could not {verb}: {message}")
        self._sync()
        if what != "plan":  # part of it may be written: the tree must show the bank as it is
            self.bank_changed.emit([])


def _record_paths(rec: Any) -> list[str]:
    out = []
    for c in rec.clusters:
        out.append(c["keeper"]["path"])
        out += [t.get("restored_as") or t["path"] for t in c["trashed"]]
    return out
