"""Streams that stream: the fill's text leaves as the decode settles it, and joined it is the unstreamed answer.

A scripted tiny model commits left to right, one character a call (serve_tiny), so a line is
settled as soon as its line break is committed. Nothing here measures time: the first event
is shown to come before the decode ends by counting model calls, or by a model that waits on
an Event the test sets once the first event has arrived.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from starlette.testclient import TestClient

from dlmcode.serve.app import make_app
from dlmcode.serve.engine import Engine
from dlmcode.serve.request import Fill
from dlmcode.serve.stream import sse

from editors import llama_vim_body, ollama_body
from serve_tiny import Gated, serving, tiny_dlm

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\n\nprint(add(1, 2))\n"
LINES = "x = a + b\n    y = x * 2\n    return y"  # three lines, all of them parse in place
SETTLED = 1 + len("x = a + b\n")  # the call after which the first line is settled: the length probe, then 10 commits


def serve(script: str = LINES, **engine) -> tuple[TestClient, object]:
    dlm, predict = tiny_dlm(PREFIX, script)
    return TestClient(make_app(Engine(dlm, lang="python", lines=0, **engine))), predict


def sse_events(text: str) -> list[dict]:
    return [json.loads(e[len("data: ") :]) for e in text.split("\n\n") if e and e != "data: [DONE]"]


# ---------------------------------------------------------------- the engine


def test_pieces_leave_before_the_decode_ends_and_join_to_the_answer():
    dlm, predict = tiny_dlm(PREFIX, LINES)
    engine = Engine(dlm, lang="python", lines=0)
    pieces: list[tuple[int, str]] = []
    answer = engine.run(Fill(PREFIX, SUFFIX, ceiling=48), emit=lambda piece: pieces.append((predict.calls, piece)))
    assert [p for _, p in pieces] == ["x = a + b", "\n    y = x * 2"]  # whole lines, each once its line break is in
    assert pieces[0][0] == SETTLED and pieces[0][0] < answer.calls  # the first one after 10 of the decode's calls
    assert answer.text == LINES == engine.run(Fill(PREFIX, SUFFIX, ceiling=48)).text


def test_the_syntax_rule_still_cuts_what_was_not_sent():
    dlm, _ = tiny_dlm(PREFIX, "x = a + b\n    return (")  # the second line breaks the file
    engine = Engine(dlm, options={"guard": "false"}, lang="python", lines=0)  # guarded, nothing breaks to cut
    pieces: list[str] = []
    streamed = engine.run(Fill(PREFIX, SUFFIX, ceiling=48), emit=pieces.append)
    assert pieces == ["x = a + b"]
    assert streamed.text == "x = a + b" == engine.run(Fill(PREFIX, SUFFIX, ceiling=48)).text
    assert streamed.stop == "syntax"


def test_a_stop_string_across_a_line_break_is_never_sent_ahead():
    dlm, _ = tiny_dlm(PREFIX, LINES)
    engine = Engine(dlm, options={"guard": "false"}, lang="python", lines=0)  # guarded, "x = a + " would not do
    pieces: list[str] = []
    req = Fill(PREFIX, SUFFIX, ceiling=48, stop=("b\n    y",))
    streamed = engine.run(req, emit=pieces.append)
    assert streamed.text == "x = a + " == engine.run(req).text
    assert "".join(pieces) == "" or streamed.text.startswith("".join(pieces))


def test_the_line_rule_and_n_indent_hold_for_streams():
    dlm, _ = tiny_dlm(PREFIX, LINES)
    engine = Engine(dlm, lang="python", lines=0)
    for req in (Fill(PREFIX, SUFFIX, ceiling=48, lines=2), Fill(PREFIX, SUFFIX, ceiling=48, min_indent=8)):
        pieces: list[str] = []
        streamed = engine.run(req, emit=pieces.append)
        assert streamed.text == engine.run(req).text and streamed.text.startswith("".join(pieces))
    assert engine.run(Fill(PREFIX, SUFFIX, ceiling=48, lines=2)).text == "x = a + b\n    y = x * 2"


# ---------------------------------------------------------------- each protocol: streamed == unstreamed


def test_llama_cpp_infill_stream_joins_to_the_answer():
    c, _ = serve()
    body = {**llama_vim_body(PREFIX, "", SUFFIX), "n_indent": 0, "t_max_predict_ms": 0, "response_fields": None}
    whole = c.post("/infill", json=body).json()
    r = c.post("/infill", json={**body, "stream": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert [e["stop"] for e in events] == [False, False, False, True]  # two settled lines, the rest, the end
    assert "".join(e["content"] for e in events) == whole["content"] == LINES
    assert events[-1]["dlmcode"]["stop_reason"] == whole["dlmcode"]["stop_reason"]


def test_llama_cpp_completion_stream_joins_to_the_answer():
    c, _ = serve()
    body = {"prompt": f"<PRE> {PREFIX} <SUF>{SUFFIX} <MID>", "n_predict": 48}
    whole = c.post("/completion", json=body).json()["content"]
    events = sse_events(c.post("/completion", json={**body, "stream": True}).text)
    assert "".join(e["content"] for e in events) == whole == LINES and events[-1]["stop"] is True


def test_openai_stream_joins_each_choice_to_the_answer():
    c, _ = serve()
    body = {"model": "dlmcode", "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 48, "n": 2}
    whole = c.post("/v1/completions", json=body).json()
    r = c.post("/v1/completions", json={**body, "stream": True})
    assert r.text.endswith("data: [DONE]\n\n")
    chunks = sse_events(r.text)
    for i in range(2):
        mine = [ch["choices"][0] for ch in chunks if ch["choices"][0]["index"] == i]
        assert "".join(m["text"] for m in mine) == whole["choices"][i]["text"] == LINES
        assert [m["finish_reason"] for m in mine][-1] == whole["choices"][i]["finish_reason"]
        assert len([m for m in mine if m["text"]]) == 3  # streamed in pieces, not one
    assert len({ch["id"] for ch in chunks}) == 1


def test_ollama_stream_joins_to_the_answer():
    c, _ = serve()
    whole = c.post("/api/generate", json=ollama_body(PREFIX, SUFFIX, stream=False)).json()
    r = c.post("/api/generate", json=ollama_body(PREFIX, SUFFIX, stream=None))  # Ollama's default: stream
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [x["done"] for x in lines] == [False, False, False, True]
    assert "".join(x["response"] for x in lines) == whole["response"] == LINES


def test_a_refused_stream_is_still_a_4xx_in_the_protocols_shape():
    c, _ = serve()
    r = c.post("/v1/completions", json={"prompt": PREFIX, "stream": True, "decoder": "nope"})
    assert r.status_code == 400 and "unknown decoder" in r.json()["error"]["message"]
    r = c.post("/api/generate", json={"prompt": PREFIX, "options": {"num_predict": 9999}})
    assert r.status_code == 400 and "context" in r.json()["error"]


def test_one_sse_writer():
    assert sse({"a": "é"}) == 'data: {"a": "é"}\n\n'


# ---------------------------------------------------------------- on a real socket


@pytest.fixture
def live():
    """(base URL, app, gated model) of a uvicorn server on a free port, with the scripted model gated after line one."""
    dlm, script = tiny_dlm(PREFIX, LINES)
    dlm.predict = gated = Gated(script, SETTLED + 1)
    app = make_app(Engine(dlm, lang="python", lines=0, batch=2))
    with serving(app) as base:
        try:
            yield base, app, gated
        finally:
            gated.open.set()  # let a decode that waits on the gate end, so the server can stop


def test_the_first_event_arrives_while_the_decode_still_runs(live):
    base, _, gated = live
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 48, "stream": True}
    with httpx.stream("POST", f"{base}/infill", json=body, timeout=60) as r:
        lines = r.iter_lines()
        first = json.loads(next(line for line in lines if line)[len("data: ") :])
        calls_then = gated.script.calls
        gated.open.set()
        rest = [json.loads(line[len("data: ") :]) for line in lines if line]
    assert first["content"] == "x = a + b" and calls_then == SETTLED  # the decode is held at its next call
    assert rest[-1]["stop"] is True and rest[-1]["dlmcode"]["calls"] > calls_then
    assert first["content"] + "".join(e["content"] for e in rest) == LINES


def test_a_client_that_leaves_mid_stream_stops_its_decode(live):
    base, app, gated = live
    queue = app.state.server.queue
    cancelled = threading.Event()

    class Counted(type(queue.counters)):
        def __setattr__(self, name, value):
            super().__setattr__(name, value)
            if name == "cancelled" and value:
                cancelled.set()

    queue.counters = counters = Counted()  # the server's own count says when the decode has stopped
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 48, "stream": True}
    with httpx.stream("POST", f"{base}/infill", json=body, timeout=60) as r:
        next(line for line in r.iter_lines() if line)  # the first line arrived; now leave
    gated.open.set()
    assert cancelled.wait(20)  # a safety net only
    assert counters.cancelled == 1 and counters.answered == 0
    assert gated.script.calls < len(LINES)  # stopped before its end
    r = httpx.post(f"{base}/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 48}, timeout=60)
    assert r.json()["content"] == LINES


def test_many_streams_at_once_each_joined_once(live):
    base, app, gated = live
    gated.open.set()  # no holding here
    bodies = [
        ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 48, "stream": True}, "/infill"),
        ({"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 48, "stream": True, "n": 2}, "/v1/completions"),
        ({"prompt": PREFIX, "suffix": SUFFIX, "options": {"num_predict": 48}}, "/api/generate"),
    ] * 4
    joined: dict[int, list[str]] = {}
    lock = threading.Lock()

    def one(i: int, body: dict, path: str) -> None:
        with httpx.stream("POST", f"{base}{path}", json=body, timeout=60) as r:
            text = "".join(r.iter_text())
        if path == "/api/generate":
            parts = ["".join(json.loads(line)["response"] for line in text.splitlines())]
        elif path == "/infill":
            parts = ["".join(e["content"] for e in sse_events(text))]
        else:
            choices = [c for e in sse_events(text) for c in e["choices"]]
            parts = ["".join(c["text"] for c in choices if c["index"] == k) for k in range(2)]
        with lock:
            joined[i] = parts

    threads = [threading.Thread(target=one, args=(i, b, p)) for i, (b, p) in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(joined) == list(range(len(bodies)))
    assert all(part == LINES for parts in joined.values() for part in parts)
    counters = app.state.server.queue.counters
    assert counters.answered == 16 and counters.cancelled == 0 and counters.failed == 0  # 4 x (1 + 2 + 1) fills
