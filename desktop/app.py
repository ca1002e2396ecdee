"""Entry point of the desktop app: ``run_app(args)`` (called by ``skilldesk`` with no command).

``create_window`` builds everything without entering the event loop, for tests and the
screenshot tool. ``args`` may carry ``bank`` and ``user`` (the CLI's ``--bank``/``--user``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication

from engine.settings import Settings

from . import theme
from .mainwindow import MainWindow
from .session import Session


def ensure_app(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance()
    if app is None:
        app = QApplication(argv or [sys.argv[0]])
    app.setApplicationName("SkillDesk")
    app.setOrganizationName("SkillDesk")
    app.setWindowIcon(theme.icon("app"))
    return app


def create_window(args: Any = None, settings: Settings | None = None,
                  qsettings: QSettings | None = None, engine: bool = True,
                  opener: Any = None) -> MainWindow:
    """The session and window, started (tree loading, engine opening), not yet shown.

    ``engine=False`` does not open the skill engine (tests of the skill views); ``opener``
    replaces how the engine is opened (tests: a desk on the scripted model).
    """
    app = ensure_app()
    first_run = not Settings.path().exists()
    settings = settings or Settings.load()
    user = getattr(args, "user", None)
    if user:
        settings.user = user
    theme.apply_theme(app, settings.theme)
    session = Session(settings, bank_dir=getattr(args, "bank", None),
                      **({"opener": opener} if opener is not None else {}))
    window = MainWindow(session, qsettings)
    session.start(engine=engine)
    window.show_notices(session.notices())
    window.first_run = first_run or session.starter_created
    if first_run:
        settings.save()
    return window


def run_app(args: argparse.Namespace | None = None) -> int:
    logging.basicConfig(level=logging.DEBUG if getattr(args, "debug", False) else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    app = ensure_app()
    window = create_window(args)
    window.show()
    if window.first_run:
        QTimer.singleShot(300, lambda: window.session.show_welcome(window))
    return int(app.exec())
