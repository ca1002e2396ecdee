"""``skilldesk bench chat --turn``: the whole SkillDesk turn against the plain model (issue 15b).

The self-filter (engine/chat/skill_filter.py) adds one model call to a turn where a skill passed
η. This measures what the user waits for: TTFT from ``desk.chat(..., stream=True)`` to the first
text chunk (rewrite check, retrieval, the self-filter, the skill block's prompt evaluation),
against raw llama-cpp-python answering the same user message with no skills (``plain``), and
against the exact messages SkillDesk sent to the model (``same prompt``: what the skill block
costs by itself). Each request, on the shipped starter bank:

- ``injected``: a request a starter skill applies to (the filter runs and keeps it);
- ``two``: a request two starter skills apply to (two filter calls, each candidate judged
  alone; on paraphrased requests the filter judged 1.7-2.1 candidates per request, so this
  is the common case, not ``injected``);
- ``dropped``: a topical neighbour that passes η (the filter runs and drops it);
- ``none``: a question nothing passes η for (no filter call).

Cold KV cache for the chat prompt before every call (the worst case: a new request rarely
shares the previous prompt beyond the system prompt); the self-filter's fixed instructions stay
in their KV snapshot, as in the app after its first filter call (an untimed filter call on
another request comes before each timed turn, so only the fixed part is reused; the first, cold
filter call is reported apart, and again after ``desk.warm_up()``, which the app runs once the
model is loaded); runs alternate which side goes first; medians. Two self-filter columns:
``filter`` where the request's skills were judged before in the session (on another request:
their kept prefixes are in KV snapshots, as for a skill the user keeps using, or one
``warm_up`` primed) and ``new skl`` where none was (their kept prefixes dropped first).

``prepared``: the app's turn when the user paused before sending: ``desk.prepare`` ran on the
same message from the same cold state (its rewrite check, retrieval, self-filter and the
prefill of the chat prompt finished), then the message is sent; the turn must have used that
decision (``TurnResult.prepared``). ``+other``: the same with another prompt evaluated in
between (in the app, a learning call), so the prepared prompt is put back from its snapshot.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

REQUESTS = {
    "injected": "Write a commit message for my fix of the login timeout bug.",
    "two": "Review my Python patch and write the commit message for it.",
    "dropped": "What does git stash do?",
    "none": "Name three rivers in Europe.",
}


def _first_chunk(chunks: Any) -> tuple[float, int]:
    t0 = time.perf_counter()
    ttft, n = float("nan"), 0
    for text in chunks:
        if text and n == 0:
            ttft = time.perf_counter() - t0
        n += bool(text)
    return ttft, n


def run(spec: Any, a: Any) -> str:
    from llama_cpp import Llama

    from engine.desk import SkillDesk
    from engine.llm.base import GenParams
    from engine.llm.llama_backend import loading
    from engine.settings import RESOURCES, Settings

    with loading():  # as the backend loads it
        raw = Llama(model_path=str(spec.path), n_ctx=a.n_ctx, n_threads=a.threads,
                    n_threads_batch=a.threads, verbose=False)
    tmp = Path(tempfile.mkdtemp(prefix="skilldesk-turn-"))
    shutil.copytree(RESOURCES / "starter", tmp / "bank" / "Common" / "starter")
    cfg = Settings()
    cfg.model.model, cfg.model.n_threads, cfg.model.n_ctx = str(spec.path), a.threads, a.n_ctx
    cfg.model.temperature = 0.0
    desk = SkillDesk.open(tmp / "bank", config=cfg)
    params = GenParams(max_tokens=a.max_tokens, temperature=0.0, seed=a.seed)
    sent: list[list[dict]] = []
    worker = desk.worker
    worker.wait_ready()
    orig = worker.stream_chat

    def capture(messages, *args, **kw):
        sent.append([dict(m) for m in messages])
        return orig(messages, *args, **kw)

    worker.stream_chat = capture  # type: ignore[method-assign]

    def reset() -> None:  # a cold chat prompt; the structured prompts' snapshots stay, as
        # they do in the app after its first self-filter call (llama_backend.py)
        raw.reset()
        worker.submit(lambda b, _c: (b.llm.reset(), b.drop_snapshots(("chat",)))).result()

    def forget_skills() -> None:  # no skill judged before: its kept prefix is gone
        worker.submit(lambda b, _c: b.drop_snapshots(("prefix",))).result()

    from engine.llm.client import LLMClient

    primer = LLMClient(worker)

    def prime() -> None:
        """The previous turn's self-filter call, on another request: the snapshot then holds
        the prompt's fixed part and a different request, as in the app (untimed)."""
        primer.structured("filter", request="Plan a weekend in Lisbon for two.",
                          skills="1. Travel planner: Plans city trips day by day.")

    def raw_ttft(messages: list[dict]) -> float:
        s = raw.create_chat_completion(messages=messages, stream=True,
                                       max_tokens=a.max_tokens, temperature=0.0, seed=a.seed)
        return _first_chunk(c["choices"][0]["delta"].get("content") for c in s)[0]

    def sd_ttft(text: str, filt: bool) -> tuple[float, Any]:
        stream = desk.chat([{"role": "user", "content": text}], stream=True, learn=False,
                           params=params, self_filter=filt)
        ttft, _ = _first_chunk(stream)
        return ttft, stream.result

    def prepared_ttft(text: str, between: bool) -> float:
        """The app's turn when the user paused before sending: desk.prepare() ran on the
        draft (its decision and prefill finished), then, with ``between``, another prompt
        took the model (in the app: a learning call), then the same message is sent."""
        msgs = [{"role": "user", "content": text}]
        desk.prepare(msgs, self_filter=True).join()
        if between:
            prime()
        t, info = sd_ttft(text, True)
        assert info.prepared, "the prepared decision was not used"
        return t

    rows = []
    try:
        reset()
        raw_ttft([{"role": "user", "content": "hi"}])  # warm-up both
        sd_ttft("hi", False)
        t0 = time.perf_counter()
        sd_ttft(REQUESTS["injected"], True)  # the first self-filter call: its prompt is cold
        cold_filter = time.perf_counter() - t0
        # the same first turn after desk.warm_up() (the app primes the filter prompt in the
        # background once the model is loaded); a chat turn in between holds the live cache
        worker.submit(lambda b, _c: (b.llm.reset(), b.drop_snapshots())).result()
        job = desk.warm_up()
        if job is not None:
            job.result()
        sd_ttft("hi", False)
        t0 = time.perf_counter()
        sd_ttft(REQUESTS["injected"], True)
        warm_filter = time.perf_counter() - t0
        for label, text in REQUESTS.items():
            got: dict[str, list[float]] = {"plain": [], "same": [], "nofilter": [],
                                           "filter_new": [], "filter": [], "prepared": [],
                                           "prep_other": []}
            info: Any = None
            for i in range(max(1, a.runs)):
                order = ("raw", "sd") if i % 2 == 0 else ("sd", "raw")
                for side in order:
                    if side == "raw":
                        reset()
                        got["plain"].append(raw_ttft([{"role": "user", "content": text}]))
                    else:
                        reset()
                        t, _ = sd_ttft(text, False)
                        got["nofilter"].append(t)
                        same = sent[-1]
                        prime()
                        reset()
                        forget_skills()
                        got["filter_new"].append(sd_ttft(text, True)[0])
                        prime()
                        reset()
                        t, info = sd_ttft(text, True)
                        got["filter"].append(t)
                        reset()
                        got["same"].append(raw_ttft(same))
                        prime()
                        reset()
                        got["prepared"].append(prepared_ttft(text, False))
                        prime()
                        reset()
                        got["prep_other"].append(prepared_ttft(text, True))
            med = {k: statistics.median(v) for k, v in got.items()}
            rows.append((label, text, med, info))
    finally:
        desk.close()
        raw.close()
        shutil.rmtree(tmp, ignore_errors=True)
    lines = [f"\nWhole turn vs the plain model ({spec.title}; threads {a.threads}, n_ctx "
             f"{a.n_ctx}, max_tokens {a.max_tokens}, {a.runs} runs, cold KV, medians; plain = "
             "raw llama on the user message alone; same prompt = raw llama on the messages "
             "SkillDesk sent (skill block included); target: SkillDesk with the self-filter "
             "<= 1.25x plain)",
             f"{'request':<10}{'skills (filter on)':<40}{'filter s':>9}{'plain s':>9}"
             f"{'same s':>9}{'no filt s':>10}{'filter s':>10}{'x plain':>9}{'x no filt':>10}"
             f"{'new skl s':>10}{'x no filt':>10}"
             f"{'prepared s':>11}{'+other s':>9}{'x no filt':>10}"]
    for label, _text, med, info in rows:
        names = ",".join(s.name for s in info.injected) or "-"
        fs = info.timings.get("filter_s")
        lines.append(f"{label:<10}{names[:39]:<40}{(f'{fs:.2f}' if fs else '-'):>9}"
                     f"{med['plain']:>9.2f}{med['same']:>9.2f}{med['nofilter']:>10.2f}"
                     f"{med['filter']:>10.2f}{med['filter'] / med['plain']:>8.2f}x"
                     f"{med['filter'] / med['nofilter']:>9.2f}x"
                     f"{med['filter_new']:>10.2f}{med['filter_new'] / med['nofilter']:>9.2f}x"
                     f"{med['prepared']:>11.3f}{med['prep_other']:>9.3f}"
                     f"{med['prep_other'] / med['nofilter']:>9.2f}x")
    lines += [f"  {label}: {text!r}" for label, text in REQUESTS.items()]
    lines.append("  filter s: the skills were judged before in this session (on another "
                 "request), so the self-filter's prompt up to the request is in a KV snapshot "
                 "(one per skill, llama_backend.py); new skl s: none of them was (first use)")
    lines.append("  prepared: the app's turn when the user paused before sending (desk.prepare "
                 "on the draft, from a cold chat prompt, finished before the send); +other: "
                 "another prompt took the model in between (a learning call), so the prepared "
                 "prompt comes back from its KV snapshot and its last token is decoded again")
    lines.append(f"  the very first turn with the self-filter (its prompt not yet in a KV "
                 f"snapshot), whole turn incl. {a.max_tokens} tokens: {cold_filter:.2f} s; "
                 f"after desk.warm_up(): {warm_filter:.2f} s")
    return "\n".join(lines)
