"""SkillDesk desktop app (PySide6): presentation over the Qt-free engine. Entry: desktop.app.run_app."""
