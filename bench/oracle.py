"""A scripted oracle "model" for tests and the benchmark — never what the app uses.

It implements the :class:`~engine.llm.base.LLMBackend` protocol and answers the structured
prompts (rewrite, extract, judge, merge) from a scenario's expected outcome, deterministically,
so the pipeline's logic (gate, windows, checks, retrieval-assisted judging, versioned merges,
conflict handling, the queue) can be tested on its own. It is only ever constructed
explicitly (``OracleLLM(...)``); no settings value or model reference resolves to it.

A scenario's ``expect`` list holds items like::

    {"outcome": "add", "name": "Summary TL;DR first", "evidence": "TL;DR",
     "constraints": ["Start summaries with a one-line TL;DR"], "level": "functional", ...}
    {"outcome": "merge", "into": "Python code style", "evidence": "four spaces",
     "constraints": ["Use four spaces for indentation"]}

Extraction returns the items whose ``evidence`` appears in the user messages it is shown.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

from engine.errors import Cancelled
from engine.llm.base import CancelToken, ChatResult, GenParams, Message, Usage
from engine.text import coverage, normalize

_NUMBERED = re.compile(r"^(\d+)\.\s+(.+?)\s*\|", re.M)


class OracleLLM:
    """Answers from the loaded scenario; ``delay_s`` makes each call slow (cancellable)."""

    tier = "capable"  # a scripted stand-in for a model able to extract and judge

    def __init__(self, scenario: dict[str, Any] | None = None, *, delay_s: float = 0.0,
                 reply: str = "OK.", token_delay_s: float = 0.0):
        self.name = "oracle (scripted)"
        self.delay_s = delay_s
        self.reply = reply
        self.token_delay_s = token_delay_s
        self.calls: list[str] = []
        self.last_result: ChatResult | None = None
        self._lock = threading.Lock()
        self.load(scenario or {"expect": []})

    def load(self, scenario: dict[str, Any]) -> None:
        with self._lock:
            self.scenario = scenario
            self.expect = [dict(e) for e in scenario.get("expect") or []]

    # ------------------------------------------------------------------ LLMBackend protocol
    @property
    def context_length(self) -> int:
        return 8192

    def count_tokens(self, text: str) -> int:
        return max(1, len(text) // 4)

    def close(self) -> None:
        pass

    def _sleep(self, cancel: CancelToken | None) -> None:
        end = time.perf_counter() + self.delay_s
        while time.perf_counter() < end:
            if cancel is not None and cancel.cancelled:
                raise Cancelled("oracle call stopped")
            time.sleep(0.005)

    def stream_chat(self, messages: list[Message], params: GenParams | None = None,
                    cancel: CancelToken | None = None) -> Iterator[str]:
        self.calls.append("chat")
        t0 = time.perf_counter()
        words = self.reply.split(" ")
        result = ChatResult(text="", usage=Usage(prompt_tokens=sum(
            self.count_tokens(m.get("content") or "") for m in messages)))
        self.last_result = result
        out = []
        for i, w in enumerate(words):
            if cancel is not None and cancel.cancelled:
                result.finish_reason = "cancelled"
                break
            if self.token_delay_s:
                time.sleep(self.token_delay_s)
            chunk = w if i == 0 else " " + w
            out.append(chunk)
            result.ttft_s = result.ttft_s or time.perf_counter() - t0
            yield chunk
        result.text = "".join(out)
        result.usage.completion_tokens = len(out)

    def chat(self, messages: list[Message], params: GenParams | None = None,
             cancel: CancelToken | None = None) -> ChatResult:
        for _ in self.stream_chat(messages, params, cancel):
            pass
        assert self.last_result is not None
        return self.last_result

    def structured(self, messages: list[Message], schema: dict[str, Any],
                   params: GenParams | None = None,
                   cancel: CancelToken | None = None) -> dict[str, Any]:
        props = set((schema or {}).get("properties") or {})
        last = messages[-1]["content"] if messages else ""
        kind = ("extract" if "skills" in props else "judge" if "action" in props
                else "rewrite" if "query" in props else "reword" if "rule" in props
                else "name" if props == {"name"}
                else "quote" if "sentence" in props
                else "fact" if "fact" in props
                else "triage" if "kind" in props
                else "filter" if "use" in props
                else "about" if "about" in props else "merge")
        self.calls.append(kind)
        self._sleep(cancel)
        with self._lock:
            return getattr(self, f"_{kind}")(last)

    # ------------------------------------------------------------------ the answers
    filter_answer: list[int] | None = None  # the self-filter's answer; None: every candidate

    def _filter(self, prompt: str) -> dict[str, Any]:
        """The self-filter (engine/chat/skill_filter.py): a scripted model cannot judge, so it
        keeps every candidate unless a test scripts ``filter_answer``."""
        if self.filter_answer is not None:
            return {"use": list(self.filter_answer)}
        shown = prompt.split("Skills:", 1)[-1]
        return {"use": [i for i in (1, 2, 3) if f"\n{i}. " in "\n" + shown]}

    def _about(self, prompt: str) -> dict[str, Any]:
        """About the user or a task (engine/learning/about.py): the expected item whose rules
        the prompt shows says so (``"about": "user"``); a task otherwise."""
        shown = normalize(prompt.rsplit("Skill:", 1)[-1])
        for e in self.expect:
            if any(normalize(r) in shown for r in e.get("constraints") or []):
                return {"about": "user" if e.get("about") == "user" else "task"}
        return {"about": "task"}

    def _rewrite(self, prompt: str) -> dict[str, Any]:
        latest = prompt.rsplit("Latest:", 1)[-1].strip()
        return {"query": latest or "query"}

    def _reword(self, prompt: str) -> dict[str, Any]:
        """The rule less the details named (checks.general_rules): a scripted rule never
        names a case detail, so this only answers the prompt's shape."""
        if "Rule:" not in prompt:  # rule.md (same answer shape): the rule said, as a fact
            return {"rule": self._fact(prompt)["fact"]}
        rule = prompt.split("Rule:", 1)[-1].split("\nDetails:", 1)[0].strip()
        if "Details:" not in prompt:  # standalone.md (same answer shape): the rule as it was
            return {"rule": rule or "rule"}
        details = prompt.rsplit("Details:", 1)[-1].split(",")
        for d in details:
            rule = rule.replace(d.strip(), "") if d.strip() else rule
        return {"rule": " ".join(rule.split()) or "rule"}

    def _name(self, prompt: str) -> dict[str, Any]:
        """The expected item whose rules the prompt shows names the skill (a cut name is
        named again at write time, Pipeline.add)."""
        shown = normalize(prompt.rsplit("Rules:", 1)[-1])
        for e in self.expect:
            if e.get("name") and any(normalize(r) in shown for r in e.get("constraints") or []):
                return {"name": e["name"]}
        return {"name": "skill"}

    def _quote(self, prompt: str) -> dict[str, Any]:
        """The numbered sentence that says most of an expected item's rule; "0" when none
        does (an evidence phrase such as "meeting minutes" is in the request too)."""
        shown = prompt.rsplit("Sentences:", 1)[-1]
        for i, sent in re.findall(r"^(\d+)\.\s+(.+)$", shown, re.M):
            if any(coverage(r, sent) >= 0.5 for e in self.expect
                   for r in e.get("constraints") or []):
                return {"sentence": str(i)}
        return {"sentence": "0"}

    def _fact(self, prompt: str) -> dict[str, Any]:
        """The fact a sentence said beside a request (``fact.md``): the first rule of the
        expected item whose evidence it holds; "" (no usable answer) when none does."""
        said = normalize(re.split(r"Said:|用户说：", prompt)[-1])
        for e in self.expect:
            if e.get("evidence") and normalize(e["evidence"]) in said and e.get("constraints"):
                return {"fact": e["constraints"][0]}
        return {"fact": ""}

    def _triage(self, prompt: str) -> dict[str, Any]:
        """Durable when an expected item's evidence is in the user turns shown."""
        shown = normalize(prompt)
        hit = any(e.get("evidence") and normalize(e["evidence"]) in shown for e in self.expect)
        return {"kind": "rule" if hit else "none"}

    def _item_json(self, e: dict[str, Any]) -> dict[str, Any]:
        name = e.get("name") or e.get("into") or "skill"
        rules = list(e.get("constraints") or [])
        return {"name": name, "description": e.get("description") or f"{name}.",
                "constraints": rules, "goal": e.get("goal") or e.get("description") or name,
                "workflow": list(e.get("workflow") or []),
                "triggers": list(e.get("triggers") or [name]), "tags": list(e.get("tags") or []),
                "examples": list(e.get("examples") or []),
                "level": e.get("level") or "functional", "confidence": 0.9}

    def _extract(self, prompt: str) -> dict[str, Any]:
        # the evidence only: what follows the label, not the context before it (English and
        # Chinese prompts)
        shown = normalize(re.split(r"User messages:|用户消息：", prompt)[-1])
        found = [self._item_json(e) for e in self.expect
                 if e.get("evidence") and normalize(e["evidence"]) in shown]
        return {"skills": found[:2]}

    def _judge(self, prompt: str) -> dict[str, Any]:
        new = prompt.split("NEW:", 1)[-1].split("EXISTING:", 1)
        cand_name, _, cand_rules = (normalize(x) for x in new[0].partition("|"))
        existing = {normalize(name): int(i) for i, name in _NUMBERED.findall(new[-1])}
        named = [e for e in self.expect
                 if normalize(e.get("name") or e.get("into") or "") == cand_name]
        # the item whose rule the candidate says (the checks may rename it and reword its
        # rules in the user's words): most of the item's first rule's words are there
        said = {id(e): coverage(e["constraints"][0], cand_rules)
                for e in self.expect if e.get("constraints")}
        says = sorted((e for e in self.expect if said.get(id(e), 0.0) >= 0.5),
                      key=lambda e: -said[id(e)])
        item = next((e for e in says if e in named), None)
        item = item or (says[0] if says else None) or (named[0] if named else None)
        if item is None:
            return {"action": "discard", "target": 0, "reason": "not in the script"}
        if item.get("outcome") == "merge":
            target = existing.get(normalize(item["into"]))
            if target is None:
                return {"action": "add", "target": 0,
                        "reason": f"{item['into']} is not among the skills shown"}
            return {"action": "merge", "target": target, "reason": f"refines {item['into']}"}
        return {"action": "add", "target": 0, "reason": "a new task"}

    def _merge(self, prompt: str) -> dict[str, Any]:
        ex_text, _, new_text = prompt.partition("NEW:")
        ex, new = _fields(ex_text), _fields(new_text)
        rules = ex.get("constraints", [])
        for r in new.get("constraints", []):
            if normalize(r) not in {normalize(x) for x in rules}:
                rules.append(r)
        triggers = ex.get("triggers", []) + [t for t in new.get("triggers", [])
                                             if t not in ex.get("triggers", [])]
        desc = (ex.get("description") or [""])[0] or "Merged skill."
        new_rules = {normalize(r) for r in new.get("constraints", [])}
        replaced = [a for e in self.expect if e.get("outcome") == "merge"
                    and {normalize(r) for r in e.get("constraints") or []} & new_rules
                    for a in e.get("absent") or []]
        rules = [r for r in rules if normalize(r) not in {normalize(a) for a in replaced}]
        return {"description": desc, "constraints": rules,
                "goal": (ex.get("goal") or [desc])[0], "workflow": ex.get("workflow", []),
                "triggers": triggers[:8], "tags": [], "replaced": replaced}


def _fields(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if sep and key in ("description", "goal", "constraints", "workflow", "triggers"):
            vals = [v.strip() for v in value.split(" | ")] if key not in ("description", "goal") \
                else [value.strip()]
            out[key] = [v for v in vals if v]
    return out
