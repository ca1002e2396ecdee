"""The junk filter of consolidation (SkillX's refinement): it FLAGS skills, it never deletes.

A skill is flagged, with one reason per problem, when it is:

- ``empty``: no rules — no constraint, no workflow step, no instruction line worth the name;
- ``generic``: a generic name, or rules that are nearly all boilerplate any assistant follows
  ("be helpful", "answer clearly", "保持专业"), so injecting it changes nothing;
- ``one-off``: bound to one case — case details (an email address, a phone or order number)
  in its rules, a body that is pasted material (a long text in a few huge blocks), or a single
  instruction with no trigger and no description;
- ``missing-reference``: it names resource files (``scripts/…``, ``references/…``,
  ``assets/…``, relative Markdown links) that are not in its folder, or allowed tools that are
  not known (``known_tools``; the default list is the Agent Skills / Claude Code tool names).

The flags are written to a report, ``<bank>/.consolidations/flags-<user>.json``, which the app
and ``skilldesk consolidate`` show; the skills themselves are not touched.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.bank.skill import Skill, now_iso
from engine.fsutil import atomic_write, check_component
from engine.learning.candidate import parse_body
from engine.learning.checks import GENERIC_NAMES
from engine.text import content_tokens, normalize

KNOWN_TOOLS = frozenset({
    "bash", "read", "write", "edit", "multiedit", "glob", "grep", "ls", "webfetch", "websearch",
    "notebookedit", "notebookread", "todowrite", "todoread", "task", "skill", "python",
    "computer", "browser", "shell", "terminal", "str_replace_based_edit_tool", "view", "agent",
    "exitplanmode", "killshell", "bashoutput", "slashcommand", "mcp",
})
GENERIC_RULES = [
    "be helpful", "be clear", "be concise", "be accurate", "be polite", "be professional",
    "be friendly", "answer the question", "answer clearly", "respond clearly", "provide accurate",
    "provide helpful", "provide clear", "helpful assistant", "follow instructions",
    "follow the user", "understand the user", "user's request", "user's needs", "high quality",
    "best possible", "as needed", "if needed", "appropriate", "relevant information",
    "清晰", "简洁明了", "准确", "专业", "礼貌", "有帮助", "用户的需求", "用户的要求", "高质量",
]
MIN_RULE_CHARS = 12
PASTED_CHARS, PASTED_ITEM_CHARS = 12_000, 1_000  # a long body made of few huge blocks
_REF = re.compile(r"(?<![\w/.-])((?:scripts|references|assets)/[\w./-]+\w)")
# a relative Markdown link to a file (an extension, no scheme, no placeholder)
_LINK = re.compile(r"\[[^\]]*\]\((?![a-z]+:|#|<)([\w./-]+\.[A-Za-z0-9]{1,5})\)")
# case details that make a rule one-off: a real address, a phone number, an order/ticket id
_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@([A-Za-z0-9-]+\.)+[A-Za-z]{2,}\b")
_EXAMPLE_MAIL = re.compile(r"@(example|test|x|domain|your[\w-]*|email|mail|company)\.", re.I)
_PHONE = re.compile(r"(?<![0-9A-Za-z.])(?:\+\d{1,3}[\s-]?\(?\d{2,4}\)?[\s-]?\d{3,4}[\s-]?\d{3,4}|"
                    r"\(\d{3}\)\s?\d{3}-\d{4}|1[3-9]\d{9})(?![\w.])")
_ORDER = re.compile(r"(?:order|invoice|ticket|tracking|booking|订单|单号|工单|发票)\s*"
                    r"(?:no\.?|number|id|#|号)?\s*[:：#]?\s*[A-Z]{0,3}\d{5,}", re.I)
_TOOL = re.compile(r"^\s*([A-Za-z_][\w-]*)")


@dataclass
class Flag:
    """One flagged skill and why (``reasons``: ``kind: detail`` strings)."""

    path: str
    id: str
    name: str
    title: str
    kinds: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def add(self, kind: str, detail: str) -> None:
        if kind not in self.kinds:
            self.kinds.append(kind)
        self.reasons.append(f"{kind}: {detail}")


def _rules(skill: Skill) -> list[str]:
    goal, rules, steps, extra = parse_body(skill.instructions)
    lines = [*rules, *steps]
    for ln in extra.splitlines():
        ln = ln.strip()
        if ln and not ln.startswith("#") and not ln.startswith("```"):
            lines.append(re.sub(r"^\s*(?:[-*+•]|\d+[.)、])\s*", "", ln))
    return [x for x in lines if content_tokens(x)]


def _case_detail(text: str) -> bool:
    mails = [m.group(0) for m in _EMAIL.finditer(text) if not _EXAMPLE_MAIL.search(m.group(0))]
    return bool(mails or _PHONE.search(text) or _ORDER.search(text))


def _generic_share(rules: list[str]) -> float:
    if not rules:
        return 0.0
    hits = 0
    for r in rules:
        n = normalize(r)
        generic = any(g in n for g in GENERIC_RULES)
        if generic and len(content_tokens(n)) <= 6:
            hits += 1
    return hits / len(rules)


def _tools(allowed) -> list[str]:
    if not allowed:
        return []
    items = allowed if isinstance(allowed, list) else re.split(r"[,\s]+(?![^()]*\))", str(allowed))
    out = []
    for item in items:
        m = _TOOL.match(str(item))
        if m:
            out.append(m.group(1))
    return out


def check(skill: Skill, known_tools: frozenset[str] | set[str] = KNOWN_TOOLS) -> Flag | None:
    """The flag for ``skill``, or None when nothing is wrong with it."""
    f = Flag(str(skill.path or ""), skill.id, skill.name, skill.title)
    rules = _rules(skill)
    body_chars = sum(len(r) for r in rules)
    if not rules or body_chars < MIN_RULE_CHARS:
        f.add("empty", "no rules" if not rules else f"only {body_chars} characters of rules")
    name = normalize(skill.title or skill.name).replace("-", " ").replace("_", " ").strip()
    if name in GENERIC_NAMES or not any(c.isalnum() for c in name):
        f.add("generic", f"generic name {skill.title or skill.name!r}")
    elif rules and len(rules) >= 2 and _generic_share(rules) >= 0.6:
        f.add("generic", f"{_generic_share(rules):.0%} of its rules are boilerplate any "
                         "assistant follows")
    pii = [x for x in [skill.description, *rules, *skill.triggers] if _case_detail(x)]
    if pii:
        f.add("one-off", f"case details (an email address, phone or order number) in "
                         f"{len(pii)} line(s), e.g. {pii[0][:60]!r}")
    elif len(skill.instructions) > PASTED_CHARS and body_chars / max(1, len(rules)) > \
            PASTED_ITEM_CHARS:
        f.add("one-off", f"looks like pasted material ({len(skill.instructions) // 1000} KB in "
                         f"{len(rules)} blocks), not reusable rules")
    elif not skill.triggers and len(rules) <= 1 and not skill.description:
        f.add("one-off", "a single instruction with no trigger or description")
    if skill.path is not None:
        folder = Path(skill.path).parent
        missing = set()
        for m in [*_REF.findall(skill.instructions), *_LINK.findall(skill.instructions)]:
            rel = m.split("#")[0].rstrip(".,;:)")
            if rel and not rel.startswith("/") and not (folder / rel).exists():
                missing.add(rel)
        if missing:
            f.add("missing-reference", "files not in the skill's folder: "
                  + ", ".join(sorted(missing)[:5]))
    unknown = [t for t in _tools(skill.allowed_tools)
               if t.lower() not in known_tools and not t.lower().startswith("mcp")]
    if unknown:
        f.add("missing-reference", "unknown tools: " + ", ".join(unknown[:5]))
    return f if f.kinds else None


def flag_skills(skills: list[Skill], known_tools: frozenset[str] | set[str] = KNOWN_TOOLS
                ) -> list[Flag]:
    return [f for f in (check(s, known_tools) for s in skills) if f is not None]


def report_path(bank_root: Path, user: str) -> Path:
    return Path(bank_root) / ".consolidations" / f"flags-{check_component(user, 'user')}.json"


def save_report(bank_root: Path, user: str, flags: list[Flag]) -> Path:
    path = report_path(bank_root, user)
    data = {"user": user, "created": now_iso(), "flags": [asdict(f) for f in flags]}
    atomic_write(path, json.dumps(data, ensure_ascii=False, indent=1))
    return path


def _is_flag(f: Any) -> bool:
    """A saved flag with every field of the right type (a hand-edited report may differ)."""
    return (isinstance(f, dict) and set(f) <= {"path", "id", "name", "title", "kinds", "reasons"}
            and all(isinstance(f.get(k), str) for k in ("path", "id", "name", "title"))
            and all(isinstance(f.get(k, []), list) and all(isinstance(x, str) for x in f.get(k, []))
                    for k in ("kinds", "reasons")))


def load_report(bank_root: Path, user: str) -> list[Flag]:
    """The last saved flags (empty when there is no report or it is unreadable)."""
    try:
        data = json.loads(report_path(bank_root, user).read_text("utf-8"))
        flags = data.get("flags", []) if isinstance(data, dict) else []
        return [Flag(**f) for f in flags if _is_flag(f)] if isinstance(flags, list) else []
    except (OSError, ValueError, TypeError, RecursionError):
        return []
