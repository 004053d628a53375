"""The `dlmcode serve` command: bad options fail before the model loads, a busy port
is one line, Ctrl-C stops cleanly."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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


def test_the_socket_listens_before_the_address_line_is_printed():
    """`started` below connects as soon as the address line is out: the socket the line stands for already listens,
    so a connection waits in its backlog. It was only bound until uvicorn's startup called listen(), and a client
    that came first was refused (a test failed so once under load)."""
    from dlmcode import serve

    sock = serve.listen("127.0.0.1", free_port())
    try:
        with socket.create_connection(sock.getsockname()[:2], timeout=5):
            pass  # before: ConnectionRefusedError
    finally:
        sock.close()


def started(proc: subprocess.Popen) -> str:
    """The server's stderr up to its address line, which it prints once its socket listens: from
    then on a connection waits in the backlog, so nothing needs to poll /health."""
    lines = []
    while not (lines and lines[-1].startswith("dlmcode: serving")):
        line = proc.stderr.readline()
        if not line:
            raise AssertionError(f"the server ended before listening: {''.join(lines)}")
        lines.append(line)
    return "".join(lines)


@contextlib.contextmanager
def serving(*options: str, env: dict | None = None) -> Iterator[tuple[subprocess.Popen, str, str]]:
    """`dlmcode serve` on a free port of 127.0.0.1, once it listens: (process, URL, stderr so far);
    killed on the way out."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlmcode", "serve", "--port", str(port), *options],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc, f"http://127.0.0.1:{port}", started(proc)
    finally:
        proc.kill()
        proc.wait()


@dataclass
class Held:
    """A server process over the scripted model (tests/gated_serve.py) with a decode held in a call."""

    proc: subprocess.Popen
    url: str
    head: str  # its stderr up to the address line
    events: int  # it says `held` and `stopping` here
    go: int  # a byte here lets the held call go on

    def said(self) -> str:
        """The server's next word (one line; it may say `stopping` again as it shuts down)."""
        word = b""
        while not word.endswith(b"\n"):
            assert select.select([self.events], [], [], 60)[0], "the server said nothing"  # a safety net only
            byte = os.read(self.events, 1)
            assert byte, f"the server ended after {word!r}"
            word += byte
        return word.decode().strip()

    def stop(self, sig: int) -> tuple[str, str]:
        """Send `sig` while the decode is held; let the call go on once the server has stopped its queue."""
        assert self.said() == "held"
        self.proc.send_signal(sig)
        assert self.said() == "stopping"
        os.write(self.go, b"x")
        out, err = self.proc.communicate(timeout=60)
        return out, self.head + err


@contextlib.contextmanager
def held_serving(*options: str, env: dict | None = None) -> Iterator[Held]:
    port = free_port()
    events_r, events_w = os.pipe()
    go_r, go_w = os.pipe()
    script = Path(__file__).with_name("gated_serve.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(events_w), str(go_r), "--port", str(port), "--cache", "none", *options],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        pass_fds=(events_w, go_r),
    )
    os.close(events_w)
    os.close(go_r)
    try:
        yield Held(proc, f"http://127.0.0.1:{port}", started(proc), events_r, go_w)
    finally:
        proc.kill()
        proc.wait()
        os.close(events_r)
        os.close(go_w)


SLOW = {"input_prefix": "x = ", "input_suffix": "\n", "n_predict": 32, "options": {"block": 1}}


def in_background(url: str, body: dict, headers: dict | None = None) -> tuple[threading.Thread, list]:
    """POST `body` from a thread: (the thread, the list that gets its answer, if one comes)."""
    answers: list = []

    def post():
        with contextlib.suppress(httpx.HTTPError):
            answers.append(httpx.post(url, json=body, headers=headers, timeout=60))

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread, answers


def test_serve_prints_its_address_serves_and_stops_on_ctrl_c_at_once():
    """Ctrl-C with a decode in flight: it is cancelled between steps (before, the server waited for it:
    5.9 s), so its client gets no answer even though the decode could end at once when let go."""
    with held_serving(env={"DLMCODE_API_KEY": "k"}) as held:
        assert httpx.post(f"{held.url}/infill", json={"input_prefix": "x = "}).status_code == 401  # key from the env
        thread, answers = in_background(f"{held.url}/infill", SLOW, headers={"Authorization": "Bearer k"})
        out, err = held.stop(signal.SIGINT)
    thread.join(60)
    assert held.proc.returncode == 130 and out == ""  # the CLI's exit code for Ctrl-C
    assert answers == [] or answers[0].status_code != 200
    first, last = err.splitlines()[0], err.splitlines()[-1]
    assert last == "dlmcode: interrupted; the server stopped"
    assert first.startswith(f"dlmcode: serving dlmcode (low-confidence) at {held.url}")
    assert "Traceback" not in err


def test_sigterm_stops_the_server_cleanly_with_one_line_and_exit_0():
    """A service manager's stop: one line and 0 (it was death by the signal, rc -15, with no word)."""
    with held_serving() as held:
        thread, answers = in_background(f"{held.url}/infill", SLOW)
        out, err = held.stop(signal.SIGTERM)
    thread.join(60)
    assert held.proc.returncode == 0 and out == ""
    assert answers == [] or answers[0].status_code != 200
    assert err.splitlines()[-1] == "dlmcode: stopped by SIGTERM; the server stopped"
    assert len(err.splitlines()) == 2 and "Traceback" not in err  # the address line, then this one


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the server's memory")
def test_a_huge_request_is_trimmed_before_it_is_tokenized():
    """7 MiB of prefix, under the 8 MiB cap: trimmed to what the context could hold before tokenizing.
    Before: the server kept 690 MB more (and took 13 s, /health waiting 7.5 s); after: 42 MB."""
    line = "    value = compute(alpha, beta, gamma) + offset  # a comment\n"
    prefix = line * (7 * 1024 * 1024 // len(line))
    with serving() as (proc, url, _):
        before = rss_mb(proc.pid)
        answer = httpx.post(
            f"{url}/infill", json={"input_prefix": prefix, "input_suffix": "\n", "n_predict": 8}, timeout=120
        )
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
        grown = rss_mb(proc.pid) - before
    assert answer.status_code == 200 and answer.json()["truncated"] is True
    assert answer.json()["tokens_evaluated"] <= answer.json()["generation_settings"]["n_ctx"]
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
