"""Widgets of the SkillDesk window (presentation only; the engine does the work)."""
