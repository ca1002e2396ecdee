"""What ``skilldesk serve`` is configured with: where it binds, who may call it, its limits.

Identity is decided here and only here: a request's user is the one its API key maps to
(``api_keys``), or the single local ``user`` when no keys are configured. Nothing a request
sends (the OpenAI ``user`` field, a header, a path) ever names a folder on disk.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import SkillDeskError
from engine.fsutil import check_component

DEFAULT_PORT = 8765
MAX_BODY_BYTES = 1_000_000


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    user: str = "default"  # the single local user (no keys, or the user of a lone --api-key)
    api_keys: dict[str, str] = field(default_factory=dict)  # key -> user; empty = no auth
    learn: bool = True  # background evolution after each turn (a request may only turn it off)
    max_body_bytes: int = MAX_BODY_BYTES
    queue_wait_s: float = 30.0  # how long a request waits for the model before a 503
    max_waiting: int = 128  # requests allowed to wait at once; more get a 503 at once
    max_tokens_cap: int = 4096  # the largest max_tokens a request may ask for
    default_max_tokens: int = 512
    max_embedding_inputs: int = 256
    model_name: str = ""  # what /v1/models reports ("" = the desk's model name)

    def __post_init__(self) -> None:
        check_component(self.user, "user")
        for key, user in self.api_keys.items():
            if not isinstance(key, str) or len(key) < 8:
                raise SkillDeskError("every API key must be a string of 8 characters or more")
            check_component(user, "user")

    @property
    def users(self) -> list[str]:
        """Every user a request can be, in a stable order."""
        return sorted(set(self.api_keys.values())) if self.api_keys else [self.user]

    @property
    def auth(self) -> bool:
        return bool(self.api_keys)


def load_keys(path: str | os.PathLike) -> dict[str, str]:
    """A keys file: a JSON object ``{"<api key>": "<user>", ...}``."""
    p = Path(path).expanduser()
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SkillDeskError(f"cannot read keys file {p}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise SkillDeskError(f"keys file {p} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in data.items()):
        raise SkillDeskError(f'keys file {p} must be a JSON object {{"<key>": "<user>"}}')
    return dict(data)
