"""Look and feel: light/dark palettes + QSS from ``resources/themes``, icons, CJK-capable fonts."""

from __future__ import annotations

from functools import cache

from PySide6.QtGui import QColor, QFont, QFontDatabase, QIcon, QPalette
from PySide6.QtWidgets import QApplication

from engine.settings import RESOURCES

THEMES = ("light", "dark")
ICONS_DIR = RESOURCES / "icons"
THEMES_DIR = RESOURCES / "themes"

# Colours used outside QSS (palette, Markdown/diff HTML).
COLORS = {
    "light": {"window": "#f6f7f9", "base": "#ffffff", "text": "#1f2328", "muted": "#6b7280",
              "code_bg": "#f3f4f6", "code_border": "#e3e6ea", "link": "#2563eb",
              "add": "#dcfce7", "del": "#fee2e2", "hunk": "#e0e7ff", "button": "#ffffff",
              "highlight": "#3b82f6", "danger": "#b91c1c"},
    "dark": {"window": "#16181d", "base": "#1e2128", "text": "#e6e8eb", "muted": "#8b949e",
             "code_bg": "#111318", "code_border": "#2a2e36", "link": "#60a5fa",
             "add": "#14361f", "del": "#4a1d1d", "hunk": "#1e2a4a", "button": "#23272f",
             "highlight": "#3b82f6", "danger": "#f87171"},
}

# Latin first, then a CJK face: Qt picks per glyph, so Chinese renders without tofu.
UI_FAMILIES = ["Noto Sans", "DejaVu Sans", "Segoe UI", "Helvetica Neue", "WenQuanYi Micro Hei",
               "Noto Sans CJK SC", "Microsoft YaHei", "PingFang SC"]
MONO_FAMILIES = ["DejaVu Sans Mono", "Menlo", "Consolas", "WenQuanYi Micro Hei Mono",
                 "Noto Sans Mono CJK SC", "monospace"]

_current = {"name": "light"}


def current() -> str:
    return _current["name"]


def colors(name: str | None = None) -> dict[str, str]:
    return COLORS.get(name or current(), COLORS["light"])


@cache
def icon(name: str) -> QIcon:
    path = ICONS_DIR / f"{name}.svg"
    return QIcon(str(path)) if path.is_file() else QIcon()


def _available(families: list[str]) -> list[str]:
    have = set(QFontDatabase.families())
    found = [f for f in families if f in have]
    return found or families[-1:]


def ui_font(point_size: float = 10.0) -> QFont:
    font = QFont()
    font.setFamilies(_available(UI_FAMILIES))
    font.setPointSizeF(point_size)
    return font


def mono_css_families() -> str:
    return ", ".join(f"'{f}'" for f in _available(MONO_FAMILIES))


def _palette(name: str) -> QPalette:
    c = colors(name)
    pal = QPalette()
    role = QPalette.ColorRole
    pal.setColor(role.Window, QColor(c["window"]))
    pal.setColor(role.WindowText, QColor(c["text"]))
    pal.setColor(role.Base, QColor(c["base"]))
    pal.setColor(role.AlternateBase, QColor(c["window"]))
    pal.setColor(role.Text, QColor(c["text"]))
    pal.setColor(role.Button, QColor(c["button"]))
    pal.setColor(role.ButtonText, QColor(c["text"]))
    pal.setColor(role.ToolTipBase, QColor(c["base"]))
    pal.setColor(role.ToolTipText, QColor(c["text"]))
    pal.setColor(role.PlaceholderText, QColor(c["muted"]))
    pal.setColor(role.Highlight, QColor(c["highlight"]))
    pal.setColor(role.HighlightedText, QColor("#ffffff"))
    pal.setColor(role.Link, QColor(c["link"]))
    for r in (role.Text, role.WindowText, role.ButtonText):
        pal.setColor(QPalette.ColorGroup.Disabled, r, QColor(c["muted"]))
    return pal


def apply_theme(app: QApplication, name: str) -> str:
    """Apply ``light`` or ``dark`` (anything else falls back to light); returns the name used."""
    name = name if name in THEMES else "light"
    _current["name"] = name
    app.setStyle("Fusion")
    app.setPalette(_palette(name))
    app.setFont(ui_font())
    qss = THEMES_DIR / f"{name}.qss"
    app.setStyleSheet(qss.read_text(encoding="utf-8") if qss.is_file() else "")
    return name
