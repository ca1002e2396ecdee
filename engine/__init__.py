"""SkillDesk's Qt-free core: skills on disk, retrieval, local models and the learning loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from engine.desk import SkillDesk

__all__ = ["SkillDesk", "__version__"]


def __getattr__(name: str):
    # ``from engine import SkillDesk`` without making ``import engine`` load numpy/hnswlib.
    if name == "SkillDesk":
        from engine.desk import SkillDesk

        return SkillDesk
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
