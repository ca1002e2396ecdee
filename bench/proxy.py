"""``skilldesk bench proxy``: what ``skilldesk serve`` adds in front of a model server, and a
bounded load test.

Setup (all on loopback, in child processes): ``python -m llama_cpp.server`` on the bundled
GGUF (the upstream), and ``skilldesk serve --backend openai`` in front of it on a bank of
``--skills`` skills (the autoskill-dev corpus replicated, copied into a work folder).

- Overhead: the same chat request sent directly to the upstream and through the proxy, in
  blocks (so llama.cpp's prompt-prefix cache treats both alike), ``--runs`` each; p50/p95 of the
  end-to-end latency, the added latency, and the proxy's own retrieval + injection time as it
  reports it (``skilldesk.timings``). Note that the proxied prompt is longer (the skill block).
- Load: ``--clients`` threads x ``--requests`` requests each (non-streaming, small max_tokens,
  varied questions) against the proxy; throughput, status counts (503s are honest
  back-pressure), latency, and the bank afterwards (same SKILL.md files, same bytes, all parse).
  Bounded: clients stop starting requests after ``--deadline`` seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from engine.settings import ROOT


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="skilldesk bench proxy", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="bundled", help="model reference (default: bundled)")
    p.add_argument("--skills", type=int, default=10_000, help="bank size (default 10000)")
    p.add_argument("--runs", type=int, default=20, help="overhead requests per side")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--requests", type=int, default=20, help="requests per client")
    p.add_argument("--deadline", type=float, default=420.0,
                   help="load test: no new requests after this many seconds")
    p.add_argument("--queue-wait", type=float, default=30.0,
                   help="the proxy's --queue-wait (503 after this long)")
    p.add_argument("--learn", action="store_true", help="run the proxy with learning on")
    p.add_argument("--skip-overhead", action="store_true")
    p.add_argument("--skip-load", action="store_true")
    p.add_argument("--work", help="work folder to keep the bank and its index between runs")
    p.add_argument("--threads", type=int, default=2, help="llama.cpp threads of the upstream")
    p.add_argument("--json", action="store_true")
    p.add_argument("--bank", help=argparse.SUPPRESS)
    p.add_argument("--user", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- processes --------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port: int, path: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:4]} exited with {proc.returncode}")
        try:
            status, _ = request(port, "GET", path, timeout=5)
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"nothing answered on port {port}{path} after {timeout:.0f} s")


def start_upstream(model_path: Path, port: int, threads: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path),
           "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads),
           "--n_threads_batch", str(threads), "--n_ctx", "2048", "--verbose", "False"]
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def start_proxy(bank: Path, port: int, upstream: int, learn: bool, queue_wait: float,
                log: Path, home: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "cli.main", "serve", "--bank", str(bank), "--port", str(port),
           "--backend", "openai", "--base-url", f"http://127.0.0.1:{upstream}/v1",
           "--queue-wait", str(queue_wait), "--log-level", "warning"]
    if not learn:
        cmd.append("--no-learn")
    env = {**os.environ, "SKILLDESK_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT,
                            env=env)


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


# --- HTTP --------------------------------------------------------------------------------------
def request(port: int, method: str, path: str, body: Any = None, timeout: float = 300.0,
            conn: http.client.HTTPConnection | None = None) -> tuple[int, Any]:
    own = conn is None
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw
    finally:
        if own:
            c.close()


def chat_body(question: str, max_tokens: int) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens, "temperature": 0.0, "seed": 1}


# --- the bank ----------------------------------------------------------------------------------
def bank_snapshot(bank: Path) -> dict[str, str]:
    return {str(p.relative_to(bank)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(bank.rglob("SKILL.md"))}


def unparseable(bank: Path) -> list[str]:
    from engine.bank.store import SkillBank

    res = SkillBank(bank).load(user=None)
    users = SkillBank(bank).users_dir
    bad = [e.path for e in res.errors]
    if users.is_dir():
        for u in sorted(users.iterdir()):
            bad += [e.path for e in SkillBank(bank).load(u.name, "user").errors]
    return bad


def questions(bank: Path, n: int = 40) -> list[str]:
    """Varied questions built from skill titles, so retrieval does real work."""
    from engine.bank.skillfile import read

    out = []
    for f in sorted(bank.rglob("SKILL.md"))[: n * 7: 7]:
        try:
            s = read(f)
        except Exception:  # noqa: BLE001 - a bad file is simply not used as a question
            continue
        out.append(f"Please help me with this: {(s.title or s.name).replace('-', ' ')}.")
    return out or ["Please help me write a short, polite email to a colleague."]


# --- measurements ------------------------------------------------------------------------------
def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def overhead(up: int, px: int, runs: int, max_tokens: int, question: str) -> dict[str, Any]:
    body = chat_body(question, max_tokens)
    out: dict[str, Any] = {"direct": [], "proxy": [], "retrieve": [], "total_server": [],
                           "injected": 0, "tokens_direct": 0, "tokens_proxy": 0}
    for port in (up, px):  # warm both (model, caches, index)
        request(port, "POST", "/v1/chat/completions", body)
    block = 5
    done = 0
    while done < runs:
        n = min(block, runs - done)
        for side, port in (("direct", up), ("proxy", px)):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            for _ in range(n):
                t0 = time.perf_counter()
                status, res = request(port, "POST", "/v1/chat/completions", body, conn=conn)
                out[side].append(time.perf_counter() - t0)
                if status != 200:
                    raise RuntimeError(f"{side} answered {status}: {str(res)[:200]}")
                out[f"tokens_{side}"] = res["usage"]["prompt_tokens"]
                info = res.get("skilldesk") or {}
                if side == "proxy":
                    t = info.get("timings") or {}
                    out["retrieve"].append(t.get("rewrite_s", 0.0) + t.get("retrieve_s", 0.0))
                    out["total_server"].append(t.get("total_s", 0.0))
                    out["injected"] = len(info.get("injected") or [])
            conn.close()
        done += n
    return out


def load(px: int, clients: int, per_client: int, max_tokens: int, qs: list[str],
         deadline_s: float) -> dict[str, Any]:
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    lock = threading.Lock()
    t_start = time.perf_counter()
    stop_at = t_start + deadline_s
    retry_after: list[str] = []

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", px, timeout=600)
        for j in range(per_client):
            if time.perf_counter() > stop_at:
                with lock:
                    statuses["not sent (deadline)"] += per_client - j
                break
            body = chat_body(qs[(i * per_client + j) % len(qs)], max_tokens)
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                raw = r.read()
                key = str(r.status)
                if r.status == 200:
                    ok = json.loads(raw)["choices"][0]["message"]["content"] is not None
                    key = "200" if ok else "200 (bad body)"
                elif r.status == 503:
                    with lock:
                        retry_after.append(r.getheader("Retry-After") or "")
            except (OSError, http.client.HTTPException, ValueError, KeyError) as exc:
                key = f"error {type(exc).__name__}"
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", px, timeout=600)
            dt = time.perf_counter() - t0
            with lock:
                statuses[key] += 1
                if key == "200":
                    latencies.append(dt)
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start
    return {"wall_s": wall, "statuses": dict(statuses), "latencies": latencies,
            "retry_after": sorted(set(retry_after)), "ok": statuses.get("200", 0)}


# --- main ----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    from bench.bank import CORPUS, replicate
    from engine.llm.registry import resolve

    spec = resolve(args.model)
    if not CORPUS.is_dir():
        print(f"corpus not found: {CORPUS} (set SKILLDESK_CORPUS)", file=sys.stderr)
        return 1
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    bank = Path(args.bank) if args.bank else work / f"bank{args.skills}"
    if not bank.exists():
        print(f"building a {args.skills}-skill bank in {bank} ...", file=sys.stderr)
        replicate(CORPUS, bank, args.skills)
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    up_port, px_port = free_port(), free_port()
    upstream = proxy = None
    report: dict[str, Any] = {"skills": args.skills, "model": spec.key,
                              "max_tokens": args.max_tokens}
    try:
        upstream = start_upstream(spec.path, up_port, args.threads, work / "upstream.log")
        wait_http(up_port, "/v1/models", upstream, 120)
        before = bank_snapshot(bank)
        t0 = time.perf_counter()
        proxy = start_proxy(bank, px_port, up_port, args.learn, args.queue_wait,
                            work / "proxy.log", home)
        wait_http(px_port, "/health", proxy, 1800)
        report["proxy_start_s"] = time.perf_counter() - t0
        qs = questions(bank)
        if not args.skip_overhead:
            report["overhead"] = overhead(up_port, px_port, args.runs, args.max_tokens, qs[0])
            print_overhead(report)
        if not args.skip_load:
            report["load"] = load(px_port, args.clients, args.requests, args.max_tokens, qs,
                                  args.deadline)
            stop(proxy)
            proxy = None
            after = bank_snapshot(bank)
            report["bank"] = {
                "files_before": len(before), "files_after": len(after),
                "removed": sorted(set(before) - set(after)),
                "changed": sorted(k for k in before if k in after and before[k] != after[k]),
                "added": sorted(set(after) - set(before)), "unparseable": unparseable(bank)}
            print_load(report, args)
    finally:
        stop(proxy)
        stop(upstream)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)  # our own temp folder, never user data
    if args.json:
        slim = {k: v for k, v in report.items()}
        if "load" in slim:
            slim["load"] = {k: v for k, v in slim["load"].items() if k != "latencies"}
        print(json.dumps(slim, default=str))
    bank_ok = not report.get("bank") or not (report["bank"]["removed"] or
                                             report["bank"]["unparseable"])
    return 0 if bank_ok else 1


def _ms(x: float) -> str:
    return f"{x * 1000:8.1f}"


def print_overhead(report: dict[str, Any]) -> None:
    o = report["overhead"]
    d50, p50 = statistics.median(o["direct"]), statistics.median(o["proxy"])
    print(f"\nProxy overhead: {report['skills']} skills, model {report['model']}, "
          f"max_tokens {report['max_tokens']}, {len(o['direct'])} requests per side")
    print(f"{'':34}{'p50 ms':>8}  {'p95 ms':>8}")
    print(f"{'direct to llama_cpp.server':34}{_ms(d50)}  {_ms(pct(o['direct'], .95))}")
    print(f"{'through skilldesk serve':34}{_ms(p50)}  {_ms(pct(o['proxy'], .95))}")
    print(f"{'added latency (p50 difference)':34}{_ms(p50 - d50)}")
    print(f"{'retrieval + injection (in proxy)':34}{_ms(statistics.median(o['retrieve']))}  "
          f"{_ms(pct(o['retrieve'], .95))}")
    http = [c - t for c, t in zip(o["proxy"], o["total_server"], strict=False)]
    print(f"{'proxy HTTP/JSON (client - turn)':34}{_ms(statistics.median(http))}  "
          f"{_ms(pct(http, .95))}")
    print(f"prompt tokens: direct {o['tokens_direct']}, proxied {o['tokens_proxy']} "
          f"({o['injected']} skills injected)")


def print_load(report: dict[str, Any], args: argparse.Namespace) -> None:
    ld, b = report["load"], report["bank"]
    lat = ld["latencies"]
    print(f"\nLoad: {args.clients} clients x {args.requests} requests, max_tokens "
          f"{args.max_tokens}, proxy --queue-wait {args.queue_wait:g}s, "
          f"learning {'on' if args.learn else 'off'}")
    print(f"wall {ld['wall_s']:.1f} s, {ld['ok']} ok, throughput "
          f"{ld['ok'] / ld['wall_s']:.2f} req/s ({ld['wall_s'] / max(1, ld['ok']):.2f} s of "
          f"model time per answer, served one at a time)")
    for k, v in sorted(ld["statuses"].items()):
        print(f"  {k:24} {v}")
    seen = [int(v) for v in ld["retry_after"] if v.isdigit()]
    if seen:
        print(f"  Retry-After on the 503s: {min(seen)}-{max(seen)} s")
    if lat:
        print(f"latency of ok requests: p50 {statistics.median(lat):.2f} s, "
              f"p95 {pct(lat, .95):.2f} s, max {max(lat):.2f} s")
    print(f"bank: {b['files_before']} SKILL.md before, {b['files_after']} after; "
          f"removed {len(b['removed'])}, changed {len(b['changed'])}, added {len(b['added'])}, "
          f"unparseable {len(b['unparseable'])}")
