"""SkillDesk's Qt-free core: skills on disk, retrieval, local models and the learning loop."""

__version__ = "0.1.0"
