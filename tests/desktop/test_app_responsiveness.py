"""The GUI never blocks: while a background evolution job and a streamed generation run on the
real bundled model, a 5 ms timer on the GUI thread keeps firing. Measures the largest gap
between timer events and prints it (target < 100 ms)."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("pytestqt")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QElapsedTimer, QTimer  # noqa: E402

pytestmark = pytest.mark.model
TARGET_MS = 100


class GapMeter:
    """Timer events on the GUI thread; the gaps between them show any blocking."""

    def __init__(self, interval_ms: int = 5):
        self.clock = QElapsedTimer()
        self.gaps: list[float] = []
        self.timer = QTimer(interval=interval_ms)
        self.timer.timeout.connect(self._tick)
        self.last = None

    def _tick(self) -> None:
        now = self.clock.nsecsElapsed() / 1e6
        if self.last is not None:
            self.gaps.append(now - self.last)
        self.last = now

    def start(self) -> None:
        self.clock.start()
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def summary(self) -> dict[str, float]:
        g = sorted(self.gaps)
        return {"ticks": len(g), "max_ms": g[-1], "p99_ms": g[int(len(g) * 0.99) - 1],
                "median_ms": g[len(g) // 2]}


def test_event_loop_keeps_running_during_generation_and_learning(qtbot, open_app, bank_dir,
                                                                 bundled_model_path, preference_chat):
    w = open_app(bank_dir, model=bundled_model_path, max_tokens=96, n_ctx=1024)
    queue = w.session.desk.learning
    events: list[str] = []
    w.session.learning_event.connect(lambda ev: events.append(ev.kind))
    chunks: list[str] = []
    w.session.chat.worker.chunk.connect(lambda _r, t: chunks.append(t))

    # Baseline: the idle app on this (shared, possibly busy) machine.
    idle = GapMeter()
    idle.start()
    qtbot.wait(2000)
    idle.stop()
    base = idle.summary()

    meter = GapMeter()
    meter.start()
    t0 = time.perf_counter()
    job = queue.submit(preference_chat)  # background learning, on the engine's queue
    qtbot.waitUntil(lambda: "running" in events, timeout=30_000)
    w.chat.input.setPlainText("Summarize: the office is closed on Monday for maintenance.")
    w.chat.send_btn.click()  # foreground generation, streamed to the GUI
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=300_000)
    gen_done = time.perf_counter() - t0
    qtbot.waitUntil(lambda: queue.state()["queued"] == 0 and queue.state()["running"] == 0,
                    timeout=600_000)
    meter.stop()
    total = time.perf_counter() - t0
    s = meter.summary()
    print(f"\nresponsiveness: {s['ticks']} timer events over {total:.1f} s "
          f"(generation {gen_done:.1f} s, {len(chunks)} chunks; evolution job {job}: "
          f"{[k for k in events if k not in ('queued', 'running')]}) — max gap "
          f"{s['max_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms, median {s['median_ms']:.1f} ms "
          f"(target < {TARGET_MS} ms); idle baseline: max {base['max_ms']:.1f} ms, "
          f"p99 {base['p99_ms']:.1f} ms; load average {os.getloadavg()[0]:.1f}")
    assert len(chunks) >= 2 and "done" in events
    assert s["ticks"] > total * 50  # the 5 ms timer really kept firing (> 25% of ideal)
    assert s["p99_ms"] < TARGET_MS
    # Blocking the GUI on a model call would show as seconds; a busy shared 2-core box can
    # deschedule the GUI thread for a slice or two, which the idle baseline shows too.
    assert s["max_ms"] < max(5 * TARGET_MS, 2 * base["max_ms"])
