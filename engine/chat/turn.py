"""The foreground turn (``SkillDesk.chat``): rewrite → retrieve → render skills → answer.

1. Rewrite the newest user message into one standalone retrieval query (P_rw) whenever it
   depends on the conversation, and rule-based on tiny models: the topic anchor (first message
   of the ongoing topic) plus the new message. "Depends" is decided by retrieval itself, not by
   cue words or length: the message alone and the anchor + message are both searched (two
   index searches, ~10 ms, no model call); when the conversation finds a skill the message
   alone does not (a higher P(related), reaching η), the message is a follow-up on that task
   ("Make the tone warmer and add a closing line" after a cover letter) and is rewritten; when
   the message finds its own skill at least as well, or when neither finds anything, it stands
   alone. An explicit topic switch ("by the way, ...") always stands alone.
2. Hybrid retrieval through the desk. On models able to judge, when a skill passed η, the
   self-filter (engine/chat/skill_filter.py, one short constrained call) keeps only those the
   model says fit the request; nothing retrieved, no call. The chosen skills are rendered
   (every rule, within the model's budget: engine/chat/render.py,
   engine/llm/tiers.skill_budget).
3. Answer with P_chat (``resources/prompts/chat.md``; ``chat_about.md`` / ``chat_both.md``
   when skills about the user are among them: those go under "About me"): the user's system
   prompt, the history as the caller sent it, and the newest request with the skill block
   before it. Everything
   before the newest request is the same whatever skills this turn injects, so a change of
   skills never costs the whole history's evaluation again (KV cache), only the exchange
   before it when that request was sent with a block; the rules sit next to the request they
   are for. With the block in the system message instead, Qwen2.5-Coder-1.5B followed the
   learned preferences no better than with no skills at all (PrefEval items 180..259, the
   same learned banks asked twice: 0.30 there, 0.33 with no skills; 0.39 beside the request,
   0.46 with the preference pasted into the question). Streamed and stoppable; FOREGROUND
   priority, so it pre-empts background learning.
4. Afterwards, the conversation is queued for background learning (``learn=True``).

Steps 1-2 are :meth:`Turn.decide`; ``SkillDesk.prepare`` runs them while the user is still
typing (and evaluates step 3's prompt), and the turn sent with the same messages starts from
that :class:`Decision`.

:class:`TurnResult` says which skills were injected and with which scores, for the UI.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from engine import prompts
from engine.bank.skill import Skill
from engine.chat.render import InjectedSkill, render
from engine.chat.skill_filter import self_filter
from engine.errors import Cancelled, SkillDeskError
from engine.learning import triage
from engine.llm import tiers
from engine.llm.base import CancelToken, GenParams, Usage
from engine.llm.client import LLMClient
from engine.llm.worker import FOREGROUND, ModelWorker
from engine.text import clip

_turn_ids = itertools.count(1)


@dataclass
class TurnResult:
    text: str
    query: str
    rewritten: bool
    injected: list[InjectedSkill] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    ttft_s: float | None = None
    decode_tps: float | None = None
    finish_reason: str = "stop"
    trimmed_messages: int = 0
    model: str = ""
    turn_id: str = ""
    timings: dict[str, float] = field(default_factory=dict)  # rewrite_s, retrieve_s,
    # filter_s (only when the self-filter ran), total_s
    filtered_out: list[str] = field(default_factory=list)  # skills the self-filter dropped
    prepared: bool = False  # the skills were decided while the user typed (SkillDesk.prepare)
    learning_job: str | None = None

    def info(self) -> dict[str, Any]:
        """What a front end shows and keeps of this turn, in plain JSON types (the app's
        chat history and "Skills used" line, the proxy's ``skilldesk`` extension)."""
        return {
            "text": self.text, "query": self.query, "rewritten": self.rewritten,
            "injected": [{"id": s.id, "name": s.name, "title": s.title, "version": s.version,
                          "path": s.path, "score": round(float(s.score), 4),
                          "rules_total": s.rules_total, "rules_shown": s.rules_shown,
                          "cut": list(s.cut)}
                         for s in self.injected],
            "model": self.model, "finish_reason": self.finish_reason, "ttft_s": self.ttft_s,
            "decode_tps": self.decode_tps, "turn_id": self.turn_id,
            "usage": {"prompt_tokens": self.usage.prompt_tokens,
                      "completion_tokens": self.usage.completion_tokens},
            "timings": {k: round(float(v), 6) for k, v in self.timings.items()},
            "filtered_out": list(self.filtered_out), "prepared": self.prepared,
        }


# ------------------------------------------------------------------------------ the rewrite
def needs_rewrite(messages: list[dict]) -> bool:
    """True when the newest user message *may* depend on the conversation: there is an earlier
    user turn and the message is not an explicit topic switch. Whether it does is decided by
    :func:`depends_on_context` from retrieval (see the module docstring)."""
    turns = triage.user_turns(messages)
    return len(turns) >= 2 and not triage.is_switch(turns[-1].text)


def topic_anchor(messages: list[dict]) -> str:
    """The first user message of the topic the conversation was on before the newest message
    (the newest one's own boundary is decided by retrieval, not by word overlap)."""
    turns = triage.user_turns(messages)
    if len(turns) < 2:
        return ""
    return triage.segments(turns[:-1])[-1][0].text


def rule_rewrite(messages: list[dict]) -> str:
    """The topic anchor + the newest message (the newest alone when there is no anchor)."""
    turns = triage.user_turns(messages)
    if not turns:
        return ""
    latest, anchor = turns[-1].text, topic_anchor(messages)
    if not anchor or triage.is_switch(latest):
        return clip(latest, 300)
    return clip(f"{clip(anchor, 160)} {latest}", 300)


def depends_on_context(messages: list[dict], confidence: Callable[[str], float],
                       eta: float = 0.0) -> bool:
    """Whether the newest message must be searched with its conversation: the anchor + message
    query finds a skill (best P(related) >= ``eta``, > 0) more confidently than the message
    alone. ``confidence(query)``: the best P(related) of a plain search (0 when none)."""
    if not needs_rewrite(messages):
        return False
    latest = triage.user_turns(messages)[-1].text
    ctx = confidence(rule_rewrite(messages))
    return ctx > 0 and ctx >= eta and ctx > confidence(latest)


def llm_rewrite(client: LLMClient, messages: list[dict]) -> str:
    turns = triage.user_turns(messages)
    seg = triage.segments(turns)[-1] if turns else []
    history = "\n".join(f"- {clip(t.text, 200)}" for t in (seg[:-1] or turns[:-1])[-3:])
    out = client.structured("rewrite", history=history or "- (none)",
                            message=clip(turns[-1].text, 400))
    return clip(str(out["query"]), 300)


# ------------------------------------------------------------------------------ the turn
@dataclass
class Decision:
    """What a turn decides before the answer: the query, the skills, what the filter dropped,
    and how long each step took. ``SkillDesk.prepare`` makes it while the user is still typing,
    and the turn then sent with the same messages starts from it."""
    query: str
    rewritten: bool
    hits: list[Any]
    dropped: list[str]
    timings: dict[str, float]


class Turn:
    """One foreground turn; iterate :meth:`stream` or call :meth:`run`."""

    def __init__(self, messages: list[dict], *, worker: ModelWorker,
                 search: Callable[[str, int | None, LLMClient], list[Any]],
                 system_prompt: str = "",
                 top_k: int | None = None, params: GenParams | None = None,
                 on_done: Callable[[TurnResult, list[dict]], str | None] | None = None,
                 tier: str | None = None, cancel: CancelToken | None = None,
                 confidence: Callable[[str], float] | None = None,
                 edited: Callable[[Skill], set[str]] | None = None,
                 judged: Callable[[Any], bool] | None = None,
                 priority: int = FOREGROUND, decided: Decision | None = None):
        if not any(m.get("role") == "user" for m in messages):
            raise ValueError("a chat turn needs at least one user message")
        self.messages = [dict(m) for m in messages]
        self.worker, self.search, self.top_k = worker, search, top_k
        self.system_prompt = system_prompt
        self.params = params or GenParams(max_tokens=512)
        self.on_done = on_done
        self.confidence = confidence  # best P(related) of a plain search (the rewrite check)
        self.edited = edited          # a skill's hand-written rules (kept first when cut)
        self.tier = tier or tiers.tier_of(worker)
        self.policy = tiers.policy(self.tier)
        # The self-filter: None = off; else judged(hit) says which hits the model may drop
        # (False for always-on skills). Only tiers whose policy has self_filter run it.
        self.judged = judged if self.policy.self_filter else None
        self.cancel_token = cancel or CancelToken()
        self.client = LLMClient(worker, priority=priority, tier=self.tier)
        self.decided = decided  # made ahead by SkillDesk.prepare for these messages
        self.turn_id = f"t{next(_turn_ids)}-{int(time.time() * 1000) % 10**8}"
        self.result: TurnResult | None = None
        self.cancel_token.add_callback(self.client.cancel_all)
        self._chat = None

    def cancel(self) -> None:
        self.cancel_token.cancel()
        if self._chat is not None:
            self._chat.cancel()

    def _query(self, timings: dict[str, float]) -> tuple[str, bool]:
        latest = next(m["content"] for m in reversed(self.messages) if m.get("role") == "user")
        t0 = time.perf_counter()
        if self.confidence is not None:
            depends = depends_on_context(self.messages, self.confidence)
        else:  # no index to ask: every possible follow-up is rewritten
            depends = needs_rewrite(self.messages)
        timings["rewrite_check_s"] = time.perf_counter() - t0
        if not depends:
            return clip(str(latest), 400), False
        t0 = time.perf_counter()
        try:
            if self.policy.rewrite == "rule":
                query = rule_rewrite(self.messages)
            else:
                query = llm_rewrite(self.client, self.messages)
        except (SkillDeskError, Cancelled):  # garbage JSON, a model error, a stop
            query = rule_rewrite(self.messages)  # a bad rewrite must not cost the answer
        timings["rewrite_s"] = time.perf_counter() - t0
        return query, True

    def chat_messages(self, skills_block: str, about: str = "") -> list[dict]:
        system = self.system_prompt
        history = []
        for m in self.messages:
            if m.get("role") == "system":
                system = str(m.get("content") or "") or system  # the caller's system prompt wins
            elif m.get("role") in ("user", "assistant"):
                history.append({"role": m["role"], "content": str(m.get("content") or "")})
        head = [{"role": "system", "content": system}] if system else []
        if not (skills_block or about) or not history or history[-1]["role"] != "user":
            return [*head, *history]  # nothing applies: the user's system prompt alone
        # the skill block goes with the newest request, after the history (see the module
        # docstring): earlier turns are sent as the caller has them, so the model sees exactly
        # this turn's skills ("Skills used") and the prefix it has evaluated stays valid.
        # Skills about the user go under "About me" (engine/chat/render.py)
        values = {"request": history[-1]["content"]}
        if about:
            values["about"] = about
        if skills_block:
            values["skills"] = skills_block
        name = "chat" if not about else "chat_both" if skills_block else "chat_about"
        ask = prompts.load(name, self.tier).render(**values)
        return [*head, *history[:-1], *ask]

    def decide(self) -> Decision:
        """Rewrite check, retrieval and the self-filter: everything before the answer."""
        timings: dict[str, float] = {}
        query, rewritten = self._query(timings)
        t0 = time.perf_counter()
        hits: list[Any] = []
        if query and not self.cancel_token.cancelled:
            try:  # the plan step's model call is this turn's: Stop interrupts it too
                hits = list(self.search(query, self.top_k, self.client) or [])
            except Cancelled:
                hits = []
        timings["retrieve_s"] = time.perf_counter() - t0
        dropped: list[str] = []
        if self.judged is not None and hits and not self.cancel_token.cancelled:
            try:
                checked = self_filter(self.client, query, hits[: self.policy.max_skills],
                                      self.judged)
            except Cancelled:
                checked = None
            if checked is not None and checked.asked:
                timings["filter_s"] = checked.seconds
                dropped = [h.skill.name for h in checked.dropped]
                hits = checked.hits
        return Decision(query, rewritten, hits[: self.policy.max_skills], dropped, timings)

    def answer_messages(self, d: Decision) -> tuple[Any, list[dict]]:
        """The rendered skills of decision ``d`` and the messages the model answers."""
        rendered = render(d.hits, tiers.skill_budget(self.worker), edited=self.edited)
        return rendered, self.chat_messages(rendered.text, rendered.about)

    def stream(self) -> Iterator[str]:
        t_start = time.perf_counter()
        d = self.decided or self.decide()
        timings = dict(d.timings)
        query, rewritten, dropped = d.query, d.rewritten, d.dropped
        rendered, msgs = self.answer_messages(d)
        text, res = [], None
        if not self.cancel_token.cancelled:
            self._chat = self.worker.stream_chat(msgs, self.params, priority=FOREGROUND)
            if self.cancel_token.cancelled:
                self._chat.cancel()
            for chunk in self._chat:
                text.append(chunk)
                yield chunk
            res = self._chat.result
        timings["total_s"] = time.perf_counter() - t_start
        backend = self.worker.backend
        self.result = TurnResult(
            text="".join(text), query=query, rewritten=rewritten, injected=rendered.skills,
            usage=res.usage if res else Usage(), ttft_s=res.ttft_s if res else None,
            decode_tps=res.decode_tps if res else None,
            finish_reason=res.finish_reason if res else "cancelled",
            trimmed_messages=res.trimmed_messages if res else 0,
            model=getattr(backend, "name", ""), turn_id=self.turn_id, timings=timings,
            filtered_out=dropped, prepared=self.decided is not None)
        if self.on_done is not None:
            convo = [*self.messages, {"role": "assistant", "content": self.result.text}]
            self.result.learning_job = self.on_done(self.result, convo)

    def run(self) -> TurnResult:
        for _ in self.stream():
            pass
        assert self.result is not None
        return self.result


class TurnStream:
    """``desk.chat(..., stream=True)``: iterate for text chunks; ``.result`` afterwards."""

    def __init__(self, turn: Turn):
        self._turn = turn
        self._it = turn.stream()

    def __iter__(self) -> Iterator[str]:
        return self._it

    def __next__(self) -> str:
        return next(self._it)

    def cancel(self) -> None:
        self._turn.cancel()

    @property
    def result(self) -> TurnResult | None:
        return self._turn.result

    @property
    def turn_id(self) -> str:
        return self._turn.turn_id
