"""dlmcode serve on a real socket (uvicorn on 127.0.0.1, a free port) with the built-in model,
driven by the official `openai` client and by raw HTTP bodies as llama.vim and Ollama send them.

Each answer must equal what the library's own job gives for the same request (Engine.run).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading

import httpx
import pytest

from dlmcode.models import load
from dlmcode.serve.app import make_app
from dlmcode.serve.engine import Engine
from dlmcode.serve.request import Fill

from editors import llama_vim_body
from serve_tiny import serving, tiny_dlm

openai = pytest.importorskip("openai")

PREFIX = "import os\n\n\ndef read_lines(path):\n    with open(path) as f:\n        "
SUFFIX = "\n\n\ndef main():\n    print(read_lines('x'))\n"


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(load(), lang="python")


@pytest.fixture(scope="module")
def app(engine):
    return make_app(engine, api_key="k")


@pytest.fixture(scope="module")
def base(app):
    with serving(app) as url:
        yield url


def expected(engine: Engine, prefix: str, suffix: str, ceiling: int) -> str:
    return engine.run(Fill(prefix, suffix, ceiling=ceiling)).text


def test_openai_client_completion_with_suffix(base, engine):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
    got = client.completions.create(model="dlmcode", prompt=PREFIX, suffix=SUFFIX, max_tokens=24, temperature=0)
    assert got.choices[0].text == expected(engine, PREFIX, SUFFIX, 24)
    assert got.model_extra["dlmcode"]["decoder"] == "low-confidence"
    assert [m.id for m in client.models.list()] == ["dlmcode"]


def test_openai_client_streams(base, engine):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
    chunks = list(client.completions.create(model="dlmcode", prompt=PREFIX, suffix=SUFFIX, max_tokens=24, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == expected(engine, PREFIX, SUFFIX, 24)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_openai_client_gets_errors_it_understands(base):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.completions.create(model="dlmcode", prompt="x")
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="unknown decoder"):
        client.completions.create(model="dlmcode", prompt="x", extra_body={"decoder": "nope"})
    with pytest.raises(openai.BadRequestError, match="past the model's context"):
        client.completions.create(model="dlmcode", prompt="x", max_tokens=5000)


def test_llama_vim_request_over_http(base, engine):
    # llama.vim's FIM request body (editors.llama_vim_body) as a user's settings change it, sent with the key
    body = {
        **llama_vim_body(PREFIX, "", SUFFIX),
        "n_indent": 8,
        "t_max_predict_ms": 60000,
        "response_fields": ["content", "truncated"],
    }
    r = httpx.post(f"{base}/infill", json=body, headers={"Authorization": "Bearer k"}, timeout=60)
    want = engine.run(Fill(PREFIX, SUFFIX, ceiling=128, min_indent=8)).text
    assert r.json() == {"content": want, "truncated": False}


def test_ollama_stream_over_http(base, engine):
    body = {
        "model": "dlmcode",
        "prompt": PREFIX,
        "suffix": SUFFIX,
        "options": {"num_predict": 24},
    }  # stream: default true
    with httpx.stream(
        "POST", f"{base}/api/generate", json=body, headers={"Authorization": "Bearer k"}, timeout=60
    ) as r:
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert lines[-1]["done"] is True
    assert "".join(x["response"] for x in lines) == expected(engine, PREFIX, SUFFIX, 24)


def test_many_clients_at_once_each_answered_once(base, engine):
    want = expected(engine, PREFIX, SUFFIX, 16)
    results: list[str] = []
    lock = threading.Lock()

    def one():
        r = httpx.post(
            f"{base}/infill",
            json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 16},
            headers={"Authorization": "Bearer k"},
            timeout=120,
        )
        with lock:
            results.append(r.json()["content"])

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [want] * 6


class HeldUntilCancelled:
    """A stand-in predict whose first call waits until the server has cancelled the request (its client
    has gone), so the decode is surely still running when the client leaves; later calls answer at once."""

    def __init__(self, predict) -> None:
        self.predict = predict
        self.calls = 0
        self.started = threading.Event()  # the first call is running: the client may leave
        self.cancel: threading.Event | None = None  # the request's cancel event, as the queue hands it to the engine

    def __call__(self, tokens):
        self.calls += 1
        if self.calls == 1:
            self.started.set()
            assert self.cancel is not None and self.cancel.wait(60), "the server never cancelled the request"
        return self.predict(tokens)


def test_a_disconnected_client_is_cancelled():
    dlm, script = tiny_dlm("x = ", "41 + 1")
    held = HeldUntilCancelled(script)
    app = make_app(Engine(dataclasses.replace(dlm, predict=held)), api_key="k")
    queue = app.state.server.queue
    work = queue.work

    def work_and_see(req, cancel):
        held.cancel = cancel
        return work(req, cancel)

    queue.work = work_and_see
    slow = json.dumps({"input_prefix": "x = ", "input_suffix": "\n", "n_predict": 32}).encode()  # 32 holes: 32 calls
    with serving(app) as url:
        client = socket.create_connection((httpx.URL(url).host, httpx.URL(url).port))
        client.sendall(
            b"POST /infill HTTP/1.1\r\nHost: dlmcode\r\nAuthorization: Bearer k\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(slow), slow)
        )
        assert held.started.wait(60)
        client.close()  # the client goes while its decode waits in its first call
        r = httpx.post(
            f"{url}/infill",
            json={"input_prefix": "x = ", "input_suffix": "\n", "n_predict": 8},
            headers={"Authorization": "Bearer k"},
            timeout=60,
        )  # FIFO: answered after the first decode ended
    assert r.status_code == 200 and r.json()["content"] == "41 + 1"
    assert queue.counters.cancelled == 1 and queue.counters.failed == 0
    assert held.calls < 32  # the cancelled decode stopped after its first step
