"""User settings (one JSON file in SKILLDESK_HOME) and the places SkillDesk keeps things.

Shared by the app, the CLI and the proxy, so they agree on the bank, the user and the model.
Resolution order for the bank: explicit argument > ``$SKILLDESK_BANK`` > settings > the
checkout's ``SkillBank/``. For the model: argument > ``$SKILLDESK_MODEL`` > settings > registry
default (the recommended model when installed, else the bundled one).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import platformdirs

from engine.fsutil import atomic_write

ROOT = Path(__file__).resolve().parent.parent  # the checkout (editable install)
RESOURCES = ROOT / "resources"
MODELS_DIR = ROOT / "models"
DEFAULT_BANK = ROOT / "SkillBank"


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
        """The saved settings; unknown keys are ignored, a broken file falls back to defaults."""
        try:
            data = json.loads(cls.path().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        return cls.from_dict(data if isinstance(data, dict) else {})

    @classmethod
    def from_dict(cls, data: dict) -> Settings:
        def pick(dc, raw):
            names = {f.name for f in fields(dc)}
            return {k: v for k, v in (raw or {}).items() if k in names}

        s = cls(**{k: v for k, v in pick(cls, data).items() if k not in ("model", "retrieval")})
        if isinstance(data.get("model"), dict):
            s.model = ModelSettings(**pick(ModelSettings, data["model"]))
        if isinstance(data.get("retrieval"), dict):
            s.retrieval = RetrievalSettings(**pick(RetrievalSettings, data["retrieval"]))
        return s

    def save(self) -> None:
        atomic_write(self.path(), json.dumps(asdict(self), indent=2, ensure_ascii=False))
