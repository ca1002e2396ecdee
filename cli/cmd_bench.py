"""`skilldesk bench NAME [ARGS...]`: run one benchmark and print its table.

Generic on purpose: the names come from ``bench.BENCHES`` and ``bench NAME ARGS``
calls ``bench.NAME.main(ARGS)`` (imported only then), so adding a bench never touches
this file. ``skilldesk bench NAME --help`` shows that bench's own options.
"""

from __future__ import annotations

import argparse

from bench import BENCHES, load


def register(sub) -> None:
    p = sub.add_parser(
        "bench", help="run a benchmark and print its table",
        description="Run one of SkillDesk's benchmarks. Options after NAME belong to that "
                    "bench; see `skilldesk bench NAME --help`.")
    p.add_argument("--bank", metavar="DIR", default=None,
                   help="skill bank folder, forwarded to the bench")
    p.add_argument("--user", metavar="U", default=None, help="user, forwarded to the bench")
    p.add_argument("name", choices=BENCHES, metavar="NAME",
                   help=f"which bench: {', '.join(BENCHES)}")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="options for the bench (e.g. --model REF --runs N --max-tokens N)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    module = load(args.name)
    forwarded: list[str] = []
    if args.bank:
        forwarded += ["--bank", args.bank]
    if args.user:
        forwarded += ["--user", args.user]
    return int(module.main(forwarded + list(args.bench_args)) or 0)
