"""Markdown → HTML for chat bubbles and skill views, with code blocks that have a Copy link.

Prose is rendered by Qt's own CommonMark/GFM reader (``QTextDocument.setMarkdown``); fenced
code blocks are cut out first and rendered as framed ``<pre>`` blocks whose header carries a
``copy:N`` link (the view copies ``blocks[N]`` when it is clicked). An unclosed fence (common
while an answer is still streaming) is shown as code up to the end.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from PySide6.QtGui import QTextDocument

from . import theme

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)[^\n]*$")
_BODY = re.compile(r"<body[^>]*>(.*)</body>", re.S)
_SMALLER = {"xx-large": "large", "x-large": "medium", "large": "medium"}
_SIZE = re.compile(r"font-size:(xx-large|x-large|large);")


@dataclass
class Rendered:
    html: str
    blocks: list[str] = field(default_factory=list)  # code of each block, for copy:N


def split_fences(text: str) -> list[tuple[str, str, str]]:
    """``[(kind, lang, text)]`` with kind ``"prose"`` or ``"code"``, in order."""
    out: list[tuple[str, str, str]] = []
    prose: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            prose.append(lines[i])
            i += 1
            continue
        if prose:
            out.append(("prose", "", "\n".join(prose)))
            prose = []
        fence, lang = m["fence"], m["lang"]
        code: list[str] = []
        i += 1
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                i += 1
                break
            code.append(lines[i])
            i += 1
        out.append(("code", lang, "\n".join(code)))
    if prose:
        out.append(("prose", "", "\n".join(prose)))
    return out


def prose_html(text: str) -> str:
    if not text.strip():
        return ""
    doc = QTextDocument()
    doc.setMarkdown(text, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    m = _BODY.search(doc.toHtml())
    body = m.group(1) if m else html.escape(text)
    # Qt's heading sizes are poster-sized in a bubble: scaled down, in one pass.
    return _SIZE.sub(lambda m: f"font-size:{_SMALLER[m.group(1)]};", body)


def code_html(code: str, lang: str, index: int) -> str:
    c = theme.colors()
    label = html.escape(lang or "code")
    body = html.escape(code) or "&nbsp;"
    return (
        f'<table width="100%" border="0" cellspacing="0" cellpadding="6" '
        f'bgcolor="{c["code_bg"]}" style="margin-top:6px; margin-bottom:6px;">'
        f'<tr bgcolor="{c["code_border"]}"><td><span style="color:{c["muted"]}; '
        f'font-size:small;">{label}</span></td>'
        f'<td align="right"><a href="copy:{index}" style="color:{c["link"]}; '
        f'text-decoration:none; font-size:small;">Copy</a></td></tr>'
        f'<tr><td colspan="2"><pre style="font-family:{theme.mono_css_families()}; '
        f'margin:0px;">{body}</pre></td></tr></table>')


def render(text: str) -> Rendered:
    """HTML for ``text`` plus the code blocks the Copy links refer to."""
    parts: list[str] = []
    blocks: list[str] = []
    for kind, lang, chunk in split_fences(text):
        if kind == "code":
            parts.append(code_html(chunk, lang, len(blocks)))
            blocks.append(chunk)
        else:
            parts.append(prose_html(chunk))
    return Rendered("".join(parts), blocks)
