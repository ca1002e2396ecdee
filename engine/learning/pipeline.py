"""The learning pipeline for one conversation: triage → extract → check → judge (:mod:`.judge`)
→ merge/add.

Every model step validates its JSON; an unusable answer becomes a ``discard`` action with the
reason, never a crash and never a skill. Deterministic checks (:mod:`.checks`) run after
extraction and after a merge. Merges re-read the skill and write with the optimistic check
(:meth:`SkillBank.write`); a hand edit in between raises ``ConflictError`` and the merge is
redone from the new file. Which steps use the model depends on its tier (:mod:`engine.llm.tiers`):
on a tiny model the judge and the merge are rule-based, because its answers there are noise.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.errors import Cancelled, ConflictError, SkillDeskError, StructuredOutputError
from engine.learning import about, triage
from engine.learning.candidate import Candidate
from engine.learning.checks import (
    good_name,
    in_user_words,
    known_already,
    points_back,
    repair_merge,
    request_part,
    resolved,
    union,
    vet_candidate,
)
from engine.learning.events import Action
from engine.learning.judge import Neighbour, judge_llm, judge_rule, skill_text
from engine.learning.rules import (
    WHOLE_SENTENCE,
    own_sentence,
    rule_extract,
    rule_span,
    statements,
)
from engine.llm import tiers
from engine.llm.client import LLMClient
from engine.retrieval.relevance import logit
from engine.text import (
    clip,
    content_tokens,
    coverage,
    dedupe,
    jaccard,
    language,
    normalize,
    scrub,
)

log = logging.getLogger("skilldesk.learning")

TOP_M = 3  # neighbours shown to the judge
MERGE_ATTEMPTS = 3  # redo a merge this often when the file keeps changing under us
# Extraction's own first decision, read as a probability like triage's: after '{"skills":'
# the model writes ' []' (nothing) or a list ('[{"', as in the prompt's examples, or another
# opening). Below the bar nothing is generated; at or above it the answer must hold a skill.
EXTRACT_PREFIX = '{"skills":'
EXTRACT_OPTIONS = {"none": " []", "some": ' [{"', "some_": " [{", "some_nl": " [\n",
                   "some_sp": " ["}
# Fitted with `skilldesk bench triage --extract --split tune` (Qwen2.5-Coder-1.5B): with the
# second round's triage, on the 26 turns it let through (19 durable), 0.3 writes all 19 and 5
# of 7 others, as 0.5 does, where 2 durable turns (a format rule, "show an example first", P
# 0.31) got nothing — greedy decoding's choice, the largest recall loss of that round. With the
# third round's triage (31 turns, 24 durable): 23/24 at 0.3, 20/24 at 0.5, 5/7 others at both.
# The one-off turns scored 0.14 and 0.22: a thin margin; the held-out halves decide.
EXTRACT_MIN_P = 0.3
# The conversation's opening message is decided by one score fitted on three reads: triage's
# P(durable) of the whole message and, for each of its sentences, triage's P of it read alone
# (:meth:`Pipeline.sentence_reads`: a fact said beside a request, "…what could we do on the
# saturday night? I've got tinnitus, anywhere loud…", reads 0.48 whole and 0.77 alone) times
# P(it is the writer's own and lasts, :meth:`Pipeline.mine_score`: a fact about them, or a
# standing instruction of theirs). The third read is there because triage also takes a fact
# about someone or something else for the user's constraint (read fresh70: "my colleague is
# very quiet", "my mum's eyesight", a running cistern). The product is read for every
# sentence and the highest counts: in a story the sentence triage finds likeliest may be
# someone else's (read fresh71: "老伴嫌我天天在她眼前转悠" 0.63 above the writer's "我手抖得厉害…"
# 0.60, whose P(the writer's own) was 0.98 to the other's 0.25). A logistic fit on the two
# logits (:func:`opening_p`), fitted on the 161 model-triaged openings of the read splits
# fresh53-59 (`skilldesk bench triage --openings --extract --lasting`, 26 holding a lasting
# rule, all firm facts beside a request; 135 not): AUC 0.998. The bar weighs a lost rule as
# three false yeses, the lowest such on a 0.05 grid of the fit set (of the 92 triage's bar
# lets on, 0.3: 26 durable and 2 others through; 0.35: 26 and 2; 0.4: 26 and 1; 0.45: 26
# and 1; 0.5: 25 and 1). The fit before it (three separate logits, of triage's likeliest
# sentence only, at 0.3) let through 26/26 and 1 there; on the read fresh60-66 (160
# openings, 27 durable) 25/27 and 3 others, now 26/27 and 2 (AUC 0.991 → 0.995); on the read
# fresh68-70 (69, 12 durable) 6/12 and 2, now 7/12 and 3; on the read fresh71 (21, 4) 2/4
# and 0, now 3/4 and 0. Reading every sentence with the three separate logits let the
# writer's background through ("im the secretary of our allotment society…", P(the writer's
# own) 0.96 where triage read 0.33) in four "just this once" openings of fresh65-70: the
# product needs both. Extraction's P(a skill) is no read of it: it costs a forward pass over
# the long extraction prompt on every opening for one other fewer (forty-fifth round).
# mine.md's wording was settled on the fit set, on fresh60-70 and on sentences of our own
# (its first wording, yes or no, separated the two at 0.936 and 0.882; asking only who the
# sentence is about stopped "From now on, answer me in British English" at the opening).
# Forty-ninth round: "usual", the way the writer usually does something themselves, told
# before asking for it differently this time ("…the minutes normally go up as a few bullet
# points. just this once I want a proper write-up"), which "me" had taken (0.78-0.82 on read
# fresh69-73; such openings wrote junk skills), with a Chinese standing instruction among the
# examples (without it "usual" took "我让你写的东西段落都别超过三行…" from "always"). Fit set
# fresh53-59, of those triage's bar lets on, 26 durable & 1 other through -> 25 & 1 (a "no
# licence, don't suggest car hire" fact lost, 0.74 -> 0.33: "usual" 0.18; a refit (0.85,
# 2.09, 0.82) is this one); read fresh67-73 18 & 6 -> 19 & 5 (AUC of the product 0.951 ->
# 0.974). Telling the model that what the writer cannot do or has not is "me" kept that fact
# and raised "me" for things and other people too: read fresh67-73 21 & 12.
OPENING_FIT = (0.85, 2.26, 0.63)  # × logit: P whole, P sentence × P(the writer's own); + c
OPENING_MIN_P = 0.4
# ...unless triage was sure: its P(durable) at or above this overrules extraction's "nothing"
# (fourth round: extraction answered "nothing" (P 0.05-0.28) to "do not recap", "three
# sentences at most" after triage's 0.84-0.93). The bar is the lowest on a 0.05 grid that no
# turn that was not durable reached in triage: fifth round's mean triage over the five read
# splits, 0.9 (one follow-up question scored 0.89); 8 of 97 durable turns reach it.
TRIAGE_SURE_P = 0.9
# A merge drops the one rule of the skill that the model's P(the user's new message means it
# must no longer be followed) ranks first, when that P reaches this (``replace.md``; asked of
# every old rule; :meth:`Pipeline.takes_back`). `skilldesk bench replace` on the read splits
# fresh37-52 (146 pairs: every merge's message against each rule of its target, 16 rules a
# contradiction takes back), AUC 0.95 but P crowded at 0.5-0.7: the top rule at 0.60 / 0.62 /
# 0.64 found 10 / 9 / 7 of the 16 and dropped 6 / 3 / 2 of the 130 that stand; any rule at
# the old bar 0.7 found 3 and dropped 1 (asked only of the rules the merge model left out, it
# found 1: the merge model keeps the rule a contradiction takes back).
REPLACE_MIN_P = 0.62
# The quote step (:meth:`Pipeline.quote`) counts the sentence the model points at when its P
# reaches QUOTE_MIN_P (a majority), and runs only after a cue word or where triage's P(durable)
# reached QUOTE_TRIAGE_P: a rescue of rules the model could not ground asks for surer evidence
# than a write does. Pooled over the read splits fresh10-16 (317 scored turns, 110 durable,
# `skilldesk bench triage`): at 0.6 triage lets 54% of the durable turns and 10% of the others
# through, at the write bar (0.42) 95% and 33%. On the 31 read scenarios that reach the step,
# the tweaks it turned into skills ("make it funnier", "two or three plain lines") scored
# 0.49-0.56 there, the three personas it saved 0.61-0.66.
QUOTE_MIN_P = 0.5
QUOTE_TRIAGE_P = 0.6
# A later turn goes on where the lasting check's P(what it says is about every future piece
# of that work, not only this answer or case) reaches LASTING_MIN_P (:meth:`Pipeline._lasting`).
# P(every) is low on the whole (the model answers "this" to most turns): the bar is the
# prompt's and the read's, fitted again whenever either changes (`skilldesk bench triage
# --lasting`), as the highest 0.02 step that keeps 9 in 10 durable later turns of the read
# fresh60-66. The check replaced triage's P weighed at even odds against P(not wanted again),
# which let 48 of 61 other later turns of fresh60-66 through; the forty-fourth round's wording
# ("this" also where a change comes with a reason about the people of this case) took AUC
# 0.78 -> 0.80 there. Fifty-fourth round: the turn is read alone (an empty "Earlier"), not
# after the user's two turns before it; read after them, P(every) ran lower and separated
# less (the request just answered draws the model to "this"). Every later turn of fresh60-66
# (161, 98 durable), fitted on: AUC 0.81 -> 0.93 (English 0.84 -> 0.93, Chinese 0.77 ->
# 0.94); the bar moved 0.24 -> 0.34: durable let on 89/98 both, others 25/63 -> 18/63, one-off
# conversations with a later turn let on 5 -> 6 of 35. Not fitted on, fresh53-59 and
# fresh67-79 (457, 280 durable): AUC 0.81 -> 0.90 (English 0.86 -> 0.91, Chinese 0.73 ->
# 0.90); durable 253 -> 252 of 280, others 83 -> 50 of 177, one-off conversations 20 -> 14 of
# 96 (the mean of both reads: AUC 0.88).
LASTING_MIN_P = 0.34
# A later turn that asks, for a new answer, for what an earlier turn of the conversation asked
# ("and same for these, how big do they end up") is read together with that turn
# (:meth:`Pipeline.asked_again`) where the model's P(yes) on ``again.md`` reaches AGAIN_MIN_P,
# asked of at most AGAIN_TURNS earlier turns. Fitted with `skilldesk bench triage --again` on
# the odd half of bench/data/asked_again.jsonl (32 pairs, EN + ZH, written for it before the
# prompt was tuned): 0.6 finds 14/16 repeats and takes 3/16 others, 0.7 finds 11/16 and takes
# 1/16. The higher bar, since a wrong yes can make a tweak a skill where a miss only leaves the
# turn read alone, as before. On the even half, not tuned on: AUC 1.00, 14/16 and 0/16.
AGAIN_MIN_P = 0.7
AGAIN_TURNS = 2
# A rule said in a later turn keeps none of its sentences whose P(story) (``part.md``: the
# sentence tells what happened, who did what or this case's details, and asks for nothing by
# itself) reaches STORY_MIN_P, where the rule has another sentence
# (:meth:`Pipeline.without_story`). Fitted with `skilldesk bench triage --story` on every
# sentence of the later turns that hold an expected rule in the read fresh53-79, labelled
# "rule" where it holds the rule's evidence and "story" where it holds a word the scenario
# forbids (615 sentences). The fit half fresh53-66 (150 story, 145 rule): AUC 0.954; the
# lowest bar (in 0.02 steps) that drops at most 1 in 20 rule sentences: 0.42, 98/150 stories
# and 5/145 rules. Not fitted on, fresh67-79 (164, 156): AUC 0.975; 98/164 and 2/156.
STORY_MIN_P = 0.42
Search = Callable[[str, int], list[Neighbour]]


def conversation_key(messages: Sequence[dict]) -> str:
    """What a skill records of the conversation that wrote it: a short hash of the
    conversation's first user message, the same for every learning run of one conversation
    (each run gets the whole conversation so far). A skill's ``source_turns`` entries read
    ``<turn id>@<key>``; the first is the add's (:func:`learned_here`)."""
    first = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
    return hashlib.sha1(" ".join(first.split()).encode("utf-8")).hexdigest()[:12] if first \
        else ""


def lexical_search(bank: SkillBank, user: str) -> Search:
    """A search over the user's skills by word overlap (when no index is at hand)."""

    def search(query: str, k: int) -> list[Neighbour]:
        q = content_tokens(query)
        hits = []
        for s in bank.load(user, scope="user").skills:
            score = jaccard(q, skill_text(s))
            if score > 0:
                hits.append(Neighbour(s, score, None, score))
        return sorted(hits, key=lambda h: -h.score)[:k]

    return search


class Likeliest(NamedTuple):
    """A sentence of a message and triage's read of it alone (:meth:`Pipeline.sentence_reads`;
    the likeliest to last: :meth:`Pipeline.likeliest_sentence`)."""

    text: str
    p: float  # triage's P(durable) of it
    kind: str | None  # the durable kind triage found likeliest ("constraint", "rule", …)


class Pipeline:
    """Runs the loop for one bank + user with one model client."""

    def __init__(self, bank: SkillBank, user: str, llm: LLMClient | None, *,
                 search: Search | None = None,
                 refresh: Callable[[list[Path]], Any] | None = None,
                 policy: dict[str, str] | None = None, top_m: int = TOP_M,
                 eta: float | None = None):
        self.bank, self.user, self.llm = bank, user, llm
        self.search = search or lexical_search(bank, user)
        self.refresh = refresh or (lambda paths: None)
        tier = llm.tier if llm is not None else "tiny"
        self.policy = dict(tiers.policy(tier).steps(), **(policy or {}))
        if llm is None:  # no model: only what rules can do
            self.policy.update(extract="rule", judge="rule", merge="rule")
        self.top_m = top_m
        self.eta = eta  # η, where ``search`` scores are retrieval's P(related)
        self.triaged: dict[int, float] = {}
        self.quoted: dict[tuple, list[float] | None] = {}  # quote answers of this run
        self.facts: dict[str, str | None] = {}  # fact answers of this run
        self.again: dict[int, triage.UserTurn | None] = {}  # asked_again answers of this run
        self.users: list[triage.UserTurn] = []  # the user's turns of the conversation
        self.remembered = False  # the user asked for the newest turn to be remembered
        self.key = ""  # conversation_key of the conversation being learned from

    # ------------------------------------------------------------------------------ the run
    def run(self, messages: list[dict], mode: str = "turn", turn_id: str | None = None,
            checkpoint: Callable[[], None] | None = None) -> list[Action]:
        """Learn from ``messages``; ``checkpoint()`` runs between steps (pause / stop).

        ``mode``: "turn" (the newest user turn, after a chat turn), "conversation" (every
        topic of a whole conversation), or "remember": the user asked for their newest turn
        to be remembered ("Remember this" on the message). That is the signal triage guesses
        at, so no gate asks the model whether the turn lasts (triage, the lasting and opening
        checks, extraction's first decision, the model's "no sentence is meant to last"):
        extraction must write, and every check after it (grounding, the instance, the judge)
        stands as for any rule."""
        self.checkpoint = checkpoint or (lambda: None)
        self.triaged = {}  # message index -> triage's P(durable), for extraction
        self.quoted, self.facts, self.rules, self.again = {}, {}, {}, {}
        self.focused: tuple[str, str] | None = None  # (the opening's sentence, the rest)
        self.users = triage.user_turns(messages)
        self.key = conversation_key(messages)
        self.remembered = mode == "remember" and bool(self.users)
        actions: list[Action] = []
        decide = self._triage if self.policy.get("triage") == "llm" and self.llm is not None \
            else None
        confirm = self._confirm if decide is not None else None
        if mode == "remember":
            mode = "turn"
            if self.remembered:
                decide = lambda turns: "remember"  # noqa: E731 - the user's word, not a guess
                confirm = None
                self.triaged[self.users[-1].index] = 1.0
        for w in triage.windows(messages, mode, decide, confirm):
            self.checkpoint()
            earlier = earlier_requests(messages, w)
            w, earlier = self.with_asked_again(messages, w, earlier)
            candidates, failed = self.extract(w, earlier)
            if failed is not None:
                actions.append(failed)
            fixing = any(triage.is_fixing(t.text) for t in w.turns[-1:])
            texts = [t.text for t in w.turns]
            shown = texts[w.focus:]  # the evidence turns
            before = texts[:w.focus]
            if self.focused is not None:  # the opening's sentence that lasts, read alone
                shown, before = [self.focused[0]], [self.focused[1]]
            said_now = "\n".join(shown)
            # the model read them as evidence and the requests before them as context: a rule
            # of its that only restates those goes
            by_model = self.by_model
            evidence = said_now if before and by_model else None
            # what the model read as the requests before the evidence: the instance
            requests = [*earlier, *before] if evidence is not None else earlier
            vetted = []
            keep = self.keeper(w)
            reword = self.reword if by_model else None
            again = w.turns[0].text if "model:again" in w.cues else ""
            # a rule said in a later turn (not the opening's fact, read apart: its story goes
            # by fact.md): the user's words for it (said_rule), asked once, where needed
            restatable = evidence is not None and self.focused is None and len(shown) == 1
            for c in candidates:
                c.fixing = fixing
                c.said = clip(said_now, 600)
                c.again = again
                rules = list(c.constraints)
                # vet(keep=None): the checks, as often as the rules change
                vet = partial(vet_candidate, c, w.user_text, w.assistant_text, texts,
                              context=requests, evidence=evidence, reword=reword)
                why = vet()
                own_words = False  # the rule is the user's, said without its story
                if self.focused is not None and (why is None
                                                 or why.startswith("no rule grounded")):
                    # the opening's fact said without its story, wherever the checks pass
                    # it: also where they passed the model's own rule, which kept one case of
                    # the fact or its story ("Avoid tasks that require two hands" for "I've
                    # only got the one arm, lost the other in a farm accident…"; the read
                    # fresh53-66: 22 -> 29 of their 56 firm facts learned right)
                    own_words = self.restate(c, vet)
                    if own_words:
                        why = None
                elif why is None and restatable:
                    # only the wording of a rule the checks pass: said in the user's words a
                    # one-off request is grounded by construction, and the checks are what
                    # stop it (fresh69, run once on the version that rescued ungrounded
                    # candidates with it: one-off conversations with junk 4/8 -> 7/8)
                    rule = self.said_rule(before[-1], shown[0])
                    if rule is not None:
                        c.constraints = [rule]
                        own_words = vet() is None
                        if not own_words:
                            c.constraints = rules
                if why and why.startswith("no rule grounded"):
                    # the model paraphrased the user too far (Qwen-1.5B on the tune half:
                    # "Use phrases like 'matey'" for "talk to me like a cheerful pirate", "不推荐
                    # 辣的食物" for "我完全不能吃辣"): the user's own sentence of the evidence
                    # turn that says the same thing is the rule; only where there is none may
                    # the model's keep check save its own wording (on fresh3 it kept "将信息分
                    # 成小块" where the user's sentence asked for questions and answers)
                    own = own_sentence(rules, shown)
                    if own is None and self.focused is not None:
                        own = self.focused[0]  # the opening's sentence that lasts, story and all
                    if own is None and by_model:
                        own = self.quote(w, requests)
                    c.constraints = [own] if own is not None else rules
                    # nor may it where the model answered that no sentence is meant to last,
                    # unless the user asked for it twice (:meth:`asked_again`): asked about
                    # the sentences, the model reads each as said once
                    saver = None if own is not None or (
                        "model:again" not in w.cues and self.declined(w, requests)) else keep
                    why = vet(saver)
                if why:
                    actions.append(Action("discard", reason=why, candidate=c, step="check"))
                    continue
                if evidence is not None and not own_words:
                    # a rule said after the request, in the model's words
                    c.constraints = in_user_words(c.constraints, shown, requests)
                if by_model:
                    c.constraints = self.standalone(c.constraints, said_now)
                vetted.append(c)
            if len(vetted) == 1 and self.policy["extract"] == "llm+rule" and not any(
                    c.startswith("model:") for c in w.cues):
                # the user said the rule with a cue word: none of their own rule sentences is
                # lost because a small model moved it elsewhere (Qwen-1.5B once put "start
                # every summary with a TL;DR" into an example and kept only the bullet limit)
                if self.focused is not None or mode == "conversation":
                    said = self.evidence_window(w)
                else:  # a chat turn: only its own sentences
                    said = triage.Window(turns=w.turns[-1:], cues=w.cues)
                rules = vetted[0].constraints
                for r in rule_extract(said):
                    for rule in r.constraints:
                        near = max(range(len(rules)), key=lambda i: jaccard(rule, rules[i]),
                                   default=None)
                        if near is None or (jaccard(rule, rules[near]) < 0.4 and coverage(
                                rule, "\n".join(rules)) < 0.6):
                            rules.append(rule)
                        else:
                            # the model reworded it and dropped a word the user said ("start
                            # with a one-line TL;DR" -> "a one-line summary"): their words win,
                            # the clauses that say the rule (a reason after a comma is none)
                            span = rule_span(rule, rules[near])
                            if content_tokens(span) - content_tokens("\n".join(rules)):
                                rules[near] = span
            if not vetted and self.policy["extract"] == "llm+rule":
                # the model found no usable rule; the user's own rule sentences may still
                # hold what it missed (never anything the user did not say), unless the
                # model, asked about exactly those sentences, says none is meant to last
                fallback = rule_extract(self.evidence_window(w))
                for c in fallback if fallback and not self.declined(w, requests) else []:
                    c.fixing = fixing
                    c.said = clip(said_now, 600)
                    if vet_candidate(c, w.user_text, w.assistant_text, texts,
                                     context=earlier) is None:  # read from all of w
                        vetted.append(c)
            if not candidates and not vetted and failed is None:
                actions.append(Action("discard", reason="no reusable rule in the user's messages"
                                      f" (cues: {', '.join(w.cues[:3])})", step="extract"))
            asked = asked_for(earlier, w)
            for c in vetted:
                self.checkpoint()
                if evidence is not None and self.focused is None:  # a later turn's rule
                    c.constraints = self.without_story(c.constraints, before[-1])
                actions.append(self.manage(c, turn_id, asked))
        for a in actions:
            log.info("evolution %s%s: %s", a.kind,
                     f" {a.skill.title}" if a.skill is not None else "", a.reason)
        return actions

    @property
    def opening(self) -> int:
        """The message index of the conversation's first user turn (-1: none)."""
        return self.users[0].index if self.users else -1

    def evidence_window(self, w: triage.Window) -> triage.Window:
        """``w``, or where the opening's lasting sentence is read apart from its request
        (:meth:`apart`), that sentence alone: the user's own rule sentences are taken from
        what extraction read as the evidence, never from the request beside it (a cue word
        there, "帮我配个菜单，八个菜，荤素都要有", made the request a rule of the fact's skill)."""
        if self.focused is None:
            return w
        sent = self.focused[0]
        return triage.Window(turns=[triage.UserTurn(w.turns[-1].index, sent, triage.signal(sent))],
                             cues=w.cues)

    def opening_alone(self, w: triage.Window) -> bool:
        """The window's evidence is the conversation's opening message alone."""
        turns = w.turns[w.focus:]
        return len(turns) == 1 and turns[0].index == self.opening

    def at_opening(self, w: triage.Window) -> bool:
        """:meth:`opening_alone`, scored by triage, whether the model or cue words let it on:
        the opening's gate (:func:`opening_p`) decides either way. Cue words found 15 openings
        of the read fresh53-66 ("wrong", "every time", "以后", "必须"); triage's bar alone let 9
        of the 12 that held nothing lasting through (one-off questions: "my varifocals keep
        sliding…", "is there a way to fix it without…"), the opening's gate 3, and it kept the
        3 that held a firm fact."""
        return self.opening_alone(w) and self.opening in self.triaged

    @property
    def by_model(self) -> bool:
        """The model extracts, and so words the rules (not the tiny tier, not the rules)."""
        return self.llm is not None and self.llm.tier != "tiny" \
            and self.policy["extract"] != "rule"

    # ------------------------------------------------------------------------------ triage
    def _triage(self, turns: list[triage.UserTurn]) -> str | None:
        """The model's decision: does the newest turn hold anything durable? (its kind, or None)

        A short prompt (``triage.md``) read as a calibrated score, not as the model's one-word
        argmax: the probability mass the model puts on the durable kinds (one forward pass,
        :meth:`LLMClient.choice`) must reach ``triage.DURABLE_MIN_P`` on the opening message;
        on a later turn it is weighed against the lasting check instead (:meth:`_lasting`).
        Qwen2.5-Coder-1.5B's argmax answered a durable kind to plain requests ("Explain the
        CAP theorem": 3 junk writes in 6 held-out one-offs); the bar is fitted on the tune
        half (``skilldesk bench triage``). An unusable answer is "nothing" (the cost of a miss is one
        lost rule, the cost of a false yes one extraction call whose checks still stand)."""
        p, kind = self._scored(turns)
        if p is None:
            return None
        if self.llm.scores_tokens and turns[-1].index != self.opening:
            return self._lasting(turns[-1], p, kind)
        # the conversation's opening message: a request, and maybe a fact about the user
        # beside it. Past triage's bar, extraction's first decision weighs both reads
        # (:func:`opening_p`). Sending every opening to that gate, whatever triage reads of
        # the whole (a long story reads low however plainly one sentence is the writer's
        # fact), was measured in the forty-seventh round (`bench triage --openings --extract
        # --lasting`, then `bench evolution`): the fit fresh53-59 unchanged (26 durable and 1
        # other through), the read fresh67-72 2 more durable and 1 more other (of 45 openings
        # under the bar), the blind fresh73 no rule more and one junk skill more (a "just
        # this once" opening with the writer's usual way of doing it); not kept
        return kind if p >= triage.DURABLE_MIN_P else None

    def _confirm(self, turns: list[triage.UserTurn]) -> bool:
        """A chat turn cue words found goes on as the model would let it on without them: a
        later turn by the lasting check (:meth:`_lasting`), the opening where triage's
        P(durable) reaches its bar (``triage.DURABLE_MIN_P``) and then by the opening's fitted
        score, at extraction (:meth:`at_opening`). On the later turns cue words found in the
        read fresh53-73 (`bench triage --lasting --cued`; 49 turns, 35 durable), triage's bar
        let 34 durable and all 14 others on (more about the case: "jumps are always at the
        same bit"; tweaks: "way too soppy for Steve…"), the lasting check 33 and 3 (fresh53-59:
        10 & 7 -> 9 & 1; fresh67-73: 13 & 5 -> 13 & 0; fresh60-66, where its bar was fitted:
        11 & 2 both); on the blind fresh74 content recall rose 0.61 -> 0.72, junk unchanged.
        Measured with its earlier wording (fresh37-46), the lasting check had stopped 4 of 8
        durable ones. An unusable answer leaves the cue's word standing."""
        p, kind = self._scored(turns)
        if p is None:
            return True
        if self.llm.scores_tokens and turns[-1].index != self.opening:
            return self._lasting(turns[-1], p, kind) is not None
        if p < triage.DURABLE_MIN_P:
            log.info("evolution: cue words, but triage P %.2f: %s", p, clip(turns[-1].text, 80))
            return False
        return True

    def _scored(self, turns: list[triage.UserTurn]) -> tuple[float | None, str | None]:
        """:meth:`triage_score` of the newest turn, kept in ``self.triaged`` for extraction."""
        p, kind = self.triage_score(turns)
        if p is not None:
            self.triaged[turns[-1].index] = p
        return p, kind

    def _lasting(self, turn: triage.UserTurn, p: float, kind: str | None) -> str | None:
        """A later turn goes on where the model's P that what it says is about every future
        piece of work of its kind, not only this answer or this case (``lasting.md``, the
        turn read alone: :meth:`lasting_score`), reaches :data:`LASTING_MIN_P`: a tweak of the
        answer just given ("make it funnier, he's a good mate"), more about their own case, a
        follow-up question, a report or thanks stop there. Triage's P is not weighed in: on
        later turns it barely separates (read fresh60-66, AUC 0.62), and weighed at even odds
        against the earlier wording of this check (P(wanted again), AUC 0.51 there) it let 48
        of 61 other later turns through and one-off conversations wrote 20 junk skills in 48.
        Without a lasting read (no earlier turn, an unusable answer) triage's bar decides."""
        later = any(t.index < turn.index for t in self.users)
        q = self.lasting_score(turn) if later else None
        if q is None:
            return kind if p >= triage.DURABLE_MIN_P else None
        if q < LASTING_MIN_P:
            if self.asked_again(turn) is not None:  # asked for a second answer: it lasts
                return kind
            log.info("evolution: triage P %.2f, but about this case only (P(every) %.2f): %s",
                     p, q, clip(turn.text, 80))
            return None
        return kind

    def asked_again(self, turn: triage.UserTurn) -> triage.UserTurn | None:
        """The earlier user turn that ``turn`` asks for again, for a new answer: the same
        detail for each item, the same format, said in other words ("can you say how big each
        one gets fully grown?", a new request, then "and same for these, how big do they end
        up"). Asking twice, for two answers, is what makes a format lasting, and neither turn
        says all of it alone: the newest points back ("same for these"), the earlier one was
        said for one answer. The options are the user's turns with a request between them and
        ``turn`` (never the opening: that is a request), the latest :data:`AGAIN_TURNS`; the
        one whose P(yes) on ``again.md`` is highest, where it reaches :data:`AGAIN_MIN_P`.
        None where there is none, or the model cannot be read."""
        if turn.index in self.again:
            return self.again[turn.index]
        found: tuple[float, triage.UserTurn] | None = None
        if self.by_model and self.llm.scores_tokens:
            before = [t for t in self.users if t.index < turn.index]
            for t in reversed(before[1:-1][-AGAIN_TURNS:]):
                p = self.again_score(t.text, turn.text)
                if p is not None and p >= AGAIN_MIN_P and (found is None or p > found[0]):
                    found = (p, t)
            if found is not None:
                log.info("evolution: asked again (P %.2f) what an earlier turn asked: %s",
                         found[0], clip(found[1].text, 80))
        self.again[turn.index] = found[1] if found is not None else None
        return self.again[turn.index]

    def again_score(self, earlier: str, newest: str) -> float | None:
        """P(``newest`` asks, for a new answer, for what ``earlier`` asked), read after
        ``{"again": "`` of ``again.md`` (one forward pass); None when unusable."""
        return self._p_yes("again", "again", earlier=clip(scrub(earlier), 300),
                           newest=clip(scrub(newest), 300))

    def with_asked_again(self, messages: list[dict], w: triage.Window, earlier: list[str]
                         ) -> tuple[triage.Window, list[str]]:
        """Window ``w`` and its earlier requests, or where its evidence is one later turn that
        asks again what an earlier turn asked (:meth:`asked_again`), both turns as the
        evidence, and the requests before each as what they were said for."""
        turns = w.turns[w.focus:]
        if len(turns) != 1 or turns[0].index == self.opening:
            return w, earlier
        again = self.asked_again(turns[0])
        if again is None:
            return w, earlier
        between = [t.text for t in self.users if again.index < t.index < turns[0].index]
        first = earlier_requests(messages, triage.Window(turns=[again]))
        return (replace(w, turns=[again, turns[0]], focus=0, cues=[*w.cues, "model:again"]),
                [*first, *between][-ASKED_TURNS:])

    def lasting_score(self, turn: triage.UserTurn) -> float | None:
        """P(what ``turn`` says is about every future piece of work of its kind, not only
        this answer or case), the turn read alone (one forward pass); None when the model gave
        no usable answer. Read after the user's two turns before it, as until the fifty-fourth
        round, it separated durable later turns less (AUC 0.81 against 0.90 on read sets it
        was not fitted on): see :data:`LASTING_MIN_P`."""
        self.checkpoint()
        try:
            probs = self.llm.choice("lasting", "scope", earlier="",
                                    newest=clip(scrub(turn.text), 600))
        except Cancelled:
            raise
        except (SkillDeskError, ValueError) as exc:
            log.info("evolution: lasting check unavailable (%s)", exc)
            return None
        return probs.get("every")

    def triage_score(self, turns: list[triage.UserTurn]) -> tuple[float | None, str | None]:
        """(probability that the newest turn holds something durable, the likeliest durable
        kind); (None, None) when the model gave no usable answer.

        The mean of two reads: the newest turn after the earlier ones, and the newest turn
        alone. Read with the earlier turns, Qwen2.5-Coder-1.5B took a tweak of its last answer
        ("Make it friendlier", "再短一点") for a lasting format; read alone, it cannot see a
        format asked for again. Pooled over the five read splits (232 scored turns, `bench
        triage`, fifth round) the AUC of the context read was 0.912, alone 0.934, the mean
        0.930 — the mean keeps the repeated format in view at the cost of a second forward
        pass on the cached prompt (none for a conversation's first turn)."""
        reads = [self._triage_read(turns)] + ([self._triage_read(turns[-1:])]
                                              if len(turns) > 1 else [])
        if any(r is None for r in reads):
            return None, None
        p = sum(sum(r.values()) for r in reads) / len(reads)
        return p, max(reads[0], key=reads[0].get)

    def _triage_read(self, turns: list[triage.UserTurn]) -> dict[str, float] | None:
        """The durable kinds' probabilities for the newest of ``turns`` (one forward pass)."""
        self.checkpoint()
        try:
            probs = self.llm.choice("triage", "kind", user_turns=numbered(turns))
        except Cancelled:
            raise
        except (SkillDeskError, ValueError) as exc:
            log.info("evolution: triage failed (%s); nothing learned from this turn", exc)
            return None
        return {k: v for k, v in probs.items() if k != "none"} or None

    # ------------------------------------------------------------------------------ extract
    def extract(self, w: triage.Window,
                earlier: Sequence[str] = ()) -> tuple[list[Candidate], Action | None]:
        self.focused = None
        if self.policy["extract"] == "rule" or self.llm is None:
            return rule_extract(w), None
        if self.policy["extract"] == "off":
            return [], Action("discard", reason="learning is off for this model", step="extract")
        values = self.extract_values(w, earlier)
        schema, decided = None, False  # decided: the model's first decision is to write one
        # a remembered turn needs no first decision: the user made it; a backend that cannot
        # score tokens (a scripted or remote model) lets its structured answer decide alone
        if self.llm.scores_tokens and not self.remembered:
            best, text = None, w.turns[w.focus].text
            if self.at_opening(w):
                q, best = self.opening_score(text)
                if q is None or q < OPENING_MIN_P:
                    log.info("evolution: the opening's P(lasting) from three reads %s < %.2f",
                             "unavailable" if q is None else f"{q:.2f}", OPENING_MIN_P)
                    return [], None
                decided = True
            elif (p := self.extract_score(values)) is not None:
                log.info("evolution: extraction P(a skill) %.3f (%s)", p,
                         clip(values["user_turns"], 80))
                sure = max((self.triaged.get(t.index, 0.0) for t in w.turns), default=0.0)
                if p < EXTRACT_MIN_P and sure < TRIAGE_SURE_P:
                    return [], None
                decided = True
                if self.opening_alone(w):
                    # let on by cue words where triage did not score it (no P of the whole
                    # to reuse); they may sit in the request or in the story ("…家里盐也换成
                    # 无碘的了" is no correction): its fact is read apart all the same
                    best = self.likeliest_sentence(text)
            self.focused = self.apart(text, best) if best is not None else None
            if self.focused is not None:
                values = self.extract_values(w, earlier, focus=self.focused)
        if decided or (self.remembered and self.llm.scores_tokens):
            lang = values["lang"]
            schema = self.llm.prompt("extract", lang).schema or {}  # decided: write one
            schema = {**schema, "properties": {**schema["properties"], "skills": {
                **schema["properties"]["skills"], "minItems": 1}}}
        try:
            out = self.llm.structured("extract", schema=schema, **values)
        except StructuredOutputError as exc:
            return [], Action("discard", reason=f"extraction answer unusable: {clip(str(exc), 160)}",
                              step="extract")
        except Cancelled:
            raise
        except SkillDeskError as exc:
            return [], Action("error", reason=f"extraction failed: {exc}", step="extract")
        raw = out.get("skills") or []
        return [Candidate.from_json(s) for s in raw if isinstance(s, dict)], None

    def extract_values(self, w: triage.Window, earlier: Sequence[str] = (),
                       focus: tuple[str, str] | None = None) -> dict[str, Any]:
        """The extraction prompt's inputs for window ``w``: the evidence turns, numbered; the
        context (earlier requests: the window's turns before its evidence and ``earlier``,
        :func:`earlier_requests`; the last reply; a repeated format); the language.
        ``focus`` (the opening's sentence that lasts, :meth:`likeliest_sentence`, and the rest of
        the message): that sentence is the evidence, the rest its context."""
        tiny = self.llm.tier == "tiny"
        evidence = [t.text for t in (w.turns if tiny else w.turns[w.focus:])]
        before = [] if tiny else [*earlier, *(t.text for t in w.turns[:w.focus])][-2:]
        if focus is not None:
            evidence, before = [focus[0]], [focus[1]]
        turns = "\n".join(f"{i}. {scrub(t)}" for i, t in enumerate(evidence, 1))
        lang = language(w.user_text)
        zh = lang == "zh"
        context = ""
        if before:  # earlier requests only say what task the evidence was about (Qwen-1.5B
            # answered [] after a yes when they were numbered as evidence: a plain request
            # there looks like its one-off example)
            said = " / ".join(clip(scrub(t), 160) for t in before)
            context += f"{self.llm.prompt('extract', lang).extra.get('earlier', '')}: {said}\n\n"
        if w.context and self.llm.tier != "tiny":
            label = "助手上一条回复（仅作背景）" if zh else "Assistant's last reply (context only)"
            context += f"{label}: {clip(scrub(w.context), 200)}\n\n"
        repeated = ", ".join(c.split(":", 1)[1] for c in w.cues if c.startswith("repeated:"))
        if repeated:  # the gate saw it; small models miss a pattern spread over messages
            context += (f"注意：用户在多条消息里要求同一种格式（{repeated}），这是长期偏好。\n\n" if zh
                        else f"Note: the user asked for the same format ({repeated}) in several "
                             "messages; that is a lasting preference.\n\n")
        elif "model:again" in w.cues:  # :meth:`asked_again`
            context += f"{self.llm.prompt('extract', lang).extra.get('again', '')}\n\n"
        return {"user_turns": turns, "context": context, "lang": lang}

    def extract_score(self, values: dict[str, Any]) -> float | None:
        """P(extraction writes a skill) from its answer's first token (one forward pass over
        the prompt the generation then reuses); None where the backend cannot score tokens
        (a scripted or remote model: its structured answer decides alone)."""
        if not self.llm.scores_tokens:
            return None
        try:
            probs = self.llm.score("extract", EXTRACT_PREFIX, EXTRACT_OPTIONS,
                                   lambda out: "some" if out.get("skills") else "none",
                                   **values)
        except Cancelled:
            raise
        except (SkillDeskError, ValueError) as exc:
            log.info("evolution: extraction score unavailable (%s)", exc)
            return None
        return 1.0 - probs["none"]

    @staticmethod
    def apart(text: str, best: Likeliest) -> tuple[str, str] | None:
        """(``best``'s sentence, the rest of ``text``) where the opening's likeliest sentence is
        to be read apart from its request; None where the message is read whole.

        A fact about the user beside a request ("…saturday night? I've got tinnitus…") is the
        evidence, the request context; a rule about the request's own task ("Summarize this:
        … Please start the summary with a TL;DR") is read with it: alone, Qwen-1.5B described
        that skill as "a one-line summary of the previous message", which no later "Please
        summarize: …" found. A fact is what triage, reading the sentence alone, found
        likeliest a constraint, or a sentence that shares no word with the request: one shared
        word ("I've", "got", "two", "推荐", "地方") read 45 of the 250 firm facts of the read
        scenario sets with their request, and Qwen-1.5B wrote the request's task skill
        ("Christmas dinner | Include both sets of in-laws"); triage's kind found 39 of those
        45 a constraint, and 2 of 26 rules about the request's own task."""
        sent = chain_of(text, best.text)  # quotes out (:func:`statements`): rest is all of it
        rest = " ".join(text.replace(sent, " ").split()) if sent in text else text
        told = content_tokens(rest)
        if normalize(sent) == normalize(text) or not told or (
                best.kind != "constraint" and told & content_tokens(sent)):
            return None
        log.info("evolution: the opening's lasting sentence is read alone: %s", clip(sent, 80))
        return sent, rest

    def likeliest_sentence(self, text: str, whole: float | None = None) -> Likeliest | None:
        """The sentence of ``text`` that triage, reading each alone, finds likeliest to last,
        that P and the durable kind it found likeliest (:class:`Likeliest`); None where
        ``text`` has no sentence but questions (a question is a request, never a rule:
        :func:`statements`) or a read gave no usable answer. ``whole``: triage's P of ``text``
        read alone, where known — a message that is one sentence is not read again (its kind
        is then None).

        An opening is a request, and maybe a fact about the user beside it ("…what could we
        do on the saturday night? I've got tinnitus, anywhere loud…"). Triage read whole
        scored that 0.48, the fact alone 0.77: the opening's gate weighs both
        (:func:`opening_p`), and extraction reads the sentence alone (:meth:`extract_values`):
        read whole, Qwen2.5-Coder-1.5B wrote the request's task skill ("Tent selection",
        "旅行建议 | 推荐周边游玩的地方") and not the fact — read fresh62, 0 of its 4 firm facts."""
        reads = self.sentence_reads(text, whole)
        return max(reads, key=lambda s: s.p) if reads else None

    def sentence_reads(self, text: str, whole: float | None = None) -> list[Likeliest] | None:
        """Triage's read of every sentence of ``text`` alone (:class:`Likeliest`), in order (a
        Chinese sentence whole, then clause by clause, :func:`topic_chain`); None where
        ``text`` has no sentence but questions or a read gave no usable answer. ``whole`` as
        for :meth:`likeliest_sentence`."""
        out = []
        for s in (u for t in statements([text]) for u in dict.fromkeys([t, *topic_chain(t)])):
            if whole is not None and normalize(s) == normalize(text):
                out.append(Likeliest(s, whole, None))  # read before, whole
                continue
            r = self._triage_read([triage.UserTurn(-1, s, triage.signal(s))])
            if r is None:
                return None
            out.append(Likeliest(s, sum(r.values()), max(r, key=r.get)))
        return out or None

    def restate(self, c: Candidate, vet: Callable[[], str | None]) -> bool:
        """Make ``c``'s one rule and its description the fact the opening's focused sentence
        states, said without its story (:meth:`fact`), where ``vet`` (the candidate's checks)
        then passes; otherwise ``c`` is left as it was. Whether it was made so."""
        fact = self.fact(self.focused[0]) if self.focused is not None else None
        if fact is None:
            return False
        rules, c.constraints = c.constraints, [fact]
        if vet() is None:
            c.description = fact
            return True
        c.constraints = rules
        return False

    def fact(self, sentence: str) -> str | None:
        """The lasting fact about the user that ``sentence`` (a fact said beside the opening's
        request, :meth:`likeliest_sentence`) states, said without the story of this one
        occasion (``fact.md``, ``fact.zh.md`` for a Chinese sentence); None when the model gave
        no usable answer.

        Where the model's own rules for such a fact were not grounded in the user's words,
        the user's sentence was the rule, story and all: "我有腱鞘炎，右手手腕一使劲就疼，拧个
        瓶盖都费劲，医生让我少用手腕" (read fresh63), "I've got no sense of smell at all since a
        head injury in my twenties, so…" (read fresh57) — case details a skill must not carry
        ("右手", "瓶盖", "head injury"). Asked for the fact alone, Qwen2.5-Coder-1.5B wrote
        "用户有腱鞘炎，手腕一用力就疼。"; of the 80 facts of the read fresh44-63 its answers kept a
        case detail in 5 where the sentences held one in 23. The answer is a rule like any
        other: its words must come from the user's (grounding, :func:`vet_candidate`). It is
        asked for every candidate of such a fact (:meth:`restate`), also where the checks
        passed the model's own rule.
        """
        if sentence not in self.facts:  # asked once per run (one per candidate of it)
            new = self._answer("fact", "fact", lang=language(sentence),
                               said=clip(scrub(sentence), 600)) or None
            if new:
                log.info("evolution: the fact without its story: %s", clip(new, 120))
            self.facts[sentence] = new
        return self.facts[sentence]

    def said_rule(self, request: str, said: str) -> str | None:
        """The rule a later turn ``said`` after ``request`` sets for every such piece of work,
        in the user's own words, without its story or this case's details (``rule.md``,
        ``rule.zh.md``). Qwen2.5-Coder-1.5B's extraction drops what a rule said in a later
        turn is about ("Use cowboy language" for "talk like an old cowboy sat round a
        campfire", "Check every word and date" for "…and reply 'approved' in writing"). Asked
        for the rule alone, it kept the expected words, and no case detail, in 79 of the 98
        such rules of the read fresh60-66; the app's rules were right in 51. Asked only for a
        candidate whose own rules pass the checks, it is the candidate's rule where it passes
        them too (grounding, the instance); a candidate the checks stop is never rescued by
        it. None when the model gave none."""
        if (request, said) not in self.rules:  # asked once per window (one per candidate)
            new = self._answer("rule", "rule", lang=language(said),
                               earlier=clip(scrub(request), 300),
                               said=clip(scrub(said), 600)) or None
            if new:
                log.info("evolution: the rule in the user's words: %s", clip(new, 120))
            self.rules[request, said] = new
        return self.rules[request, said]

    def without_story(self, rules: list[str], request: str) -> list[str]:
        """``rules``, said in a later turn after ``request``, without their sentences that
        only tell the story (``part.md``: P(story) reaching :data:`STORY_MIN_P`), where another
        sentence of them is left. The user's words for a rule, theirs or the model's, often
        keep the story told after it ("…just 'a resident raised'. They go on the noticeboard…,
        and after the last lot someone spray painted 'grass' on Gerald's garage door", "…只收
        对公转账。陈先生这边还差一万五。"): the names and numbers of one case, which a skill must
        not carry (the read fresh76-79: 14 conversations leaked a case detail, at least 5 of
        them by such a story; this check took it out of 2, and a name out of a third). A
        sentence ends at a full stop, not at a semicolon: what follows one goes on with the
        instruction ("Don't put anyone's time in the results; just who ran and any
        milestones", whose second half read alone scores 0.50). Rules of one sentence, and a
        rule all of whose sentences read as story, are left as they are (the checks before
        judged them)."""
        units = [(i, m[0].strip()) for i, rule in enumerate(rules)
                 for m in WHOLE_SENTENCE.finditer(rule) if m[0].strip(" ,;；，。.")]
        if len(units) < 2:
            return rules
        ps = [self.story_score(request, s) for _, s in units]
        if any(p is None for p in ps) or all(p >= STORY_MIN_P for p in ps):
            return rules
        kept: dict[int, list[str]] = {}
        for (i, sent), p in zip(units, ps, strict=True):
            if p < STORY_MIN_P:
                kept.setdefault(i, []).append(sent)
            else:
                log.info("evolution: a sentence of the story left out of the rule (P %.2f): %s",
                         p, clip(sent, 80))
        return [("" if language(rules[i]) == "zh" else " ").join(sents)
                for i, sents in kept.items()]

    def story_score(self, request: str, sentence: str) -> float | None:
        """P(``sentence``, of a later turn after ``request``, only tells the story: what
        happened, who, this case's details) (``part.md``, one forward pass); None when
        unusable."""
        return self._p_yes("part", "part", ("story",), earlier=clip(scrub(request), 300),
                           sentence=clip(scrub(sentence), 300))

    # ------------------------------------------------------------------------------ quote
    def quote(self, w: triage.Window, requests: Sequence[str] = ()) -> str | None:
        """The sentence of the window's evidence turns that says what the user wants to last,
        picked by the model (``quote.md``: its number, or 0 for none), where the model's own
        rules paraphrased the user beyond grounding and no sentence of theirs shares the
        rules' words (Qwen-1.5B wrote "Use a calm, soothing tone" for "Talk to me like a
        hushed nature documentary narrator…"). The user's sentence is grounded by
        construction; it counts when its probability reaches :data:`QUOTE_MIN_P` (read after
        ``{"sentence": "``, one forward pass), or, offered alone as the conversation's
        opening, where triage's P outweighs its P(none) (:meth:`opened`); None otherwise."""
        if all(c.startswith("model:") for c in w.cues) and max(
                (self.triaged.get(t.index, 0.0) for t in w.turns), default=0.0) < QUOTE_TRIAGE_P:
            return None  # triage let the turn through, but not surely enough for a rescue
        sents, probs = self.evidence_scores(w, requests)
        if probs is None:
            return None
        best = max(range(len(probs)), key=probs.__getitem__)
        log.info("evolution: quote %d P %.3f of %d (%s)", best, probs[best], len(sents),
                 clip(sents[best - 1], 80) if best else "none")
        if best and probs[best] >= QUOTE_MIN_P:
            return sents[best - 1]
        if len(sents) == 1 and self.opened(w, probs[0]):
            return sents[0]
        return None

    def opened(self, w: triage.Window, p_none: float) -> bool:
        """The window's evidence is the conversation's opening message alone, and triage's
        P(durable) for it outweighs ``p_none``, the quote step's P(no sentence is meant to
        last): the opening's gate (:func:`opening_p`) has let it on, and its one sentence is
        what lasts.

        Offered one sentence, the quote step's question is a yes/no on it, and Qwen2.5-Coder-
        1.5B leans to "none" there on lone firm facts (P(none) 0.52-0.67 on six diets, dislikes
        and fears of the read PrefEval items 260..459, triage P 0.86-0.99): a majority bar
        would make the gate's yes a no. Weighed against triage, the one sentence is the rule
        where the model's own wording was not grounded in it ("Limit sodium intake" for a
        low-sodium diet: 7 of the 21 preferences of those items that wrote nothing). Later
        turns have no such check (the lasting check asks another question): there a lone
        sentence still needs the majority."""
        if not self.opening_alone(w) or not self.llm.scores_tokens:
            return False  # (a backend that cannot score tokens has no P to weigh)
        p = self.triaged.get(self.opening)
        if p is None or p < p_none:  # the two reads at even odds, no constant fitted
            return False
        log.info("evolution: the opening's one sentence is the rule (triage P %.2f outweighs "
                 "P(none) %.2f)", p, p_none)
        return True

    def declined(self, w: triage.Window, requests: Sequence[str] = ()) -> bool:
        """The model, asked which sentence of the window's evidence turns says what should
        last (``quote.md``, the prompt :meth:`quote` asks, cached), answered that none does.

        Then neither the keep check (``keep.md``) saves the model's own wording of an
        ungrounded rule, nor the cue-word fallback (:func:`rule_extract`) writes the user's
        sentence as a rule behind the model's back: a cue word may bring a turn to the model,
        never overrule its answer. On Qwen2.5-Coder-1.5B the fallback had turned a one-off
        request with a "don't" in it ("…课往后顺延一节就行，别扣我课时") into a skill whose one
        rule was the whole message, right after the model had answered "none" (read fresh33),
        and the keep check had kept "跟物业沟通" for a message to the caretaker.

        Only an answer among two or more sentences counts. Offered one sentence, the question
        is yes or no on it, which the opening's gate has already decided, and
        Qwen2.5-Coder-1.5B leans to "none" there on lone firm facts triage rightly let through
        (P(none) 0.57-0.67 on five one-sentence diets and dislikes of the read PrefEval items
        260..459, triage P 0.86-0.99): counted, it cost a one-sentence fear of heights its
        skill, which the keep check had kept (PrefEval 460..499).
        False as well where the model does not extract or its answer cannot be read (both run
        as before)."""
        if not self.by_model or self.remembered:  # the user said it is meant to last
            return False
        sents, probs = self.evidence_scores(w, requests)
        if probs is None or len(sents) < 2 or max(range(len(probs)), key=probs.__getitem__):
            return False
        log.info("evolution: the model says no sentence is meant to last (P %.2f): neither its "
                 "own wording nor a cue word's sentence is kept", probs[0])
        return True

    def evidence_scores(self, w: triage.Window, requests: Sequence[str] = ()
                        ) -> tuple[list[str], list[float] | None]:
        """The options the quote step offers for window ``w`` (the sentences of its evidence
        turns, :func:`options`) and its scores for them (:meth:`quote_scores`, cached): what
        both the rescue (:meth:`quote`) and the veto (:meth:`declined`) read."""
        sents = options(statements([t.text for t in w.turns[w.focus:]]))
        return sents, self.quote_scores(sents, requests)

    def quote_scores(self, sentences: list[str], requests: Sequence[str] = ()
                     ) -> list[float] | None:
        """P(none), then P(each of ``sentences`` (:func:`options`)) says what the user wants to
        last, read with the ``requests`` before them as context (``quote.md``, one forward
        pass; where the backend cannot score tokens, its one structured answer counts as
        probability 1); None when there is nothing to ask about or no usable answer."""
        sents = options(sentences)
        if not sents:
            return None
        said = " / ".join(clip(scrub(t), 160) for t in requests[-2:])
        key = (tuple(sents), said)  # an opening's check and its rescue ask the same prompt
        if key not in self.quoted:
            self.quoted[key] = self._quote_scores(sents, said)
        return self.quoted[key]

    def _quote_scores(self, sents: list[str], said: str) -> list[float] | None:
        label = self.llm.prompt("quote").extra.get("earlier", "")
        self.checkpoint()
        try:
            probs = self.llm.score(
                "quote", '{"sentence": "', {str(i): str(i) for i in range(len(sents) + 1)},
                lambda out: str(out.get("sentence")),
                context=f"{label}: {said}\n" if said else "",
                sentences="\n".join(f"{i}. {clip(scrub(s), 300)}"
                                    for i, s in enumerate(sents, 1)))
        except Cancelled:
            raise
        except (SkillDeskError, ValueError) as exc:
            log.info("evolution: quote unavailable (%s)", exc)
            return None
        return [probs[str(i)] for i in range(len(sents) + 1)]

    # ------------------------------------------------------------------------------ keep
    def keeper(self, w: triage.Window) -> Callable[[str], float | None] | None:
        """The model's per-rule decision for window ``w`` (:meth:`keep_score`), where the model
        extracts and its token probabilities can be read; None elsewhere (the word-overlap
        grounding of :func:`vet_candidate` decides alone). It is asked last: about a candidate
        none of whose rules the user's words ground and no sentence of theirs says."""
        if self.policy["extract"] == "rule" or self.llm is None or not self.llm.scores_tokens:
            return None
        return lambda rule: self.keep_score(w, rule)

    def keep_score(self, w: triage.Window, rule: str) -> float | None:
        """P(the user asked for ``rule`` to hold beyond this request), read after
        ``{"keep": "`` of ``keep.md`` (one forward pass; the window's turns come first, so the
        rules of one candidate share the prompt's prefix in the KV cache). None when the model
        gave no usable answer."""
        return self._p_yes("keep", "keep", user_turns=numbered(w.turns), rule=clip(rule, 200))

    def opening_score(self, text: str) -> tuple[float | None, Likeliest | None]:
        """P(the opening message ``text`` holds something lasting about the user) and the
        sentence that says it: of :meth:`opening_reads`, the sentence the gate
        (:func:`opening_p`) scores highest. The P is None when a read gave no usable answer."""
        whole = self.triaged[self.opening]
        reads = self.opening_reads(text, whole)
        if reads is None:
            return None, None
        q, best, _ = opening_pick(whole, reads)
        return q, best

    def opening_reads(self, text: str, whole: float) -> list[tuple[Likeliest, float]] | None:
        """The opening gate's reads of each sentence of ``text`` (``whole``: triage's P of
        all of it, scored before): triage's P of it alone (:meth:`sentence_reads`) and P(it
        is the writer's own and lasts, :meth:`mine_score`).
        A message of questions only (or whose sentences triage could not read) is read whole,
        as one sentence with triage's P of the whole. None when a read gave no usable answer.

        Every sentence is read, not only the one triage finds likeliest: in a long story a
        sentence about someone else may read likelier to last than the writer's own fact
        (read fresh71: "老伴嫌我天天在她眼前转悠" above "我手抖得厉害…").

        The sentence is read without its quotes (:func:`statements`). Read with them (the
        writer's usual way told through a quote: "I usually just scrawl '…' and that's it"),
        P(the writer's own) rose rather than fell on the read fresh67-73 (that card 0.85 ->
        0.88, a tailor's "平时小纸板上就写个“…”" 0.30 -> 0.64); the gate let the same through
        there, on the fit set fresh53-59 and on the blind fresh77 (forty-ninth round); not
        kept.

        A Chinese sentence is read whole and by its clauses (:func:`topic_chain`): it runs the
        writer's fact into the request and the story with "，" ("…就是爱拍照，因为我晕车晕得厉害、
        坐大巴走盘山路没有一回不吐的，所以路线得好好琢磨，…帮我排个行程"), and read whole the fact
        drowned (P(the writer's own) 0.24; read fresh76-77). Of the openings triage's bar lets
        on, durable & others through: fit set fresh53-59 25 & 1 -> 26 & 2, read fresh67-73 19
        & 5 -> 22 & 5 (fiftieth round; each clause alone 26 & 1 and 22 & 9: a clause without
        its subject, "一天打两回胰岛素" after "我婆婆糖尿病十来年了", read as the writer's own).
        The whole sentence is still read: its clauses alone stopped "我让你写的东西段落都别超过
        三行，我在手机上看" (0.39). It costs two short reads per clause: model calls per learning
        turn 5.1-5.5 -> 6.8-7.2 on fresh76-78."""
        sents = self.sentence_reads(text, whole) or [Likeliest(text, whole, None)]
        out = []
        for s in sents:
            mine = self.mine_score(s.text)
            if mine is None:
                return None
            out.append((s, mine))
        return out

    def mine_score(self, sentence: str) -> float | None:
        """P(``sentence`` is the writer's own and lasts): the model's P of "me" (a lasting
        fact about the writer) plus "always" (a standing instruction of theirs) after
        ``{"who": "`` of ``mine.md``; the others are "other" (someone or something else),
        "usual" (how the writer usually does it, told before "just this once") and "request"
        (this one request, a question, thanks). One forward pass; None when the
        model gave no usable answer.

        Asked as yes or no, Qwen2.5-Coder-1.5B answered 0.5-0.95 for nearly every opening (a
        guest's peanut allergy 0.78 beside the writer's own 0.90); asked who the sentence is
        about, 0.00 and 0.96 (on the read fresh53-59 the AUC for the openings that hold a
        lasting fact rose from 0.946 to 0.994). Asked only that, it put a standing
        instruction ("From now on, answer me in British English") under "request" (P(me)
        0.03); "always" gives it 0.81. "usual" (the writer's usual way of doing something,
        told before asking for it differently this time) counts for neither: on fresh76
        and the blind fresh77 (`bench evolution`) one-off junk 1/8 -> 0/8 in both, content
        precision 0.73 -> 0.79 and 0.72 -> 0.76, recall unchanged. Without a Chinese
        "always" among its examples it took the standing instruction "我让你写的东西段落都别超过
        三行…" (gate 0.03; forty-eighth round)."""
        return self._p_yes("mine", "who", ("me", "always"), sentence=clip(scrub(sentence), 400))

    def _answer(self, prompt: str, field: str, **values: Any) -> str:
        """The text field ``field`` of prompt ``prompt``'s structured answer, whitespace
        folded; "" when the model gave no usable answer (that step only is skipped)."""
        self.checkpoint()
        try:
            out = self.llm.structured(prompt, **values)
        except Cancelled:
            raise
        except SkillDeskError as exc:
            log.info("evolution: %s unavailable (%s)", prompt, exc)
            return ""
        return " ".join(str(out.get(field) or "").split())

    def reword(self, rule: str, words: list[str]) -> str | None:
        """``rule`` said without ``words``, the details of the one request it came from
        (``reword.md``; :func:`checks.general_rules` checks the answer). None when the model
        gave no usable answer."""
        return self._answer("reword", "rule", rule=clip(rule, 200),
                            details=", ".join(words[:6])) or None

    def standalone(self, rules: list[str], said: str) -> list[str]:
        """``rules``, each that points back at the message it came from ("Never suggest these
        types of games", :func:`checks.points_back`) said in full by the model with the
        message's words (``standalone.md``), where :func:`checks.resolved` holds; otherwise
        as it was. A later conversation does not show the message: "Avoid these areas" says
        nothing there, and it made a second preference ("areas with a high cost of living")
        known already (PrefEval 700..739). Read 620..739: 7 of 9 such rules said in full, the
        other two left as they were."""
        out = []
        for rule in rules:
            new = self._answer("standalone", "rule", said=clip(scrub(said), 600),
                               rule=clip(rule, 200)) if points_back(rule) else ""
            if new and resolved(rule, new, said):
                log.info("evolution: %r said in full: %r", rule, new)
                rule = new
            out.append(rule)
        return dedupe(out)

    def name_skill(self, c: Candidate) -> str | None:
        """A name for ``c`` from its description and rules alone (``name.md``, ``name.zh.md``
        for Chinese rules), which never saw the request; None when the answer is unusable or
        fails :func:`checks.good_name`."""
        lang = language("\n".join(c.constraints))
        name = self._answer("name", "name", lang=lang, description=clip(c.description, 200),
                            rules="\n".join(f"- {clip(r, 160)}" for r in c.constraints[:6]))
        name = name.strip(" .。")
        return name if good_name(name, c, self._example_words("name", lang)) else None

    def _example_words(self, prompt: str, lang: str) -> set[str]:
        """The words of the answers prompt ``prompt`` shows as examples: a small model copies
        them into answers they do not fit (Qwen-1.5B named a Word-format writing skill
        "word格式的菜谱推荐" after the example "无花生的菜谱推荐")."""
        words: set[str] = set()
        for role, text in self.llm.prompt(prompt, lang).messages:
            if role == "assistant":
                try:
                    words |= content_tokens(" ".join(str(v) for v in json.loads(text).values()))
                except (ValueError, AttributeError):
                    continue
        return words

    def _p_yes(self, name: str, field: str, yes: tuple[str, ...] = ("yes",),
               **values: Any) -> float | None:
        """P(an answer in ``yes``) of prompt ``name``, whose answer is ``{"<field>": "<value>"}``
        (by default "yes" or "no"; one forward pass); None when unusable."""
        self.checkpoint()
        try:
            probs = self.llm.choice(name, field, **values)
            return sum(probs[v] for v in yes)
        except Cancelled:
            raise
        except (SkillDeskError, ValueError, KeyError) as exc:
            log.info("evolution: %s score unavailable (%s)", name, exc)
            return None

    # ------------------------------------------------------------------------------ judge
    def neighbours(self, c: Candidate, asked: str = "") -> list[Neighbour]:
        """The user's skills nearest to ``c``; the one nearest to what was ``asked`` (the
        request the rule was said for) is among the first ``top_m`` the judge sees: a rule
        worded without its task ("Put swimming on two days") may share no word with the skill
        of that task ("Running training plans")."""
        query = "\n".join([c.name, c.description, *c.constraints[:4], *c.triggers[:2]])
        out = self._user_hits(query, max(8, self.top_m * 3))
        seen = {h.skill.path for h in out}
        extra = [h for h in self._user_hits(asked, self.top_m) if h.skill.path not in seen] \
            if asked else []
        if out and c.constraints:  # what the merge gate reads (Neighbour.rule_score)
            by_rules = {h.skill.path: h.score for h in self._user_hits(
                "\n".join(c.constraints[:4]), len(out) + 8)}
            for h in out:
                h.rule_score = by_rules.get(h.skill.path, 0.0)
        return out[:self.top_m - 1] + extra[:1] + out[self.top_m - 1:]

    def _user_hits(self, query: str, k: int) -> list[Neighbour]:
        try:
            hits = self.search(query, k)
        except SkillDeskError as exc:
            log.warning("evolution: neighbour search failed (%s); judging without", exc)
            return []
        return [h for h in hits if h.skill.scope == "user" and h.skill.owner == self.user
                and h.skill.path is not None]

    def manage(self, c: Candidate, turn_id: str | None, asked: str = "") -> Action:
        """Add, merge or discard ``c``; ``asked`` is what the user was asking for when they
        said it (:func:`asked_for`): the judge reads it to tell which task the rule is about."""
        near = self.neighbours(c, asked)
        for n in near[: self.top_m]:
            if known_already(c, Candidate.from_skill(n.skill)):
                return Action("discard", skill=n.skill, candidate=c, step="judge",
                              reason=f"already known: {n.skill.title} says all of it")
        # the judge sees the nearest skills whatever their level: a level is a guess (a model's
        # or the rules'), and a rule about the same task belongs to that task's skill (on the
        # people set, 3 of 10 merge targets were of another level than the extracted rule)
        same = near[: self.top_m]
        if not same:
            return self.add(c, turn_id, f"no similar {c.level} skill yet")
        if self.policy["judge"] == "llm" and self.llm is not None:
            decision, target, reason = judge_llm(self.llm, c, same, asked, self.key,
                                                 self.eta)
        else:
            decision, target, reason = judge_rule(c, same)
        if decision == "add":
            return self.add(c, turn_id, reason)
        if decision == "merge" and target is not None:
            c.level = target.skill.level
            return self.merge(c, target.skill, turn_id, reason, asked)
        return Action("discard", candidate=c, step="judge", reason=reason,
                      skill=target.skill if target else None)

    # ------------------------------------------------------------------------------ write
    def source(self, turn_id: str | None) -> list[str]:
        """The ``source_turns`` entry of a write: the turn, and the conversation's key."""
        entry = f"{turn_id or ''}@{self.key}" if self.key else turn_id or ""
        return [entry] if entry else []

    def add(self, c: Candidate, turn_id: str | None, reason: str) -> Action:
        if c.name_cut and self.by_model:
            # a Chinese name cut by characters ("撰写" left of "政府报告撰写", "馈要求") or a
            # clipped rule ("我膝盖做过半月") is no name to browse by
            new = self.name_skill(c)
            if new:
                c.triggers = [new if t == c.name else t for t in c.triggers]
                c.name = new
        skill = c.to_skill(source="extracted", source_turns=self.source(turn_id),
                           about=self.about(c))
        written = self.bank.create(skill, self.user, source="extracted")
        self._refresh(written)
        return Action("add", skill=written, candidate=c, step="write", reason=reason)

    def about(self, c: Candidate) -> str:
        """``"user"`` when the model reads the new skill as about the user (a diet, a fear, a
        dislike: :mod:`engine.learning.about`), else ``""``; the self-filter judges it by
        that. Asked only where the model extracts (the tiny tier runs no self-filter); a
        failed answer leaves it a task skill, as every skill was before."""
        if not self.by_model:
            return ""
        try:
            p = about.p_about_user(self.llm, c.name, c.description, c.constraints)
        except Cancelled:
            raise
        except (SkillDeskError, ValueError, KeyError) as exc:
            log.info("about: no usable answer, a task skill: %s", exc)
            return ""
        return "user" if p >= about.ABOUT_USER_MIN_P else ""

    def merge(self, c: Candidate, target: Skill, turn_id: str | None, reason: str,
              asked: str = "") -> Action:
        notes: list[str] = []
        for attempt in range(MERGE_ATTEMPTS):
            existing = self.bank.read(target.path)  # always from the file as it is now
            ex = Candidate.from_skill(existing)
            if self.policy["merge"] == "llm" and self.llm is not None:
                try:
                    out = self.llm.structured("merge", existing=ex.fields_text(),
                                              candidate=c.fields_text())
                except Cancelled:
                    raise
                except SkillDeskError as exc:  # garbage JSON or a model error: this one only
                    return Action("discard", skill=existing, candidate=c, step="merge",
                                  reason=f"merge answer unusable: {clip(str(exc), 160)}")
                merged = Candidate.from_json({**out, "name": ex.name, "level": ex.level})
                notes += repair_merge(merged, ex, c, [str(x) for x in out.get("replaced") or []],
                                      takes_back=self.takes_back(c, asked))
            else:
                merged = union(ex, c)
            # triggers the merge adds lose the request's topic, as a new skill's do (fresh11:
            # "红烧肉" reached a skill through a merge)
            merged.triggers = dedupe(ex.triggers + c.general_triggers(
                [t for t in merged.triggers if t not in ex.triggers]))[:8]
            if _same_rules(merged, ex):  # reported as what it is, never as a merge
                return Action("discard", skill=existing, candidate=c, step="merge",
                              reason=f"the merge changed nothing: {existing.title} already "
                                     "says all of it")
            new = existing.copy(description=merged.description, instructions=merged.body(),
                                triggers=merged.triggers, tags=merged.tags,
                                examples=[{"input": e} for e in merged.examples],
                                source_turns=[*existing.source_turns, *self.source(turn_id)])
            try:
                written = self.bank.write(new, expected_hash=existing.content_hash,
                                          source="merged")
            except ConflictError:
                log.info("evolution: %s changed during the merge; redoing from the new file "
                         "(attempt %d)", existing.path, attempt + 1)
                notes.append("redone after a hand edit")
                try:  # keep the hand edit as a version of its own, so undo returns to it
                    self.bank.record_hand_edit(existing.path)
                except SkillDeskError as exc:
                    log.warning("evolution: could not record the hand edit: %s", exc)
                continue
            self._refresh(written)
            # a hand edit is recorded in the history under its own version while the file
            # still names the one before it: undo must return to the hand edit
            return Action("merge", skill=written, candidate=c, step="write", reason=reason,
                          previous_version=self.bank.effective_version(existing), notes=notes,
                          replaced=[r for r in ex.constraints if r not in merged.constraints])
        return Action("error", skill=target, candidate=c, step="merge",
                      reason=f"{target.title} kept changing on disk; the merge was not written")

    def takes_back(self, c: Candidate, asked: str = "") -> Callable[[list[str]], set[str]] | None:
        """Which of a skill's rules the user's message behind ``c`` takes back: the model's
        P(yes) on ``replace.md``, asked of every old rule (:func:`repair_merge`; the merge
        prompt's own ``replaced`` list names few: of the 16 read contradiction scenarios, 1).
        At most one goes, the rule ranked first, when its P reaches :data:`REPLACE_MIN_P`: a
        message that adds a detail still scores 0.5-0.7 on some rules, but rarely above the
        rule it contradicts. A skill of one rule keeps it unless the merge model also left it
        out (a second fact of one area judged the same task, "Avoid cooked foods" into a
        spicy-food skill, is no contradiction of its only rule).

        Asked only where the rule was said for a request (``asked`` less the rule's own
        sentences, :func:`request_part`, has words: a follow-up in a task, "change the
        payment bit, it's online now"; all 16 read contradictions are such). A fact said
        alone ("I have a severe allergy to shellfish…") is not asked: the check reads one
        fact as taking back another of the same area (read PrefEval 620..659: 0.76 for a
        peanut allergy against "Never suggest gluten-containing foods", 0.75 and 0.74 for a
        shellfish allergy against that and the peanut rule), and 5 of that run's 6 merges
        were facts said alone. The judge now makes such a fact a skill of its own
        (:func:`~engine.learning.judge.judge_llm`: the merge model's own "replaced" list took a
        gluten rule back for a peanut allergy as well); should one reach a merge, it takes
        back only what the merge model names, not a rule sharing its words (:func:`corrects`
        read "Avoid mass-produced furniture" as a rewrite of "Avoid furniture with glass"). None
        where token probabilities cannot be read (a rule the merge left out goes when a new
        one corrects it)."""
        if not c.said or self.llm is None or not self.llm.scores_tokens:
            return None
        if not content_tokens(request_part(asked, c.constraints)):
            return lambda olds: set()

        def check(olds: list[str]) -> set[str]:
            scored = [(p, old) for old in olds
                      if (p := self.replace_score(c.said, old)) is not None]
            for p, old in scored:
                log.info("evolution: replace check %r: P %.2f", clip(old, 60), p)
            if not scored:
                return set()
            p, old = max(scored)
            return {old} if p >= REPLACE_MIN_P else set()
        return check

    def replace_score(self, said: str, rule: str) -> float | None:
        """P(what the user ``said`` means ``rule`` must no longer be followed), read after
        ``{"replaces": "`` of ``replace.md`` (one forward pass; the message comes first, so the
        rules of one skill share the prompt's prefix). None when unusable."""
        return self._p_yes("replace", "replaces", said=clip(said, 600), rule=clip(rule, 200))

    def _refresh(self, skill: Skill) -> None:
        try:
            self.refresh([Path(skill.path)])
        except Exception as exc:  # the index is a cache; a failed refresh must not lose the write
            log.warning("evolution: reindex of %s failed: %s", skill.path, exc)


ASKED_TURNS = 2  # user turns the judge reads as the request a rule was said for
ASKED_CHARS = 160


def earlier_requests(messages: list[dict], w: triage.Window) -> list[str]:
    """The user turns just before window ``w`` (at most ``ASKED_TURNS``), back to an explicit
    topic switch ("by the way", "换个话题"). A window starts at a turn that shares no word with
    the one before it, but a follow-up often shares none with its request ("Give each piece
    its length in minutes" after "Write the programme for Sunday's recital"): that request is
    still what the rule was said for, so the judge reads it (:func:`asked_for`) and the
    instance checks strip its words (``vet_candidate``'s ``context``)."""
    turns = [t for t in triage.user_turns(messages) if t.index < w.turns[0].index]
    out: list[str] = []
    nxt = w.turns[0]
    for t in reversed(turns):
        if len(out) >= ASKED_TURNS or triage.is_switch(nxt.text):
            break
        out.insert(0, t.text)
        nxt = t
    return out


def asked_for(earlier: list[str], w: triage.Window) -> str:
    """What the user was asking for when they said the rules of window ``w``: their last user
    turns up to the window's newest, ``earlier`` (:func:`earlier_requests`) included ("Write
    menu descriptions for our autumn dishes" before "Put the allergens in brackets"),
    scrubbed and clipped. The judge reads it: a small model shown only the rule and its own
    name for it cannot tell which of three look-alike skills the rule belongs to."""
    texts = [*earlier, *(t.text for t in w.turns)][-ASKED_TURNS:]
    return " / ".join(clip(scrub(t), ASKED_CHARS) for t in texts)


MAX_OPTIONS = 9  # the quote prompt's schema numbers sentences 1-9
WRITER = re.compile("[我咱]")  # a Chinese clause that names the writer (:func:`topic_chain`)


def opening_p(p_durable: float, p_sentence: float, p_mine: float) -> float:
    """P(the conversation's opening message holds something lasting about the user) from
    triage's P(durable) of the whole message and, of one of its sentences, triage's P of it
    read alone (:meth:`Pipeline.sentence_reads`) times P(it is the writer's own,
    :meth:`Pipeline.mine_score`): the logistic fit :data:`OPENING_FIT`."""
    a, b, c = OPENING_FIT
    return 1.0 / (1.0 + math.exp(-(a * logit(p_durable) + b * logit(p_sentence * p_mine) + c)))


def opening_pick(whole: float, reads: list[tuple[Likeliest, float]]
                 ) -> tuple[float, Likeliest, float]:
    """Of an opening's reads (:meth:`Pipeline.opening_reads`; ``whole``: triage's P of the
    whole message), the one the gate (:func:`opening_p`) scores highest: (its P, the
    sentence, P(it is the writer's own))."""
    return max(((opening_p(whole, s.p, mine), s, mine) for s, mine in reads),
               key=lambda x: x[0])


def options(sentences: list[str]) -> list[str]:
    """What the quote step numbers: the sentences, a Chinese one split at "，" (it runs clauses
    together: "我是开小卖部的，你给我打个生活里的比方，讲得跟家常话一样" — each clause is an option, so
    the rule is not the whole of it); at most MAX_OPTIONS."""
    return [c for s in sentences for c in clauses(s)][:MAX_OPTIONS]


def clauses(sentence: str) -> list[str]:
    """``sentence`` split at "，" (Chinese runs its statements together with it where English
    ends sentences)."""
    return [c for c in (x.strip() for x in sentence.split("，")) if c]


COMMA_CLAUSE = re.compile(r"[^,，;；]+(?:[,，;；]+|$)")


def comma_clauses(sentence: str) -> list[str]:
    """``sentence`` cut after each comma or semicolon (English or Chinese), each piece with its
    mark, so that ``"".join`` gives the sentence back: the units the story check reads inside
    one sentence of a rule (:meth:`Pipeline.without_story`)."""
    return [m[0] for m in COMMA_CLAUSE.finditer(sentence) if m[0].strip(" ,，;；")]


def topic_chains(sentence: str) -> list[list[str]]:
    """The clauses of one sentence (:func:`clauses`), by topic chain: an English sentence is
    one chain of one; in a Chinese one, a clause that does not name the writer (我, 咱)
    continues the chain before it — it drops the subject that chain's first clause gave
    ("我婆婆糖尿病十来年了，一天打两回胰岛素" is the mother-in-law's)."""
    out: list[list[str]] = []
    for part in clauses(sentence):
        if not out or WRITER.search(part):
            out.append([part])
        else:
            out[-1].append(part)
    return out or [[sentence]]


def chain_reads(sentence: str) -> list[tuple[str, list[str]]]:
    """(what the opening gate reads, the topic chain it comes from) for one sentence
    (:func:`topic_chains`): each chain's first clause alone, and each of its other clauses
    after that first one (alone, the mother-in-law's "一天打两回胰岛素" read as the writer's
    own); an English sentence whole."""
    return [(c[0] if i == 0 else f"{c[0]}，{part}", c)
            for c in topic_chains(sentence) for i, part in enumerate(c)]


def topic_chain(sentence: str) -> list[str]:
    """What the opening gate reads of one sentence (:func:`chain_reads`)."""
    return [read for read, _ in chain_reads(sentence)]


def chain_of(text: str, unit: str) -> str:
    """The whole topic chain of ``text`` that the gate's read ``unit`` (:func:`chain_reads`)
    came from: what extraction reads as the opening's lasting part (a rule runs on over the
    clauses of its chain: "菜谱别写成一大段，按步骤一条一条列出来"); ``unit`` where none did."""
    for sent in statements([text]):
        for read, c in chain_reads(sent):
            if read == unit:
                return "，".join(c)
    return unit


def numbered(turns: list[triage.UserTurn]) -> str:
    """``1. …`` per user turn, scrubbed and clipped: what the short scoring prompts (triage,
    keep) read."""
    return "\n".join(f"{i}. {clip(scrub(t.text), 300)}" for i, t in enumerate(turns, 1))


def _same_rules(a: Candidate, b: Candidate) -> bool:
    norm = lambda xs: sorted(normalize(x) for x in xs)  # noqa: E731
    return norm(a.constraints) == norm(b.constraints) and norm(a.workflow) == norm(b.workflow)
