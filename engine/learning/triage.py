"""Triage in front of extraction: which user turns may hold something durable; the windows.

- :func:`windows` decides per topic segment. Cue words fast-track a segment to extraction; a
  segment without cues goes to ``decide`` (the model's triage on capable models, see
  :mod:`engine.llm.tiers`), which may still let it through — cues never veto. Without
  ``decide`` (the tiny tier) only cues count. Measured why: of 100 PrefEval preferences ("I
  strictly avoid gluten…") the cue-only gate let 1 through; of 54 conversations written like
  real users (``bench/scenarios/people.jsonl``) it passed 16, all one-offs and known rules.
- :func:`signal` finds durable-signal cues in one user message (English and Chinese): a stated
  preference ("from now on", "always", "以后", "每次"), a rule ("never", "不要"), a correction
  ("no, I said…", "不对"), or a format word that the user keeps asking for.
- :func:`segments` cuts a conversation's user turns at topic switches (explicit cues such as
  "by the way"/"换个话题", or a long turn that shares nothing with the previous one).
- :func:`windows` picks what extraction reads: per segment, the last few user turns, bounded.
  After a chat turn (``mode="turn"``) only the segment of the newest user turn is considered
  and only when the newest turn itself carries the signal (older turns were judged when they
  were new); for a whole conversation (``mode="conversation"``) every segment is.

No LLM is called here (``decide`` is the caller's); a window that fails costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.text import content_tokens, normalize

MAX_WINDOW_TURNS = 6
MAX_TURN_CHARS = 600
TRIAGE_TURNS = 4  # user turns the triage reads (the newest and up to three before it)
TRIAGE_CALLS = 3  # whole conversations: triage at most the last N turns of a segment
# The model's probability of a durable kind (1 - P("none") after '{"kind": "', the mean of
# the read with the earlier turns and the read of the newest turn alone: Pipeline.triage_score)
# that counts as "yes". Fifth round, fitted with `skilldesk bench triage` on Qwen2.5-Coder-1.5B
# pooled over the five read splits (tune, seen, fresh, fresh2, fresh3: 232 user turns that no
# cue word fast-tracks, 97 durable), with the prompt's tweak / thanks / firm-constraint
# examples: the lowest bar that lets no more other turns through than the fourth round's
# prompt did at its bar (32/135), so every durable turn it recovers costs no extra extraction:
# 0.42 lets 90/97 durable turns and 31/135 others through (old prompt at 0.58: 83/97, 32/135;
# best balanced accuracy would be 0.50: 82/97, 16/135 — a miss loses a rule, a false yes costs
# an extraction whose checks still stand). Earlier rounds: 0.58 and 0.62, tune half only.
DURABLE_MIN_P = 0.42

_EN_PREFERENCE = [
    r"\bfrom now on\b", r"\bgoing forward\b", r"\bfrom here on\b", r"\bin (the )?future\b",
    r"\balways\b", r"\bnever\b", r"\bevery ?time\b", r"\beach time\b", r"\bwhenever\b",
    r"\bby default\b", r"\bi (really )?prefer\b", r"\bmy preference\b", r"\bremember (that|to)\b",
    r"\bplease remember\b", r"\bas a rule\b", r"\bfor all (my|future)\b", r"\bno more\b",
    r"\bin all (your )?(future )?(answers|replies|responses)\b", r"\bstop (using|adding|doing)\b",
    r"\bdon'?t ever\b", r"\bi (like|want) (my|all|every)\b", r"\bmake sure (to|you) (always|never)\b",
    r"\bthe way i like\b", r"\bthe rule is\b",
]
_EN_CORRECTION = [
    r"^(no|nope)\b[,.!]?", r"\bthat'?s (not|wrong)\b", r"\bnot like that\b", r"^actually\b",
    r"\bi (said|told you|asked for)\b", r"\binstead\b", r"\bactually,? (use|make|please|i)\b",
    r"\bdon'?t (use|add|include|write|start|put|say|mention)\b",
    r"\bdo not (use|add|include|write|start|put|say|mention)\b", r"\bwrong\b",
]
# Cues that the user is correcting what was just done (so a skill about it is in play).
_FIXING = re.compile(r"^(no|nope)\b|\bnot like that\b|\bi (said|told you|meant)\b|"
                     r"^actually\b|\bthat'?s (not|wrong)\b|不对|错了|我说过|我说的是|不是这样",
                     re.I)
_ZH_PREFERENCE = ["以后", "今后", "从现在起", "从现在开始", "往后", "每次", "总是", "始终", "一律",
                  "永远", "记住", "请记得", "默认", "我喜欢", "我希望", "我更喜欢", "我习惯",
                  "都用", "都要", "统一", "一直用"]
_ZH_RULE = ["不要", "别再", "不许", "不准", "禁止", "必须", "务必"]
_ZH_CORRECTION = ["不对", "错了", "我说过", "我说的是", "应该是", "改成", "换成", "不是这样"]

FORMAT_WORDS = {
    "bullets": [r"\bbullet", r"要点", r"分点", r"列表"],
    "table": [r"\btable\b", r"\btabular\b", r"表格"],
    "json": [r"\bjson\b"],
    "markdown": [r"\bmarkdown\b"],
    "tldr": [r"\btl;?dr\b", r"一句话总结"],
    "numbered": [r"\bnumbered\b", r"编号"],
    "brief": [r"\bconcise\b", r"\bbrief(ly)?\b", r"\bshort(er)?\b", r"简洁", r"简短", r"精简"],
    "formal": [r"\bformal(ly)?\b", r"正式"],
    "emoji": [r"\bemojis?\b", r"表情"],
    "english": [r"\bin english\b", r"用英文", r"英文回答"],
    "chinese": [r"\bin chinese\b", r"用中文", r"中文回答"],
    "code": [r"\bcode blocks?\b", r"\btype hints?\b", r"代码块"],
}
_SWITCH = [r"\bby the way\b", r"\bbtw\b", r"\banother (question|thing|topic)\b",
           r"\bdifferent (question|topic)\b", r"\bnew (question|topic)\b", r"\bunrelated\b",
           r"\bswitching (gears|topics)\b", r"\bchanging the subject\b", "换个话题", "另外一个问题",
           "另一个问题", "顺便问", "换个问题", "说点别的"]
_ANAPHORA = re.compile(r"\b(it|this|that|these|those|them|same|again|above|previous|also|too|"
                       r"instead|shorter|longer|more|less)\b|它|这个|那个|这些|那些|上面|刚才|再|也|还|改")

_compile = lambda pats: [re.compile(p, re.I) for p in pats]  # noqa: E731
_EN_PREF_RE, _EN_CORR_RE, _SWITCH_RE = (_compile(_EN_PREFERENCE), _compile(_EN_CORRECTION),
                                         _compile(_SWITCH))
_FORMAT_RE = {k: _compile(v) for k, v in FORMAT_WORDS.items()}


@dataclass
class Signal:
    """The durable-signal cues found in one user message."""

    preference: list[str] = field(default_factory=list)
    correction: list[str] = field(default_factory=list)
    formats: set[str] = field(default_factory=set)

    @property
    def strong(self) -> bool:
        return bool(self.preference or self.correction)


def signal(text: str) -> Signal:
    t = normalize(text)
    s = Signal()
    for rx in _EN_PREF_RE:
        if m := rx.search(t):
            s.preference.append(m[0])
    s.preference += [c for c in _ZH_PREFERENCE + _ZH_RULE if c in t]
    for rx in _EN_CORR_RE:
        if m := rx.search(t):
            s.correction.append(m[0])
    s.correction += [c for c in _ZH_CORRECTION if c in t]
    s.formats = {k for k, rxs in _FORMAT_RE.items() if any(rx.search(t) for rx in rxs)}
    return s


def is_fixing(text: str) -> bool:
    """The message corrects the assistant's last answer ("No, I said…", "Actually…", "不对")."""
    return bool(_FIXING.search(normalize(text)))


def is_switch(text: str) -> bool:
    t = normalize(text)
    return any(rx.search(t) for rx in _SWITCH_RE)


def is_anaphoric(text: str) -> bool:
    return bool(_ANAPHORA.search(normalize(text)))


@dataclass
class UserTurn:
    index: int  # position in the conversation's messages
    text: str
    signal: Signal


@dataclass
class Window:
    """What one extraction call reads: consecutive user turns of one topic segment."""

    turns: list[UserTurn]
    context: str = ""  # the assistant reply before the newest turn (context, never evidence)
    cues: list[str] = field(default_factory=list)
    assistant_text: str = ""  # every assistant reply in the window's span (for junk checks)
    focus: int = 0  # turns before this index are context, not evidence (a chat turn is
    #                 judged alone; earlier requests are what it was about)

    @property
    def user_text(self) -> str:
        return "\n".join(t.text for t in self.turns)


def user_turns(messages: list[dict]) -> list[UserTurn]:
    out = []
    for i, m in enumerate(messages):
        if m.get("role") == "user" and str(m.get("content") or "").strip():
            text = str(m["content"]).strip()[:MAX_TURN_CHARS]
            out.append(UserTurn(i, text, signal(text)))
    return out


def starts_new_topic(prev: UserTurn, turn: UserTurn) -> bool:
    """A boundary before ``turn``: an explicit switch cue, or a long unrelated request."""
    if is_switch(turn.text):
        return True
    if turn.signal.correction or is_anaphoric(turn.text):
        return False
    toks, prev_toks = content_tokens(turn.text), content_tokens(prev.text)
    return len(toks) >= 6 and not (toks & prev_toks)


def segments(turns: list[UserTurn]) -> list[list[UserTurn]]:
    out: list[list[UserTurn]] = []
    for t in turns:
        if out and not starts_new_topic(out[-1][-1], t):
            out[-1].append(t)
        else:
            out.append([t])
    return out


def _repeated_formats(turns: list[UserTurn], must_include: UserTurn | None = None) -> set[str]:
    """Format words asked for in at least two user turns (one of them ``must_include``)."""
    counts: dict[str, int] = {}
    for t in turns:
        for f in t.signal.formats:
            counts[f] = counts.get(f, 0) + 1
    rep = {f for f, n in counts.items() if n >= 2}
    return rep & must_include.signal.formats if must_include is not None else rep


def _cues(turns: list[UserTurn], newest_only: bool) -> list[str]:
    pool = turns[-1:] if newest_only else turns
    cues = [c for t in pool for c in t.signal.preference + t.signal.correction]
    reps = _repeated_formats(turns, turns[-1] if newest_only else None)
    return cues + [f"repeated:{f}" for f in sorted(reps)]


Decide = Callable[[list[UserTurn]], "str | None"]  # the newest turn last; a kind or None


def _decided(seg: list[UserTurn], mode: str, decide: Decide | None) -> tuple[list[str], int]:
    """Ask ``decide`` about a segment without cues: its newest turn (a chat turn) or, for a
    whole conversation, each of its last TRIAGE_CALLS turns. Returns the cues (the newest
    durable turn's kind) and, for a whole conversation, where its evidence starts: the first
    turn triage did not rule out. A turn it read and found nothing durable in is the request
    the later turns were about, context as in a chat turn's window (Qwen2.5-1.5B wrote "Keep
    it short" from "Write a short note asking my landlord…" when the durable-looking turn
    after it was "Make this one a bit more formal"); a turn it did not read may hold a rule."""
    if decide is None:
        return [], 0
    ends = [len(seg)] if mode == "turn" else list(range(len(seg), 0, -1))[:TRIAGE_CALLS]
    kinds = [(end - 1, kind) for end in ends
             if (kind := decide(seg[max(0, end - TRIAGE_TURNS):end]))]
    if not kinds:
        return [], 0
    start = kinds[-1][0] if len(ends) == len(seg) else 0
    return [f"model:{kinds[0][1]}"], start


def windows(messages: list[dict], mode: str = "turn", decide: Decide | None = None,
            confirm: Callable[[list[UserTurn]], bool] | None = None) -> list[Window]:
    """The windows that pass triage (empty: nothing durable here, no extraction needed).

    ``confirm(seg)``, where the model can triage, is asked of a chat turn cue words found: they
    take a turn to the model, not past it (a later turn is decided by the lasting check, an
    opening by the opening's score, :meth:`Pipeline._confirm`). Cue words are ambiguous ("以后" is "after" as often as
    "from now on", "一直" and "always" describe a problem that keeps happening): fast-tracked
    alone, 11 of the 19 turns they caught on read fresh37-46 held nothing lasting, 10 of them
    in one-off conversations (`bench triage --lasting`, the cued table)."""
    turns = user_turns(messages)
    if not turns:
        return []
    segs = segments(turns)
    if mode == "turn":
        if turns[-1].index != max((i for i, m in enumerate(messages)
                                   if m.get("role") == "user"), default=-1):
            return []
        segs = segs[-1:]
    out = []
    for seg in segs:
        seg = seg[-MAX_WINDOW_TURNS:]
        cues = _cues(seg, newest_only=(mode == "turn"))
        if cues and mode == "turn" and confirm is not None and not confirm(seg):
            continue
        start = 0
        if not cues:
            cues, start = _decided(seg, mode, decide)
        # a chat turn is the evidence, the segment's earlier requests only say what it was
        # about, however the turn passed triage; a format asked for again is said in several
        # turns, so they all are evidence
        focus = len(seg) - 1 if mode == "turn" and not any(
            c.startswith("repeated:") for c in cues) else start
        if not cues:
            continue
        first, last = seg[0].index, seg[-1].index
        assistant = [str(m.get("content") or "") for m in messages[first:last + 2]
                     if m.get("role") == "assistant"]
        before = [str(m.get("content") or "") for m in messages[first:last]
                  if m.get("role") == "assistant"]
        out.append(Window(turns=seg, context=before[-1] if before else "", cues=cues,
                          assistant_text="\n".join(assistant), focus=focus))
    return out
