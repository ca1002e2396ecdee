"""The errors SkillDesk raises on purpose. Each carries a message a user can act on.

The CLI prints ``str(error)`` on one line (a traceback only with ``--debug``); the app shows it
in a dialog or the status bar. Anything that is not a ``SkillDeskError`` is a bug.
"""

from __future__ import annotations


class SkillDeskError(Exception):
    """Base class: an expected failure with a clear, one-line message."""


class UnsafePathError(SkillDeskError, ValueError):
    """A user id, skill name or path would escape the bank (``../``, absolute, NUL, symlink...)."""


class SkillFormatError(SkillDeskError, ValueError):
    """A SKILL.md file cannot be read: malformed YAML, not UTF-8, too large, no front-matter."""

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        self.reason = message
        super().__init__(f"{path}: {message}" if path else message)


class ConflictError(SkillDeskError):
    """A write was refused because the file changed since the writer read it (a hand edit).

    The caller re-reads the file and starts again from what is on disk now.
    """

    def __init__(self, path: str, expected: str | None, actual: str | None):
        self.path = path
        self.expected = expected
        self.actual = actual
        super().__init__(f"{path} changed on disk since it was read; re-read it and try again")


class ReadOnlyError(SkillDeskError):
    """An attempt to change a Common (shared) skill through evolution."""


class NotFoundError(SkillDeskError, KeyError):
    """No skill, version or model with that name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "not found"


class ChatHistoryError(SkillDeskError):
    """The chat history database is damaged or cannot be written (disk full, say)."""


class ModelError(SkillDeskError):
    """A model file is missing, truncated or not GGUF, or a backend cannot be reached."""


class StructuredOutputError(SkillDeskError):
    """A model's structured answer was not valid JSON or did not match its schema."""


class Cancelled(SkillDeskError):
    """A generation was stopped by the user."""
