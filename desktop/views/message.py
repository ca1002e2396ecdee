"""One chat bubble: role, Markdown body (code blocks with Copy), and the skills used below it."""

from __future__ import annotations

import html

from PySide6.QtCore import QSize, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication, QTextOption
from PySide6.QtWidgets import QFrame, QLabel, QSizePolicy, QTextBrowser, QVBoxLayout

from .. import markdown, theme

ROLE_NAMES = {"user": "You", "assistant": "SkillDesk", "system": "SkillDesk"}
RENDER_INTERVAL_MS = 60  # while streaming, re-render at most this often


class _Body(QTextBrowser):
    """A QTextBrowser that is exactly as tall as its document (no inner scrollbar)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(2)
        self.document().contentsChanged.connect(self._fit)

    def _fit(self) -> None:
        self.document().setTextWidth(self.viewport().width())
        h = int(self.document().size().height()) + 4
        if h != self.height():
            self.setFixedHeight(h)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fit()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(400, self.height())


class MessageWidget(QFrame):
    """A message. ``set_text`` is cheap to call per token: rendering is throttled."""

    link_activated = Signal(str)  # "skill:<path>" links
    feedback_requested = Signal(str, str)  # "didn't fit": (skill path or id, the turn's query)
    remember_requested = Signal()  # "Remember this" on one of the user's messages

    def __init__(self, role: str, text: str = "", meta: dict | None = None,
                 message_id: int | None = None, parent=None):
        super().__init__(parent)
        self.setObjectName("Bubble")
        self.setProperty("role", role)
        self.role = role
        self.message_id = message_id
        self.meta = dict(meta or {})
        self._text = text
        self._blocks: list[str] = []
        self._streaming = False
        self._render_timer = QTimer(self, singleShot=True, interval=RENDER_INTERVAL_MS)
        self._render_timer.timeout.connect(self._render)

        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 8)
        lay.setSpacing(4)
        self.role_label = QLabel(ROLE_NAMES.get(role, role), objectName="BubbleRole")
        self.body = _Body(self)
        self.body.anchorClicked.connect(self._on_anchor)
        self.footer = QLabel(objectName="BubbleFooter")
        self.footer.setWordWrap(True)
        self.footer.setTextFormat(Qt.TextFormat.RichText)
        self.footer.linkActivated.connect(self._on_link)
        self.footer.hide()
        lay.addWidget(self.role_label)
        lay.addWidget(self.body)
        lay.addWidget(self.footer)
        self._render()
        self.set_meta(self.meta)

    # ------------------------------------------------------------------ content
    @property
    def text(self) -> str:
        return self._text

    def set_text(self, text: str, *, streaming: bool = False) -> None:
        self._text = text
        self._streaming = streaming
        if streaming:
            if not self._render_timer.isActive():
                self._render_timer.start()
        else:
            self._render_timer.stop()
            self._render()

    def append(self, chunk: str) -> None:
        self.set_text(self._text + chunk, streaming=True)

    def _render(self) -> None:
        text = self._text
        if self._streaming:
            text += " ▍"
        if self.role == "user":
            # The user's words are shown as typed (no Markdown surprises), line breaks kept.
            body = html.escape(text).replace("\n", "<br>")
            self._blocks = []
        else:
            rendered = markdown.render(text)
            body, self._blocks = rendered.html, rendered.blocks
        self.body.setHtml(body)

    def set_meta(self, meta: dict) -> None:
        """Footer: injected skills (links), model, speed, or an error note."""
        self.meta = dict(meta or {})
        c = theme.colors()
        parts: list[str] = []
        skills = self.meta.get("injected") or []
        if skills:
            links = []
            for s in skills:
                name = html.escape(str(s.get("title") or s.get("name") or "skill"))
                ver = html.escape(str(s.get("version", "")))
                score = s.get("score")
                score_txt = f" · {score:.2f}" if isinstance(score, int | float) else ""
                ref = str(s.get("path") or s.get("id") or "")
                href = html.escape(f"skill:{ref}", quote=True)
                if s.get("always"):
                    score_txt = " · always"
                cut_txt = ""
                if s.get("cut"):  # over the context budget: how much of the skill the model saw
                    cut_txt = html.escape(f" · {s.get('rules_shown')} of {s.get('rules_total')} "
                                          "rules (budget)")
                if s.get("didnt_fit"):
                    fit = f' <span style="color:{c["muted"]};">(didn\'t fit: noted)</span>'
                else:
                    fit = (f' <a href="{html.escape("fit:" + ref, quote=True)}" '
                           f'style="color:{c["muted"]};" title="This skill did not fit this '
                           f'answer">didn\'t fit?</a>')
                links.append(f'<a href="{href}" style="color:{c["link"]};">{name}</a>'
                             f" v{ver}{score_txt}{cut_txt}{fit}")
            parts.append("Skills used: " + ", ".join(links))
        info = []
        if self.meta.get("model"):
            info.append(html.escape(str(self.meta["model"])))
        if isinstance(self.meta.get("decode_tps"), int | float):
            info.append(f"{self.meta['decode_tps']:.1f} tok/s")
        if self.meta.get("finish_reason") == "cancelled":
            info.append("stopped")
        if self.meta.get("error"):
            info.append(f'<span style="color:#dc2626;">{html.escape(self.meta["error"])}</span>')
        if info:
            parts.append(" · ".join(info))
        if self.role == "user" and self.message_id is not None:
            state = self.meta.get("remembered")
            if state:  # asked for: where it stands ("remembering…", the skill, why not)
                parts.append(f'<span style="color:{c["muted"]};">{html.escape(str(state))}</span>')
            else:
                parts.append(f'<a href="remember:" style="color:{c["muted"]};" title="Learn a '
                             'skill from this message: you say it should hold in future chats">'
                             'Remember this</a>')
        self.footer.setText("<br>".join(parts))
        self.footer.setVisible(bool(parts))

    # ------------------------------------------------------------------ links
    def _on_anchor(self, url: QUrl) -> None:
        target = url.toString()
        if target.startswith("copy:"):
            try:
                code = self._blocks[int(target[5:])]
            except (ValueError, IndexError):
                return
            QGuiApplication.clipboard().setText(code)
            win = self.window()
            if hasattr(win, "statusBar"):
                win.statusBar().showMessage("Code copied to the clipboard", 2000)
            return
        self._on_link(target)

    def _on_link(self, target: str) -> None:
        if target.startswith("skill:"):
            self.link_activated.emit(target)
        elif target.startswith("fit:"):
            self.feedback_requested.emit(target[4:], str(self.meta.get("query") or ""))
        elif target == "remember:":
            self.remember_requested.emit()
        elif target.startswith(("http://", "https://")):
            QDesktopServices.openUrl(QUrl(target))

    def mark_didnt_fit(self, ref: str) -> None:
        """Show that the "didn't fit" on ``ref`` was recorded (kept in the message's meta)."""
        for s in self.meta.get("injected") or []:
            if ref in (str(s.get("path") or ""), str(s.get("id") or "")):
                s["didnt_fit"] = True
        self.set_meta(self.meta)

    def set_remembered(self, state: str) -> None:
        """Show where "Remember this" stands for this message (kept in its meta)."""
        self.meta["remembered"] = state
        self.set_meta(self.meta)

    def copy_blocks(self) -> list[str]:
        return list(self._blocks)
