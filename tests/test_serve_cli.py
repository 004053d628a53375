"""The `dlmcode serve` command: bad options fail before the model loads, a busy port
is one line, Ctrl-C stops cleanly."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from dlmcode.cli.commands import app

from ports import free_port

runner = CliRunner()


def test_unknown_decoder_and_bad_port_are_usage_errors():
    r = runner.invoke(app, ["serve", "-d", "nope"])
    assert r.exit_code == 2 and r.output.strip().startswith("dlmcode: error: unknown decoder 'nope'")
    r = runner.invoke(app, ["serve", "-o", "tau=1"])
    assert r.exit_code == 2 and "has no setting 'tau'" in r.output
    r = runner.invoke(app, ["serve", "--port", "70000"])
    assert r.exit_code == 2 and "--port 70000" in r.output
    for size in ("0", "65"):
        r = runner.invoke(app, ["serve", "--batch", size])
        assert (
            r.exit_code == 2
            and r.output.strip() == f"dlmcode: error: --batch {size}: give 1 to 64 decodes sharing a forward"
        )


def test_a_busy_port_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = runner.invoke(app, ["serve", "--port", str(port)])
    assert r.exit_code == 1
    assert f"dlmcode: error: cannot listen on 127.0.0.1:{port}" in r.output


@contextlib.contextmanager
def serving(*options: str, env: dict | None = None) -> Iterator[tuple[subprocess.Popen, str]]:
    """`dlmcode serve` on a free port of 127.0.0.1, once /health answers; killed on the way out."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlmcode", "serve", "--port", str(port), *options],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield proc, url
    finally:
        proc.kill()
        proc.wait()


def stop(proc: subprocess.Popen, sig: int) -> tuple[str, str, float]:
    start = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    return out, err, time.monotonic() - start


SLOW = {
    "input_prefix": "def f(x):\n    return [x for x in range(10)]\n" * 40,
    "n_predict": 32,
    "n_cmpl": 4,
    "options": {"block": 1},
    "temperature": 1.0,
}  # 4 decodes of 32 calls without a cache: about 7 s here


def in_background(url: str, body: dict, headers: dict | None = None) -> threading.Thread:
    def post():
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(url, json=body, headers=headers, timeout=60)

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread


def test_serve_prints_its_address_serves_and_stops_on_ctrl_c_at_once():
    """Ctrl-C with decodes in flight: they are cancelled between steps (it took 5.9 s before, waiting for them)."""
    with serving("--cache", "none", env={"DLMCODE_API_KEY": "k"}) as (proc, url):
        assert httpx.post(f"{url}/infill", json={"input_prefix": "x = "}).status_code == 401  # key from the env
        in_background(f"{url}/infill", SLOW, headers={"Authorization": "Bearer k"})
        time.sleep(0.5)
        out, err, seconds = stop(proc, signal.SIGINT)
    assert proc.returncode == 130 and out == ""  # the CLI's exit code for Ctrl-C
    first, last = err.splitlines()[0], err.splitlines()[-1]
    assert last == "dlmcode: interrupted; the server stopped"
    assert first.startswith(f"dlmcode: serving dlmcode (low-confidence) at {url}")
    assert "Traceback" not in err
    assert seconds < 2.5, seconds  # 0.1-0.2 s measured after the change


def test_sigterm_stops_the_server_cleanly_with_one_line_and_exit_0():
    """A service manager's stop: one line and 0 (it was death by the signal, rc -15, with no word)."""
    with serving("--cache", "none") as (proc, url):
        in_background(f"{url}/infill", SLOW)
        time.sleep(0.5)
        out, err, seconds = stop(proc, signal.SIGTERM)
    assert proc.returncode == 0 and out == ""
    assert err.splitlines()[-1] == "dlmcode: stopped by SIGTERM; the server stopped"
    assert len(err.splitlines()) == 2 and "Traceback" not in err  # the address line, then this one
    assert seconds < 2.5, seconds


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the server's memory")
def test_health_answers_while_a_huge_request_is_in_flight():
    """7 MiB of prefix, under the 8 MiB cap: trimmed to what the context could hold before tokenizing.
    Before: 13 s, /health waited 7.5 s and the server kept 690 MB more; after: 0.35 s, 0.05 s, 42 MB."""
    line = "    value = compute(alpha, beta, gamma) + offset  # a comment\n"
    prefix = line * (7 * 1024 * 1024 // len(line))
    with serving() as (proc, url):
        before = rss_mb(proc.pid)
        answers: list = []
        thread = threading.Thread(
            target=lambda: answers.append(
                httpx.post(
                    f"{url}/infill", json={"input_prefix": prefix, "input_suffix": "\n", "n_predict": 8}, timeout=120
                )
            )
        )
        started = time.monotonic()
        thread.start()
        waits = []
        while thread.is_alive():
            asked = time.monotonic()
            assert httpx.get(f"{url}/health", timeout=30).status_code == 200
            waits.append(time.monotonic() - asked)
            time.sleep(0.05)
        seconds, grown = time.monotonic() - started, rss_mb(proc.pid) - before
    answer = answers[0].json()
    assert answers[0].status_code == 200 and answer["truncated"] is True
    assert answer["tokens_evaluated"] <= answer["generation_settings"]["n_ctx"]
    assert max(waits) < 1.5, waits
    assert seconds < 6, seconds
    assert grown < 250, grown


def test_serve_defaults_are_the_measured_ones(monkeypatch):
    """block=8 and the dual cache (docs/serve.md: as good as the prefix cache on both suites, twice as fast)."""
    import dlmcode.serve as server

    seen = {}
    monkeypatch.setattr(server, "run", lambda engine, host, port, key: seen.update(engine=engine, host=host, key=key))
    r = runner.invoke(app, ["serve", "--port", "8099"])
    assert r.exit_code == 0, r.output
    engine = seen["engine"]
    assert (seen["host"], seen["key"]) == ("127.0.0.1", None)
    assert (engine.cache, engine.options) == ("dual", {"block": "8"})
    assert engine.batch == 4  # docs/serve.md: the best median at 2 to 4 clients, half the memory of 8
