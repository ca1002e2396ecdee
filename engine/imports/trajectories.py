"""Skills from successful agent runs (SkillX's trajectory bootstrapping).

``candidates_from_trajectory(obj, llm=None) -> list[Skill]`` turns one run (or a file's worth)
into candidate skills for the learning pipeline (judge / merge) to manage:

- one **planning** skill: the task's ordered steps, compressed — failed calls, retries that
  were superseded, and read-only exploration (listing, searching, viewing) removed;
- **functional** skills, one per subtask (explicit ``subtask``/``phase`` labels, or the
  boundaries the agent's thoughts announce: "Next, …", "Now …", "然后…"), when a subtask has
  two or more effective steps;
- **atomic** skills, one per tool: how it was called successfully (its arguments) and its
  failure modes (the errors seen, and what the next successful call changed).

Accepted shapes (liberal): OpenAI chat messages with ``tool_calls`` / ``role: tool`` answers
(a bare list, or under ``messages``), ``{"steps": [...]}`` with ``action``/``tool``/``thought``
and ``observation``/``result``/``output``/``error``, a list or ``{"trajectories": [...]}`` of
either, JSONL files. A run whose success flag is false yields nothing. The deterministic path
needs no model; with ``llm`` (an ``LLMClient``), the planning skill's name, description, steps
and triggers are rewritten by the ``trajectory`` prompt and any unusable answer keeps the
deterministic candidate.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.bank.skill import Skill
from engine.errors import Cancelled, SkillDeskError, SkillFormatError
from engine.learning.candidate import Candidate
from engine.text import clip, content_tokens, dedupe, scrub

EXPLORE_TOOLS = {"ls", "list", "list_dir", "list_files", "glob", "grep", "search", "find",
                 "view", "read", "read_file", "cat", "open", "browse", "look", "inspect",
                 "search_files", "websearch", "web_search"}
EXPLORE_SHELL = re.compile(r"^\s*(ls|cat|head|tail|find|grep|rg|pwd|echo|which|tree|less|wc)\b")
ERROR_TEXT = re.compile(r"\b(error|traceback|exception|failed|failure|not found|no such file|"
                        r"permission denied|invalid|denied|timed? ?out)\b|报错|失败|错误", re.I)
BOUNDARY = re.compile(r"^\s*(next|now|then|after that|finally|step \d+|first|接下来|然后|现在|最后|首先)"
                      r"\b", re.I)
SHELL_TOOLS = {"bash", "shell", "terminal", "run", "execute", "exec", "run_command", "cmd"}


@dataclass
class Step:
    tool: str
    args: Any = None
    thought: str = ""
    observation: str = ""
    ok: bool = True
    subtask: str = ""

    @property
    def shell(self) -> str:
        if self.tool.lower() in SHELL_TOOLS:
            a = self.args
            return str(a.get("command") or a.get("cmd") or "") if isinstance(a, dict) else str(a)
        return ""

    def describe(self) -> str:
        """One compressed line: what was done, with which tool."""
        if self.shell:
            return f"Run `{clip(scrub(self.shell), 80)}`"
        a = self.args
        if isinstance(a, dict) and a:
            shown = ", ".join(f"{k}={clip(scrub(str(v)), 40)}" for k, v in list(a.items())[:3])
            return f"{self.tool}({shown})"
        if a:
            return f"{self.tool}: {clip(scrub(str(a)), 80)}"
        return self.tool


@dataclass
class Trajectory:
    task: str
    steps: list[Step] = field(default_factory=list)
    success: bool | None = None


# ------------------------------------------------------------------------------ parsing
def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            return raw
        return value if _depth_ok(value) else raw
    return raw


MAX_DEPTH = 64  # as engine.imports.readers.MAX_JSON_DEPTH: nothing real nests deeper


def _depth_ok(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``value`` nests at most ``limit`` deep (iterative: safe on any input)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            return False
        if isinstance(v, dict):
            stack.extend((c, d + 1) for c in v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend((c, d + 1) for c in v)
    return True


def _failed(obs: str, flag: Any = None, error: Any = None) -> bool:
    if flag is not None:
        return not bool(flag)
    if error:
        return True
    return bool(ERROR_TEXT.search(str(obs or "")[:400]))


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _from_messages(msgs: list[dict], success: Any = None) -> Trajectory:
    msgs = [m for m in msgs if isinstance(m, dict)]
    task = next((str(m.get("content") or "") for m in msgs if m.get("role") == "user"), "")
    steps: list[Step] = []
    by_id: dict[str, Step] = {}
    for m in msgs:
        role = m.get("role")
        if role == "assistant":
            thought = str(m.get("content") or "")
            for call in _list(m.get("tool_calls")):
                call = _dict(call)
                fn = _dict(call.get("function")) or call
                step = Step(str(fn.get("name") or "tool"), _args(fn.get("arguments")), thought)
                thought = ""
                steps.append(step)
                by_id[str(call.get("id") or len(steps))] = step
            if m.get("function_call"):
                fn = _dict(m["function_call"])
                steps.append(Step(str(fn.get("name") or "tool"), _args(fn.get("arguments")),
                                  thought))
        elif role in ("tool", "function"):
            step = by_id.get(str(m.get("tool_call_id"))) or (steps[-1] if steps else None)
            if step is not None:
                step.observation = str(m.get("content") or "")
                step.ok = not _failed(step.observation, m.get("success"), m.get("error"))
    return Trajectory(task, steps, None if success is None else bool(success))


_ACTION_HEAD = re.compile(r"\s*([\w.-]+)\s*[(\[:]")


def _split_action(action: str) -> tuple[str, str]:
    r"""``"tool(args)"`` / ``"tool[args]"`` / ``"tool: args"`` → ``(tool, args)``.

    Linear time: the former single regex (``(.*?)[)\]]?\s*$``) was quadratic on long runs of
    spaces, a few seconds for a 100 KB action string.
    """
    m = _ACTION_HEAD.match(action)
    if not m:
        return "action", action
    rest = action[m.end():].strip()
    if rest.endswith((")", "]")):
        rest = rest[:-1]
    return m.group(1), rest


def _from_steps(obj: dict) -> Trajectory:
    task = str(obj.get("task") or obj.get("goal") or obj.get("instruction") or obj.get("query")
               or obj.get("question") or "")
    steps = []
    for raw in obj.get("steps") or []:
        if not isinstance(raw, dict):
            steps.append(Step("action", str(raw)))
            continue
        action = raw.get("action") if raw.get("action") is not None else raw.get("tool_call")
        tool, args = raw.get("tool") or raw.get("name"), raw.get("args") or raw.get("arguments")
        if isinstance(action, dict):
            tool = tool or action.get("tool") or action.get("name")
            args = args or action.get("args") or action.get("arguments") or action.get("input")
        elif isinstance(action, str) and not tool:
            tool, args = _split_action(action)
        obs = str(raw.get("observation") or raw.get("result") or raw.get("output") or "")
        flag = raw.get("success", raw.get("ok"))
        steps.append(Step(str(tool or "action"), _args(args), str(raw.get("thought") or ""),
                          obs, not _failed(obs, flag, raw.get("error")),
                          str(raw.get("subtask") or raw.get("phase") or "")))
    ok = obj.get("success", obj.get("succeeded", obj.get("solved")))
    return Trajectory(task, steps, None if ok is None else bool(ok))


def parse(obj: Any, _depth: int = 0) -> list[Trajectory]:
    """Every trajectory in ``obj`` (see the module docstring for the accepted shapes)."""
    if _depth > MAX_DEPTH:  # lists of lists of ...: no run is nested that deep
        return []
    if isinstance(obj, dict):
        if isinstance(obj.get("trajectories"), list):
            return [t for x in obj["trajectories"] for t in parse(x, _depth + 1)]
        success = obj.get("success", obj.get("succeeded"))
        if isinstance(obj.get("messages"), list):
            t = _from_messages(obj["messages"], success)
            t.task = str(obj.get("task") or t.task)
            return [t]
        if isinstance(obj.get("steps"), list):
            return [_from_steps(obj)]
        return []
    if isinstance(obj, list):
        if obj and all(isinstance(m, dict) and "role" in m for m in obj):
            return [_from_messages(obj)]
        return [t for x in obj for t in parse(x, _depth + 1)]
    return []


def load(path: str | Path) -> list[Any]:
    """The JSON objects in a ``.json`` or ``.jsonl`` file."""
    path = Path(path)
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillFormatError(f"cannot read trajectory file: {exc}", str(path)) from None
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    except RecursionError:
        raise SkillFormatError("JSON nested too deeply", str(path)) from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError as exc:
                raise SkillFormatError(f"line {n} is not JSON ({exc})", str(path)) from None
            except RecursionError:
                raise SkillFormatError(f"line {n}: JSON nested too deeply", str(path)) from None
    return out


# ------------------------------------------------------------------------------ compression
def _exploration(s: Step) -> bool:
    return s.tool.lower() in EXPLORE_TOOLS or bool(s.shell and EXPLORE_SHELL.match(s.shell))


def effective_steps(t: Trajectory) -> list[Step]:
    """The steps that made the run succeed: failures, superseded retries, exploration dropped."""
    kept = [s for s in t.steps if s.ok]
    acting = [s for s in kept if not _exploration(s)]
    chosen = {id(s) for s in (acting or kept)}
    steps, pending = [], ""
    for s in t.steps:  # a dropped step's announced intent ("Next, run the tests") moves on
        if id(s) not in chosen:
            pending = pending or s.thought
            continue
        if pending and not s.thought:
            s = Step(s.tool, s.args, pending, s.observation, s.ok, s.subtask)
        pending = ""
        steps.append(s)
    out: list[Step] = []
    for s in steps:  # the same call twice in a row (a retry that worked) counts once
        if out and out[-1].tool == s.tool and out[-1].describe() == s.describe():
            continue
        out.append(s)
    return out


def subtasks(steps: list[Step]) -> list[tuple[str, list[Step]]]:
    """``(label, steps)`` groups from explicit labels, else the thoughts' boundary cues."""
    groups: list[tuple[str, list[Step]]] = []
    labelled = any(s.subtask for s in steps)
    for s in steps:
        new = (s.subtask and (not groups or groups[-1][0] != s.subtask)) if labelled else (
            not groups or bool(BOUNDARY.match(s.thought or "")))
        if new:
            label = s.subtask or clip(scrub(BOUNDARY.sub("", s.thought).strip(" ,.:;，。")
                                            ), 80) or s.describe()
            groups.append((label, []))
        groups[-1][1].append(s)
    return groups


def _failure_notes(t: Trajectory, tool: str) -> list[str]:
    notes = []
    for i, s in enumerate(t.steps):
        if s.tool != tool or s.ok:
            continue
        err = next((ln for ln in s.observation.splitlines() if ERROR_TEXT.search(ln)),
                   s.observation.strip().splitlines()[0] if s.observation.strip() else "failed")
        fix = next((x for x in t.steps[i + 1:] if x.tool == tool and x.ok), None)
        note = f"Pitfall: {clip(scrub(s.describe()), 80)} failed with {clip(scrub(err), 100)!r}"
        if fix is not None:
            note += f"; what worked: {clip(scrub(fix.describe()), 80)}"
        notes.append(note)
    return dedupe(notes)[:5]


def _usage_notes(steps: list[Step], tool: str) -> list[str]:
    ok = [s for s in steps if s.tool == tool and s.ok]
    keys = dedupe([", ".join(s.args) for s in ok if isinstance(s.args, dict) and s.args])
    notes = [f"Call {tool} with arguments: {k}" for k in keys[:2]]
    notes += [f"Example: {s.describe()}" for s in ok[:2]]
    return dedupe(notes)


def _task_name(task: str) -> str:
    words = [w for w in re.split(r"\s+", scrub(task)) if w][:8]
    return clip(" ".join(words), 60) or "Agent task"


def deterministic(t: Trajectory) -> list[Candidate]:
    """Candidates from one trajectory without a model."""
    steps = effective_steps(t)
    if not steps:
        return []
    name = _task_name(t.task)
    out = [Candidate(name=f"Plan: {name}", description=clip(
        f"Ordered steps that completed: {scrub(t.task)}", 240), goal=clip(scrub(t.task), 240),
        constraints=[f"Follow these {len(steps)} steps in order; skip exploration already done"],
        workflow=[s.describe() for s in steps][:10], triggers=[clip(scrub(t.task), 100)],
        tags=["trajectory", "plan"], level="planning", confidence=0.7)]
    groups = subtasks(steps)
    if len(groups) > 1:
        for label, group in groups:
            if len(group) < 2:
                continue
            out.append(Candidate(
                name=clip(label, 60), description=clip(f"Subtask of '{name}': {label}", 240),
                goal=clip(label, 240),
                constraints=[f"Use {', '.join(dedupe([s.tool for s in group]))} in this order"],
                workflow=[s.describe() for s in group][:10], triggers=[clip(label, 100)],
                tags=["trajectory", "subtask"], level="functional", confidence=0.6))
    for tool in dict.fromkeys(s.tool for s in t.steps):
        usage, pitfalls = _usage_notes(t.steps, tool), _failure_notes(t, tool)
        if not usage:
            continue
        out.append(Candidate(
            name=f"Using {tool}", description=clip(f"How to call the {tool} tool correctly, "
                                                   "with its failure modes.", 240),
            goal=f"Call {tool} correctly the first time.", constraints=usage + pitfalls,
            triggers=[tool, f"use {tool}"], tags=["trajectory", "tool", tool.lower()[:30]],
            level="atomic", confidence=0.6))
    return out


def _refine(llm: Any, t: Trajectory, plan: Candidate) -> list[str]:
    """Let the model rewrite the planning candidate in place; returns notes."""
    try:
        out = llm.structured("trajectory", task=clip(scrub(t.task), 400),
                             steps="\n".join(f"{i}. {s}" for i, s in enumerate(plan.workflow, 1)))
    except Cancelled:
        raise
    except SkillDeskError as exc:
        return [f"model refinement unusable ({clip(str(exc), 100)}); kept the steps as recorded"]
    steps = [clip(str(s), 200) for s in out.get("steps") or [] if str(s).strip()]
    if len(steps) < max(1, len(plan.workflow) // 3):
        return ["model dropped most steps; kept the steps as recorded"]
    plan.name = clip(scrub(str(out.get("name") or "")), 60) or plan.name
    plan.description = clip(scrub(str(out.get("description") or "")), 240) or plan.description
    plan.workflow = dedupe(steps)[:10]
    plan.triggers = dedupe([*map(str, out.get("triggers") or []), *plan.triggers])[:8]
    return []


def candidates_from_trajectory(obj: Any, llm: Any = None, *,
                               require_success: bool = True) -> list[Skill]:
    """Candidate skills (not written anywhere) from the run(s) in ``obj``."""
    skills: list[Skill] = []
    for t in parse(obj):
        if require_success and t.success is False:
            continue
        cands = deterministic(t)
        notes: list[str] = []
        if llm is not None and cands and cands[0].level == "planning":
            notes = _refine(llm, t, cands[0])
        for c in cands:
            if not content_tokens(c.name):
                continue
            s = c.to_skill(source="trajectory")
            if notes and c.level == "planning":
                s.extra_metadata["notes"] = notes
            skills.append(s)
    return skills
