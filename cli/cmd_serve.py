"""``skilldesk serve``: the OpenAI-compatible proxy (chat with skills, embeddings, skill API).

Local model by default; ``--backend openai --base-url URL`` puts the proxy in front of another
OpenAI-compatible server instead (llama.cpp's server, vLLM, Ollama...). Binds 127.0.0.1 unless
told otherwise. With ``--api-key`` (or ``$SKILLDESK_API_KEY``) every endpoint but ``/health``
needs ``Authorization: Bearer KEY`` and acts as ``--user``; ``--keys FILE`` maps several keys
to several users. The request's own ``user`` field is ignored.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from engine.errors import SkillDeskError

from .common import resolve
from .main import add_bank_args


def register(sub: argparse._SubParsersAction) -> None:
    from server.config import DEFAULT_PORT, MAX_BODY_BYTES

    p = sub.add_parser("serve", help="OpenAI-compatible proxy: chat with skills, skill API",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    p.add_argument("--api-key", metavar="KEY", default=None,
                   help="require this bearer key (default: $SKILLDESK_API_KEY; none = no auth)")
    p.add_argument("--keys", metavar="FILE", default=None,
                   help='JSON {"<key>": "<user>", ...}: several keys, each acting as its user')
    add_bank_args(p)
    p.add_argument("--model", metavar="REF", default=None,
                   help="model: registry key or .gguf path (default: settings / bundled); "
                        "with --backend openai, the upstream model name")
    p.add_argument("--backend", choices=["local", "openai"], default=None,
                   help="local GGUF (default) or an upstream OpenAI-compatible server")
    p.add_argument("--base-url", metavar="URL", default=None,
                   help="upstream server for --backend openai (e.g. http://127.0.0.1:8080/v1)")
    p.add_argument("--upstream-key", metavar="KEY", default=None,
                   help="API key sent to the upstream server")
    p.add_argument("--threads", type=int, default=None, help="llama.cpp threads (local)")
    p.add_argument("--no-learn", action="store_true",
                   help="never learn skills from requests (retrieval still runs)")
    p.add_argument("--max-body", type=int, default=MAX_BODY_BYTES, metavar="BYTES",
                   help=f"largest request body (default {MAX_BODY_BYTES})")
    p.add_argument("--queue-wait", type=float, default=30.0, metavar="S",
                   help="seconds a request waits for the model before a 503 (default 30)")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=run)


def build_settings(args: argparse.Namespace):
    """The settings with this command's model/backend overrides applied."""
    from engine.settings import Settings

    settings = Settings.load()
    m = settings.model
    changes: dict = {}
    if args.backend:
        changes["backend"] = args.backend
    if args.base_url:
        changes["base_url"] = args.base_url
        changes.setdefault("backend", "openai")
    if args.upstream_key is not None:
        changes["api_key"] = args.upstream_key
    if args.model:
        key = "api_model" if changes.get("backend", m.backend) == "openai" else "model"
        changes[key] = args.model
    if args.threads:
        changes["n_threads"] = args.threads
    settings.model = dataclasses.replace(m, **changes)
    if args.no_learn:
        settings.learning = False
    return settings


def build_config(args: argparse.Namespace, user: str, settings):
    from server import ServerConfig, load_keys

    keys: dict[str, str] = {}
    if args.keys:
        keys.update(load_keys(args.keys))
    api_key = args.api_key if args.api_key is not None else os.environ.get("SKILLDESK_API_KEY")
    if api_key:
        keys[api_key] = user
    return ServerConfig(host=args.host, port=args.port, user=user, api_keys=keys,
                        learn=not args.no_learn and settings.learning,
                        max_body_bytes=args.max_body, queue_wait_s=args.queue_wait)


def run(args: argparse.Namespace) -> int:
    from server import Desks, create_app, serve

    bank, user = resolve(args, must_exist=False)
    settings = build_settings(args)
    config = build_config(args, user, settings)
    if config.host not in ("127.0.0.1", "localhost", "::1") and not config.auth:
        print("skilldesk: warning: listening beyond this machine without an API key; anyone "
              "who can reach the port can use your skills", file=sys.stderr)
    m = settings.model
    where = f"upstream {m.base_url}" if m.backend == "openai" else (m.model or "default model")
    print(f"skilldesk serve: opening bank {bank.root} for {', '.join(config.users)} "
          f"({where})...", file=sys.stderr)
    try:
        desks = Desks(bank.root, config.users, settings)
    except (OSError, ValueError) as exc:
        raise SkillDeskError(f"cannot open the bank: {exc}") from exc
    try:
        desks.wait_ready()  # a bad model file fails here, with the model's own message
        app = create_app(desks, config)
        print(f"skilldesk serve: http://{config.host}:{config.port}/v1  model {desks.model_name}"
              f"  learning {'on' if config.learn else 'off'}"
              f"  auth {'on' if config.auth else 'off'}  (Ctrl-C stops)", file=sys.stderr)
        serve(app, config, log_level=args.log_level)
    finally:
        desks.close()
    return 0
