"""The prompt files in ``resources/prompts/``: loading, per-model variants, filling.

Format (see ``resources/prompts/README.md``): ``<name>.md`` has YAML front-matter (``name``,
``inputs``, ``schema``, generation defaults) and a body of ``=== role ===`` sections, the
few-shot examples being ordinary user/assistant pairs; ``<name>.schema.json`` is the answer's
JSON schema. ``<name>.<tier>.md`` overrides the base prompt for one model tier.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine.errors import SkillDeskError
from engine.settings import RESOURCES

PROMPTS_DIR = RESOURCES / "prompts"
ROLES = ("system", "user", "assistant")
_SECTION = re.compile(r"^=== (system|user|assistant) ===[ \t]*$", re.M)
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


class PromptError(SkillDeskError):
    """A prompt file is missing or malformed, or was filled with the wrong inputs."""


@dataclass(frozen=True)
class Prompt:
    """One prompt: its message templates, declared inputs, answer schema and defaults."""

    name: str
    inputs: tuple[str, ...]
    messages: tuple[tuple[str, str], ...]  # (role, template)
    schema: dict[str, Any] | None = None
    max_tokens: int = 256
    temperature: float | None = None
    variant: str = ""
    path: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def render(self, **values: Any) -> list[dict[str, str]]:
        """The chat messages with every ``{{input}}`` filled; wrong inputs raise PromptError."""
        missing = [k for k in self.inputs if k not in values]
        unknown = [k for k in values if k not in self.inputs]
        if missing or unknown:
            raise PromptError(f"prompt {self.name!r}: missing inputs {missing}, "
                              f"unknown inputs {unknown}")
        text_values = {k: "" if v is None else str(v) for k, v in values.items()}
        out = []
        for role, template in self.messages:
            content = _PLACEHOLDER.sub(lambda m: text_values[m[1]], template).strip()
            out.append({"role": role, "content": content})
        return out


def _parse(path: Path, variant: str) -> Prompt:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptError(f"cannot read prompt {path}: {exc}") from None
    if not text.startswith("---"):
        raise PromptError(f"{path}: a prompt file starts with YAML front-matter ('---')")
    try:
        _, head, body = text.split("---", 2)
        meta = yaml.safe_load(head) or {}
    except (ValueError, yaml.YAMLError) as exc:
        raise PromptError(f"{path}: malformed front-matter ({exc})") from None
    parts = _SECTION.split(body)
    messages = tuple((parts[i], parts[i + 1].strip("\n")) for i in range(1, len(parts) - 1, 2))
    if not messages:
        raise PromptError(f"{path}: no '=== system|user|assistant ===' sections")
    inputs = tuple(meta.get("inputs") or ())
    used = {m for _, t in messages for m in _PLACEHOLDER.findall(t)}
    if used != set(inputs):
        raise PromptError(f"{path}: declared inputs {sorted(inputs)} but the text uses "
                          f"{sorted(used)}")
    schema = None
    schema_ref = str(meta.get("schema") or "none")
    if schema_ref != "none":
        try:
            schema = json.loads((path.parent / schema_ref).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PromptError(f"{path}: cannot load schema {schema_ref} ({exc})") from None
    known = {"name", "inputs", "schema", "max_tokens", "temperature"}
    return Prompt(name=str(meta.get("name") or path.stem.split(".")[0]), inputs=inputs,
                  messages=messages, schema=schema, max_tokens=int(meta.get("max_tokens", 256)),
                  temperature=meta.get("temperature"), variant=variant, path=path,
                  extra={k: v for k, v in meta.items() if k not in known})


@functools.lru_cache(maxsize=64)
def _load_cached(name: str, variant: str, lang: str, directory: str) -> Prompt:
    base = Path(directory)
    for parts in ([variant, lang], [lang], [variant]):
        parts = [p for p in parts if p]
        if parts:
            special = base / f"{name}.{'.'.join(parts)}.md"
            if special.is_file():
                return _parse(special, ".".join(parts))
    path = base / f"{name}.md"
    if not path.is_file():
        raise PromptError(f"no prompt file {path}")
    return _parse(path, "")


def load(name: str, variant: str | None = None, directory: str | Path | None = None,
         lang: str | None = None) -> Prompt:
    """The prompt ``name``: the most specific of ``<name>.<variant>.<lang>.md``,
    ``<name>.<lang>.md``, ``<name>.<variant>.md`` that exists, else ``<name>.md``.

    ``variant`` is the model tier; ``lang`` the conversation's language (``zh``), for prompts
    whose few-shot examples must be in the user's language (small models copy their language).
    """
    return _load_cached(name, variant or "", "" if lang in (None, "en") else lang,
                        str(directory or PROMPTS_DIR))

