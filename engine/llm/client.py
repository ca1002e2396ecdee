"""How the learning loop talks to a model: through the ModelWorker, at a fixed priority.

:class:`LLMClient` fills a prompt file, sends it as one structured job (background learning
uses ``BACKGROUND``; the rewrite of a chat turn uses ``FOREGROUND``), waits, and counts calls
and seconds per step for the benchmark. It also accepts a bare backend (tests, the oracle).
A stopped job (``close()``/``cancel()``) raises :class:`~engine.errors.Cancelled`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine import prompts
from engine.llm.base import CancelToken, GenParams
from engine.llm.tiers import tier_of
from engine.llm.worker import BACKGROUND, ModelWorker


@dataclass
class CallStats:
    calls: int = 0
    seconds: float = 0.0
    failures: int = 0
    by_step: dict[str, list[float]] = field(default_factory=dict)

    def add(self, step: str, seconds: float, ok: bool) -> None:
        self.calls += 1
        self.seconds += seconds
        self.failures += 0 if ok else 1
        self.by_step.setdefault(step, []).append(seconds)

    def snapshot(self) -> tuple[int, float]:
        return self.calls, self.seconds


class LLMClient:
    """Structured prompt calls on a worker (or a bare backend) at one priority."""

    def __init__(self, target: Any, *, priority: int = BACKGROUND, tier: str | None = None,
                 prompt_dir: str | None = None):
        self.target = target
        self.priority = priority
        self.tier = tier or tier_of(target)
        self.prompt_dir = prompt_dir
        self.stats = CallStats()
        self._lock = threading.Lock()
        self._jobs: set[Any] = set()
        self._closed = False

    def prompt(self, name: str, lang: str | None = None) -> prompts.Prompt:
        return prompts.load(name, self.tier, self.prompt_dir, lang=lang)

    def structured(self, name: str, *, lang: str | None = None,
                   schema: dict[str, Any] | None = None, **values: Any) -> dict[str, Any]:
        """Fill prompt ``name`` (its ``lang`` variant if any), run it, return its validated
        JSON (raises ``StructuredOutputError`` on garbage). ``schema`` replaces the prompt's
        (a narrower one: the caller already knows more about the answer)."""
        p = self.prompt(name, lang)
        messages = p.render(**values)
        params = GenParams(max_tokens=p.max_tokens, temperature=p.temperature,
                           seed=0 if not p.temperature else None)
        schema = schema if schema is not None else p.schema or {}
        return self._call(name, lambda b, c: b.structured(messages, schema, params, c))

    @property
    def scores_tokens(self) -> bool:
        """Whether :meth:`score` reads the model's probabilities (llama.cpp) rather than
        counting its structured answer as certain."""
        backend = self.target.backend if isinstance(self.target, ModelWorker) else self.target
        return callable(getattr(backend, "choice_logprobs", None))

    def choice(self, name: str, field: str, *, lang: str | None = None,
               **values: Any) -> dict[str, float]:
        """The probability of each value of the enum ``field`` of prompt ``name``'s answer
        (``{"field": "<value>"}``), renormalised over the values (see :meth:`score`)."""
        schema = self.prompt(name, lang).schema or {}
        options = [str(o) for o in
                   (schema.get("properties", {}).get(field, {}).get("enum") or [])]
        if not options:
            raise ValueError(f"prompt {name!r} has no enum field {field!r}")
        return self.score(name, '{"' + field + '": "', {o: o for o in options},
                          lambda out: str(out.get(field)), lang=lang, **values)

    def score(self, name: str, prefix: str, options: dict[str, str],
              pick: Callable[[dict[str, Any]], str], *, lang: str | None = None,
              per_call: tuple[str, ...] = (), **values: Any) -> dict[str, float]:
        """The probability of each labelled continuation of the answer of prompt ``name``
        after ``prefix`` (``options``: label -> text whose first token decides), renormalised
        over the options.

        On a backend that exposes ``choice_logprobs`` (llama.cpp) this is one forward pass and
        gives the model's confidence, not only its argmax; elsewhere the structured answer
        counts as probability 1 for the label ``pick(answer)`` names. ``per_call``: the inputs
        that change from call to call (the self-filter's request); the prompt up to the first
        of them is kept in a KV snapshot of its own, for the next call that shares it."""
        p = self.prompt(name, lang)
        messages = p.render(**values)
        keep = p.render(**{**values, **{k: "" for k in per_call}}) if per_call else None
        params = GenParams(max_tokens=p.max_tokens, temperature=p.temperature,
                           seed=0 if not p.temperature else None)
        labels = list(options)

        def run(backend: Any, cancel: CancelToken) -> dict[str, float]:
            scorer = getattr(backend, "choice_logprobs", None)
            if scorer is not None:
                logp = scorer(messages, prefix, [options[k] for k in labels], cancel,
                              **({"keep": keep} if keep is not None else {}))
                top = max(logp.values())
                w = {k: math.exp(logp[options[k]] - top) for k in labels}
                z = sum(w.values())
                return {k: v / z for k, v in w.items()}
            out = backend.structured(messages, p.schema or {}, params, cancel)
            chosen = pick(out)
            return {k: 1.0 if k == chosen else 0.0 for k in labels}

        return self._call(name, run)

    def _call(self, name: str, run: Any) -> Any:
        t0 = time.perf_counter()
        ok = False
        try:
            if isinstance(self.target, ModelWorker):
                job = self.target.submit(run, priority=self.priority, kind="structured")
                with self._lock:
                    if self._closed:
                        job.cancel()
                    self._jobs.add(job)
                try:
                    out = job.result()
                finally:
                    with self._lock:
                        self._jobs.discard(job)
            else:
                out = run(self.target, CancelToken())
            ok = True
            return out
        finally:
            with self._lock:
                self.stats.add(name, time.perf_counter() - t0, ok)

    def cancel_all(self) -> None:
        """Stop the calls in flight (closing the queue); later calls are stopped at once."""
        with self._lock:
            self._closed = True
            jobs = list(self._jobs)
        for job in jobs:
            job.cancel()
