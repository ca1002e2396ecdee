"""Deterministic checks that keep junk out of the bank, whatever a model answered.

:func:`vet_candidate` cleans one extracted candidate (drops rules that are not grounded in the
user's own words or that were copied from the assistant, scrubs case details) and returns the
reason to discard it, if any: no rules left, a generic name, low confidence, leftover personal
data. :func:`generalize` keeps the instance out of what describes the skill: the words that
only the request turns had (the one dish, the one table, a person's name, a number, quoted
text) never stay in its name, goal, description or triggers. :func:`repair_merge` makes sure a merge never loses an existing rule that the new
candidate did not explicitly correct.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from engine.learning.candidate import Candidate
from engine.learning.rules import (
    QUOTED,
    SENTENCE,
    asks_about_self,
    is_question,
    named_tools,
    rule_span,
    said_for_this_request,
)
from engine.text import (
    ZH_STOP,
    cjk_count,
    clip,
    content_tokens,
    coverage,
    dedupe,
    has_pii,
    jaccard,
    language,
    normalize,
    trim_words,
)

MIN_CONFIDENCE = 0.5
GROUNDING = 0.5  # share of a rule's content words that must come from the user's messages
# The model's P(keep) an ungrounded rule needs (keep.md, :func:`keeps`). Fitted with `skilldesk
# bench triage --extract --rules` on the tune, seen, fresh and fresh2 splits pooled (Qwen2.5-
# Coder-1.5B; 74 extracted rules labelled from the scenarios, 54 wanted, 20 not): word overlap
# alone keeps 46/54 and 10/20 (balanced accuracy 0.68); "overlap or P >= 0.7" keeps 48/54 and
# 10/20 (0.69, the best bar; 0.6 rescued a one-off's "Identify the error" at 0.65). On
# grounded rules the score does not separate (a restated request scored 0.20-0.58, wanted
# rules 0.39-0.75), so it only ever adds what overlap dropped.
KEEP_MIN_P = 0.7
GENERIC_NAMES = {
    "skill", "new skill", "my skill", "skill name", "name", "user skill", "user preference",
    "user preferences", "preference", "preferences", "general", "general skill", "assistant",
    "helper", "help", "task", "tasks", "misc", "other", "default", "rule", "rules", "style",
    "format", "response", "answer", "answers", "chat", "conversation", "untitled", "example",
    "技能", "新技能", "用户偏好", "偏好", "通用", "规则", "格式", "回答", "任务", "其他",
}


def _is_generic(name: str) -> bool:
    n = normalize(name).strip(" .:-_")
    return not n or n in GENERIC_NAMES or len(n) < 3 and not any('\u4e00' <= c for c in n) \
        or not content_tokens(n)


_CUE_WORDS = re.compile(
    r"\b(from now on|going forward|in (the )?future|always|never|every ?time|please|remember|"
    r"make sure|do not|don'?t)\b|以后|今后|从现在开始|从现在起|每次|总是|始终|一律|都要|都用|"
    r"不要|别再|必须|记住|请|一定", re.I)


def _empty_rule(rule: str) -> bool:
    """Nothing left once the cue words are gone ("以后都要有", "always do it")."""
    rest = _CUE_WORDS.sub(" ", normalize(rule))
    rest_zh = "".join(ch for ch in rest if "\u4e00" <= ch <= "\u9fff")
    words = {t for t in content_tokens(rest) if not ("\u4e00" <= t[0] <= "\u9fff")}
    return not words and len(rest_zh) < 2


def _copied_from_assistant(rule: str, user_toks: set[str], assistant: str) -> bool:
    """A rule whose words come from the assistant's replies rather than the user's."""
    if not assistant:
        return False
    toks = content_tokens(rule)
    if not toks:
        return False
    return coverage(toks, assistant) >= 0.8 and coverage(toks, user_toks) < GROUNDING


def restates_context(rule: str, evidence: str) -> bool:
    """The rule says (almost) nothing of the evidence turns: under a third of its words
    (Chinese: characters) are there, so it came from the earlier request the evidence was about
    ("Understand the difference between a lasting power of attorney and a deputyship" after a
    follow-up question; "Follow the proper form" for "add the easier version"). The
    extraction prompt shows those requests as context, never as evidence."""
    toks = content_tokens(rule)
    if language(rule) == "zh":
        chars = {ch for ch in normalize(rule) if "\u4e00" <= ch <= "\u9fff" and ch not in ZH_STOP}
        return len(chars) >= 3 and len(chars & set(normalize(evidence))) / len(chars) < 0.3
    return bool(toks) and coverage(toks, content_tokens(evidence)) < 0.3


def restates_question(rule: str, turns: Sequence[str]) -> bool:
    """The rule is one of the user's questions about their own case said again without its
    question: most of its words come from the question (:func:`_drawn_from`) and it keeps most
    of the question's (Qwen2.5-1.5B: "我妈的社保卡丢了，要补办，在杭州" from "…，在杭州，怎么弄"). A
    question is a request, never a rule, as for a rule that kept the question itself
    (:func:`~engine.learning.rules.is_question`); a fact said inside a question ("I'm vegan,
    so what could I cook?") is a part of it, and a question asking the assistant to do
    something ("能不能拆成一步一步的") may say a rule."""
    own = said_words(rule)
    for turn in turns:
        for m in SENTENCE.finditer(turn):
            toks = content_tokens(m[0])
            if (own and toks and asks_about_self(m[0]) and _drawn_from(rule, own, m[0], toks)
                    and coverage(toks, content_tokens(rule)) >= 0.5):
                return True
    return False


def grounded(rule: str, user_toks: set[str], user_text: str) -> bool:
    """Most of the rule's words come from the user's messages. Chinese paraphrases reorder
    characters ("风险一栏必须有" for "要加上风险一栏"), so Chinese rules count characters.
    A constraint stated as a fact ("I strictly avoid gluten") becomes a rule with words of its
    own ("Avoid gluten in food suggestions"): two of the user's words and a third of the rule
    ground it too. How a rule is said (``RULE_WORDS``: never, avoid, suggest…) is no claim
    about the user and does not count: "Never suggest or mention motorsports" is the user's
    "I have no interest in motorsports" (PrefEval 180..259, read: 9 of 80 preferences lost
    every rule this way, at 1 of 3 or 4 words grounded; 6 of the 9 rules pass now)."""
    toks = said_words(rule)
    cov = coverage(toks, user_toks)
    if cov >= GROUNDING or (cov >= 0.3 and len(toks & user_toks) >= 2):
        return True
    chars = {ch for ch in normalize(rule) if "\u4e00" <= ch <= "\u9fff" and ch not in ZH_STOP}
    if len(chars) < 3:
        return False
    return len(chars & set(normalize(user_text))) / len(chars) >= 0.6


MERGE_SOURCED = 0.7  # share of a merged rule's words that the skill's or the new rules must hold
MAX_TRIGGER_CHARS = 60  # a trigger is a short request a user would type, not a pasted sentence


# a sentence or a Chinese clause: one message often holds the request and the rule ("What's
# the best way to drive from A to B? I don't do motorways, full stop."); an English comma
# does not end one ("I'm vegetarian, so no meat for me" states one rule)
_CLAUSE = re.compile(r"(?:[^.!?。！？;；，\n]|[.;](?=\S))+[.!?。！？;；，]?")


def _rule_sentences(turns: list[str], rules: list[str]) -> tuple[list[str], list[str]]:
    """(sentences that state the rules, the other sentences: the requests). A sentence states
    a rule when it shares the most words with one of the rules (the model rewords: "I don't do
    motorways" for "Plan routes that avoid motorways"; between sentences sharing as many, the
    one with the larger share of its own words in the rule), holds a third of a rule's words, or
    has half of its own words, two at least, in the rules (a clause of a long rule:
    "每段别超过二十分钟"; not "Give me a pancake recipe." beside a rule about recipes)."""
    said = content_tokens("\n".join(rules))
    sents = _clauses(turns)
    best = _closest(sents, rules)
    ruled, asked = [], []
    for i, (s, toks) in enumerate(sents):
        states = (i in best or any(coverage(r, toks) >= 0.34 for r in rules)
                  or (coverage(toks, said) >= 0.5 and len(toks & said) >= 2))
        (ruled if states else asked).append(s)
    return ruled, asked


def _clauses(turns: list[str]) -> list[tuple[str, set[str]]]:
    """The sentences and Chinese clauses of ``turns`` that hold a content word, with them."""
    sents = [(m[0], content_tokens(m[0])) for t in turns for m in _CLAUSE.finditer(t)]
    return [(s, toks) for s, toks in sents if toks]


def _closest(sents: list[tuple[str, set[str]]], rules: list[str]) -> set[int]:
    """Per rule, the sentence sharing the most of its words (between sentences sharing as
    many, the one with the larger share of its own words in the rule)."""
    best: set[int] = set()
    for r in rules:
        rt = content_tokens(r)
        fit = [(len(rt & toks), len(rt & toks) / len(toks)) for _, toks in sents]
        top = max(fit, default=(0, 0.0))
        best |= {i for i, f in enumerate(fit) if top[0] and f == top}
    return best


def request_part(asked: str, rules: list[str]) -> str:
    """What was ``asked`` (:func:`~engine.learning.pipeline.asked_for`, turns joined by " / ")
    less the sentence closest to each of ``rules`` (:func:`_closest`): the request the rules
    were said for, with any reason said beside them; "" when the user's words were the rule
    alone ("Horror genuinely freaks me out." for "Avoid horror films"). Only the closest:
    a request sharing a word with its rule ("Suggest food for a picnic." beside "No salty
    food for me") is still the request."""
    sents = _clauses(asked.split(" / "))
    best = _closest(sents, rules)
    return " ".join(s for i, (s, _) in enumerate(sents) if i not in best)


_CAP = re.compile(r"\b[A-Z][\w'-]+")
_NUM = re.compile(r"\d+(?:[.,:]\d+)*")


def _specific(text: str, names_only: bool = False) -> set[str]:
    """The tokens of ``text`` that name one instance: quoted text, numbers, and capitalised
    words inside a sentence (names of people, places, products: "Lisbon", "PostgreSQL");
    only the names with ``names_only``."""
    out = set()
    if not names_only:
        for m in QUOTED.finditer(text):
            out |= content_tokens(m[0])
        out |= {m for m in _NUM.findall(text)}
    for m in _CAP.finditer(text):
        before = text[:m.start()].rstrip()
        if before and before[-1] not in ".!?:;\n\"'(“‘" and m[0] not in ("I", "I'm", "I'd"):
            out |= content_tokens(m[0])
    return out


def case_details(turns: list[str], rules: list[str], *, topic: bool = False,
                 requests: Sequence[str] = ()) -> set[str]:
    """The instance: quoted text, numbers and names (:func:`_specific`) of the request
    sentences that the sentences stating the rules do not repeat outside quotes (quoted text
    there is an example), and the names of the sentences stating the rules that the rules
    leave out (a sentence can be the request too: "Lesson summary for Bethany, two hours
    today").
    With ``topic``, also every other word only the requests had and the rules
    do not use ("mortgage" in "Explain what a mortgage is" before "talk like a pirate in every
    reply"): what a skill's name, goal and description must not carry. Triggers may name the
    kind of request ("write an email"), so they are checked without ``topic``. The tools the
    conversation names ("Python", "SQL") are never case details.

    ``requests`` are turns the model read as the requests before the rule's turns, never as
    where a rule was said: all their sentences are requests. When no sentence of ``turns``
    shares a word with the rules (the model said them in its own words: "用简单易懂的语言" for
    "你给我打个生活里的比方"), ``turns`` still state them and ``requests`` hold the instance."""
    turns = [t for t in turns if t not in requests]
    ruled, asked = _rule_sentences(turns, rules)
    if not ruled:
        ruled, asked = asked, []
    asked += [m[0] for t in requests for m in _CLAUSE.finditer(t) if content_tokens(m[0])]
    tools = content_tokens(" ".join(named_tools("\n".join([*requests, *turns]))))
    said = content_tokens("\n".join(rules))
    # the names in the sentences stating the rules that the rules leave out: the sentence was
    # the request too ("Lesson summary for Bethany, two hours today: …"). Not its numbers or
    # quoted text: those are often what the rule is ("keep them under 30 words"), which the
    # model's description kept where its rule lost it
    named = set().union(*(_specific(t, names_only=True) for t in ruled)) - said - tools
    if not ruled or not (asked or named):
        return set()
    keep = (content_tokens(QUOTED.sub(" ", "\n".join(ruled))) - named) | tools
    found = set().union(named, *(_specific(t) for t in asked))
    if topic:
        keep |= said
        # a Chinese sentence is cut at its commas (one often holds the request and the rule);
        # the other clauses of the sentence closest to a rule, where it asks nothing, say what
        # the rule is for, not the request: the fact about the user ("我有痛风，海鲜、啤酒、动物
        # 内脏这些我碰了就犯病" — 痛风 is no topic of the dinner asked for before it)
        keep |= _beside(turns, rules) - found
    stems = {k[:4] for k in keep if k.isascii() and len(k) >= 4}  # query / queries
    if topic:
        found |= content_tokens("\n".join(asked))
    return {t for t in found if t not in keep
            and not (t.isascii() and len(t) >= 4 and t[:4] in stems)}


def _beside(turns: list[str], rules: list[str]) -> set[str]:
    """The words of the sentences of ``turns`` that hold the clause closest to one of
    ``rules`` (:func:`_closest`) and ask nothing (no question)."""
    sents = _clauses(turns)
    anchors = [sents[i][0].strip() for i in _closest(sents, rules)]
    out: set[str] = set()
    for t in turns:
        for m in SENTENCE.finditer(t):
            if not is_question(m[0]) and any(a and a in m[0] for a in anchors):
                out |= content_tokens(QUOTED.sub(" ", m[0]))
    return out


def _carries(text: str, case: set[str]) -> bool:
    return bool(case) and bool(content_tokens(text) & case)


# a Latin word or number, or a run of other script (a digit inside "把3号楼" is its own word)
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_'’.+#-]*|[^\x00-\x7f\s]+")


def case_words(rule: str, case: set[str]) -> list[str]:
    """The words of ``rule`` (as written) that carry a case detail: "Pip" in "End the story
    with Pip falling asleep" after "a turtle called Pip"."""
    return dedupe([w.strip(".'’-") for w in _TOKEN.findall(rule) if _carries(w, case)])


def reworded(old: str, new: str, case: set[str]) -> bool:
    """Whether ``new`` is ``old`` without its case details: it names none of them, is no
    question, and keeps at least half of the other words of ``old``."""
    rest = content_tokens(old) - case
    return bool(content_tokens(new)) and not _carries(new, case) and not is_question(new) \
        and coverage(rest, content_tokens(new)) >= 0.5


def _without_topic(name: str, topic: set[str]) -> str:
    """``name`` less the request's topic, or "" when too little is left to name a skill.
    English drops the words carrying it and keeps two content words at least; Chinese drops
    the characters of its bigrams ("律师函回复期限" less 律师/师函 is "回复期限") and keeps four
    characters at least, about two words as in English (two characters are one word, most
    often the bare verb or noun the topic was cut from: "撰写", "安排", "制作"), never a clipped
    clause of a sentence."""
    if language(name) == "en":
        rest = " ".join(trim_words([w for w in name.split() if not _carries(w, topic)]))
        return rest if len(content_tokens(rest)) >= 2 and not _is_generic(rest) else ""
    cut = set()
    for i in range(len(name) - 1):
        if name[i:i + 2] in topic:
            cut |= {i, i + 1}
    rest = "".join(ch for i, ch in enumerate(name) if i not in cut).strip(
        " ，,、：:;；·-" + "".join(ZH_STOP))
    return rest if cjk_count(rest) >= 4 and not _is_generic(
        rest) else ""


def generalize(c: Candidate, turns: list[str], requests: Sequence[str] = ()) -> list[str]:
    """Strip the instance from ``c``'s name, goal, description, workflow and triggers (in
    place).

    A trigger carrying a case detail or longer than MAX_TRIGGER_CHARS is dropped, and so is a
    workflow step carrying a word only the request had ("Describe the lavender honey scones");
    a goal or description carrying one is rebuilt from the rules; a name carrying one loses
    those words (or, when nothing is left, becomes the first rule's short form). The request's
    topic is kept in ``c.topic``: the triggers a skill gets from ``c``, new or merged into,
    lose it (:meth:`Candidate.general_triggers`); the candidate keeps its own for finding the
    skill it may merge into. The words rules are said with (``RULE_WORDS``: write, give,
    use…) are no topic. Returns notes."""
    from engine.learning.rules import short_name

    case = case_details(turns, c.constraints, requests=requests)
    topic = case_details(turns, c.constraints, topic=True, requests=requests)
    notes = []
    kept = [t for t in c.triggers if len(t) <= MAX_TRIGGER_CHARS and not _carries(t, case)]
    if len(kept) < len(c.triggers):
        notes.append(f"dropped {len(c.triggers) - len(kept)} case-specific trigger(s)")
    c.triggers = kept
    c.topic = frozenset(topic - RULE_WORDS)
    if c.general_triggers() != kept:
        notes.append("a skill's triggers lose the request's topic")
    steps = [s for s in c.workflow if not _carries(s, topic)]
    if len(steps) < len(c.workflow):
        notes.append(f"dropped {len(c.workflow) - len(steps)} case-specific step(s)")
    c.workflow = steps
    if _carries(c.name, topic):
        new = _without_topic(c.name, topic)
        c.name = new if new else short_name(c.constraints[0])
        c.name_cut = language(c.name) != "en"  # cut by characters, not words
        notes.append("name made general")
    for attr in ("goal", "description"):
        if _carries(getattr(c, attr), topic):
            setattr(c, attr, clip("; ".join(c.constraints[:2]), 200))
            notes.append(f"{attr} made general")
    return notes


def vet_candidate(c: Candidate, user_text: str, assistant_text: str = "",
                  turns: list[str] | None = None,
                  keep: Callable[[str], float | None] | None = None,
                  context: Sequence[str] = (), evidence: str | None = None,
                  reword: Callable[[str, list[str]], str | None] | None = None) -> str | None:
    """Clean ``c`` in place; return why it must be discarded, or None when it may be used.
    ``turns`` (the user's messages one by one) lets :func:`generalize` find the instance;
    ``context`` (the requests just before them) is read for the instance only.
    ``keep(rule)`` is the model's probability that the user asked for the rule to last
    (:meth:`Pipeline.keep_score`): it can keep a rule word overlap would drop (:func:`keeps`).
    ``evidence`` (the turns the model was asked about, where ``user_text`` also holds the
    requests before them) drops a rule that only restates those requests
    (:func:`restates_context`). ``reword(rule, words)`` is the model's rule without the
    request's case details (:func:`general_rules`)."""
    user_toks = content_tokens(user_text)
    kept, dropped, once = [], [], []
    for rule in c.constraints:
        # a question is a request, never a rule (Qwen-1.5B wrote "年化6%，十年后大概有多少？" —
        # the user's question, with its case numbers — as the rule of a skill)
        if _empty_rule(rule) or is_question(rule) or _copied_from_assistant(
                rule, user_toks, assistant_text) or (
                evidence is not None and restates_context(rule, evidence)) or (
                turns and restates_question(rule, turns)):
            dropped.append(rule)
        elif turns and said_for_this_request(rule, turns, task_words(c)):
            once.append(rule)
        elif keeps(rule, grounded(rule, user_toks, user_text), keep):
            kept.append(rule)
        else:
            dropped.append(rule)
    c.constraints = dedupe(kept)
    c.workflow = [s for s in dedupe(c.workflow) if coverage(s, user_toks) >= GROUNDING / 2]
    # an example is the user's own (copied), never one the model made up
    c.examples = [e for e in dedupe(c.examples) if coverage(e, user_toks) >= 0.8
                  and not _copied_from_assistant(e, user_toks, assistant_text)][:2]
    if not c.constraints and once and not dropped:
        return f"said for this request only (dropped: {clip('; '.join(once), 120)})"
    dropped += once
    if not c.constraints:
        why = "no rule grounded in the user's messages" if dropped else "no rules"
        return f"{why} (dropped: {clip('; '.join(dropped), 120)})" if dropped else why
    if _is_generic(c.name):
        return f"generic name {c.name!r}"
    if c.confidence < MIN_CONFIDENCE:
        return f"low confidence {c.confidence:.2f}"
    if any(has_pii(x) for x in [c.name, c.description, *c.constraints, *c.triggers]):
        return "case-specific details (emails, phone or order numbers) left in the rules"
    if turns:
        if reword is not None:
            c.constraints = general_rules(c.constraints, case_details(
                turns, c.constraints, requests=context), reword)
        if not c.constraints:
            return ("its rules name details of this one request and could not be said "
                    f"without them (dropped: {clip('; '.join(kept), 120)})")
        generalize(c, turns, requests=context)
    if not c.description.strip():
        c.description = c.goal or "; ".join(c.constraints[:2])
    if not c.goal.strip():
        c.goal = c.description
    if not c.triggers:
        c.triggers = [c.name]
    c.triggers = dedupe(c.triggers)
    c.tags = skill_tags(c.tags, c.constraints, topic=c.topic)
    return None


MAX_TAGS = 6


def skill_tags(tags: list[str], rules: list[str], kept: Sequence[str] = (),
               topic: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """``kept`` (a skill's own tags, as they are) and then those of ``tags`` that are labels in
    the language of the ``rules`` (or a tool's name: "sql"): one or two words, or at most four
    Chinese characters, never a rule ("no flowery language" on a Chinese skill came from a
    merge) and never the request's ``topic`` ("政府" on a skill learned while writing a
    government report, as its triggers lose it); English ones lowercased; MAX_TAGS in all."""
    lang = language("\n".join(rules))
    out = list(kept)
    for t in tags:
        t = " ".join(str(t).split()).strip(" #,;，；")
        en = language(t) == "en"
        cjk = cjk_count(t)
        label = len(t.split()) <= 2 if en else 0 < cjk <= 4
        if t and label and (language(t) == lang or named_tools(t) == {t.lower()}) \
                and not _carries(t, set(topic)):
            out.append(t.lower() if en else t)
    return dedupe(out)[:max(MAX_TAGS, len(kept))]


MAX_NAME_WORDS = 6  # English words of a skill's name (Chinese: MAX_NAME_CJK characters)
MAX_NAME_CJK = 12  # about as long as six English words


def good_name(name: str, c: Candidate, examples: set[str] | frozenset[str] = frozenset()) -> bool:
    """Whether the model's ``name`` for ``c`` (:meth:`Pipeline.name_skill`) may be its name:
    short (a name, never a rule: at most MAX_NAME_WORDS words or MAX_NAME_CJK Chinese
    characters), not generic, no question, in the rules' language, with no number and no
    name of a person, place or product (a rule can still carry one the checks let through:
    "Compare Vodafone, BT and Sky"), and carrying none of the request's topic words that
    ``c``'s own description and rules do not use, nor any word of the prompt's ``examples``
    that they do not use (copied from an example answer)."""
    name = name.strip()
    cjk = cjk_count(name)
    if not name or _is_generic(name) or is_question(name) or "\n" in name \
            or language(name) != language("\n".join(c.constraints)):
        return False
    if cjk and not 2 <= cjk <= MAX_NAME_CJK or not cjk and len(name.split()) > MAX_NAME_WORDS:
        return False
    if _NUM.search(name) or _specific(name, names_only=True) - content_tokens(
            " ".join(named_tools(name))):
        return False
    own = content_tokens("\n".join([c.description, *c.constraints]))
    return not _carries(name, (set(c.topic) | set(examples)) - own)


def general_rules(rules: list[str], case: set[str],
                  reword: Callable[[str, list[str]], str | None]) -> list[str]:
    """``rules`` without the request's case details (:func:`case_details`): a rule naming one
    ("End the story with Pip falling asleep") is reworded by the model (``reword(rule,
    words)``, :meth:`Pipeline.reword`) and kept when :func:`reworded` holds; otherwise it
    goes: a learned rule never carries the names, numbers or quoted text of the request it
    came from. (Without a model, the rule tier, :func:`vet_candidate` does not call it: its
    rules are the user's own rule sentences, which case details never come from.)"""
    out = []
    for rule in rules:
        words = case_words(rule, case)
        if not words:
            out.append(rule)
            continue
        new = reword(rule, words)
        if new is not None and reworded(rule, new, case):
            out.append(new.strip())
    return dedupe(out)


# A word that points back at the message a rule came from ("Never suggest these types of
# games", "Put this under my address"): English demonstratives, a closed class, not a list
# of topics ("such as" introduces examples and points at nothing). Not Chinese yet: its
# demonstratives also close a list ("别安排游船、轮渡这些"), where they point at nothing, and
# Qwen2.5-1.5B left both Chinese rules it was asked about as they were.
_POINTER = re.compile(r"\b(?:these|those|this)\b", re.I)


def points_back(rule: str) -> bool:
    """``rule`` names what it is about by pointing at the conversation it came from, which a
    later conversation will not show: read PrefEval 620..739 (three learning runs, 126 rules),
    9 did ("Avoid these areas", learned from "high-density urban areas with a lot of noise"
    and then again from "areas with a high cost of living", which was dropped as known)."""
    return bool(_POINTER.search(rule or ""))


def resolved(old: str, new: str, said: str) -> bool:
    """Whether ``new`` is ``old`` said in full (:meth:`Pipeline.standalone`): it points at
    nothing, is no question, names no instance ``old`` did not (a name, a number, quoted
    text: the case's details stay out, :func:`case_details`), keeps at least half of the
    other words of ``old``, and every word it adds is the user's (``said``): what it pointed
    at, in their words."""
    if not new or points_back(new) or is_question(new) or _specific(new) - _specific(old):
        return False
    own, mine = content_tokens(old), content_tokens(new)
    if not mine or coverage(own, mine) < 0.5:
        return False
    return coverage(mine - own, said) >= 0.9


USER_WORDS_MAX = 30  # content words: a longer sentence tells a story, it states no rule


def _drawn_from(rule: str, own: set[str], sent: str, toks: set[str]) -> bool:
    """Most of ``rule`` comes from ``sent``: its words (``own``), or for Chinese, whose
    paraphrases reorder characters ("提前打招呼" for "提前跟两边物业打好招呼"), its
    characters (as :func:`grounded`)."""
    if coverage(own, toks) >= 0.6:
        return True
    chars = {ch for ch in normalize(rule) if "\u4e00" <= ch <= "\u9fff" and ch not in ZH_STOP}
    return len(chars) >= 3 and len(chars & set(normalize(sent))) / len(chars) >= 0.8


def in_user_words(rules: list[str], said: list[str], requests: Sequence[str]) -> list[str]:
    """``rules`` with each one the model shortened from one of the user's sentences in
    ``said`` (the turns it read as the evidence, after the ``requests``) said in the user's
    own words. A small model's rule keeps the gist and drops what the rule is about (Qwen2.5-
    1.5B: "Bring the licence with you" for "put in a line telling them to bring their
    provisional licence with them", "Clear everything within two metres" for "... within two
    metres of the fireplace before I arrive"). The sentence wins when most of the rule's words
    come from it (:func:`_closest`), it says more than the rule, and what it adds is not the
    instance: no name, number or quoted text (:func:`_specific`), mostly words the
    ``requests`` did not have ("make the toast for my brother's wedding funnier" after "write
    a toast for my brother's wedding" adds only theirs; Chinese bigrams share a framing word
    such as 确认 with the request), no question, not a story. What is kept of the sentence
    is its clauses that say the rules (:func:`rule_span`): a Chinese rule often spans two
    ("让客户提前跟两边物业打好招呼，把电梯约好"), and a reason said after a comma is no rule.
    """
    sents = [(s, toks) for s, toks in ((m[0].strip(" ,;；，"), content_tokens(m[0]))
                                       for t in said for m in SENTENCE.finditer(t))
             if toks and not is_question(s) and not QUOTED.search(s)]
    asked = content_tokens("\n".join(requests))
    out = []
    for rule in rules:
        own = said_words(rule)
        best = sorted(_closest(sents, [rule]))
        if not own or len(best) != 1:
            out.append(rule)
            continue
        sent = rule_span(sents[best[0]][0], "\n".join(rules))
        toks = content_tokens(sent)
        added = said_words(sent) - content_tokens(rule)
        if (_drawn_from(rule, own, sent, toks) and added and coverage(added, asked) < 0.5
                and not _specific(sent) and len(toks) <= USER_WORDS_MAX):
            out.append(sent[:1].upper() + sent[1:])
        else:
            out.append(rule)
    return dedupe(out)


def keeps(rule: str, lexical: bool, keep: Callable[[str], float | None] | None) -> bool:
    """Whether a rule stays: grounded in the user's words (``lexical``), or, where the model
    can be asked (``keep``), its P(the user asked for this to last) reaches
    :data:`KEEP_MIN_P` — a constraint the model worded in its own words ("Avoid all products
    containing peanuts" for "I'm allergic to peanuts"). The model is asked only about
    ungrounded rules: on grounded ones its score did not separate a restated request from a
    wanted rule (see KEEP_MIN_P), so it never drops what the user said."""
    if lexical or keep is None:
        return lexical
    p = keep(rule)
    return p is not None and p >= KEEP_MIN_P


# Words of how a rule is said, not of what task it is about ("avoid gluten" and "avoid
# jumping" share no task): the same-task veto (judge.shares_task) and says_already ignore them.
RULE_WORDS = frozenset(content_tokens(
    "avoid avoids prefer prefers preference use uses using always never keep make like likes "
    "want wants write writes give answer answers reply replies respond response user style "
    "rule rules please instead only every each good new way thing things "
    "suggest suggests suggestion suggestions recommend recommends recommendation "
    "recommendations mention mentions include includes"))


def said_words(text: str) -> set[str]:
    """The content words of rule ``text`` less how rules are said (``RULE_WORDS``); all of
    them when nothing else is left ("Never suggest them")."""
    toks = content_tokens(text)
    return toks - RULE_WORDS or toks


def task_words(c: Candidate) -> set[str]:
    """What task a skill or candidate is about: the words of its name, triggers and tags, less
    how rules are said (``RULE_WORDS``). Not its description: a learned skill's description is
    often the user's sentence, whose everyday words ("high" in "places with high humidity")
    are no task."""
    return content_tokens("\n".join([c.name, *c.triggers, *c.tags])) - RULE_WORDS


def says_already(c: Candidate, existing: Candidate) -> bool:
    """Every rule of ``c`` is said by ``existing``: most of the rule's own words — not the
    skill's task words (name, triggers, tags), which a new rule for the same task shares, nor
    how rules are said (``RULE_WORDS``) — are in what the skill says (description, rules,
    steps). What a judge's "discard: skill N already says it" must meet; looser than
    :func:`known_already`, which skips the judge ("Keep my work emails short, under 150 words"
    beside "Keep work emails under 150 words" says it; "In Python functions use f-strings"
    beside a Python skill that only asks for type hints does not)."""
    task = task_words(existing)
    said = content_tokens("\n".join([existing.description, *existing.constraints,
                                     *existing.workflow]))

    def says(rule: str) -> bool:
        own = content_tokens(rule) - task - RULE_WORDS
        return coverage(own or content_tokens(rule), said) >= GROUNDING

    return bool(c.constraints) and all(says(r) for r in c.constraints)


def known_already(c: Candidate, existing: Candidate) -> bool:
    """Every rule of ``c`` is already one of ``existing``'s rules (nearly word for word, or its
    words all found in one rule and the skill: "in Python use type hints" vs "use type hints")."""
    if not c.constraints:
        return True
    whole = content_tokens(existing.text)

    def known(r: str) -> bool:
        best = max((jaccard(r, e) for e in existing.constraints), default=0.0)
        inside = max((coverage(r, e) for e in existing.constraints), default=0.0)
        return best >= 0.75 or (inside >= 0.6 and coverage(r, whole) >= 0.85)

    return all(known(r) for r in c.constraints)


def corrects(new: str, old: str) -> bool:
    """``new`` rewrites ``old``: same subject, different detail (e.g. 2 → 4 spaces)."""
    if normalize(new) == normalize(old):
        return False
    return jaccard(new, old) >= 0.4


def union(existing: Candidate, new: Candidate) -> Candidate:
    """The rule-based merge: existing rules, corrected where the new ones say so, plus the new.

    Identity (name, level, language of what was there) stays the existing skill's.
    """
    rules = list(existing.constraints)
    for r in new.constraints:
        hit = next((i for i, old in enumerate(rules) if corrects(r, old)), None)
        if hit is not None:
            rules[hit] = r
        elif max((jaccard(r, o) for o in rules), default=0.0) < 0.75:
            rules.append(r)
    steps = existing.workflow or new.workflow
    return Candidate(name=existing.name, description=existing.description or new.description,
                     goal=existing.goal or new.goal, constraints=dedupe(rules)[:12],
                     workflow=steps, triggers=dedupe(existing.triggers + new.triggers)[:8],
                     tags=skill_tags(new.tags, existing.constraints + new.constraints,
                                     kept=existing.tags),
                     examples=dedupe(existing.examples + new.examples)[:4],
                     level=existing.level, confidence=1.0,
                     extra_sections=existing.extra_sections)


def _listed(rule: str, listed: list[str]) -> bool:
    return any(normalize(rule) == normalize(x) or jaccard(rule, x) >= 0.75 for x in listed)


def repair_merge(merged: Candidate, existing: Candidate, new: Candidate,
                 replaced: list[str] | None = None,
                 takes_back: Callable[[list[str]], set[str]] | None = None) -> list[str]:
    """Fix a model's merge in place: no lost rules, no dropped triggers, identity kept.

    An existing rule goes when the model named it in ``replaced`` (a new rule contradicts it:
    "at the top" for "at the end") or when the user's new message takes it back:
    ``takes_back(old rules)`` where the caller can ask the model (the replace check,
    ``replace.md``, :meth:`~engine.learning.pipeline.Pipeline.takes_back`), asked of every old
    rule, whether the merge model kept it or not: the merge model keeps the rule a
    contradiction takes back (read fresh37-52: the old rule stayed in 15 of 16 contradiction
    scenarios). The check also says "taken back" of rules the user still holds: on the read
    PrefEval merges (22, different facts judged one task: "Avoid cooked foods" beside "Avoid
    spicy foods") it said so of 8 of 25 old rules, asked of each alone at the bar of then. So
    the caller asks only where the new rule was said for a request (a follow-up in a task,
    "change the payment bit…"; for a fact said alone ``takes_back`` takes back nothing), one
    rule at most goes (:meth:`~engine.learning.pipeline.Pipeline.takes_back`), and the only
    rule of a skill goes only where the merge model left it out too: it has no other rule to
    be ranked against. Without ``takes_back`` (no token probabilities), a rule the merge left
    out goes when a new rule corrects it (:func:`corrects`, word overlap), and a rule it kept
    stays. Any other rule it left out comes back. A rule the model rewrote into a new rule is not "kept". The old wording of a
    rule that goes stays in the skill's history (every write keeps the previous version).

    The description and goal stay the skill's own unless the model's wording still says all
    of them (it extends them, "Summaries of driving lessons, faults judged against the test")
    or a rule was taken back: a merge adds to a skill, it never swaps what the skill is about
    (the same PrefEval runs: "The user dislikes spicy food." became "The user follows a
    strict raw food diet" on a merge). Returns a note per repair (for the event log).
    """
    notes = []
    replaced = [r for r in (replaced or []) if any(_listed(r, [o]) for o in existing.constraints)]
    rules = [r for r in dedupe(merged.constraints)
             if not (_listed(r, replaced) and not _listed(r, new.constraints))]
    # a merge recombines what the skill and the new rule say; a rule with words from neither
    # is the model's own (a case detail of the conversation it saw, or an invention) and goes
    said = existing.constraints + new.constraints
    source = content_tokens("\n".join(said))
    # the request's topic (what the new rule was said for: a learner's name, the dish) that
    # neither the skill nor the new rules name: the model took it from the request, and it
    # reaches no rule, description, goal or step of the skill
    case = set(new.topic) - content_tokens(existing.text) - content_tokens(
        "\n".join(new.constraints))
    invented = [r for r in rules if (coverage(r, source) < MERGE_SOURCED and max(
        (jaccard(r, x) for x in said), default=0.0) < 0.4) or _carries(r, case)]
    for r in invented:
        notes.append(f"dropped rule {clip(r, 60)!r}: neither the skill nor the new rule says it")
    rules = [r for r in rules if r not in invented]
    taken_back = False
    taken = takes_back(list(existing.constraints)) if takes_back is not None and \
        new.constraints else None
    for old in existing.constraints:
        kept = not _listed(old, replaced) and any(
            jaccard(old, r) >= 0.5 for r in rules
            if _listed(r, [old]) or not _listed(r, new.constraints))
        if not new.constraints or (kept and (taken is None or len(existing.constraints) < 2)):
            if not kept:
                rules.append(old)
            continue
        gone = _listed(old, replaced) or (old in taken if taken is not None else any(
            corrects(n, old) for n in new.constraints))
        if gone:  # with the wording the merge model kept of it
            taken_back = True
            rules = [r for r in rules if _listed(r, new.constraints) or not (
                _listed(r, [old]) or jaccard(old, r) >= 0.5)]
            notes.append(f"replaced rule {clip(old, 60)!r} (the old wording is in the history)")
        elif not kept:
            rules.append(old)
            notes.append(f"kept existing rule {clip(old, 60)!r}")
    for n in new.constraints:  # a new rule the model forgot
        if max((jaccard(n, r) for r in rules), default=0.0) < 0.4:
            rules.append(n)
            notes.append(f"added new rule {clip(n, 60)!r}")
    merged.constraints = dedupe(rules)[:14]
    merged.triggers = dedupe(existing.triggers + merged.triggers + new.triggers)[:8]
    merged.tags = skill_tags(merged.tags, merged.constraints or existing.constraints,
                             kept=existing.tags, topic=case)
    merged.examples = dedupe(existing.examples + new.examples)[:4]
    merged.name, merged.level = existing.name, existing.level
    merged.extra_sections = existing.extra_sections
    if existing.workflow and not merged.workflow:
        merged.workflow = existing.workflow
    if language(existing.text) != language(merged.text) and existing.constraints:
        notes.append("merge changed the language; kept the existing wording plus new rules")
        fallback = union(existing, new)
        merged.constraints, merged.description, merged.goal = (
            fallback.constraints, fallback.description, fallback.goal)
    for attr in ("description", "goal"):
        mine, own = getattr(merged, attr), getattr(existing, attr)
        if not mine.strip() or _carries(mine, case) or (
                own.strip() and not taken_back and coverage(own, mine) < 1.0):
            setattr(merged, attr, own)
    merged.workflow = [s for s in merged.workflow if not _carries(s, case)]
    return notes
