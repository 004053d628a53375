"""The `dlmcode serve` command: bad options fail before the model loads, a busy port is one line, Ctrl-C stops cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
from typer.testing import CliRunner

from dlmcode.cli import app

runner = CliRunner()


def test_unknown_decoder_and_bad_port_are_usage_errors():
    r = runner.invoke(app, ["serve", "-d", "nope"])
    assert r.exit_code == 2 and r.output.strip().startswith("dlmcode: error: unknown decoder 'nope'")
    r = runner.invoke(app, ["serve", "-o", "tau=1"])
    assert r.exit_code == 2 and "has no setting 'tau'" in r.output
    r = runner.invoke(app, ["serve", "--port", "70000"])
    assert r.exit_code == 2 and "--port 70000" in r.output


def test_a_busy_port_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = runner.invoke(app, ["serve", "--port", str(port)])
    assert r.exit_code == 1
    assert f"dlmcode: error: cannot listen on 127.0.0.1:{port}" in r.output


def test_serve_prints_its_address_serves_and_stops_on_ctrl_c():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DLMCODE_API_KEY": "k"}
    proc = subprocess.Popen([sys.executable, "-m", "dlmcode", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert httpx.post(f"http://127.0.0.1:{port}/infill", json={"input_prefix": "x = "}).status_code == 401  # key from the env
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130 and out == ""  # the CLI's exit code for Ctrl-C
    first, last = err.splitlines()[0], err.splitlines()[-1]
    assert last == "dlmcode: interrupted; the server stopped"
    assert first.startswith(f"dlmcode: serving dlmcode (low-confidence) at http://127.0.0.1:{port}")
    assert "Traceback" not in err


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
