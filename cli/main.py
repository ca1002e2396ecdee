"""``skilldesk``: with no subcommand, open the desktop app; otherwise run a subcommand.

Each subcommand lives in its own module of this package, which defines ``register(subparsers)``
(adding its parser and ``set_defaults(func=...)``). ``func(args)`` returns the exit code.
Errors that are ``SkillDeskError`` print as one line (a traceback only with ``--debug``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from engine import __version__
from engine.errors import SkillDeskError
from engine.settings import Settings

# Subcommand modules, in --help order.
COMMANDS = ["chat", "search", "index", "skills", "import_", "consolidate", "serve", "models",
            "bench"]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def add_bank_args(p: argparse.ArgumentParser) -> None:
    """``--bank`` and ``--user``, which every subcommand takes."""
    p.add_argument("--bank", metavar="DIR", default=None,
                   help="skill bank folder (default: $SKILLDESK_BANK or the settings)")
    p.add_argument("--user", metavar="U", default=None,
                   help="user whose skills to use (default: the settings, or 'default')")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skilldesk",
        description="SkillDesk: an offline assistant that learns skills from the way you work. "
                    "With no command, opens the desktop app.")
    parser.add_argument("--version", action="version", version=f"skilldesk {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"cli.cmd_{name}").register(sub)
    return parser


def _open_app(args: argparse.Namespace) -> int:
    if sys.platform.startswith("linux") and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
            or os.environ.get("QT_QPA_PLATFORM")):
        print("skilldesk: no display found, so the desktop app cannot open.\n"
              "  Chat in the terminal instead:   skilldesk chat\n"
              "  Or start a virtual display:      xvfb-run skilldesk\n"
              "  (QT_QPA_PLATFORM=offscreen runs the app without any window.)", file=sys.stderr)
        return EXIT_ERROR
    from desktop.app import run_app  # the only place the CLI touches Qt

    return run_app(args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None) or _open_app
    if func is not _open_app:  # the app shows these in its window
        for problem in Settings.load().problems:  # said once per command, not per load
            print(f"skilldesk: warning: {problem}", file=sys.stderr)
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `skilldesk ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except SkillDeskError as exc:
        if args.debug:
            raise
        print(f"skilldesk: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
