"""User settings (one JSON file in SKILLDESK_HOME) and the places SkillDesk keeps things.

Shared by the app, the CLI and the proxy, so they agree on the bank, the user and the model.
Resolution order for the bank: explicit argument > ``$SKILLDESK_BANK`` > settings > the
checkout's ``SkillBank/``. For the model: argument > ``$SKILLDESK_MODEL`` > settings > registry
default (the recommended model when installed, else the bundled one).
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import platformdirs

from engine.errors import UnsafePathError
from engine.fsutil import atomic_write, check_component

ROOT = Path(__file__).resolve().parent.parent  # the checkout, or site-packages for a wheel
# Shipped data (prompts, themes, icons, the model registry, starter skills). Wheels install
# unpacked, so the package folder is a real directory.
RESOURCES = Path(str(importlib.resources.files("resources")))
# Run from a checkout (``make run``), models and the default bank live in it; installed from a
# wheel, in the platform's user data folder.
IN_CHECKOUT = (ROOT / "pyproject.toml").is_file() and (ROOT / "engine").is_dir()
_DATA = ROOT if IN_CHECKOUT else Path(platformdirs.user_data_dir("skilldesk", "SkillDesk"))
MODELS_DIR = _DATA / "models"
DEFAULT_BANK = _DATA / "SkillBank"


def home_dir() -> Path:
    """Settings and chat history: ``$SKILLDESK_HOME`` or the platform's user data dir."""
    env = os.environ.get("SKILLDESK_HOME")
    path = Path(env) if env else Path(platformdirs.user_data_dir("skilldesk", "SkillDesk"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class RetrievalSettings:
    top_k: int = 3
    # η: the least P(related) (engine/retrieval/relevance.py) a skill needs to be injected
    # (engine/retrieval/__init__.py has the measurement). Was ``threshold``, η on the fused
    # score: a saved value of that key meant something else and is ignored.
    min_relevance: float = 0.45
    # The self-filter: on models able to judge (engine/llm/tiers.py), one short model call
    # after retrieval keeps only the skills that fit the request (engine/chat/skill_filter.py).
    # It runs only when a skill passed η; False turns it off.
    self_filter: bool = True
    # Decide the skills of the message being typed when the user pauses, and evaluate its
    # prompt (SkillDesk.prepare): the answer then starts as soon as it is sent.
    prepare: bool = True
    scope: str = "all"  # "user" | "common" | "all"


@dataclass
class ModelSettings:
    model: str = ""  # registry key, a .gguf path, or "" for the registry default
    backend: str = "local"  # "local" | "openai"
    base_url: str = "http://127.0.0.1:8080/v1"
    api_model: str = ""
    api_key: str = ""
    n_threads: int = 0  # 0 = physical cores
    n_ctx: int = 0  # 0 = the registry default for the model
    temperature: float | None = None
    system_prompt: str = "You are SkillDesk, a helpful assistant running locally."


@dataclass
class Settings:
    bank: str = ""
    user: str = "default"
    learning: bool = True
    theme: str = "light"
    editor_command: str = ""  # e.g. "code -w {path}"; empty = the desktop's default app
    embedder: str = ""  # "" = the measured default
    model: ModelSettings = field(default_factory=ModelSettings)
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)

    # --- derived -------------------------------------------------------------------------
    def bank_dir(self, override: str | os.PathLike | None = None) -> Path:
        chosen = override or os.environ.get("SKILLDESK_BANK") or self.bank or DEFAULT_BANK
        return Path(chosen).expanduser()

    def model_ref(self, override: str | None = None) -> str:
        return override or os.environ.get("SKILLDESK_MODEL") or self.model.model

    # --- persistence ---------------------------------------------------------------------
    @classmethod
    def path(cls) -> Path:
        return home_dir() / "settings.json"

    @classmethod
    def load(cls) -> Settings:
        """The saved settings. Never raises: what cannot be used is listed in ``problems``.

        A file that is not JSON (truncated, say) gives the defaults; a value of the wrong type
        or out of range gives that setting's default; an unknown key is ignored. Each case adds
        one line to ``problems``, which the app and the CLI show once at start.
        """
        path = cls.path()
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls()
        except OSError as exc:
            s = cls()
            s.problems.append(f"{path.name} cannot be read ({exc.strerror or exc}); "
                              "using the default settings")
            return s
        try:
            data = json.loads(raw.decode("utf-8-sig"))
        except UnicodeDecodeError:
            why = "is not UTF-8 text"
        except json.JSONDecodeError as exc:
            why = f"is not valid JSON (line {exc.lineno}: {exc.msg})"
        except (ValueError, RecursionError):
            why = "is not usable JSON (nested too deeply or a number too long)"
        else:
            why = "" if isinstance(data, dict) else "does not hold a JSON object"
        if why:
            s = cls()
            s.problems.append(f"{path.name} {why}; using the default settings")
            return s
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict) -> Settings:
        """Settings from a parsed settings file; every value is checked against its field."""
        problems: list[str] = []
        s = cls(**_checked(cls, data, "", problems))
        for name, sub in (("model", ModelSettings), ("retrieval", RetrievalSettings)):
            if name not in data:
                continue
            if isinstance(data[name], dict):
                setattr(s, name, sub(**_checked(sub, data[name], f"{name}.", problems)))
            else:
                problems.append(f"settings.json: '{name}' must be an object of settings, not "
                                f"{_show(data[name])}; using the defaults")
        s.problems = problems
        return s

    def __post_init__(self) -> None:
        self.problems: list[str] = []  # not a field: never saved
        self._kept_bad_file = False

    def save(self) -> None:
        """Write the settings atomically. If the file on disk had problems when it was loaded,
        it is first kept beside as ``settings.json.bad-<time>`` (a hand edit is never lost)."""
        path = self.path()
        if self.problems and not self._kept_bad_file and path.is_file():
            with contextlib.suppress(OSError):
                shutil.copy2(path, path.with_name(f"{path.name}.bad-{int(time.time())}"))
            self._kept_bad_file = True
        atomic_write(path, json.dumps(asdict(self), indent=2, ensure_ascii=False))


# --------------------------------------------------------------------------- checking values
_CHOICES = {"retrieval.scope": ("user", "common", "all"), "model.backend": ("local", "openai"),
            "theme": ("light", "dark")}
_MINIMUM = {"retrieval.top_k": 1, "model.n_threads": 0, "model.n_ctx": 0,
            "retrieval.min_relevance": 0.0, "model.temperature": 0.0}
# Settings an older SkillDesk wrote whose meaning changed: dropped quietly on load (the next
# save leaves them out), never reported as a problem with the user's file.
_RETIRED = {"retrieval.threshold"}  # η on the fused score; now retrieval.min_relevance


def _user_problem(value: str) -> str:
    try:
        check_component(value, "user")
    except UnsafePathError as exc:
        return f"is not a usable user name ({str(exc)[:80]})"
    return ""


def _bank_problem(value: str) -> str:
    if value and Path(value).expanduser().exists() and not Path(value).expanduser().is_dir():
        return f"names a file, not a folder ({_show(value)})"
    return ""


_VALIDATORS = {"user": _user_problem, "bank": _bank_problem}
_KIND = {"int": "a whole number", "float": "a number", "str": "text", "bool": "true or false",
         "float | None": "a number or null"}


def _show(value: object) -> str:
    """A value for a one-line message: JSON, control characters escaped, at most 40 chars."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value, ensure_ascii=not str(value).isprintable())
    return text if len(text) <= 40 else text[:39] + "…"


def _name(key: str) -> str:
    """A key as the user typed it, on one line (control characters escaped)."""
    key = key if len(key) <= 60 else key[:59] + "…"
    return f"'{key}'" if key.isprintable() else json.dumps(key)


def _fits(kind: str, value: object) -> bool:
    if isinstance(value, bool):
        return kind == "bool"
    if kind == "int":
        return isinstance(value, int)
    if kind in ("float", "float | None"):
        return (value is None and kind == "float | None") or (
            isinstance(value, (int, float)) and math.isfinite(value))
    if kind == "str":
        return isinstance(value, str) and "\x00" not in value
    return False


def _checked(dc: type, raw: dict, prefix: str, problems: list[str]) -> dict:
    """The keys of ``raw`` that are fields of ``dc`` with a usable value; the rest reported."""
    out = {}
    known = {f.name: f for f in fields(dc)}
    for key, value in raw.items():
        f = known.get(key)
        name = f"{prefix}{key}"
        if f is None:
            if name not in _RETIRED:
                problems.append(f"settings.json: unknown setting {_name(name)} ignored")
            continue
        kind = str(f.type)
        if kind not in _KIND:
            continue  # a nested group: handled by the caller
        default = f.default
        if not _fits(kind, value):
            problems.append(f"settings.json: '{name}' must be {_KIND[kind]}, not {_show(value)}; "
                            f"using {_show(default)}")
            continue
        if name in _CHOICES and value not in _CHOICES[name]:
            problems.append(f"settings.json: '{name}' must be one of "
                            f"{', '.join(_CHOICES[name])}, not {_show(value)}; "
                            f"using {_show(default)}")
            continue
        why = _VALIDATORS[name](value) if name in _VALIDATORS else ""
        if why:
            problems.append(f"settings.json: '{name}' {why}; using {_show(default)}")
            continue
        if name in _MINIMUM and value is not None and value < _MINIMUM[name]:
            problems.append(f"settings.json: '{name}' must be at least {_MINIMUM[name]}, not "
                            f"{_show(value)}; using {_show(default)}")
            continue
        out[key] = value
    return out
