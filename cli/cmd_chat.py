"""``skilldesk chat``: chat in the terminal with the same engine, bank and learning as the app.

Interactive by default (``/help`` lists the commands; Ctrl-C stops an answer, Ctrl-D quits).
``-m TEXT`` sends one message and prints the answer (``--json`` for the whole turn result), for
scripts. Conversations are saved in the same history the app shows.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
from dataclasses import asdict

from engine.errors import SkillDeskError
from engine.settings import Settings

from .main import add_bank_args

HELP = """commands:
  /new        start a new conversation      /skills   skills injected in the last answer
  /learning   background learning status    /pause    pause learning   /resume  resume it
  /remember   learn from your last message (you say it should last)
  /quit       leave (or Ctrl-D)             Ctrl-C    stop the answer being written"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chat", help="chat in the terminal (same engine, same bank)")
    add_bank_args(p)
    p.add_argument("--model", help="registry key or .gguf path (default: the settings)")
    p.add_argument("-m", "--message", help="send one message, print the answer, exit")
    p.add_argument("--json", action="store_true", help="with -m: print the turn as JSON")
    p.add_argument("--no-learn", action="store_true", help="do not learn from this chat")
    p.add_argument("--max-tokens", type=int, default=None)
    p.set_defaults(func=run)


def _open(args):
    from engine import SkillDesk

    settings = Settings.load()
    if args.model:
        settings.model.model = args.model
    desk = SkillDesk.open(args.bank, user=args.user or settings.user, config=settings,
                          create=True, starter=True)
    return desk, settings


def _footer(result) -> str:
    parts = []
    if result.injected:
        parts.append("skills: " + ", ".join(
            f"{s.title} v{s.version} ({s.score:.2f}"
            + (f", {s.rules_shown} of {s.rules_total} rules: budget" if s.cut else "") + ")"
            for s in result.injected))
    if result.decode_tps:
        parts.append(f"{result.decode_tps:.1f} tok/s")
    if result.trimmed_messages:
        parts.append(f"{result.trimmed_messages} old messages trimmed")
    if result.finish_reason == "cancelled":
        parts.append("stopped")
    return f"\033[2m[{' · '.join(parts)}]\033[0m" if parts else ""


def _params(max_tokens: int | None):
    from engine.llm.base import GenParams

    return GenParams(max_tokens=max_tokens) if max_tokens else None


def _stream(desk, messages, learn: bool, max_tokens: int | None):
    stream = desk.chat(messages, stream=True, learn=learn, params=_params(max_tokens))
    try:
        for chunk in stream:
            sys.stdout.write(chunk)
            sys.stdout.flush()
    except KeyboardInterrupt:
        stream.cancel()
        for _ in stream:  # drain: the worker stops within a token
            pass
    sys.stdout.write("\n")
    return stream.result


def run(args) -> int:
    desk, settings = _open(args)
    learn = settings.learning and not args.no_learn
    try:
        if args.message is not None:
            return _one_shot(desk, args, learn)
        return _repl(desk, args, learn)
    finally:
        if learn and args.message is not None:
            desk.learning.wait_idle(timeout=600)
        desk.close()


def _one_shot(desk, args, learn: bool) -> int:
    messages = [{"role": "user", "content": args.message}]
    if args.json:
        result = desk.chat(messages, stream=False, learn=learn, params=_params(args.max_tokens))
        print(json.dumps(asdict(result), ensure_ascii=False, default=str))
    else:
        result = _stream(desk, messages, learn, args.max_tokens)
        if result is not None:
            print(_footer(result), file=sys.stderr)
    return 0


def _repl(desk, args, learn: bool) -> int:
    from engine.chat.conversations import ConversationStore

    store = ConversationStore()
    if store.notice:
        print(f"skilldesk: warning: {store.notice}", file=sys.stderr)
    conv = store.new()
    notes: queue.Queue[str] = queue.Queue()
    remembering: set[str] = set()  # /remember jobs: the user hears how each one ended

    def on_event(ev) -> None:
        if ev.kind in ("add", "merge"):
            verb = "learned" if ev.kind == "add" else "updated"
            notes.put(f"\033[32m✓ {verb} skill: {ev.title or ev.skill_name} "
                      f"(v{ev.version})\033[0m {ev.path or ''}")
        elif ev.job_id in remembering and ev.kind in ("discard", "error"):
            notes.put(f"(not remembered: {ev.reason})")
        elif ev.job_id in remembering and ev.kind == "done":
            remembering.discard(ev.job_id)

    unsubscribe = desk.learning.subscribe(on_event)
    print("loading the model…", end="\r", flush=True)
    backend = desk.worker.wait_ready()
    print(f"SkillDesk chat · model: {backend.name} · "
          f"{len(desk.skills)} skills · learning {'on' if learn else 'off'} · /help")
    messages: list[dict[str, str]] = []
    last = None
    try:
        while True:
            while not notes.empty():
                print(notes.get())
            try:
                line = input("\033[1myou>\033[0m ").strip()
            except EOFError:
                print()
                return 0
            except KeyboardInterrupt:
                print()
                return 0
            if not line:
                continue
            if line.startswith("/"):
                cmd = line.split()[0]
                if cmd in ("/quit", "/exit"):
                    return 0
                if cmd == "/new":
                    messages, conv = [], store.new()
                    print("(new conversation)")
                elif cmd == "/skills":
                    for s in (last.injected if last else []):
                        print(f"  {s.title} v{s.version} score {s.score:.2f}  {s.path}")
                elif cmd == "/learning":
                    print(f"  {desk.learning.state()}")
                elif cmd == "/pause":
                    desk.learning.pause()
                    print("(learning paused)")
                elif cmd == "/resume":
                    desk.learning.resume()
                    print("(learning resumed)")
                elif cmd == "/remember":
                    if not messages:
                        print("(nothing to remember yet: say something first)")
                        continue
                    remembering.add(desk.remember(messages).job_id)
                    print("(remembering your last message: it is learned in the background)")
                else:
                    print(HELP)
                continue
            messages.append({"role": "user", "content": line})
            store.add_message(conv.id, "user", line)
            try:
                last = _stream(desk, messages, learn, args.max_tokens)
            except SkillDeskError as exc:
                messages.pop()
                print(f"error: {exc}", file=sys.stderr)
                continue
            if last is not None:
                messages.append({"role": "assistant", "content": last.text})
                store.add_message(conv.id, "assistant", last.text)
                footer = _footer(last)
                if footer:
                    print(footer)
    finally:
        unsubscribe()
        store.close()
