"""Fitting a conversation into a model's context window by trimming the oldest turns.

Pure logic (no model): the backend passes a function that counts the tokens of a rendered
prompt. The system messages at the head are always kept, and so is the newest message; the
oldest other turns are dropped, and a note saying how many were dropped is appended to the
first system message (appending keeps the system prompt's tokens, and so its KV cache, intact;
a separate mid-conversation system message would break some chat templates).
"""

from __future__ import annotations

from collections.abc import Callable

from engine.llm.base import Message

TRIM_NOTE = "[{n} earlier {messages} trimmed to fit the context window]"


def trim_note(n: int) -> str:
    return TRIM_NOTE.format(n=n, messages="message was" if n == 1 else "messages were")


def _with_note(head: list[Message], n: int) -> list[Message]:
    note = trim_note(n)
    if head:
        first = dict(head[0])
        first["content"] = f"{first.get('content') or ''}\n\n{note}".lstrip()
        return [first, *head[1:]]
    return [{"role": "system", "content": note}]


def _n_head(messages: list[Message]) -> int:
    """How many system messages lead the conversation (they are never trimmed)."""
    n = 0
    while n < len(messages) and messages[n].get("role") == "system":
        n += 1
    return n


def trimmed(messages: list[Message], k: int) -> tuple[list[Message], int]:
    """``messages`` without the ``k`` oldest non-system turns (plus an orphaned assistant reply).

    Returns the new list and how many messages were dropped.
    """
    n_head = _n_head(messages)
    head, body = messages[:n_head], messages[n_head:]
    k = min(k, max(len(body) - 1, 0))
    # Never start the kept history with an assistant reply whose question was dropped.
    while k < len(body) - 1 and body[k].get("role") == "assistant":
        k += 1
    if k == 0:
        return list(messages), 0
    return _with_note(head, k) + body[k:], k


def fit_messages(messages: list[Message], prompt_tokens: Callable[[list[Message]], int],
                 budget: int) -> tuple[list[Message], int, int]:
    """Drop the fewest oldest turns so the rendered prompt has at most ``budget`` tokens.

    Returns ``(messages, n_trimmed, n_prompt_tokens)``. When even the newest message alone is
    over budget, returns the most-trimmed version; the caller decides what to do with it.
    """
    n = prompt_tokens(messages)
    if n <= budget:
        return list(messages), 0, n
    n_body = len(messages) - _n_head(messages)
    if n_body <= 1:
        return list(messages), 0, n
    lo, hi = 1, n_body - 1
    best: tuple[list[Message], int, int] | None = None
    while lo <= hi:  # prompt length falls as k grows: binary search for the smallest k that fits
        mid = (lo + hi) // 2
        cand, dropped = trimmed(messages, mid)
        length = prompt_tokens(cand)
        if length <= budget:
            best, hi = (cand, dropped, length), mid - 1
        else:
            lo = mid + 1
    if best is None:
        cand, dropped = trimmed(messages, n_body - 1)
        best = (cand, dropped, prompt_tokens(cand))
    return best
