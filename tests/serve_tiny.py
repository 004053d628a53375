"""A scripted tiny dLLM for the server tests: it always fills the hole with a given text.

Char-level tokenizer (id = code point + 4, ASCII only). `predict` proposes, at the k-th
position after the prefix, the k-th character of `script` (then pad), with confidence
falling in k, so any confidence-ordered decoder commits left to right. `delay` seconds per
call make a slow model for time-limit, queue and cancellation tests. `serving` runs an app
on a real socket for the tests that need a real HTTP client.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import torch

from dlmcode.models.base import Dlm

PAD, MASK, BOS, EOS = 0, 1, 2, 3
VOCAB = 4 + 128


class CharTokenizer:
    def encode(self, text: str) -> list[int]:
        return [4 + min(ord(c), 127) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i - 4) for i in ids if i >= 4)


class Script:
    """predict for a canvas BOS + prefix + holes + suffix + EOS: the holes get `script`, then pads."""

    def __init__(self, prefix: str, script: str, delay: float = 0.0) -> None:
        self.start = 1 + len(
            prefix.rstrip(" \t")
        )  # first hole position (BOS at 0); the server leaves trailing spaces off
        self.ids = CharTokenizer().encode(script)
        self.delay = delay
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        with self.lock:
            self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        logits = torch.zeros(len(tokens), VOCAB)  # (L, V)
        for pos in range(len(tokens)):
            k = pos - self.start
            token = self.ids[k] if 0 <= k < len(self.ids) else PAD
            logits[pos, token] = 10.0 - 0.05 * max(k, 0)  # later positions less sure: committed later
        return logits


class Gated:
    """A predict that holds its call number `at` until `open` is set (`held` says it is holding):
    a test can act while a decode is known to be mid-way, without timing anything."""

    def __init__(self, script: Script, at: int) -> None:
        self.script, self.at = script, at
        self.open, self.held = threading.Event(), threading.Event()

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.script.calls + 1 == self.at:
            self.held.set()
            self.open.wait(30)  # a safety net only: a test that never opens it fails on its own assertions
        return self.script(tokens)


def when_queued(queue) -> asyncio.Event:
    """An event set when the next request is queued: Queue.answer queues it (Queue.put) on the loop, before its
    first wait. Made inside the running loop, after the requests that are not to count."""
    event, put = asyncio.Event(), queue.put

    def put_then_say(entry) -> None:
        put(entry)
        event.set()

    queue.put = put_then_say
    return event


def tiny_dlm(prefix: str, script: str, delay: float = 0.0, context: int = 256) -> tuple[Dlm, Script]:
    predict = Script(prefix, script, delay)
    return char_dlm(predict, context), predict


def char_dlm(predict, context: int = 256, family: str = "tiny") -> Dlm:
    """A Dlm over the char tokenizer whose model is `predict`."""
    return Dlm(
        name="tiny",
        family=family,
        tokenizer=CharTokenizer(),
        mask_id=MASK,
        eos_id=EOS,
        pad_id=PAD,
        context=context,
        predict=predict,
        device=torch.device("cpu"),
        dtype=torch.float32,
        special_ids=frozenset({PAD, MASK, BOS, EOS}),
        bos_id=BOS,
    )


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """uvicorn serving `app` on a free port of 127.0.0.1, in a thread: the base URL.

    The socket listens before the server starts, so a client may connect at once (it waits in the backlog).
    """
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
