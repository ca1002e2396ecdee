"""Screenshots of skill management (issue 18): ``xvfb-run python -m desktop.screenshot_manage
REVIEW.png MENU.png``.

Runs the real app (real engine: embedder and index; the chat model is not needed) in a throwaway
SKILLDESK_HOME on a small bank made for the purpose: a few skills used recently, two
near-duplicates, a vague one the junk filter flags, one disabled and one always-on, and some
not touched for three months. Saves the Review view, then the tree's context menu on a skill
(the menu is its own window, so the screen is grabbed, cropped to the main window).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

SKILLS = [
    ("TL;DR first", "Start every summary with a one-line TL;DR.", ["One line, then details"],
     "summaries", 3),
    ("Weekly report format", "Weekly status reports in three parts: done, next, risks.",
     ["Start with a one-line summary", "Three sections: done, next, risks"], "reports", 0),
    ("Weekly status report layout", "Weekly status reports in three parts: done, next, risks.",
     ["Start with a one-line summary", "Sections: done, next, risks"], "reports", 0),
    ("SQL query tuning", "Speed up slow SQL queries with indexes and EXPLAIN.",
     ["Run EXPLAIN ANALYZE first", "Index the filtered column"], "sql", 5),
    ("Git commit messages", "Imperative git commit subject lines under 50 characters.",
     ["Subject under 50 characters", "Imperative mood"], "git", 0),
    ("Misc", "Misc.", ["Be helpful", "Be good"], "", 0),
    ("Answer in British English", "Use British spelling in every answer.",
     ["colour, organise, centre"], "style", 7),
]


def _make_bank(bank: Path) -> None:
    from engine.bank.skill import Skill
    from engine.bank.state import SkillState
    from engine.bank.store import SkillBank

    b = SkillBank(bank)
    st = SkillState(bank, "default")
    old = time.time() - 95 * 86400
    for title, desc, rules, tag, uses in SKILLS:
        s = b.create(Skill(name=title, title=title, description=desc, tags=[tag] if tag else [],
                           instructions=f"# Goal\n{desc}\n\n# Constraints & Style\n"
                           + "".join(f"- {r}\n" for r in rules)), "default")
        if uses:
            st.record_uses([(s.id, s.key)] * 1)
            st.update(s.id, lambda e, n=uses: e.update(uses=n))
        else:
            os.utime(s.path, (old, old))
        if title == "Git commit messages":
            st.set_flag(s.id, "disabled", True, s.key)
        if title == "Answer in British English":
            st.set_flag(s.id, "always_on", True, s.key)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("review_png")
    p.add_argument("menu_png")
    p.add_argument("--theme", choices=("light", "dark"), default="light")
    args = p.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="skilldesk-shot-"))
    os.environ["SKILLDESK_HOME"] = str(work / "home")
    from PySide6.QtCore import QSettings
    from PySide6.QtGui import QGuiApplication

    from engine.settings import Settings

    from .app import create_window, ensure_app
    from .screenshot import spin

    bank = work / "bank"
    _make_bank(bank)
    settings = Settings(bank=str(bank), theme=args.theme)
    settings.save()
    app = ensure_app()
    w = create_window(None, settings, QSettings(str(work / "qt.ini"), QSettings.Format.IniFormat))
    w.resize(1440, 860)
    w.move(0, 0)
    w.show()

    if not spin(app, lambda: w.session.desk is not None and len(w.tree.items()) == len(SKILLS), 180):
        print("the engine did not open")
        return 1
    panel = w.open_review()
    spin(app, lambda: panel.review is not None, 120)
    spin(app, lambda: False, 0.5)
    w.review_dialog.grab().save(args.review_png)
    w.review_dialog.close()
    target = next(i for i in w.tree.items() if i.text(0) == "SQL query tuning")
    w.tree.select_path(target.data(0, 256))
    spin(app, lambda: w.detail.skill is not None, 10)
    spin(app, lambda: False, 0.3)
    w.tree.tree.expandAll()  # show the disabled and the always-on skills too
    spin(app, lambda: False, 0.3)
    rect = w.tree.tree.visualItemRect(target)
    w.tree.tree.customContextMenuRequested.emit(rect.topLeft() + rect.center() * 0 +
                                                type(rect.center())(90, rect.height() // 2))
    spin(app, lambda: w.context_menu.isVisible(), 5)
    spin(app, lambda: False, 0.5)
    screen = QGuiApplication.primaryScreen()
    shot = screen.grabWindow(0)
    geo = w.frameGeometry().united(w.context_menu.frameGeometry())  # the menu may stick out
    shot.copy(geo).save(args.menu_png)
    w.context_menu.close()
    w.close()
    print(f"saved {args.review_png} and {args.menu_png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
