"""dlmcode serve against the third round of hostile requests (issue 27): refused before the decode
where it can be (a 4xx in the protocol's own shape), a client that leaves mid-body is no logged
failure, and the time to read a body and the bytes of bodies held at once are bounded."""

from __future__ import annotations

import json
import logging
import socket
import threading
from urllib.parse import urlparse

import pytest
from starlette.testclient import TestClient

from dlmcode.serve import body
from dlmcode.serve.app import make_app
from dlmcode.serve.engine import Engine

from serve_tiny import serving, tiny_dlm

PREFIX, SUFFIX, SCRIPT = "x = ", "\n", "41 + 1"
DEEP = "y = " + "-" * 8000 + "1\n"  # past CPython's compiler: too deeply nested to check


@pytest.fixture
def served():
    dlm, script = tiny_dlm(PREFIX, SCRIPT)
    return TestClient(make_app(Engine(dlm, lang="python"))), script


def message(path: str, r) -> str:
    data = r.json()
    return data["error"] if path.startswith("/api/") else data["error"]["message"]


BODIES = {
    "/infill": {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 8},
    "/v1/completions": {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 8, "n": 4},
    "/api/generate": {"prompt": PREFIX, "suffix": SUFFIX, "stream": False},
}


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"lang": "klingon"}, "lang: unknown language 'klingon'; supported: python"),
        ({"temperature": 1e308}, "temperature 1e+308 must be at most 1000"),
    ],
)
def test_refused_before_the_decode_in_each_protocols_shape(served, path, extra, says):
    c, script = served
    if path == "/api/generate" and "temperature" in extra:
        extra = {"options": extra}  # Ollama's sampler fields are its options
    r = c.post(path, json=BODIES[path] | extra)
    assert r.status_code == 400, r.text
    assert says in message(path, r)
    assert script.calls == 0  # no model call: refused before the decode
    ok = c.post(path, json=BODIES[path])
    assert ok.status_code == 200 and script.calls > 0


@pytest.mark.parametrize("path", list(BODIES))
def test_code_too_deep_to_check_is_a_400_not_a_logged_500(served, path, caplog):
    c, script = served
    fields = {"input_prefix": DEEP + PREFIX} if path == "/infill" else {"prompt": DEEP + PREFIX}
    with caplog.at_level(logging.ERROR, logger="dlmcode.serve"):
        r = c.post(path, json=BODIES[path] | fields)
    assert r.status_code == 400, r.text
    assert message(path, r) == "the code is too deeply nested to check (Python's compiler gives up)"
    assert not caplog.records
    assert script.calls == 0  # refused before the decode


def test_a_stream_of_code_too_deep_ends_with_the_reason_and_logs_no_traceback(served, caplog):
    c, _ = served
    with caplog.at_level(logging.ERROR, logger="dlmcode.serve"):
        r = c.post("/infill", json=BODIES["/infill"] | {"input_prefix": DEEP + PREFIX, "stream": True})
    assert "too deeply nested to check" in r.text and "internal error" not in r.text
    assert not caplog.records


class Finished:
    """An ASGI wrapper that says when the app is done with a request (its logging included)."""

    def __init__(self, app) -> None:
        self.app, self.done = app, threading.Event()

    async def __call__(self, scope, receive, send):
        try:
            await self.app(scope, receive, send)
        finally:
            if scope["type"] == "http":
                self.done.set()


def connect(base: str) -> socket.socket:
    url = urlparse(base)
    sock = socket.create_connection((url.hostname, url.port), timeout=60)
    return sock


def response(sock: socket.socket) -> str:
    """The server's whole answer on `sock` (headers and a Content-Length body), read as it comes."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    top, rest = data.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":")[1]) for line in top.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        rest += sock.recv(4096)
    sock.close()
    return (top + b"\r\n\r\n" + rest).decode()


def head(length: int) -> bytes:
    return (
        f"POST /infill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_a_client_gone_mid_body_logs_no_traceback(caplog):
    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    app = Finished(make_app(Engine(dlm, lang="python")))
    with caplog.at_level(logging.ERROR), serving(app) as base:
        sock = connect(base)
        sock.sendall(head(1000) + b'{"input_prefix": "x = ')
        sock.close()  # gone, 980 bytes short
        assert app.done.wait(30)
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()], caplog.text


def test_a_body_that_never_ends_is_answered_408(monkeypatch):
    """A client that sends part of its body and waits: answered when BODY_SECONDS (here 0.2 s) are up."""
    monkeypatch.setattr(body, "BODY_SECONDS", 0.2)
    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    with serving(make_app(Engine(dlm, lang="python"))) as base:
        sock = connect(base)
        sock.sendall(head(1000) + b'{"input_prefix": "x = ')
        answer = response(sock)  # blocks until the server answers: no sleep
    assert answer.startswith("HTTP/1.1 408 "), answer
    assert '"message":"the body took more than 0.2 s to arrive"' in answer


class Watched(body.InFlight):
    """IN_FLIGHT with an event each time the bytes held change, so the test waits on events, not time."""

    def __init__(self, cap: int) -> None:
        super().__init__(cap)
        self.changed = threading.Event()

    def take(self, size: int) -> None:
        super().take(size)
        self.changed.set()

    def give(self, size: int) -> None:
        super().give(size)
        self.changed.set()

    def until(self, ok) -> None:
        """Wait, event by event, until `ok(bytes held)`."""
        while not ok(self.held):
            assert self.changed.wait(30), self.held
            self.changed.clear()


def test_bytes_of_bodies_held_at_once_are_bounded(monkeypatch):
    """Cap 100 bytes: a body of 60 held half-sent leaves room for 40; one more of 60 is a 503, and
    once the first is gone a body of 60 is served."""
    watched = Watched(100)
    monkeypatch.setattr(body, "IN_FLIGHT", watched)
    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    app = make_app(Engine(dlm, lang="python"))
    good = b'{"input_prefix": "x = ", "input_suffix": "\\n", "n_predict": 8}'
    with serving(app) as base:
        holding = connect(base)
        holding.sendall(head(1000) + good[:60])
        watched.until(lambda held: held == 60)
        other = connect(base)
        other.sendall(head(len(good)) + good)
        answer = response(other)
        assert answer.startswith("HTTP/1.1 503 "), answer
        assert "too many request bodies at once" in answer
        holding.close()
        watched.until(lambda held: held == 0)  # the half-sent body's bytes are given back
        served = connect(base)
        served.sendall(head(len(good)) + good)
        assert response(served).startswith("HTTP/1.1 200 ")


@pytest.mark.parametrize("stream", [False, True])
def test_llamacpp_echoes_the_n_predict_it_was_asked(served, stream):
    """generation_settings.n_predict is the request's, as llama.cpp answers (the hole count is dlmcode's own field)."""
    c, _ = served
    for asked, echoed in [({"n_predict": 8}, 8), ({}, -1)]:
        r = c.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "stream": stream} | asked)
        last = r.json() if not stream else json.loads(r.text.strip().split("\n\n")[-1].removeprefix("data: "))
        assert last["generation_settings"]["n_predict"] == echoed
