"""The local backend: llama-cpp-python on a GGUF file (:class:`LlamaCppBackend`).

How it runs a turn:

- the prompt is rendered with the chat template from the GGUF metadata (the same Jinja
  formatter llama-cpp-python builds when ``chat_format`` is None), then tokenized once;
- when prompt + ``max_tokens`` exceed the context, the oldest turns are trimmed with a visible
  note (:mod:`engine.llm.context`) and ``ChatResult.trimmed_messages`` says how many;
- tokens come from ``Llama.generate`` one at a time. ``generate`` keeps the KV cache of the
  longest prefix shared with the previous call, so a stable system prompt and history are
  evaluated once (``ChatResult.cached_tokens``). The cancel token is checked after every token,
  before the next one is decoded: Stop takes effect within one token, and closing the generator
  leaves ``Llama`` consistent (the next call just reuses the valid prefix);
- ``structured`` adds a grammar compiled from the JSON schema (llama.cpp constrained decoding),
  then validates with jsonschema;
- KV snapshots: llama.cpp keeps one KV cache, so every call evicts the previous one's
  prefix: a self-filter call between two chat turns costs the chat its cached prefix, and a
  learning turn (triage, then extraction) evaluates each fixed prompt (instructions and
  few-shot pairs, 250-700 tokens) from scratch. After each call the KV cells of its tokens are
  copied aside (``llama_state_seq_get_data``, ~28 KB per token on Qwen2.5-1.5B); a snapshot
  replaces the older one of the same prompt (``SAME_PROMPT_TOKENS`` leading tokens shared),
  the least recently used go first beyond ``MAX_SNAPSHOTS`` or ``SNAPSHOT_BYTES``. Before a
  call, the snapshot sharing the longest prefix with the new prompt is put back when it beats
  the live cache by ``MIN_SNAPSHOT_GAIN`` tokens. Measured on the 2-core box: the self-filter
  call 12 s -> 2 s, a triage call under load 11.6 s -> 1.5 s; restoring takes milliseconds.
- kept prefixes: a call that names the part of its prompt that does not change from call to
  call (``keep``: the same prompt rendered with its per-call inputs left empty) keeps a
  snapshot of that part alone (kind ``"prefix"``) instead of the whole prompt. Such
  snapshots are kept side by side, one per distinct prefix, the ``MAX_PREFIX_SNAPSHOTS`` most
  recently used: the self-filter keeps one per judged skill (its instructions, examples and
  the skill's line), so judging a skill it judged before evaluates only the new request.

Not thread-safe: one :class:`~engine.llm.worker.ModelWorker` owns each instance.
"""

from __future__ import annotations

import codecs
import ctypes
import json
import os
import random
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from typing import Any

from engine.errors import Cancelled, ModelError, StructuredOutputError
from engine.llm.base import (
    CancelToken,
    ChatFromStream,
    ChatResult,
    GenParams,
    Message,
    Usage,
    decode_rate,
)
from engine.llm.context import fit_messages
from engine.llm.grammar import schema_to_gbnf
from engine.llm.registry import ModelSpec
from engine.llm.structured import check_schema, parse_and_validate

MIN_REPLY_TOKENS = 16  # when the prompt barely fits, still leave room for this many tokens
# the chat, the self-filter, and a learning turn's prompts (triage, the opening or later-turn
# check, extraction, keep, judge, merge, replace, name): with 6, a learning turn evicted the
# snapshots it needed next (SNAPSHOT_BYTES still bounds the memory)
MAX_SNAPSHOTS = 12
MAX_PREFIX_SNAPSHOTS = 6  # kept prefixes ("prefix" kind) on top of MAX_SNAPSHOTS: the
# self-filter's, one per skill judged recently (~7 MB each on Qwen2.5-1.5B)
SNAPSHOT_BYTES = 320 * 2**20  # all snapshots together (the chat's alone can reach ~84 MB)
MAX_SNAPSHOT_TOKENS = 3000  # longer prompts are not copied aside
MIN_SNAPSHOT_GAIN = 8  # a snapshot is put back only when it saves this many prompt tokens
# (putting one back copies a few MB: 12-35 ms measured together with keeping the next one,
# where 8 tokens take ~110 ms to evaluate on Qwen2.5-1.5B, 2 cores)
SAME_PROMPT_TOKENS = 32  # two snapshots sharing this many leading tokens are of one prompt
PREFILL_CHUNK = 64  # tokens a prefill evaluates between checks of its cancel token (~0.7 s
# on Qwen2.5-1.5B, 2 cores)


def default_threads() -> int:
    """Physical-ish core count: all CPUs we may use, halved on SMT machines with > 4."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 2
    return max(1, n // 2 if n > 4 else n)


def amx_kernels() -> bool:
    """llama.cpp was built with its AMX kernels (``AMX_INT8 = 1`` in its system info: built
    for this CPU, Sapphire Rapids or later, with ``-march=native``)."""
    import llama_cpp

    return b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info()


def loading() -> AbstractContextManager[None]:
    """Wrap every ``llama_cpp.Llama(...)`` of the process in it (the backend's, the plain model
    the benchmarks compare with): where llama.cpp has AMX kernels, :func:`_without_extra_buffers`.
    That costs the other repacked layouts too: Qwen2.5-1.5B Q4_K_M decoded 9.9 tok/s instead of
    13.0 on this project's 2-core Xeon (64 tokens after a 1-token prompt, the one kind of call
    that did not crash)."""
    return _without_extra_buffers() if amx_kernels() else nullcontext()


@contextmanager
def _without_extra_buffers() -> Iterator[None]:
    """Models loaded inside keep their weights in llama.cpp's plain CPU buffers: no "extra"
    buffer types, which on an AMX CPU means no repacking into AMX tiles. Its AMX matmul
    crashes (SIGSEGV in ``ggml_backend_amx_mul_mat``) on the first prompt of a few hundred
    tokens with the Q4_K_M models here (seen on this project's 2-core Xeon; llama.cpp issue
    20824, closed unfixed). llama-cpp-python takes no argument for it, so the default
    model params it reads are wrapped while the model loads."""
    from llama_cpp import llama_cpp as lib
    default = lib.llama_model_default_params

    def params() -> Any:
        p = default()
        p.use_extra_bufts = False
        return p

    lib.llama_model_default_params = params
    try:
        yield
    finally:
        lib.llama_model_default_params = default


class LlamaCppBackend(ChatFromStream):
    """A GGUF model loaded with llama-cpp-python; implements :class:`~engine.llm.base.LLMBackend`."""

    def __init__(self, spec: ModelSpec, n_threads: int | None = None, n_ctx: int | None = None,
                 n_threads_batch: int | None = None, n_batch: int = 512, seed: int | None = None,
                 **llama_kwargs: Any):
        info = spec.check()  # a clear ModelError before llama.cpp sees a bad file
        try:
            import llama_cpp
            from llama_cpp import llama_chat_format
        except ImportError as exc:  # pragma: no cover - the venv always has it
            raise ModelError(f"llama-cpp-python is not installed ({exc}); run scripts/setup.sh "
                             f"or use an OpenAI-compatible server") from exc
        self._lc = llama_cpp
        self.spec = spec
        self.name = spec.title
        self.n_threads = int(n_threads or default_threads())
        self.n_threads_batch = int(n_threads_batch or self.n_threads)
        n_ctx = int(n_ctx or spec.n_ctx)
        if info.context_length:
            n_ctx = min(n_ctx, info.context_length)
        use_gguf = spec.chat_template in ("", "gguf")
        try:
            with loading():
                self.llm = llama_cpp.Llama(
                    model_path=str(spec.path), n_ctx=n_ctx, n_batch=n_batch,
                    n_threads=self.n_threads, n_threads_batch=self.n_threads_batch,
                    seed=seed if seed is not None else llama_cpp.LLAMA_DEFAULT_SEED,
                    chat_format=None if use_gguf else spec.chat_template,
                    verbose=False, **llama_kwargs)
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(f"{spec.path}: llama.cpp could not load the model ({exc})") from exc
        self._formatter = self._make_formatter(llama_chat_format, use_gguf)
        self._vocab = self.llm._model.vocab
        self._grammars: dict[str, Any] = {}
        self.last_result: ChatResult | None = None
        self.structured_retries = 0  # answers cut off by max_tokens and asked again
        self.snapshot_hits = 0  # calls that started from a snapshot put back
        self.keep_snapshots = True  # False: measure calls without snapshots (bench triage)
        # (kind, token ids, KV bytes), least recently used first; kind: "chat" or "structured"
        self._snaps: list[tuple[str, list[int], bytes]] = []

    # --- the prompt -------------------------------------------------------------------------
    def _make_formatter(self, lcf: Any, use_gguf: bool) -> Any:
        template = self.llm.metadata.get("tokenizer.chat_template")
        if use_gguf and template:
            eos, bos = self.llm.token_eos(), self.llm.token_bos()
            model = self.llm._model
            return lcf.Jinja2ChatFormatter(
                template=template,
                eos_token=model.token_get_text(eos) if eos != -1 else "",
                bos_token=model.token_get_text(bos) if bos != -1 else "",
                stop_token_ids=[eos])
        name = self.llm.chat_format if not use_gguf else "chatml"
        for attr in (f"format_{name}", f"format_{name.replace('-', '_')}",
                     f"format_{name.replace('-', '')}"):
            if callable(getattr(lcf, attr, None)):
                return getattr(lcf, attr)
        raise ModelError(f"{self.spec.path}: no chat template in the file and no built-in "
                         f"format named '{name}'; set chat_template in models/registry.json")

    def _render(self, messages: list[Message]) -> tuple[list[int], list[str]]:
        """Prompt tokens and the template's stop strings for ``messages``."""
        try:
            result = self._formatter(messages=messages)
        except Exception as exc:  # jinja errors, raise_exception() in templates
            raise ModelError(f"{self.name}: the chat template rejected the messages ({exc})") \
                from exc
        tokens = self.llm.tokenize(result.prompt.encode("utf-8"),
                                   add_bos=not result.added_special, special=True)
        stops = result.stop if isinstance(result.stop, list) else [result.stop]
        return tokens, [s for s in stops if s]

    def prompt_tokens(self, messages: list[Message]) -> int:
        return len(self._render(messages)[0])

    def count_tokens(self, text: str) -> int:
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    @property
    def context_length(self) -> int:
        return self.llm.n_ctx()

    def _fit(self, messages: list[Message], max_tokens: int) -> tuple[list[int], list[str], int,
                                                                         int]:
        """(prompt tokens, stop strings, trimmed count, max new tokens) that fit the context."""
        n_ctx = self.context_length
        reserve = max(MIN_REPLY_TOKENS, min(max_tokens, n_ctx // 2))
        tokens, stops = self._render(messages)
        n_trimmed = 0
        if len(tokens) > n_ctx - reserve:  # the common case renders once; trimming searches
            msgs, n_trimmed, _ = fit_messages(messages, self.prompt_tokens, n_ctx - reserve)
            tokens, stops = self._render(msgs)
        if len(tokens) > n_ctx - MIN_REPLY_TOKENS:
            raise ModelError(f"the message is too long for {self.name}: {len(tokens)} tokens, "
                             f"and the context holds {n_ctx}; shorten it or pick a "
                             f"longer-context model")
        return tokens, stops, n_trimmed, min(max_tokens, n_ctx - len(tokens))

    # --- generation -------------------------------------------------------------------------
    def _sampling(self, params: GenParams) -> dict[str, Any]:
        d = self.spec.sampling
        pick = lambda v, k, default: v if v is not None else d.get(k, default)  # noqa: E731
        return {"temp": float(pick(params.temperature, "temperature", 0.7)),
                "top_p": float(pick(params.top_p, "top_p", 0.9)),
                "top_k": int(pick(params.top_k, "top_k", 40)),
                "repeat_penalty": float(pick(params.repeat_penalty, "repeat_penalty", 1.1))}

    def stream_chat(self, messages: list[Message], params: GenParams | None = None,
                    cancel: CancelToken | None = None) -> Iterator[str]:
        return self._generate(messages, params or GenParams(), cancel, grammar=None)

    def _generate(self, messages: list[Message], params: GenParams, cancel: CancelToken | None,
                  grammar: Any) -> Iterator[str]:
        t0 = time.perf_counter()
        max_tokens = params.max_tokens if params.max_tokens and params.max_tokens > 0 \
            else self.context_length
        prompt, stops, n_trimmed, max_new = self._fit(messages, max_tokens)
        stops = [*params.stop, *stops]
        llm = self.llm
        kind = "chat" if grammar is None else "structured"
        cached = self._restore(prompt)
        llm.set_seed(params.seed if params.seed is not None else random.getrandbits(31))
        result = ChatResult(text="", usage=Usage(prompt_tokens=len(prompt)), finish_reason="length",
                            trimmed_messages=n_trimmed, cached_tokens=min(cached, len(prompt) - 1))
        self.last_result = result
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        parts: list[str] = []
        pending = ""  # text held back because it may be the start of a stop string
        n_gen, t_first, t_last = 0, None, None
        gen = llm.generate(prompt, grammar=grammar, min_p=0.05, **self._sampling(params))
        try:
            if cancel is not None and cancel.cancelled:
                result.finish_reason = "cancelled"
                return
            for token in gen:
                now = time.perf_counter()
                if cancel is not None and cancel.cancelled:
                    result.finish_reason = "cancelled"
                    break
                if self._lc.llama_vocab_is_eog(self._vocab, token):
                    result.finish_reason = "stop"
                    break
                t_first, t_last = t_first or now, now
                n_gen += 1
                pending += decoder.decode(llm.detokenize([token]))
                emit, pending, hit = _split_stop(pending, stops)
                if emit:
                    if result.ttft_s is None:
                        result.ttft_s = time.perf_counter() - t0
                    parts.append(emit)
                    yield emit
                if hit:
                    result.finish_reason = "stop"
                    break
                if n_gen >= max_new:
                    break
                if cancel is not None and cancel.cancelled:  # Stop pressed while we yielded
                    result.finish_reason = "cancelled"
                    break
            else:
                result.finish_reason = "stop"
            tail = pending + decoder.decode(b"", final=True)
            if tail and result.finish_reason != "cancelled" and not any(s in tail for s in stops):
                parts.append(tail)
                yield tail
        except GeneratorExit:  # the consumer dropped the stream: same as Stop
            result.finish_reason = "cancelled"
            raise
        except (RuntimeError, ValueError, OSError) as exc:
            llm.reset()  # never leave a half-evaluated state behind
            raise ModelError(f"{self.name}: generation failed ({exc})") from exc
        else:
            if result.finish_reason != "cancelled":
                self._snapshot(kind)
        finally:
            gen.close()
            result.text = "".join(parts)
            result.usage.completion_tokens = n_gen
            result.decode_tps = decode_rate(n_gen, t_first, t_last)

    def _grammar(self, schema: dict[str, Any]) -> Any:
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            try:
                gbnf = schema_to_gbnf(schema)
            except Exception:  # a schema feature the converter lacks: any JSON, then validate
                gbnf = JSON_GBNF
            if not self._grammar_ok(gbnf):  # never hand llama.cpp a grammar it rejects
                gbnf = JSON_GBNF
            self._grammars[key] = LlamaGrammar.from_string(gbnf, verbose=False)
        return self._grammars[key]

    def _grammar_ok(self, gbnf: str) -> bool:
        """Whether llama.cpp parses ``gbnf`` (a NULL sampler would crash generation)."""
        lc = self._lc
        sampler = lc.llama_sampler_init_grammar(self._vocab, gbnf.encode("utf-8"), b"root")
        if not sampler:
            return False
        lc.llama_sampler_free(sampler)
        return True

    def structured(self, messages: list[Message], schema: dict[str, Any],
                   params: GenParams | None = None,
                   cancel: CancelToken | None = None) -> dict[str, Any]:
        """Grammar-constrained JSON, validated. An answer cut off by ``max_tokens`` (the grammar
        guarantees every prefix is valid, not that it ends in time) is retried once with twice
        the budget; the prompt is still in the KV cache, so only the answer is paid again."""
        check_schema(schema)
        params = params or GenParams()
        grammar = self._grammar(schema)
        for attempt in range(2):
            for _ in self._generate(messages, params, cancel, grammar=grammar):
                pass
            result = self.last_result
            assert result is not None
            if result.finish_reason == "cancelled":
                raise Cancelled("the structured call was stopped")
            try:
                return parse_and_validate(result.text, schema, result.finish_reason)
            except StructuredOutputError as exc:
                if attempt == 0 and result.finish_reason == "length":
                    self.structured_retries += 1
                    budget = max(params.max_tokens or 0, result.usage.completion_tokens)
                    params = replace(params, max_tokens=2 * budget,
                                     seed=None if params.seed is None else params.seed + 1)
                    continue
                raise StructuredOutputError(f"{self.name}: {exc}") from None
        raise AssertionError("unreachable")

    def choice_logprobs(self, messages: list[Message], prefix: str, options: list[str],
                        cancel: CancelToken | None = None,
                        keep: list[Message] | None = None) -> dict[str, float]:
        """Log-probabilities of each option as the answer's next words after ``prefix``.

        One forward pass, no sampling: the prompt (the chat template's generation prompt, then
        ``prefix`` such as ``{"kind": "``) is evaluated, reusing the KV prefix shared with the
        previous call, and each option is scored by its first token (options must start with
        different tokens; ``ValueError`` otherwise). What a calibrated decision needs: the
        model's confidence, not only its argmax (a 1.5B model's argmax leans to one class).
        ``keep``: the prompt with its per-call inputs left empty; the part the two share is
        kept as a prefix snapshot (see the module docstring), the whole prompt is not."""
        if cancel is not None and cancel.cancelled:
            raise Cancelled("the choice was stopped")
        import numpy as np

        llm = self.llm
        prompt = self._fit(messages, MIN_REPLY_TOKENS)[0]
        prompt = prompt + llm.tokenize(prefix.encode("utf-8"), add_bos=False, special=False)
        firsts = {o: llm.tokenize(o.encode("utf-8"), add_bos=False, special=False)[0]
                  for o in options}
        if len(set(firsts.values())) != len(firsts):
            raise ValueError(f"options share a first token: {options}")
        split = self._kept_prefix(keep, prompt)
        try:
            cached = min(self._restore(prompt), len(prompt) - 1)
            llm.n_tokens = cached
            if split > cached:  # the part that does not change between calls, kept alone
                llm.eval(prompt[cached:split])
                self._snapshot("prefix")
            llm.eval(prompt[max(cached, split):])
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(),
                                           shape=(llm.n_vocab(),)).astype(np.float64)
            if not split:
                self._snapshot("structured")
        except (RuntimeError, ValueError, OSError) as exc:
            llm.reset()
            self._snaps = []
            raise ModelError(f"{self.name}: evaluation failed ({exc})") from exc
        top = float(logits.max())
        log_z = top + float(np.log(np.exp(logits - top).sum()))
        self.last_result = ChatResult(text="", usage=Usage(prompt_tokens=len(prompt)),
                                      finish_reason="stop", cached_tokens=cached)
        return {o: float(logits[t]) - log_z for o, t in firsts.items()}

    def prefill(self, messages: list[Message], cancel: CancelToken | None = None,
                kind: str = "structured") -> int:
        """Evaluate the prompt of ``messages`` into the KV cache and keep its snapshot (of
        ``kind``: "chat" for a chat prompt), with no answer: a later prompt sharing its prefix
        starts from there. Returns the prompt's length in tokens (``SkillDesk.warm_up`` primes
        the self-filter's fixed part with it, ``SkillDesk.prepare`` the chat prompt of a turn
        the user is still typing). Evaluated ``PREFILL_CHUNK`` tokens at a time, checking
        ``cancel`` in between: a chat that pre-empts it waits one chunk at most, and what was
        evaluated stays in the cache for it."""
        if cancel is not None and cancel.cancelled:
            raise Cancelled("the prefill was stopped")
        llm = self.llm
        prompt = self._fit(messages, MIN_REPLY_TOKENS)[0]
        try:
            keep = min(self._restore(prompt), len(prompt) - 1)
            llm.n_tokens = keep
            for start in range(keep, len(prompt), PREFILL_CHUNK):
                if cancel is not None and cancel.cancelled:
                    raise Cancelled("the prefill was stopped")
                llm.eval(prompt[start:start + PREFILL_CHUNK])
            self._snapshot(kind)
        except (RuntimeError, ValueError, OSError) as exc:
            llm.reset()
            self._snaps = []
            raise ModelError(f"{self.name}: evaluation failed ({exc})") from exc
        return len(prompt)

    # --- KV snapshots (see the module docstring) ---------------------------------------------
    def _kept_prefix(self, keep: list[Message] | None, prompt: list[int]) -> int:
        """Tokens of ``prompt`` it shares with the rendering of ``keep`` (0: none to keep)."""
        if keep is None or not self.keep_snapshots:
            return 0
        n = _common_prefix(self._fit(keep, MIN_REPLY_TOKENS)[0], prompt)
        return n if MIN_SNAPSHOT_GAIN <= n < len(prompt) else 0

    def _snapshot(self, kind: str) -> None:
        llm, lc = self.llm, self._lc
        n = int(llm.n_tokens)
        if not self.keep_snapshots or n < MIN_SNAPSHOT_GAIN or n > MAX_SNAPSHOT_TOKENS:
            return
        size = int(lc.llama_state_seq_get_size(llm._ctx.ctx, 0))
        buf = (ctypes.c_uint8 * size)()
        got = int(lc.llama_state_seq_get_data(llm._ctx.ctx, buf, size, 0))
        if got <= 0 or got > size:
            return
        tokens = [int(t) for t in llm.input_ids[:n]]
        if kind == "prefix":  # side by side: only one holding this prefix (or held by it) goes
            snaps = [sn for sn in self._snaps if sn[0] != "prefix"
                     or _common_prefix(sn[1], tokens) < min(len(sn[1]), n)]
        else:  # a newer snapshot of the same prompt replaces the older one
            snaps = [sn for sn in self._snaps if sn[0] == "prefix"
                     or _common_prefix(sn[1], tokens) < SAME_PROMPT_TOKENS]
        snaps.append((kind, tokens, ctypes.string_at(buf, got)))
        while len(snaps) > 1:  # the least recently used first
            prefixes = [i for i, sn in enumerate(snaps) if sn[0] == "prefix"]
            others = [i for i, sn in enumerate(snaps) if sn[0] != "prefix"]
            if len(prefixes) > MAX_PREFIX_SNAPSHOTS:
                snaps.pop(prefixes[0])
            elif len(others) > MAX_SNAPSHOTS:
                snaps.pop(others[0])
            elif sum(len(sn[2]) for sn in snaps) > SNAPSHOT_BYTES:
                snaps.pop(0)
            else:
                break
        self._snaps = snaps

    def drop_snapshots(self, kinds: tuple[str, ...] | None = None) -> None:
        """Forget the snapshots of these kinds ("chat", "structured"), or all (a benchmark's
        cold prompt: ``llm.reset()`` alone would let a snapshot of the same prompt back in)."""
        self._snaps = [sn for sn in self._snaps if kinds is not None and sn[0] not in kinds]

    def _restore(self, prompt: list[int]) -> int:
        """Tokens of ``prompt`` the KV cache holds, after putting back the snapshot sharing the
        longest prefix with it when that beats the live cache by ``MIN_SNAPSHOT_GAIN``."""
        llm, lc = self.llm, self._lc
        live = _common_prefix(llm.input_ids[:llm.n_tokens], prompt)
        best, pick = live + MIN_SNAPSHOT_GAIN - 1, None
        for sn in self._snaps:
            n = _common_prefix(sn[1], prompt)
            if n > best:
                best, pick = n, sn
        if pick is None:
            return live
        _kind, tokens, data = pick
        llm._ctx.kv_cache_clear()
        src = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if int(lc.llama_state_seq_set_data(llm._ctx.ctx, src, len(data), 0)) != len(data):
            llm.reset()  # a failed restore must not leave a half-valid cache
            llm._ctx.kv_cache_clear()
            self._snaps = []
            return 0
        llm.input_ids[:len(tokens)] = tokens
        llm.n_tokens = len(tokens)
        # the logits are the last live decode's, not this prompt's: a prompt the snapshot holds
        # whole (a prepared chat turn) must decode its last token again before sampling
        llm._requires_eval = True
        self._snaps.remove(pick)
        self._snaps.append(pick)  # most recently used last
        self.snapshot_hits += 1
        return best

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.close()


def _common_prefix(a: Any, b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _split_stop(text: str, stops: list[str]) -> tuple[str, str, bool]:
    """Split ``text`` into (safe to emit, held back, stop string found)."""
    if not stops:
        return text, "", False
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    if cut >= 0:
        return text[:cut], "", True
    hold = 0
    for s in stops:  # the longest tail of text that is a head of a stop string
        for n in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:n]):
                hold = n
                break
    return (text[:-hold], text[-hold:], False) if hold else (text, "", False)
