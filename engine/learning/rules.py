"""Rule-based extraction, for models too weak to extract (measured: the bundled 135M model).

Instead of asking the model, take the user's own sentences that state a lasting rule: a
sentence with a strong cue ("from now on", "whenever", "以后", "每次"…) or a clause that starts
with always/never/don't/不要; or, for a format asked for again and again, a short template rule
("Use bullet points"). Case details are scrubbed; questions are never rules. The result is
grounded in the user's words by construction, so it cannot invent junk — it can only be
clumsier than a good model's wording. The level is a guess (``level_guessed``), so the judge
may merge it into a skill of another level.
"""

from __future__ import annotations

import re

from engine.learning.candidate import Candidate
from engine.learning.triage import Window
from engine.text import ZH_STOP, clip, content_tokens, language, normalize, scrub, trim_words

# A cue about the future makes a rule even inside a question ("could you do X from now on?").
_FUTURE = re.compile(
    r"\b(from now on|going forward|from here on|in (the )?future|remember (that|to)|"
    r"please remember)\b|^remember\b|以后|今后|从现在起|从现在开始|往后|记住|请记得", re.I)
# Other cues make a rule in a statement, never in a question ("why do cats always…?").
_STRONG = re.compile(
    r"\b(whenever|every ?time|each time|by default|for all (my|future)|as a rule|"
    r"in all (your )?(future )?(answers|replies|responses)|make sure (to|you) (always|never)|"
    r"stop (using|adding|doing)|no more)\b|每次|一律|默认|统一|都用|都要", re.I)
_CLAUSE_RULE = re.compile(r"^(please |and |but |also )?(always|never|don'?t|do not)\b|"
                          r"^(请)?(不要|别再|不许|不准|必须|务必|一定要|总是|始终|永远)", re.I)
# A first-person preference is a rule in a statement: "I always want summaries to start with…",
# "I'd like you to never…", "I prefer answers that…". (Not "I always forget my keys": the verb
# after always/never must be one of wanting.)
_PREFERENCE = re.compile(
    r"\bi (always|never|usually) (want|need|like|prefer|expect)\b|"
    r"\bi(?: would|'d)? (want|need|like|prefer|expect) (you )?(to )?(always|never)\b|"
    r"\bi (really )?prefer (it |that |my |all |your |answers|replies|summaries|code)|"
    r"我(一直|总是|都)?(希望|想要|喜欢|要求)(你)?(总是|都|每次|一直)", re.I)
# Material the user asks to be written, translated or fixed is content, not a rule:
# quoted text, and what follows a colon after a request ("write a reminder: don't be late").
# A single quote opens a quotation only where no letter is before it and closes one only where
# none follows: the apostrophes of "I'm allergic to cats and can't be around them" are no
# quote (read as one, that sentence became the rule "I t be around them."). checks.py reads
# the same spans as a request's instance (quoted text).
QUOTED = re.compile(r"[\"“「『‘][^\"”」』’]*[\"”」』’]|(?<!\w)'[^']{2,}'(?!\w)")
_CONTENT_AFTER_COLON = re.compile(
    r"\b(write|translate|rewrite|fix|proofread|draft|reply to|summari[sz]e|correct|polish)\b"
    r"[^:：]*[:：].*$|(写|翻译|改写|润色|修改|改得|回复|总结|改成)[^:：]*[:：].*$", re.I)
# ...but a colon after "写上 / 写清楚 / 写明" (state, include) opens what every such piece must
# say: "入住确认都得写上：自驾来的话…走大路绕一下" is a rule, and taken out it left "入住确认都得"
# (the read scenario sets say 15 sentences that way, in 14 chats: 9 two-task, 2 merges, one
# rule without a cue word, 2 one-offs)
_INCLUDE = re.compile(r"写[上清明][^:：]*[:：]")
_QUESTION = re.compile(r"[?？吗呢]\s*$", re.I)
_LEAD = re.compile(
    r"^(ok(ay)?|no|nope|actually|also|again|and|but|please|remember|important|note|so|"
    r"i said|i told you|that'?s wrong|not like that|from now on|going forward|from here on|"
    r"in (the )?future|by default|as a rule)\b[\s,:;.!-]*|"
    r"^(不对|错了|记住|请记得|另外|还有|以后|今后|从现在起|从现在开始|换个话题)[\s，,：:。!！]*", re.I)
_TAIL = re.compile(r"[\s,]*(from now on|going forward|in (the )?future|please)[\s.!]*$", re.I)
SENTENCE = re.compile(r"(?:[^.!?。！？;；\n]|[.;](?=\S))+[.!?。！？;；]?")
# A whole sentence: up to a full stop, question or exclamation mark, or a line break (a full
# stop that no space follows is a decimal point or an abbreviation's); SENTENCE also ends at
# a semicolon
WHOLE_SENTENCE = re.compile(r"(?:[^.!?。！？\n]|\.(?=\S))+[.!?。！？]?")
_CLAUSE = re.compile(r"[,，:：]\s*")
_TOOLS = re.compile(r"\b(json|sql|git|python|regex|csv|yaml|bash|shell|api|excel|css|html|"
                    r"javascript|typescript|pytest|markdown|latex|docker)\b", re.I)


def named_tools(text: str) -> set[str]:
    """The languages and tools a text names ("sql", "python"…), lowercased."""
    return {m.lower() for m in _TOOLS.findall(text or "")}


FORMAT_RULES = {
    "bullets": ("Use bullet points", "用要点列出"),
    "table": ("Use a table", "用表格"),
    "json": ("Use JSON", "用 JSON 格式"),
    "markdown": ("Use Markdown", "用 Markdown 格式"),
    "tldr": ("Start with a one-line TL;DR", "先给一句话总结"),
    "numbered": ("Use a numbered list", "用编号列表"),
    "brief": ("Keep it brief", "简洁"),
    "formal": ("Use a formal tone", "语气正式"),
    "emoji": ("No emojis", "不用表情"),
    "english": ("Answer in English", "用英文回答"),
    "chinese": ("Answer in Chinese", "用中文回答"),
    "code": ("Put code in code blocks", "代码放在代码块里"),
}


def _clean(sentence: str) -> str:
    s = sentence.strip().rstrip("。.;；!！")
    for _ in range(4):  # peel "No, actually, from now on, ..."
        new = _LEAD.sub("", s).strip()
        if new == s:
            break
        s = new
    s = _TAIL.sub("", s).strip(" ,，")
    return s[:1].upper() + s[1:] if s else s


# A question typed without its mark, as people type in a chat, by its grammar: in Chinese an
# A-not-A verb in the last clause ("是不是", "要不要", "有没有"), unless a verb before it takes
# it as an embedded question (checking, telling, and writing or marking it down: "检查有没有
# 错别字", "每个菜后面标一下软不软") or it means "whether or not" ("不管是不是周末": statements,
# and may be rules), or a question word in a short last clause ("…在杭州，怎么
# 弄"); in English an auxiliary before its subject opening the sentence ("is it daft to…",
# "should I…"; "can you…" asks the assistant to do something, see _ASKS_TO_DO, and is not read
# as a question without its mark).
_ZH_A_NOT_A = re.compile(r"([\u4e00-\u9fff])[不没]\1")
_ZH_EMBEDS = re.compile(r"不管|无论|不论|检查|看看|看一下|确认|核对|查|问问|知道|判断|注意|说明|"
                        r"告诉|提醒|写(?!的)|标|注|列|加上|说说|说一下|讲")
_ZH_WH = re.compile(r"怎么|怎样|什么|为什么|为啥|咋|哪|谁|多少|几时|几点|几个")
_ZH_SHORT_CLAUSE = 5  # characters: "怎么弄", "要多少钱"; not "我不知道怎么写" (a statement)
_EN_INVERTED = re.compile(r"^((is|are|was|were)\s+(i|it|we|he|she|they|there|this|that|these|"
                          r"those)|(do|does|did|should|shall|am)\s+(i|it|we|he|she|they))\b", re.I)
# a question about what the user is to do, typed without its mark as the last clause of a
# sentence ("…wants a taco bar for his mates, what fillings and salsas should I do", "how do I
# get it out"); not an indirect one that asks the assistant for something ("…, how fiery is
# each one")
_EN_WH_SELF = re.compile(r"^(what|which|how|where|when|who|why)\b.*\b(should|shall|can|could|"
                         r"do|does|did|would|will|must|am)\s+(i|we)\b", re.I)


def is_question(text: str) -> bool:
    """The sentence asks something ("…?", "…吗", or a question without its mark: "…，是不是
    该换了", "…，怎么弄", "is it worth it", "…, what fillings should I do") rather than stating
    a rule."""
    s = QUOTED.sub(" ", normalize(text)).strip().rstrip(" .。!！")
    if _QUESTION.search(s) or _EN_INVERTED.search(s):
        return True
    last = [c for c in _CLAUSE.split(s) if c.strip()][-1:] or [""]
    if _EN_WH_SELF.search(last[0].strip()):
        return True
    last_zh = "".join(ch for ch in last[0] if "\u4e00" <= ch <= "\u9fff")
    a_not_a = _ZH_A_NOT_A.search(last_zh)
    if a_not_a and not _ZH_EMBEDS.search(last_zh[:a_not_a.start()]):
        return True
    return 0 < len(last_zh) <= _ZH_SHORT_CLAUSE and bool(_ZH_WH.search(last_zh))


def asks_about_self(sentence: str) -> bool:
    """A question that asks for information about the user's own case ("要不要换电池", "How much
    per litre?"), not one that asks the assistant to do something ("Could you also list
    them?", "能不能一条一条列出来")."""
    return is_question(sentence) and not _ASKS_TO_DO.search(sentence)


def is_rule_sentence(sentence: str) -> bool:
    s = without_material(QUOTED.sub(" ", normalize(sentence))).strip()
    if _FUTURE.search(s):
        return True
    if _QUESTION.search(s.rstrip(" .。")):
        return False
    if _STRONG.search(s) or _PREFERENCE.search(s):
        return True
    return any(_CLAUSE_RULE.search(c.strip()) for c in _CLAUSE.split(s))


# "I'd like you to always answer in French" → "Always answer in French";
# "I always want summaries to start with X" → "Summaries should always start with X";
# "I prefer answers that …" → "Prefer answers that …". A model follows a rule it is given as an
# instruction more often than a report of what the user wants.
_WANT_YOU = re.compile(r"^i(?: (always|usually|really))?(?: would|'d)? (?:like|want|need|expect|"
                       r"prefer) you to (?:(always|never) )?(.+)$", re.I)
# "I want X to Y" / "I want X signed Y" (X: one or two words)
_WANT_THING = re.compile(r"^i(?: (always|never|usually|really))? (?:want|need|like|prefer|expect) "
                         r"(?:my |all |your )?((?:\w+ )?\w+) (?:to (.+)|(\w+ed) (.+))$", re.I)
_PREFER = re.compile(r"^i (?:really )?prefer (.+)$", re.I)


def _imperative(rule: str) -> str:
    if m := _WANT_YOU.match(rule):
        adverb = m[2] or ("always" if (m[1] or "").lower() == "always" else "")
        out = f"{adverb} {m[3]}" if adverb else m[3]
    elif m := _WANT_THING.match(rule):
        adverb = (m[1] or "").lower()
        adverb = adverb + " " if adverb in ("always", "never") else ""
        action = m[3] if m[3] is not None else f"be {m[4]} {m[5]}"
        out = f"{m[2]} should {adverb}{action}"
    elif m := _PREFER.match(rule):
        out = f"prefer {m[1]}"
    else:
        return rule
    return out[:1].upper() + out[1:]


_COND = re.compile(r"^(whenever|when|if|each time|every ?time|any ?time)\s+(you\s+|i\s+)?", re.I)


def short_name(rule: str) -> str:
    """A short title from a rule, never the raw sentence: its first clause, at most four
    content words (English) or eight characters (Chinese), without quoted text."""
    rule = QUOTED.sub(" ", rule)
    rule = re.sub(r"\bshould (always )?(be )?", lambda m: "are " if m[2] else "", rule, count=1)
    first = re.split(r"[，,。：:；()（）]|;(?!\w)", rule, maxsplit=1)[0].strip() or rule
    first = _COND.sub("", first).strip() or first  # "Whenever you write X" → "write X"
    first = re.sub(r"\s+for (me|us)$", "", first, flags=re.I)
    if language(first) == "zh":
        return clip(first, 8).rstrip("…")
    out, n = [], 0
    for w in first.split():
        if n >= 4:
            break
        out.append(w)
        n += bool(content_tokens(w))
    name = " ".join(trim_words(out, lead=False)).rstrip(",;:.!")
    return name[:1].upper() + name[1:] if name else clip(rule, 32)


def rule_extract(w: Window) -> list[Candidate]:
    """Zero or one candidate from a window: its stated rules, in the user's words."""
    rules: list[str] = []
    for t in w.turns:
        for m in SENTENCE.finditer(t.text):
            sent = m[0].strip()
            if sent and is_rule_sentence(sent):
                cleaned = _imperative(_clean(scrub(sent)))
                if len(content_tokens(cleaned)) >= 2:
                    rules.append(cleaned)
    lang = language(w.user_text)
    for cue in w.cues:
        if cue.startswith("repeated:"):
            fmt = cue.split(":", 1)[1]
            en, zh = FORMAT_RULES.get(fmt, ("", ""))
            rule = zh if lang == "zh" else en
            if rule and not any(normalize(rule) in normalize(r) for r in rules):
                rules.append(rule)
    if not rules:
        return []
    triggers: list[str] = []  # never the user's pasted request: it carries the instance
    name = short_name(rules[0])
    level = "atomic" if named_tools(" ".join(rules)) else "functional"
    c = Candidate(name=name, description=clip("; ".join(rules), 200), goal=clip(rules[0], 200),
                  constraints=rules[:6], triggers=triggers + [name], tags=[], level=level,
                  confidence=0.6, level_guessed=True, name_cut=language(name) != "en")
    return [c]


# The user scopes what they say to this one request: "for this one", "just this once", "this
# time", "这次", or the one piece in hand ("这封", "这篇"). Said without a cue about the future,
# such a sentence is a one-off, whatever the rule extracted from it looks like.
_THIS_ONCE = re.compile(
    r"\b(just |only )?(for )?this (once|one|time)\b|\bfor now\b|"
    r"这次|这一次|这回|这一回|仅此一次|暂时|这封|这篇|这份|这条", re.I)
_LASTING = re.compile(r"\b(always|never)\b|总是|始终|永远|一直")
# A question asks the assistant to do something ("Could you also write out how it sounds?",
# "能不能一条一条列出来？") rather than asking for information ("How much per litre?").
_ASKS_TO_DO = re.compile(r"\b(could|can|would|will) you\b|\bplease\b|能不能|能否|可不可以|"
                         r"可以.*吗|请|帮我|给我|麻烦", re.I)


def _overlap_tokens(x: str) -> set[str]:
    """Content words and Chinese characters (how a rule and a sentence of the user's share
    wording: Chinese paraphrases reorder characters)."""
    cjk = {ch for ch in normalize(x) if "\u4e00" <= ch <= "\u9fff" and ch not in ZH_STOP}
    return content_tokens(x) | cjk


def said_for_this_request(rule: str, turns: list[str],
                          task: set[str] | frozenset[str] = frozenset()) -> bool:
    """The user's sentence that ``rule`` comes from (the clause sharing the most words with it,
    every such clause when several tie) was said of this request only: scoped to it ("Formal
    tone for this one, it may get forwarded", "这次数字换成同比百分比来写"), or a question asking
    for information ("Could I use citric acid instead?", "那损耗一般留多少合适？") — the rule's
    own clause carries the question mark, the question does not ask the assistant to do
    something, and neither has a cue about the future. Checked on the learning scenarios read
    so far (tune … fresh7; written before fresh8): it fires on none of the 173 wanted rules
    read against their conversations (polite requests such as "能不能一条一条列出来？"
    included); at least one sentence fires in 40 of the 68 one-off conversations.

    Not when the rule also carries words the user stated elsewhere, outside every such
    clause, that are not the ``task``'s own words (the candidate's name, triggers and tags:
    "letters" in "Keep letters very formal" only repeats the request "Write a letter…"): the
    model often writes the request and a firm constraint as one rule ("推荐不含牛奶和奶酪的早餐"
    for "有没有快手早餐推荐？" and "我乳糖不耐受，牛奶、奶酪一沾就拉肚子"; "Choose a
    left-handed fountain pen"), and its closest clause is then the request's question.
    Replayed on the rules it dropped in the read splits' runs (fresh5 … fresh8), this keeps
    the 3 wanted ones (left-handed pen, buttermilk amounts, lactose) and still drops all 10
    one-off ones: their other words sit in the one-off clause too."""
    said = _overlap_tokens(rule)
    best: list[bool] = []
    best_n = 0
    once_words: set[str] = set()
    stated: set[str] = set()
    for turn in turns:
        for m in SENTENCE.finditer(turn):
            sent = m[0].strip()
            lasting = bool(_FUTURE.search(sent) or _STRONG.search(sent)
                           or _LASTING.search(normalize(sent)))
            scoped = not lasting and bool(_THIS_ONCE.search(sent))
            asks = (not lasting and bool(_QUESTION.search(sent.rstrip(" .。")))
                    and not _ASKS_TO_DO.search(sent))
            clauses = [c for c in _CLAUSE.split(sent) if c.strip()]
            for i, clause in enumerate(clauses):
                words = _overlap_tokens(clause) & said
                once = scoped or (asks and i == len(clauses) - 1)  # the question's own clause
                (once_words if once else stated).update(words)
                if len(words) > best_n:
                    best, best_n = [once], len(words)
                elif len(words) == best_n and best_n:
                    best.append(once)
    if not (best and all(best)):
        return False
    # words, not single Chinese characters: "增长" in the rule is not stated by "长" elsewhere
    return not (content_tokens(rule) & stated) - once_words - task


# a clause: up to a comma, semicolon or colon (an ASCII one only before a space: "TL;DR",
# "10:30" and "1,000" hold one)
_PART = re.compile(r"(?:[^,，;；:：]|[,;:](?=\S))+[,，;；:：]?")


def rule_span(sent: str, rules: str) -> str:
    """The clauses of ``sent`` (a sentence the ``rules`` were drawn from) that say them: the
    clause with the largest share of its words (Chinese: characters) in the rules, the clauses
    before it from the first that shares one (the rule's framing: "请大家提前把阳台的衣服收好，
    把窗户关紧"), and after it those that say at least half as much. What comes after a rule
    is its reason or a story ("..., we had a girl with a dog allergy placed with a family with
    two labradors", "…，上回一下雨电话被打爆了"), and stays out though it may share a word."""
    ruled = _overlap_tokens(rules)
    parts = _PART.findall(sent)
    share = [len(toks & ruled) / len(toks) if (toks := _overlap_tokens(p)) else 0.0
             for p in parts]
    if not any(share):
        return sent
    best = share.index(max(share))
    first = next(i for i, x in enumerate(share) if x)
    last = max(i for i, x in enumerate(share) if i <= best or x >= share[best] / 2)
    return "".join(parts[first:last + 1]).strip(" ,，;；:：")


def own_sentence(rules: list[str], turns: list[str]) -> str | None:
    """The user's own sentence (of ``turns``) that says most of what the model's ``rules`` say,
    quotes and questions left out; None when no sentence shares two words (or Chinese
    characters) with them (one shared word is how a request overlaps a rule about it:
    "Turn these notes into meeting minutes" vs a rule of a "Meeting minutes" skill). For a rule the model paraphrased too far from the user's words to be
    grounded ("不推荐辣的食物" for "我完全不能吃辣"): the user's sentence is grounded by definition."""
    said = _overlap_tokens("\n".join(rules))
    best, best_n = None, 1
    for sent in statements(turns):
        n = len(_overlap_tokens(sent) & said)
        if n > best_n:
            best, best_n = sent, n
    return best


def without_material(sentence: str) -> str:
    """``sentence`` without the material a request hands over after a colon ("Summarize this
    for me: <the text>", :data:`_CONTENT_AFTER_COLON`), unless the colon opens what a piece of
    work must say (:data:`_INCLUDE`)."""
    return sentence if _INCLUDE.search(sentence) else _CONTENT_AFTER_COLON.sub("", sentence)


def statements(turns: list[str]) -> list[str]:
    """The sentences of ``turns`` that could state a rule: quotes and the material a request
    hands over after a colon taken out, questions left out (a question is a request, never a
    rule)."""
    out = []
    for turn in turns:
        for m in SENTENCE.finditer(turn):
            # and the material a request hands over ("Summarize this for me: <the text>")
            sent = without_material(QUOTED.sub(" ", m[0])).strip(" ,;；")
            if sent and not _QUESTION.search(sent):
                out.append(sent)
    return out
