"""Small text tools shared by the learning loop: tokens, overlap, language, PII scrubbing.

Everything here is cheap and deterministic (no model): the gate, the topic-boundary detector,
the junk checks and the rule-based steps for weak models are built from these.
"""

from __future__ import annotations

import re
import unicodedata

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(r"[a-z0-9][a-z0-9_+#'.-]*")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"\bhttps?://\S+|\bwww\.\S+", re.I)
_PHONE = re.compile(r"(?<![\w.])\+?\d[\d\s().-]{6,}\d(?![\w.])")
_LONGNUM = re.compile(r"(?<![\w.])#?\d{5,}(?![\w.])")

STOPWORDS = frozenset("""
a an the and or but if then so to of in on at by for with from as is are was were be been being
it its this that these those i me my we our you your he she they them their his her what which
who whom when where why how all any both each few more most other some such no nor not only own
same than too very can will just do does did doing have has had having would should could may
might must shall about above after again against before below between into through during out
over under up down further once here there also please pls let make give write get use using
want need like now ok okay thanks thank yes sure always every each
""".split())

ZH_STOP = frozenset("的了是在我你他她它们这那和与就都也还要请把给吗呢吧啊一个")


def cjk_ratio(text: str) -> float:
    """Share of CJK characters among the letters of ``text`` (0 for empty text)."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 0.0
    return sum(1 for c in letters if _CJK_RUN.fullmatch(c)) / len(letters)


def cjk_count(text: str) -> int:
    """The CJK characters of ``text`` (how long a Chinese name, tag or clause is: two
    characters make about one word)."""
    return sum(len(m) for m in _CJK_RUN.findall(text or ""))


def language(text: str) -> str:
    """``"zh"`` when the text is mostly Chinese, else ``"en"`` (good enough for our checks)."""
    return "zh" if cjk_ratio(text) >= 0.3 else "en"


# A typographic apostrophe inside a word ("don’t", "I’m": what macOS, iOS and word processors
# type) is the ASCII one, so cue words, tokens and comparisons read it the same.
_APOSTROPHE = re.compile(r"(?<=\w)[’ʼ](?=\w)")


def normalize(text: str) -> str:
    return _APOSTROPHE.sub("'", unicodedata.normalize("NFKC", text or "")).lower().strip()


def _stem(word: str) -> str:
    """A crude stem: enough to match summarize/summaries, bullet/bullets, formal/formally."""
    word = word.strip("'.-")
    if len(word) > 5:
        return word[:5]
    if len(word) > 3 and word.endswith("s"):
        return word[:-1]
    return word


def content_tokens(text: str) -> set[str]:
    """Content words (crudely stemmed) and CJK character bigrams of ``text``."""
    t = normalize(text)
    out: set[str] = set()
    for w in _WORD.findall(t):
        w = w[:-2] if w.endswith("'s") else w  # "Dani's" is Dani ("it's" is it, a stopword)
        if w not in STOPWORDS and len(w) > 1:
            out.add(_stem(w))
    for run in _CJK_RUN.findall(t):
        chars = [c for c in run if c not in ZH_STOP] or list(run)
        if len(chars) == 1:
            out.add(chars[0])
        out.update(chars[i] + chars[i + 1] for i in range(len(chars) - 1))
    return out


def coverage(part: str | set[str], whole: str | set[str]) -> float:
    """Share of ``part``'s content tokens found in ``whole`` (1.0 when part has none)."""
    a = content_tokens(part) if isinstance(part, str) else part
    b = content_tokens(whole) if isinstance(whole, str) else whole
    if not a:
        return 1.0
    return len(a & b) / len(a)


def jaccard(x: str | set[str], y: str | set[str]) -> float:
    a = content_tokens(x) if isinstance(x, str) else x
    b = content_tokens(y) if isinstance(y, str) else y
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b) if (a | b) else 0.0


def scrub(text: str) -> str:
    """Replace case-specific details (emails, URLs, phone and order numbers) by placeholders."""
    text = _EMAIL.sub("<EMAIL>", text or "")
    text = _URL.sub("<URL>", text)
    text = _PHONE.sub("<NUMBER>", text)
    return _LONGNUM.sub("<NUMBER>", text)


def has_pii(text: str) -> bool:
    return bool(_EMAIL.search(text) or _PHONE.search(text) or _LONGNUM.search(text))


def clip(text: str, n: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


_NEGATION = frozenset("no not never don't without nothing none".split())


def trim_words(words: list[str], *, lead: bool = True) -> list[str]:
    """``words`` without the function words they end on, and with ``lead`` start on (a
    title left "and power of attorney" once its topic went, or "Avoid words like or" once its
    quotes went); a negation ("No bananas") is never trimmed."""
    def bare(w: str) -> bool:
        return not content_tokens(w) and w.lower().strip(".,;:!?'\"") not in _NEGATION

    lo, hi = 0, len(words)
    while lead and lo < hi and bare(words[lo]):
        lo += 1
    while hi > lo and bare(words[hi - 1]):
        hi -= 1
    return words[lo:hi]


def dedupe(items: list[str], *, threshold: float = 0.85) -> list[str]:
    """Items in order without (near-)duplicates; the first spelling wins."""
    out: list[str] = []
    seen: list[set[str]] = []
    for item in items:
        item = " ".join(str(item or "").split())
        if not item:
            continue
        toks = content_tokens(item)
        key = normalize(item)
        if any(normalize(o) == key for o in out):
            continue
        if toks and any(s and jaccard(toks, s) >= threshold for s in seen):
            continue
        out.append(item)
        seen.append(toks)
    return out
