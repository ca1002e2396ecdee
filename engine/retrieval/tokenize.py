"""The lexical tokenizer: English words stemmed (PyStemmer, Snowball English), CJK as bigrams.

Text is NFKC-normalised and lowercased. Runs of Han / kana / Hangul characters become
overlapping bigrams (a one-character run stays a unigram), because Chinese has no spaces and a
word segmenter is a large dependency; bigrams are the usual segmenter-free baseline and measured
well here (``skilldesk bench retrieval --cjk unibigram`` compares adding unigrams). Everything
else is split on anything that is not a letter or digit (``_`` and ``-`` split too, so
``24_game_expert`` gives ``24 game expert``); English stop words are dropped and the rest stemmed.
"""

from __future__ import annotations

import re
import threading
import unicodedata

import Stemmer
from bm25s.stopwords import STOPWORDS_EN

# Han (incl. extension A and compatibility ideographs), Hiragana, Katakana, Hangul.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(rf"[{_CJK}]")
_STOP = frozenset(STOPWORDS_EN)

_local = threading.local()  # a Stemmer object is not thread-safe: one per thread


def _stemmer() -> Stemmer.Stemmer:
    s = getattr(_local, "stemmer", None)
    if s is None:
        s = _local.stemmer = Stemmer.Stemmer("english")
    return s


def has_cjk(text: str) -> bool:
    return _CJK_RUN.search(text or "") is not None


def tokenize(text: str, *, cjk: str = "bigram") -> list[str]:
    """Tokens for BM25. ``cjk``: ``"bigram"`` (default) or ``"unibigram"`` (also unigrams)."""
    text = unicodedata.normalize("NFKC", text or "").lower()
    words: list[str] = []
    out: list[str] = []
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if _CJK_RUN.match(tok):
            if len(tok) == 1:
                out.append(tok)
                continue
            out.extend(tok[i:i + 2] for i in range(len(tok) - 1))
            if cjk == "unibigram":
                out.extend(tok)
        elif tok not in _STOP:
            words.append(tok)
    if words:
        out.extend(_conflate(w) for w in _stemmer().stemWords(words))
    return out


def _conflate(stem: str) -> str:
    """Fold what Snowball leaves apart: -ise/-ize verbs and their -y nouns, British/American.

    ``summarize``/``summarise``/``summary``/``summaries`` stem to ``summar``/``summaris``/
    ``summari``; users ask "summarize this" of a skill titled "Summary format", so both sides
    are folded to ``summar``. Queries and documents go through the same function.
    """
    if len(stem) > 5 and stem.endswith(("is", "iz")):
        return stem[:-2]
    if len(stem) > 4 and stem.endswith("i"):
        return stem[:-1]
    return stem
