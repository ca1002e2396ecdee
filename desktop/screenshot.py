"""Screenshots of the real app for the docs: ``python -m desktop.screenshot --theme dark OUT.png``.

Runs the real app (real engine, real model) on a display (use ``xvfb-run``), in a throwaway
SKILLDESK_HOME with a copy of the shipped starter bank (which holds a Chinese skill), sends one
real message, waits for the streamed answer, selects the skill it used and saves the window.
``--remember`` then clicks *Remember this* under the message and waits for what it became;
``--reopen`` then opens a new chat and this one again.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def spin(app, until, timeout: float) -> bool:
    """Run the Qt event loop until ``until()`` holds (True) or ``timeout`` seconds pass (False)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        app.processEvents()
        if until():
            return True
        time.sleep(0.02)
    return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="PNG file to write")
    p.add_argument("--theme", choices=("light", "dark"), default="light")
    p.add_argument("--model", default="", help="model reference (default: the app's default)")
    p.add_argument("--message", default="请帮我写这周的周报：完成了登录页面，修复了两个缺陷。")
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--timeout", type=float, default=240)
    p.add_argument("--remember", action="store_true",
                   help="then click 'Remember this' under the message and wait for the skill")
    p.add_argument("--reopen", action="store_true",
                   help="then open a new chat and this one again (what the message says stays)")
    args = p.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="skilldesk-shot-"))
    os.environ["SKILLDESK_HOME"] = str(work / "home")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from engine.bank.starter import seed_starter
    from engine.settings import Settings

    from .app import create_window, ensure_app

    bank = work / "bank"
    seed_starter(bank, "default")
    settings = Settings(bank=str(bank), theme=args.theme)
    settings.model.model = args.model
    settings.model.n_threads = 2
    settings.save()  # not a first run: no welcome dialog over the window
    app = ensure_app()
    qs = QSettings(str(work / "qt.ini"), QSettings.Format.IniFormat)
    w = create_window(None, settings, qs)
    w.session.chat.max_tokens = args.max_tokens
    w.resize(1440, 860)
    w.show()

    ready = {"ok": False}
    w.session.engine_ready.connect(lambda _d: ready.update(ok=True))
    if not spin(app, lambda: ready["ok"], args.timeout):
        print("the engine did not open in time", file=sys.stderr)
        return 1
    if args.remember:  # only what the user asks for is learned: this chat's learning is off
        w.chat.learn_box.setChecked(False)
    w.chat.input.setPlainText(args.message)
    w.chat.send_btn.click()
    spin(app, lambda: w.controller.busy, 5)
    if not spin(app, lambda: not w.controller.busy, args.timeout):
        print("no answer in time", file=sys.stderr)
        return 1
    bubble = w.chat.bubbles[-1]
    used = bubble.meta.get("injected") or []
    if used and used[0].get("path"):
        w.show_skill(used[0]["path"])
    else:
        for item in w.tree.items():
            if any("\u4e00" <= ch <= "\u9fff" for ch in item.text(0)):
                w.tree.select_path(item.data(0, 0x0100))
                break
    if args.remember:
        mine = [b for b in w.chat.bubbles if b.role == "user"][-1]
        mine._on_link("remember:")
        if not spin(app, lambda: "Remembering" not in mine.footer.text(), args.timeout):
            print("nothing remembered in time", file=sys.stderr)
            return 1
        print(f"remember: {mine.meta.get('remembered')}")
        for ev in w.session.learning_history():  # show the skill it became
            if ev.kind in ("add", "merge") and ev.path:
                w.show_skill(ev.path)
    if args.reopen:
        cid = w.controller.cid
        w.controller.new_conversation()
        w.controller.open_conversation(cid)
        spin(app, lambda: not w.controller.loading, 10)
        mine = [b for b in w.chat.bubbles if b.role == "user"][-1]
        bubble = w.chat.bubbles[-1]
        print(f"reopened: {mine.footer.text()[:120]}")
    spin(app, lambda: False, 1.0)
    w.grab().save(args.out)
    print(f"saved {args.out}: answer {len(bubble.text)} chars, skills used: "
          f"{[s.get('title') or s.get('name') for s in used]}, model: {bubble.meta.get('model')}")
    w.close()
    QApplication.processEvents()
    shutil.rmtree(work, ignore_errors=True)  # our own throwaway folder, never user data
    return 0


if __name__ == "__main__":
    sys.exit(main())
