"""The server's batch (serve/queue.py over batch.Batcher): several decodes share each forward,
first come first served, each answered once, a cancelled one leaving the others undisturbed,
and the same tokens as one at a time. Synchronised on events and call counts, never on time.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading

import pytest
from starlette.testclient import TestClient

from dlmcode.core.errors import UsageError
from dlmcode.models import load
from dlmcode.serve.app import make_app
from dlmcode.serve.engine import Engine
from dlmcode.serve.queue import Queue
from dlmcode.serve.request import BadRequest, Fill
from dlmcode.serve.steps import ClientGone

from serve_tiny import Gated, tiny_dlm, when_queued

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\n\nprint(add(1, 2))\n"
SCRIPT = "return a + b"


def recording(engine: Engine) -> list[int]:
    """Wrap engine.run so that the seeds of the decodes, in the order they start, are kept."""
    started, lock, run = [], threading.Lock(), engine.run

    def run_recorded(req, *args):
        with lock:
            started.append(req.seed)
        return run(req, *args)

    engine.run = run_recorded
    return started


async def arrive(queue: Queue, reqs: list[Fill], gone=None) -> list:
    # arrival order = creation order: the loop starts tasks in the order they are made (call_soon is FIFO), and
    # each queues its request before its first wait
    tasks = [asyncio.create_task(queue.answer(req, gone)) for req in reqs]
    return await asyncio.gather(*tasks, return_exceptions=True)


def test_an_idle_queue_keeps_no_thread_and_the_next_request_starts_one():
    """The scheduler thread ends once nothing runs or waits (an app dropped without its shutdown
    left it waiting for ever: 62 of them in one test run, beside the training test that forks)."""
    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    queue = Queue(Engine(dlm, batch=2))
    others = set(threading.enumerate())
    for seeds in ([0], [1, 2, 3]):
        answers = asyncio.run(arrive(queue, [Fill(PREFIX, SUFFIX, ceiling=16, seed=i) for i in seeds]))
        assert [a.text for a in answers] == [SCRIPT] * len(seeds)
        ours = [t for t in threading.enumerate() if t.name == "dlmcode-schedule" and t not in others]
        for thread in ours:  # at most the one that answered, on its way out
            thread.join(10)
            assert not thread.is_alive()
        assert queue.thread is None
    assert queue.counters.answered == 4


def test_waiting_requests_share_forwards_in_arrival_order_and_are_answered_once():
    dlm, predict = tiny_dlm(PREFIX, SCRIPT)
    engine = Engine(dlm, batch=4)
    started = recording(engine)
    queue = Queue(engine)
    answers = asyncio.run(arrive(queue, [Fill(PREFIX, SUFFIX, ceiling=16, seed=i) for i in range(6)]))
    assert [a.text for a in answers] == [SCRIPT] * 6
    assert started == list(range(6))  # FIFO: none started before an earlier one
    c = queue.counters
    assert c.answered == 6 and c.cancelled == 0 and c.failed == 0 and queue.waiting == 0
    assert (
        c.rows == predict.calls == 6 * (1 + len(SCRIPT))
    )  # every call (the length probe, then the decode's) went through a shared forward
    assert c.forwards < c.rows  # ... and they were shared: fewer forwards than calls
    assert c.rows <= 4 * c.forwards  # never more than --batch in one


def test_a_request_never_waits_behind_a_later_one():
    # batch 2, six requests: each starts when a place frees, oldest first
    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    engine = Engine(dlm, batch=2)
    started = recording(engine)
    queue = Queue(engine)
    answers = asyncio.run(arrive(queue, [Fill(PREFIX, SUFFIX, ceiling=16 + 4 * i, seed=i) for i in range(6)]))
    assert started == list(range(6)) and [a.text for a in answers] == [SCRIPT] * 6
    assert queue.counters.rows <= 2 * queue.counters.forwards


def test_a_cancelled_request_leaves_the_batch_and_the_others_are_undisturbed():
    dlm, script = tiny_dlm(PREFIX, SCRIPT)
    dlm.predict = gated = Gated(
        script, at=6
    )  # holds the forward of the first decode's 3rd call (two decodes a forward)
    queue = Queue(Engine(dlm, batch=4))
    alone = Engine(tiny_dlm(PREFIX, SCRIPT)[0]).run(Fill(PREFIX, SUFFIX, ceiling=16, seed=1))
    asked: list[bool] = []

    async def gone() -> bool:
        """The client leaves while its decode is held mid-way; the forward goes on once the leave is noted."""
        if asked:
            gated.open.set()
        if gated.held.is_set():
            asked.append(True)
        return bool(asked)

    async def main():
        first = asyncio.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16), gone))
        second = asyncio.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16, seed=1)))
        with pytest.raises(ClientGone):
            await first
        return await second

    answer = asyncio.run(main())
    assert (answer.text, answer.calls) == (alone.text, alone.calls)
    assert queue.counters.cancelled == 1 and queue.counters.answered == 1
    assert script.calls < 2 * len(SCRIPT)  # the first stopped early
    assert queue.counters.forwards > 0 and queue.counters.rows > queue.counters.forwards  # they did share forwards


def test_an_error_in_one_decode_reaches_only_its_request():
    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    engine = Engine(dlm, batch=4)
    run = engine.run

    def failing(req, *args):
        if req.seed == 1:
            raise BadRequest("this one is refused")
        return run(req, *args)

    engine.run = failing
    queue = Queue(engine)
    answers = asyncio.run(arrive(queue, [Fill(PREFIX, SUFFIX, ceiling=16, seed=i) for i in range(3)]))
    assert isinstance(answers[1], BadRequest)
    assert [answers[0].text, answers[2].text] == [SCRIPT, SCRIPT]
    assert queue.counters.failed == 1 and queue.counters.answered == 2


def test_an_answer_handed_over_as_the_loop_stops_is_never_logged_as_unread(caplog):
    """A decode that fails after its client left, in the last turn of its event loop (a TestClient's
    loop ends with each request, a server's at shutdown): its error is nobody's to read, and is not
    logged by asyncio as "Future exception was never retrieved" (CI's flaky test_serve_round3)."""
    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    engine = Engine(dlm, batch=1)
    started, go = threading.Event(), threading.Event()

    def failing(req, *args):
        started.set()
        go.wait(30)
        raise BadRequest("this one is refused")

    engine.run = failing
    queue = Queue(engine)
    loop = asyncio.new_event_loop()
    with caplog.at_level(logging.ERROR):
        task = loop.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16)))
        assert loop.run_until_complete(loop.run_in_executor(None, started.wait, 30))  # decoding, held in `failing`
        scheduler = queue.thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            loop.run_until_complete(task)
        go.set()
        scheduler.join(30)  # the scheduler hands the error over, then ends
        assert not scheduler.is_alive() and queue.thread is None and queue.counters.cancelled == 1
        loop.call_soon(loop.stop)  # one turn: what the hand-over scheduled runs, nothing it schedules in turn
        loop.run_forever()
        loop.close()
        del task
        gc.collect()
    assert not [r.getMessage() for r in caplog.records]


def test_a_waiting_request_whose_client_left_never_runs():
    dlm, script = tiny_dlm(PREFIX, SCRIPT)
    dlm.predict = gated = Gated(script, at=2)  # the first decode is held while the second waits its turn
    engine = Engine(dlm, batch=1)
    started = recording(engine)
    queue = Queue(engine)
    asked: list[bool] = []

    async def left() -> bool:
        """The second client has gone; once that is noted, the first decode goes on."""
        if asked:
            gated.open.set()
        asked.append(True)
        return True

    async def main():
        first = asyncio.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16)))
        second = asyncio.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16, seed=1), left))
        answer = await first
        with pytest.raises(ClientGone):
            await second
        return answer

    assert asyncio.run(main()).text == SCRIPT
    assert started == [0] and script.calls == 1 + len(
        SCRIPT
    )  # only the first decode called the model (its probe, then a call a token)


def test_batch_sizes_out_of_range_are_refused():
    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    for size in (0, -1, 65):
        with pytest.raises(UsageError, match="--batch"):
            Engine(dlm, batch=size)


def test_llama_vscode_n_cmpl_completions_share_forwards():
    from editors import llama_vscode_body

    answers = {}
    for size in (1, 4):
        app = make_app(Engine(tiny_dlm(PREFIX, SCRIPT)[0], lang="python", batch=size))
        answers[size] = TestClient(app).post("/infill", json=llama_vscode_body(PREFIX, SUFFIX)).json()
    got = answers[4]
    assert [g["content"] for g in got] == [g["content"] for g in answers[1]] and [g["index"] for g in got] == [0, 1, 2]
    c = app.state.server.queue.counters
    assert c.answered == 3 and c.forwards < c.rows


@pytest.mark.parametrize("n", [0, -1, 5, 10**9])
def test_n_is_bounded(n):
    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    c = TestClient(make_app(Engine(dlm, batch=4)))
    r = c.post("/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "n": n})
    assert r.status_code == 400 and "n " in r.json()["error"]["message"]
    r = c.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_cmpl": n})
    assert r.status_code == 400 and "n_cmpl" in r.json()["error"]["message"]


# ---------------------------------------------------------------- the built-in model: batched == one at a time


@pytest.fixture(scope="module")
def builtin():
    return load()


CODE = "import os\n\n\ndef read_lines(path):\n    with open(path) as f:\n        "
AFTER = "\n\n\ndef main():\n    print(read_lines('x'))\n"


@pytest.mark.parametrize("cache", ["dual", "none"])
def test_n_completions_batched_equal_sequential(builtin, cache):
    # sampled (temperature 1), so each of the n completions depends on its own seed
    body = {"prompt": CODE, "suffix": AFTER, "max_tokens": 24, "n": 4, "temperature": 1.0, "seed": 7, "lines": 0}
    answers = {}
    for size in (1, 4):
        engine = Engine(builtin, options={"block": "8"}, cache=cache, lang="python", batch=size)
        app = make_app(engine)
        got = TestClient(app).post("/v1/completions", json=body).json()
        answers[size] = [(ch["text"], x["calls"]) for ch, x in zip(got["choices"], got["dlmcode"], strict=True)]
        if size == 4:
            c = app.state.server.queue.counters
            assert c.forwards < c.rows  # the four shared forwards
    assert answers[4] == answers[1]
    assert len({text for text, _ in answers[1]}) > 1  # the seeds differ, so do the completions


def test_concurrent_requests_batched_equal_one_at_a_time(builtin):
    reqs = [Fill(CODE, AFTER, ceiling=24, seed=s, temperature=1.0, lines=0) for s in range(5)]
    alone = [Engine(builtin, options={"block": "8"}, cache="dual", lang="python").run(r) for r in reqs]
    queue = Queue(Engine(builtin, options={"block": "8"}, cache="dual", lang="python", batch=3))
    together = asyncio.run(arrive(queue, reqs))
    assert [(a.text, a.calls) for a in together] == [(a.text, a.calls) for a in alone]
    assert queue.counters.answered == 5 and queue.counters.forwards < queue.counters.rows


def test_a_failing_shared_forward_fails_its_decodes_and_the_queue_goes_on():
    dlm, script = tiny_dlm(PREFIX, SCRIPT)
    gated = Gated(script, at=2)  # the first decode waits at its 2nd call until the second has come
    calls = {"n": 0}

    def failing(tokens):
        calls["n"] += 1
        if calls["n"] == 3:  # a forward shared by both decodes
            raise RuntimeError("out of memory (a stand-in)")
        return gated(tokens)

    dlm.predict = failing
    queue = Queue(Engine(dlm, batch=4))

    async def main():
        first = asyncio.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16)))
        assert await asyncio.to_thread(gated.held.wait, 30)
        queued = when_queued(queue)
        second = asyncio.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16, seed=1)))
        await queued.wait()  # the second is queued (it joins at the first decode's next call)
        assert len(queue.pending) == 1
        gated.open.set()
        results = await asyncio.gather(first, second, return_exceptions=True)
        return results, await queue.answer(Fill(PREFIX, SUFFIX, ceiling=16, seed=2))

    (first, second), later = asyncio.run(main())
    # the first decode's 3rd call was a forward of its own (the second joins at the next one): it gets the error
    assert isinstance(first, RuntimeError) and "out of memory" in str(first)
    assert second.text == later.text == SCRIPT  # the others, and the next request, are served
    assert queue.counters.failed == 1 and queue.counters.answered == 2
