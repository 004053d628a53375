"""Load test of `dlmcode serve`: N concurrent editors, M requests each, at several N.

    python -m benchmarks.serve_load --clients 1,2,4,8 --requests 20 --batch 1,4 [--url http://127.0.0.1:8012]

Without --url it starts one `dlmcode serve` (built-in model, or each --model) per --batch value
in subprocesses on free 127.0.0.1 ports, and stops them at the end; the levels alternate
between them (level 1 on each, then level 2 on each, ...), so that batched and one-at-a-time
are measured side by side, under the same noise. Each request is llama.vim's /infill body
(autoload/llama.vim) for a single-line hole of a held-out file (heldout-single), with a
PREFIX_LINES-line prefix and SUFFIX_LINES lines after. Every client sends the same M holes
(in a rotated order), so every level does the same mix of work and requests per second
compare across levels.
Per level it checks that every request was answered exactly once with a 200 and a
`content`, and reports latency p50/p95, requests per second, and the server's resident
memory before and after (flat memory: no growth across levels). Then, per server, it sends
--streamed streamed multi-line requests (the same holes with `lines` 0: the fill runs to its
end) one at a time, and reports time to the first event carrying text against time to the
stream's end. One JSON object on stdout.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from dlmcode.bench import suites
from dlmcode.core.entry import one_command
from dlmcode.core.errors import DlmcodeError

PREFIX_LINES = 30
SUFFIX_LINES = 10
CEILING = 128  # llama.vim's default n_predict


def bodies(count: int, prefix_lines: int = PREFIX_LINES) -> list[dict[str, Any]]:
    """llama.vim /infill bodies for the first `count` heldout-single tasks."""
    out = []
    for task in suites.load("heldout-single", count).tasks:
        prefix = "".join(task.prompt.splitlines(keepends=True)[-prefix_lines:])
        suffix = "".join(task.suffix.splitlines(keepends=True)[: SUFFIX_LINES + 1])
        out.append(
            {
                "id_slot": 0,
                "input_prefix": prefix,
                "input_suffix": suffix,
                "input_extra": [],
                "prompt": "",
                "n_predict": CEILING,
                "stop": [],
                "n_indent": 0,
                "top_k": 40,
                "top_p": 0.90,
                "samplers": ["top_k", "top_p", "infill"],
                "stream": False,
                "cache_prompt": True,
                "response_fields": ["content", "timings/predicted_n", "timings/predicted_ms"],
            }
        )
    return out


def streamed_body(body: dict[str, Any]) -> dict[str, Any]:
    """The same hole, streamed, with no line limit: a multi-line fill whose first lines can arrive early."""
    return {**body, "stream": True, "lines": 0, "n_predict": 32, "response_fields": None}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def level(url: str, clients: int, requests: int, pool: list[dict[str, Any]], headers: dict[str, str]) -> dict[str, Any]:
    """`clients` threads, each sending `requests` requests one after another."""
    latencies: list[float] = []
    answered: dict[tuple[int, int], int] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def editor(c: int) -> None:
        with httpx.Client(timeout=300, headers=headers) as http:
            for r in range(requests):
                body = pool[
                    (c + r) % requests % len(pool)
                ]  # every level sends the same `requests` holes, each once per client
                start = time.perf_counter()
                try:
                    resp = http.post(f"{url}/infill", json=body)
                    ok = resp.status_code == 200 and "content" in resp.json()
                    why = None if ok else f"{resp.status_code} {resp.text[:100]}"
                except httpx.HTTPError as err:
                    why = f"{type(err).__name__}: {err}"
                with lock:
                    latencies.append(time.perf_counter() - start)
                    answered[(c, r)] = answered.get((c, r), 0) + 1
                    if why:
                        errors.append(why)

    threads = [threading.Thread(target=editor, args=(c,)) for c in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    total = clients * requests
    return {
        "clients": clients,
        "requests": total,
        "answered_once": len(answered) == total and all(n == 1 for n in answered.values()),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "p50_ms": round(1000 * percentile(latencies, 0.5), 1),
        "p95_ms": round(1000 * percentile(latencies, 0.95), 1),
        "mean_ms": round(1000 * statistics.fmean(latencies), 1),
        "requests_per_s": round(total / wall, 3),
    }


def first_events(url: str, count: int, pool: list[dict[str, Any]], headers: dict[str, str]) -> dict[str, Any]:
    """`count` streamed multi-line /infill requests, one at a time: time to the first text event and to the end."""
    firsts, totals, early = [], [], 0
    with httpx.Client(timeout=300, headers=headers) as http:
        for i in range(count):
            start, first = time.perf_counter(), None
            with http.stream("POST", f"{url}/infill", json=streamed_body(pool[i % len(pool)])) as resp:
                events = 0
                for line in resp.iter_lines():
                    if line.startswith("data: ") and first is None and json.loads(line[6:]).get("content"):
                        first = time.perf_counter() - start
                    events += line.startswith("data: ")
            total = time.perf_counter() - start
            firsts.append(first if first is not None else total)
            totals.append(total)
            early += first is not None and events > 2  # text came in more than one piece before the end
    return {
        "streamed": count,
        "first_event_p50_ms": round(1000 * percentile(firsts, 0.5), 1),
        "first_event_p95_ms": round(1000 * percentile(firsts, 0.95), 1),
        "end_p50_ms": round(1000 * percentile(totals, 0.5), 1),
        "streamed_in_pieces": early,
    }


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Started:
    """How the started servers run: `dlmcode serve`'s flags and CPU threads."""

    decoder: str
    options: list[str]
    cache: str | None
    threads: int | None

    def start(self, batch: int, model: str | None = None) -> tuple[subprocess.Popen, str]:
        """One `dlmcode serve --batch batch [--model model]` on a free port, once it listens (its address line
        says so)."""
        port = free_port()
        cmd = [sys.executable, "-m", "dlmcode", "serve", "--port", str(port), "-d", self.decoder, "--batch", str(batch)]
        cmd += [x for o in self.options for x in ("-o", o)] + (["--model", model] if model else [])
        cmd += ["--cache", self.cache] if self.cache else []
        env = {**os.environ, "HF_HUB_OFFLINE": "1"} | ({"DLMCODE_THREADS": str(self.threads)} if self.threads else {})
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        said = []
        while not (said and said[-1].startswith("dlmcode: serving")):
            line = proc.stderr.readline()
            if not line:
                proc.wait()
                raise DlmcodeError(f"the server exited: {''.join(said).strip()}")
            said.append(line)
        return proc, f"http://127.0.0.1:{port}"


def command(
    clients: Annotated[str, typer.Option(help="concurrent clients per level, comma-separated")] = "1,2,4,8",
    requests: Annotated[int, typer.Option(help="requests per client per level")] = 20,
    batch: Annotated[str, typer.Option(help="the started servers' --batch, comma-separated (one server each)")] = "1,4",
    streamed: Annotated[int, typer.Option(help="streamed multi-line requests per server (0: none)")] = 10,
    url: Annotated[str | None, typer.Option(help="a running server; default: start one per --batch")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="DLMCODE_API_KEY")] = None,
    model: Annotated[
        list[str] | None,
        typer.Option(help="model folder (repeatable: one server per model and --batch, measured side by side)"),
    ] = None,
    decoder: Annotated[str, typer.Option("--decoder", "-d")] = "low-confidence",
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="key=value (repeatable)")] = None,
    threads: Annotated[int | None, typer.Option(help="the started servers' CPU threads (DLMCODE_THREADS)")] = None,
    cache: Annotated[str | None, typer.Option(help="the started servers' --cache (default: the server's own)")] = None,
    tasks: Annotated[int, typer.Option(help="heldout-single holes to draw from (the first M are sent)")] = 50,
    warmup: Annotated[int, typer.Option(help="untimed requests before the first level")] = 3,
) -> None:
    """Load test of `dlmcode serve`: N concurrent editors, M requests each, at several N."""
    options = option or []
    levels = [int(n) for n in clients.split(",") if n.strip()]
    batches = [int(n) for n in batch.split(",") if n.strip()]
    started = Started(decoder, options, cache, threads)
    models = model or [None]
    pool = bodies(tasks)
    servers: dict[str, tuple[subprocess.Popen | None, str]] = {}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    rows: list[dict[str, Any]] = []
    streams: list[dict[str, Any]] = []
    try:
        if url:
            servers["url"] = (None, url)
        for m in [] if url else models:
            for b in batches:
                servers[f"batch {b}" if len(models) == 1 else f"{m or 'built-in'} batch {b}"] = started.start(b, m)
        for _, address in servers.values():
            level(address, 1, warmup, pool, headers)
        for n in levels:
            for name, (proc, address) in servers.items():
                before = rss_mb(proc.pid if proc else None)
                row = {"server": name, **level(address, n, requests, pool, headers)}
                rows.append({**row, "rss_mb_before": before, "rss_mb_after": rss_mb(proc.pid if proc else None)})
                print(json.dumps(rows[-1]), file=sys.stderr)
        for name, (_, address) in servers.items() if streamed else ():
            streams.append({"server": name, **first_events(address, streamed, pool, headers)})
            print(json.dumps(streams[-1]), file=sys.stderr)
    finally:
        for proc, _ in servers.values():
            if proc is not None:
                proc.terminate()
                proc.wait(30)
    ok = all(r["answered_once"] and not r["errors"] for r in rows)
    result = {
        "decoder": decoder,
        "options": options,
        "prefix_lines": PREFIX_LINES,
        "ok": ok,
        "levels": rows,
        "streams": streams,
    }
    print(json.dumps(result))
    if not ok:
        raise typer.Exit(1)


def main(args: list[str] | None = None) -> None:
    one_command(command)(args)


if __name__ == "__main__":
    main()
