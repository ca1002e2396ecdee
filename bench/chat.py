"""``skilldesk bench chat``: SkillDesk's local backend against raw llama-cpp-python.

In one process, with the same GGUF, prompt, sampling and seed, alternating which goes first:

- raw ``llama_cpp.Llama.create_chat_completion(stream=True)``;
- SkillDesk's ``LlamaCppBackend`` driven through a ``ModelWorker`` and consumed as a
  ``ChatStream`` on the calling thread (the path the app uses).

Both are timed the same way from outside: TTFT = call to first non-empty text chunk;
decode tok/s = (chunks - 1) / (last chunk - first chunk) (each chunk is one token for both).
"cold" resets the KV cache first; "turn 2" sends the next turn of the same conversation, so
llama.cpp reuses the cached prefix. Peak RSS is measured in a fresh subprocess per side
(model loaded, one chat turn, plus one structured call for SkillDesk). Structured validity runs
the real ``extract`` prompt on 50 extraction-style conversations through the worker.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="skilldesk bench chat", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="bundled",
                   help="model reference (registry key, .gguf path, '' = the app's default); "
                        "default: bundled")
    p.add_argument("--runs", type=int, default=5, help="timed runs per side (median)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per answer")
    p.add_argument("--threads", type=int, default=2, help="n_threads and n_threads_batch")
    p.add_argument("--n-ctx", type=int, default=2048)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--structured", type=int, default=50, metavar="N",
                   help="extraction prompts for the structured-validity check (0 = skip)")
    p.add_argument("--no-rss", action="store_true", help="skip the peak-RSS subprocesses")
    p.add_argument("--turn", action="store_true", help="only the whole-turn comparison: "
                   "SkillDesk's turn (retrieval, self-filter) vs the plain model "
                   "(bench/_chat_turn.py)")
    p.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    p.add_argument("--bank", help=argparse.SUPPRESS)
    p.add_argument("--user", help=argparse.SUPPRESS)
    p.add_argument("--rss-probe", choices=["raw", "skilldesk"], help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _conversation() -> tuple[list[dict[str, str]], str]:
    from engine.prompts import load
    from engine.settings import ModelSettings

    conv = json.loads((DATA / "chat_conversation.json").read_text(encoding="utf-8"))
    ask = load("chat").render(skills=conv["skills"], request=conv["user"])
    return [{"role": "system", "content": ModelSettings().system_prompt}, *ask], conv["followup"]


def _sampling(spec: Any, a: argparse.Namespace) -> dict[str, Any]:
    s = spec.sampling
    return {"temperature": s["temperature"], "top_p": s["top_p"], "top_k": s["top_k"],
            "repeat_penalty": s["repeat_penalty"], "seed": a.seed, "max_tokens": a.max_tokens}


def _time_stream(chunks: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    first = last = None
    n, parts = 0, []
    for text in chunks:
        if not text:
            continue
        last = time.perf_counter()
        first = first or last
        n += 1
        parts.append(text)
    ttft = (first - t0) if first else float("nan")
    tps = (n - 1) / (last - first) if n > 1 and last > first else float("nan")
    return {"ttft": ttft, "tps": tps, "n": n, "text": "".join(parts)}


class _Sides:
    """The two contestants, loaded side by side."""

    def __init__(self, spec: Any, a: argparse.Namespace):
        from llama_cpp import Llama

        from engine.llm.base import GenParams
        from engine.llm.llama_backend import LlamaCppBackend, loading
        from engine.llm.worker import FOREGROUND, ModelWorker

        self.samp = _sampling(spec, a)
        with loading():  # as the backend loads it
            self.raw = Llama(model_path=str(spec.path), n_ctx=a.n_ctx, n_threads=a.threads,
                             n_threads_batch=a.threads, verbose=False)
        self.worker = ModelWorker(LlamaCppBackend(spec, n_threads=a.threads, n_ctx=a.n_ctx))
        self.params = GenParams(**self.samp)
        self._fg = FOREGROUND

    def raw_chat(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        s = self.samp
        stream = self.raw.create_chat_completion(
            messages=messages, stream=True, max_tokens=s["max_tokens"],
            temperature=s["temperature"], top_p=s["top_p"], top_k=s["top_k"], min_p=0.05,
            repeat_penalty=s["repeat_penalty"], seed=s["seed"])
        return _time_stream(c["choices"][0]["delta"].get("content") for c in stream)

    def sd_chat(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        stream = self.worker.stream_chat(messages, self.params, self._fg)
        out = _time_stream(stream)
        out["cached"] = stream.result.cached_tokens if stream.result else 0
        return out

    def reset(self) -> None:
        self.raw.reset()
        # a cold prompt: the backend's KV snapshots (llama_backend.py) are dropped too
        self.worker.submit(lambda b, _c: (b.llm.reset(), b.drop_snapshots()), self._fg).result()

    def close(self) -> None:
        self.worker.close()
        self.raw.close()


def _median(rows: list[dict[str, Any]], key: str) -> float:
    vals = [r[key] for r in rows if r[key] == r[key]]  # drop NaN
    return statistics.median(vals) if vals else float("nan")


def _timing(sides: _Sides, messages: list[dict[str, str]], followup: str,
            runs: int) -> dict[str, dict[str, list[dict[str, Any]]]]:
    res: dict[str, dict[str, list[dict[str, Any]]]] = {
        "raw": {"cold": [], "warm": []}, "sd": {"cold": [], "warm": []}}
    sides.reset()
    sides.raw_chat(messages)  # warm-up: page in the weights, build the graphs
    sides.sd_chat(messages)
    for i in range(runs):
        order = ("raw", "sd") if i % 2 == 0 else ("sd", "raw")
        for side in order:
            chat = sides.raw_chat if side == "raw" else sides.sd_chat
            sides.reset()
            cold = chat(messages)
            turn2 = [*messages, {"role": "assistant", "content": cold["text"]},
                     {"role": "user", "content": followup}]
            res[side]["cold"].append(cold)
            res[side]["warm"].append(chat(turn2))
    return res


def _structured(sides: _Sides, spec: Any, n: int, seed: int) -> dict[str, Any]:
    from engine.errors import StructuredOutputError
    from engine.llm.base import GenParams
    from engine.llm.worker import BACKGROUND
    from engine.prompts import load

    prompt = load("extract", variant=spec.tier)
    cases = [json.loads(line) for line in
             (DATA / "extraction_inputs.jsonl").read_text(encoding="utf-8").splitlines()
             if line.strip()][:n]
    params = GenParams(max_tokens=prompt.max_tokens, temperature=prompt.temperature or 0.0,
                       seed=seed)
    parseable = valid = first_try = n_retried = 0
    seconds, failures = [], []
    for case in cases:
        turns = "\n".join(f"{i}. {t}" for i, t in enumerate(case["user_turns"], 1))
        messages = prompt.render(user_turns=turns, context="")

        def run(backend: Any, cancel: Any, messages: list = messages) -> tuple:
            t0, retries = time.perf_counter(), backend.structured_retries
            try:
                backend.structured(messages, prompt.schema, params, cancel)
                ok = True
            except StructuredOutputError:
                ok = False
            return (ok, backend.last_result.text, time.perf_counter() - t0,
                    backend.structured_retries > retries)

        ok, text, secs, retried = sides.worker.submit(run, BACKGROUND).result()
        seconds.append(secs)
        first_try += ok and not retried
        n_retried += retried
        try:
            json.loads(text)
            parseable += 1
        except ValueError:
            pass
        valid += ok
        if not ok:
            failures.append(text[:120])
    return {"n": len(cases), "parseable": parseable, "valid": valid, "first_try": first_try,
            "retried": n_retried,
            "median_s": statistics.median(seconds) if seconds else float("nan"),
            "max_tokens": prompt.max_tokens,
            "failures": failures[:3]}


def _rss_probe(a: argparse.Namespace) -> int:
    """Subprocess mode: load one side, run one turn, print peak RSS (kB) as JSON."""
    from engine.llm.registry import resolve

    spec = resolve(a.model)
    messages, _ = _conversation()
    if a.rss_probe == "raw":
        from llama_cpp import Llama

        from engine.llm.llama_backend import loading

        with loading():
            llm = Llama(model_path=str(spec.path), n_ctx=a.n_ctx, n_threads=a.threads,
                        n_threads_batch=a.threads, verbose=False)
        for _ in llm.create_chat_completion(messages=messages, stream=True,
                                            max_tokens=a.max_tokens):
            pass
    else:
        from engine.llm.base import GenParams
        from engine.llm.llama_backend import LlamaCppBackend
        from engine.llm.worker import ModelWorker

        with ModelWorker(LlamaCppBackend(spec, n_threads=a.threads, n_ctx=a.n_ctx)) as w:
            w.submit_chat(messages, GenParams(max_tokens=a.max_tokens)).result()
            schema = {"type": "object", "properties": {"ok": {"type": "boolean"}},
                      "required": ["ok"]}
            w.submit_structured(messages, schema, GenParams(max_tokens=16)).result()
    print(json.dumps({"peak_rss_kb": _peak_rss_kb()}))
    return 0


def _peak_rss_kb() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


def _measure_rss(a: argparse.Namespace, side: str) -> float:
    cmd = [sys.executable, "-m", "bench.chat", "--rss-probe", side, "--model", a.model,
           "--threads", str(a.threads), "--n-ctx", str(a.n_ctx), "--max-tokens", "16"]
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=root, timeout=600)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_kb"] / 1024
    except (IndexError, ValueError, KeyError):
        print(f"peak RSS probe ({side}) failed: {out.stderr.strip()[-300:]}", file=sys.stderr)
        return float("nan")


def main(argv: list[str]) -> int:
    a = _args(argv)
    if a.rss_probe:
        return _rss_probe(a)
    from engine.llm.registry import resolve

    spec = resolve(a.model)
    if a.turn:
        from bench import _chat_turn

        print(_chat_turn.run(spec, a))
        return 0
    messages, followup = _conversation()
    sides = _Sides(spec, a)
    try:
        n_prompt = sides.worker.submit(lambda b, _c: b.prompt_tokens(messages)).result()
        timing = _timing(sides, messages, followup, max(1, a.runs))
        structured = _structured(sides, spec, a.structured, a.seed) if a.structured else None
    finally:
        sides.close()
    rss = {} if a.no_rss else {s: _measure_rss(a, s) for s in ("raw", "skilldesk")}
    report = _report(spec, a, n_prompt, timing, structured, rss)
    print(report["table"])
    if a.json:
        print(json.dumps({k: v for k, v in report.items() if k != "table"}, indent=2))
    return 0


def _report(spec: Any, a: argparse.Namespace, n_prompt: int, timing: dict, structured: Any,
            rss: dict[str, float]) -> dict[str, Any]:
    raw, sd = timing["raw"], timing["sd"]
    m = {side: {"ttft_cold": _median(rows["cold"], "ttft"),
                "ttft_warm": _median(rows["warm"], "ttft"),
                "tps": _median(rows["cold"] + rows["warm"], "tps"),
                "tokens": _median(rows["cold"], "n")} for side, rows in (("raw", raw),
                                                                       ("sd", sd))}
    raw_cold = raw["cold"]
    same = sum(r["text"] == s["text"] for r, s in zip(raw_cold, sd["cold"], strict=True))
    cached = int(_median(sd["warm"], "cached"))

    def paired(phase: str, key: str) -> float:
        """Median of per-run SkillDesk/raw ratios (runs alternate, so drift cancels)."""
        pairs = [s[key] / r[key] for r, s in zip(raw[phase], sd[phase], strict=True)
                 if r[key] == r[key] and s[key] == s[key] and r[key] > 0]
        return statistics.median(pairs) if pairs else float("nan")

    ratios = {"ttft_cold": paired("cold", "ttft"), "ttft_warm": paired("warm", "ttft"),
              "tps": statistics.median([paired("cold", "tps"), paired("warm", "tps")])}

    def row(label: str, r: float, s: float, fmt: str, pair: float | None = None,
            target: str = "") -> str:
        ratio = f"{s / r:.2f}x" if r == r and s == s and r > 0 else ""
        pr = f"{pair:.2f}x" if pair is not None and pair == pair else ""
        return (f"{label:<34}{format(r, fmt):>11}{format(s, fmt):>11}{ratio:>8}{pr:>8}"
                f"   {target}").rstrip()

    lines = [
        f"skilldesk bench chat: {spec.title} [{spec.key}]",
        f"threads {a.threads}, n_ctx {a.n_ctx}, max_tokens {a.max_tokens}, runs {a.runs} "
        f"(median), seed {a.seed}, temperature {spec.sampling['temperature']}, "
        f"prompt {n_prompt} tokens",
        "",
        f"{'':<34}{'raw llama':>11}{'SkillDesk':>11}{'ratio':>8}{'paired':>8}   target",
        row("TTFT, cold prompt (s)", m["raw"]["ttft_cold"], m["sd"]["ttft_cold"], ".3f",
            ratios["ttft_cold"], "<= 1.10x"),
        row("TTFT, turn 2, prefix cached (s)", m["raw"]["ttft_warm"], m["sd"]["ttft_warm"],
            ".3f", ratios["ttft_warm"], "<= 1.10x"),
        row("decode (tok/s)", m["raw"]["tps"], m["sd"]["tps"], ".1f", ratios["tps"], ">= 0.95x"),
        row("tokens per answer (median)", m["raw"]["tokens"], m["sd"]["tokens"], ".0f"),
        f"{'same text as raw (cold runs)':<34}{'':>11}{f'{same}/{len(raw_cold)}':>11}",
        f"{'prompt tokens reused on turn 2':<34}{'':>11}{cached:>11}",
    ]
    if rss:
        lines.append(row("peak RSS, model loaded (MB)", rss["raw"], rss["skilldesk"], ".0f"))
    lines.append("ratio = SkillDesk median / raw median; paired = median of per-run ratios "
                 "(runs alternate which side goes first)")
    out: dict[str, Any] = {"model": spec.key, "medians": m, "ratios": ratios, "same_text": same,
                           "cached_tokens": cached, "peak_rss_mb": rss}
    if structured:
        st = structured
        prompt_max = st["max_tokens"]
        pct = lambda k: 100.0 * st[k] / st["n"] if st["n"] else 0.0  # noqa: E731
        lines += ["", f"structured output, {st['n']} extraction prompts (extract prompt, "
                      f"schema-constrained, through the worker):",
                  f"  parseable JSON {st['parseable']}/{st['n']} ({pct('parseable'):.0f}%), "
                  f"schema-valid {st['valid']}/{st['n']} ({pct('valid'):.0f}%), "
                  f"median {st['median_s']:.2f} s per call (target 100%)",
                  f"  valid at the first try {st['first_try']}/{st['n']}; {st['retried']} "
                  f"answers cut off by max_tokens ({prompt_max}) were retried once with twice "
                  f"the budget"]
        lines += [f"  failed: {f!r}" for f in st["failures"]]
        out["structured"] = st
    out["table"] = "\n".join(lines)
    return out


if __name__ == "__main__":  # the peak-RSS probe runs this module in a fresh process
    sys.exit(main(sys.argv[1:]))
