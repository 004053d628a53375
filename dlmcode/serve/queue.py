"""Requests from every client, decoded one at a time in arrival order (FIFO) on one thread.

One model, one decode at a time: on a CPU two decodes at once only share the cores, and on
a GPU the built-in model's canvas is far too small to gain from a second stream. The event
loop stays free (it parses, answers warm-ups and errors) while the worker thread decodes.
A request whose client has gone is cancelled: dropped if still waiting, stopped between two
steps if running; every other request is answered exactly once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .engine import Answer, Engine
from .request import Fill
from .steps import Cancelled

POLL = 0.05  # seconds between checks that a waiting client is still there


@dataclass
class Counters:
    answered: int = 0
    cancelled: int = 0
    failed: int = 0


class Queue:
    """FIFO decode queue over one worker thread."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dlmcode-decode")  # its work queue is FIFO
        self.waiting = 0  # requests queued or decoding
        self.counters = Counters()
        self.cancels: set[threading.Event] = set()  # one per request queued or decoding: `stop` sets them all

    async def answer(self, req: Fill, gone: Callable[[], Awaitable[bool]] | None = None) -> Answer:
        """Decode `req` in turn; Cancelled when `gone()` says the client left before its answer."""
        cancel = threading.Event()
        future = asyncio.get_running_loop().run_in_executor(self.pool, self.work, req, cancel)
        self.waiting += 1
        self.cancels.add(cancel)
        try:
            while True:
                done, _ = await asyncio.wait({future}, timeout=POLL)
                if done:
                    answer = future.result()
                    self.counters.answered += 1
                    return answer
                if gone is not None and await gone():
                    cancel.set()
        except (Cancelled, asyncio.CancelledError):
            cancel.set()  # the client left (or the server is stopping): stop the decode between steps
            self.counters.cancelled += 1
            raise
        except Exception:
            self.counters.failed += 1
            raise
        finally:
            self.waiting -= 1
            self.cancels.discard(cancel)

    def work(self, req: Fill, cancel: threading.Event) -> Answer:
        if cancel.is_set():  # the client left while this request waited: skip it
            raise Cancelled
        return self.engine.run(req, cancel)

    def stop(self) -> None:
        """The server is stopping: every request still queued is dropped, the one decoding ends after its step."""
        for cancel in list(self.cancels):
            cancel.set()

    def close(self) -> None:
        self.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)
