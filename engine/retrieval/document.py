"""What gets indexed for a skill: its retrieval text, and the hash that says when it changed.

The text is built from a few fields in a fixed order (short, high-signal fields first, because
all-MiniLM-L6-v2 truncates at 256 word pieces); the embedder and BM25 get different lengths of
the instructions (measured, see below). The hash covers the text and the recipe version, so a skill is re-embedded only
when what the embedder would see changes (a version bump or a timestamp alone does not).
"""

from __future__ import annotations

import hashlib
import re

from engine.bank.skill import Skill

# Bump when the recipe below changes: every cached vector is then re-embedded.
RECIPE_VERSION = 1

ALL_FIELDS = ("title", "description", "tags", "triggers", "instructions")
DEFAULT_FIELDS = ALL_FIELDS
# The two rankers get different amounts of the body. ``bench retrieval --fields`` (USE, 400
# queries, MRR EN/ZH, only the query trigger held out): the sentence encoder is best with a
# short text (no body: dense 0.757/0.816; 300 chars 0.784/0.765; 600: 0.796/0.724; 1500:
# 0.751/0.741) while BM25 keeps gaining from the body (none 0.862/0.868; 600: 0.875/0.932;
# 1500: 0.890/0.942). Every field helps: tags +0.02-0.05 everywhere, triggers +0.02-0.03
# fused. Fused MRR on all 2,090 queries (strict hold-out), body chars embedder/BM25: 600/600
# 0.901, 1500/1500 0.909, 300/1500 0.911, 300/4000 0.913 (noise; 1500 keeps BM25 rebuilds small).
DENSE_INSTRUCTIONS_CHARS = 300
LEXICAL_INSTRUCTIONS_CHARS = 1500
DEFAULT_INSTRUCTIONS_CHARS = DENSE_INSTRUCTIONS_CHARS
MAX_TEXT_CHARS = 4000  # guards the USE encoder, whose cost grows with text length

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*", re.M)
_SPACE = re.compile(r"[ \t]+")


def _title(skill: Skill) -> str:
    title = skill.title or skill.name
    if title == skill.name:  # a slug: make it read like words
        title = title.replace("-", " ").replace("_", " ")
    return title.strip()


def instructions_head(text: str, limit: int) -> str:
    """The first ``limit`` characters of the body, markdown headings and blank lines removed."""
    if limit <= 0 or not text:
        return ""
    lines = [_SPACE.sub(" ", _HEADING.sub("", ln)).strip() for ln in text.splitlines()]
    flat = "\n".join(ln for ln in lines if ln)
    if len(flat) <= limit:
        return flat
    cut = flat[:limit]
    space = cut.rfind(" ")
    return cut[:space] if space > limit * 0.8 else cut


def retrieval_text(skill: Skill, fields: tuple[str, ...] = DEFAULT_FIELDS, *,
                   instructions_chars: int = DEFAULT_INSTRUCTIONS_CHARS,
                   exclude_triggers: bool = False) -> str:
    """The text both rankers index for ``skill`` (``exclude_triggers`` is for the benchmark)."""
    parts: list[str] = []
    for f in fields:
        if f == "title":
            parts.append(_title(skill))
        elif f == "description":
            parts.append(skill.description.strip())
        elif f == "tags" and skill.tags:
            parts.append(", ".join(t.strip() for t in skill.tags if t.strip()))
        elif f == "triggers" and skill.triggers and not exclude_triggers:
            parts.append("\n".join(t.strip() for t in skill.triggers if t.strip()))
        elif f == "instructions":
            parts.append(instructions_head(skill.instructions, instructions_chars))
    text = "\n".join(p for p in parts if p)
    return text[:MAX_TEXT_CHARS]


def index_texts(skill: Skill, fields: tuple[str, ...] = DEFAULT_FIELDS, *,
                dense_chars: int = DENSE_INSTRUCTIONS_CHARS,
                lexical_chars: int = LEXICAL_INSTRUCTIONS_CHARS,
                exclude_triggers: bool = False) -> tuple[str, str]:
    """``(text for the embedder, text for BM25)``."""
    return (retrieval_text(skill, fields, instructions_chars=dense_chars,
                           exclude_triggers=exclude_triggers),
            retrieval_text(skill, fields, instructions_chars=lexical_chars,
                           exclude_triggers=exclude_triggers))


def text_hash(text: str) -> str:
    """Content hash of a retrieval text (what decides whether a vector is still valid)."""
    h = hashlib.sha256(f"r{RECIPE_VERSION}\x00".encode())
    h.update(text.encode("utf-8"))
    return h.hexdigest()[:32]
