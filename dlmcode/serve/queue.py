"""Requests from every client, decoded in arrival order (FIFO), up to `size` at once sharing each forward.

One scheduler thread (started by a request, ended once nothing runs or waits) admits waiting
requests, oldest first, while fewer than `size` decode, and runs them through batch.py's
machinery: each decode in its own worker thread, every model call of every running decode
joined into one batched forward (its own canvas, cache, decoder and seeded generator stay its
own, so tokens are those of a decode alone). A new request joins at the next forward, so none
waits behind a later one, and a decode that ends leaves its place to the next at once. With
`size` 1 (`--batch 1`) the engine's model is not routed and each decode runs alone, as before
batching existed.

The event loop stays free (it parses, answers warm-ups and errors) while decodes run.
A request whose client has gone is cancelled: dropped if still waiting, stopped at its next
model call or step if running, and the others in the batch go on; every other request is
answered exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..jobs.batch import Batcher, Slot, Stopped
from .engine import Answer, Emit, Engine
from .request import Fill
from .steps import ClientGone

POLL = 0.05  # seconds between checks that a waiting client is still there


@dataclass
class Counters:
    answered: int = 0
    cancelled: int = 0
    failed: int = 0
    forwards: int = 0  # batched forwards run (each serves every decode that asked)
    rows: int = 0  # decode calls those forwards served: rows / forwards is the mean batch


@dataclass
class Entry:
    """One request in the queue: what to decode, its cancel flag, where its text goes, its answer."""

    req: Fill
    cancel: threading.Event
    emit: Emit | None = None
    future: Future = field(default_factory=Future)


def woken(future: Future) -> asyncio.Future[None]:
    """An event-loop future that ends, with no value, once `future` (set in the scheduler's thread) has.
    The answer or error is read from `future` itself, which never logs one left unread: an
    asyncio.wrap_future copy would carry the error onto the loop, and log it as never retrieved
    when its client left first (or the loop ended before a callback reading it could run)."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ended.done():
            ended.set_result(None)

    def call(_: Future) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(wake)

    future.add_done_callback(call)
    return ended


class Solo(Slot):
    """A decode's Slot that calls the model itself while it is the only one (`alone`): the same
    batched forward with one row, without the hand-over to the scheduler thread and back (two
    thread wake-ups a call, measured at about a tenth of a lone decode's time on a busy CPU).
    A request that arrives meanwhile joins at this decode's next call, which goes through the batch."""

    def __init__(
        self,
        cond: threading.Condition,
        stopped: Callable[[], bool],
        alone: Callable[[], bool],
        counted: Callable[[int], None],
    ) -> None:
        super().__init__(cond, lambda: stopped() or self.failure is not None)
        self.alone, self.counted = alone, counted
        self.failure: Exception | None = None  # the shared forward this decode waited for failed (queue.forward)

    def submit(self, forward, tokens):
        with self.cond:
            if self.stopped() and self.failure is None:
                raise Stopped
            solo = self.alone()
            if solo:
                self.counted(1)
        if solo:
            return forward([tokens])[0]
        try:
            return super().submit(forward, tokens)
        except Stopped:
            if self.failure is not None:  # this decode fails with the forward's error, as it would alone
                raise self.failure from None
            raise


class Queue:
    """FIFO decode queue over one scheduler thread and up to `size` decode threads."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.size = engine.batch  # the engine's model is routed for batching exactly when this is above 1
        self.batcher = Batcher(self.size)
        self.cond = self.batcher.cond
        self.pending: deque[Entry] = deque()
        self.closed = False
        self.thread: threading.Thread | None = None
        self.running = 0  # decodes started and not ended (the scheduler's count, read under the lock)
        self.waiting = 0  # requests queued or decoding
        self.counters = Counters()
        self.cancels: set[threading.Event] = set()  # one per request queued or decoding: `stop` sets them all

    async def answer(
        self, req: Fill, gone: Callable[[], Awaitable[bool]] | None = None, emit: Emit | None = None
    ) -> Answer:
        """Decode `req` in turn; ClientGone when `gone()` says the client left before its answer.
        `emit` gets the fill's text as it becomes final (engine.run), in the decode's thread."""
        entry = Entry(req, threading.Event(), emit)
        ended = woken(entry.future)
        self.put(entry)
        self.waiting += 1
        self.cancels.add(entry.cancel)
        try:
            while True:
                await asyncio.wait({ended}, timeout=POLL)
                if ended.done():
                    answer = entry.future.result()
                    self.counters.answered += 1
                    return answer
                if gone is not None and await gone():
                    self.cancel(entry.cancel)
        except (ClientGone, asyncio.CancelledError):
            self.cancel(entry.cancel)  # the client left (or the server is stopping): stop the decode
            self.counters.cancelled += 1
            raise
        except Exception:
            self.counters.failed += 1
            raise
        finally:
            self.waiting -= 1
            self.cancels.discard(entry.cancel)

    def put(self, entry: Entry) -> None:
        with self.cond:
            if self.closed:
                entry.future.set_exception(ClientGone())
                return
            self.pending.append(entry)
            if self.thread is None:
                self.thread = threading.Thread(target=self.loop, name="dlmcode-schedule", daemon=True)
                self.thread.start()
            self.cond.notify_all()

    def cancel(self, flag: threading.Event) -> None:
        """Set a request's cancel flag and wake whoever waits on it (a decode blocked on a forward)."""
        flag.set()
        with self.cond:
            self.cond.notify_all()

    # ------------------------------------------------------------ the scheduler thread

    def loop(self) -> None:
        """Admit, wait until every running decode asks for a forward or ends, answer the ended ones, forward."""
        active: dict[int, Slot] = {}
        entries: dict[int, Entry] = {}
        numbers = itertools.count()
        while self.admit(active, entries, numbers):
            done, asking = self.batcher.settle(active)
            for i in done:
                self.finish(active.pop(i), entries.pop(i))
            with self.cond:
                self.running = len(active)
            if not done and asking:
                with self.cond:
                    self.counted(len(asking))
                self.forward(asking)

    def forward(self, asking: list[Slot]) -> None:
        """One shared forward; if it fails (a bug, memory), the decodes that asked fail with its
        error and are answered (a 500), and the scheduler goes on with the others."""
        try:
            self.batcher.forward(asking)
        except Exception as err:
            with self.cond:
                for slot in asking:
                    slot.failure = err  # type: ignore[attr-defined]
                self.cond.notify_all()

    def admit(self, active: dict[int, Slot], entries: dict[int, Entry], numbers: itertools.count) -> bool:
        """Start waiting requests, oldest first, until `size` decode. False when nothing runs (so
        nothing waits either): the scheduler thread ends, and the next request starts another, so
        an idle server, or an app dropped without its shutdown, keeps no thread."""
        with self.cond:
            while self.pending and (self.closed or len(active) < self.size):
                entry = self.pending.popleft()
                if entry.cancel.is_set() or self.closed:  # the client left while this request waited: skip it
                    entry.future.set_exception(ClientGone())
                    continue
                i = next(numbers)
                entries[i], active[i] = entry, self.start(entry)
            self.running = len(active)
            if not active:
                self.thread = None
            return bool(active)

    def start(self, entry: Entry) -> Slot:
        slot = Solo(self.cond, lambda: self.closed or entry.cancel.is_set(), self.alone, self.counted)
        work = functools.partial(self.work, entry.req, entry.cancel, *([entry.emit] if entry.emit else []))
        slot.thread = threading.Thread(target=self.batcher.work, args=(slot, work), name="dlmcode-decode", daemon=True)
        slot.thread.start()
        return slot

    def work(self, req: Fill, cancel: threading.Event, emit: Emit | None = None) -> Answer:
        """One decode, in its own thread."""
        if cancel.is_set():  # the client left as it was admitted
            raise ClientGone
        return self.engine.run(req, cancel, *([emit] if emit else []))

    def alone(self) -> bool:
        """Whether one decode runs and none waits (called under the lock): it may call the model itself."""
        return self.running == 1 and not self.pending

    def counted(self, rows: int) -> None:
        self.counters.forwards += 1
        self.counters.rows += rows

    def finish(self, slot: Slot, entry: Entry) -> None:
        """Hand a decode's answer, or its error, to its request: exactly once."""
        if slot.error is None:
            entry.future.set_result(slot.value)
        elif isinstance(slot.error, Exception) and not isinstance(slot.error, ClientGone):
            entry.future.set_exception(slot.error)
        else:  # batch.Stopped (stopped at a forward) or steps.ClientGone (between steps): the client left
            entry.future.set_exception(ClientGone())

    def stop(self) -> None:
        """The server is stopping: every request still queued is dropped, those decoding end at their next call."""
        for flag in list(self.cancels):
            self.cancel(flag)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.stop()
