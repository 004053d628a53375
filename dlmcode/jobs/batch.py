"""Batching behind `predict`: several decodes share each model forward; decoders never know.

Each decode (a `jobs/job.Job`) runs in its own worker thread. Its model's predict is `Routed`:
inside a worker it hands its tokens to the `Batcher` and blocks; the Batcher waits until
every running decode has asked (or finished), runs ONE batched forward over all the requests
(`ForwardBatch`: right padding to the longest, a key-padding mask so padded positions are
never attended, rows cut back to each length) and hands each its own (L_i, V) logits. torch
releases the GIL inside a forward, and all workers are blocked while it runs. A KV-cached
predict (models/cache.py) keeps its own cache per decode; where the family batches cached
runs (`Dlm.run_rows`, the built-in model), its model runs are `RoutedRun` and join the same
forwards (full runs together, each row's block against its own cached keys together). The
server's queue (serve/queue.py) drives these pieces for requests that come and go.

Why the results do not depend on the batch size (the drift users report for Fast-dLLM,
docs/research/field.md D.2): only the forward is shared. Every decode keeps its own decoder, canvas
and seeded generator, so no choice, threshold or random number is ever taken over the batch
(LLaDA's batched generate draws the Gumbel noise of all rows at once from the global
generator, so a row's noise depends on its batch). The batched path always passes a mask,
at batch size 1 too, so it runs the same attention kernel at every size. What remains is
float rounding: padding changes how the kernels block their sums (measured on CPU: ~1e-7 in
float32, ~2e-3 in bf16; multi-threaded GEMMs vary with the row count too), so padded rows
equal unpadded ones only to rounding, and a token can differ only where two candidates tie
to that precision. Tests: rows within 1e-5, and the same tokens
and calls at batch sizes 1, 2 and 4 on a model whose holes' confidences differ by ~1e-4.

The batched forwards themselves are the models' (models/forward.py: `Dlm.forward_batch`, or one
predict call per request for a family without one); this module, above the models, runs the
jobs. Models never import it.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from torch import Tensor

from ..core.canvas import takes_rows
from ..core.errors import UsageError
from ..models.forward import ForwardBatch, one_by_one

if TYPE_CHECKING:
    from ..models.base import Dlm
    from ..models.blocks import Blocks
    from .fill import Job, Result

T = TypeVar("T")

_local = threading.local()  # .slot: the Slot of the decode this worker thread runs


class Stopped(BaseException):
    """Raised inside a decode's predict when the batched run stops (another decode failed, Ctrl-C).

    A BaseException, like KeyboardInterrupt, so that no `except Exception` in a decoder swallows it.
    """


class Routed:
    """A Predict that, inside a batched run's worker, joins the next batched forward (each request
    with the rows it reads: core/canvas.Predict)."""

    takes_rows = True

    def __init__(self, forward: ForwardBatch) -> None:
        self.forward = forward
        self.requests = self.run  # one bound method: the Batcher groups requests by the function they go to

    def __call__(self, tokens: Tensor, rows: Tensor | None = None) -> Tensor:
        slot = current()
        if slot is None:  # not in a batched run: a batch of one, the same computation as batch size 1
            return self.run([(tokens, rows)])[0]
        return slot.submit(self.requests, (tokens, rows))  # type: ignore[arg-type]

    def run(self, requests: list[tuple[Tensor, Tensor | None]]) -> list[Tensor]:
        """One batched forward over several decodes' (tokens, rows); a ForwardBatch that does not take
        rows computes every row and each request's are cut from it."""
        seqs, rows = [tokens for tokens, _ in requests], [rows for _, rows in requests]
        if takes_rows(self.forward):
            return self.forward(seqs, rows)
        out = self.forward(seqs)
        return [o if r is None else o[r.to(o.device)] for o, r in zip(out, rows, strict=True)]


class RoutedRun:
    """A KV-cached predict's model run (models/cache.py Runner) that, inside a batched run's
    worker, joins the next batched forward of cached runs (`Dlm.run_rows`): each decode keeps
    its own cache, only the forward is shared."""

    def __init__(self, run: Callable[..., Tensor], rows: Callable[[list], list[Tensor]]) -> None:
        self.run, self.rows = run, rows

    def __call__(self, ids: Tensor, start: int = 0, kv=None) -> Tensor:
        slot = current()
        if slot is None or kv is None:  # not in a batched run: the model itself
            return self.run(ids, start, kv)
        return slot.submit(self.rows, (ids[0], start, kv))  # type: ignore[arg-type]  # (1, n, V)


class RoutedSession:
    """A block family's session (models/blocks.PendingSession) whose block runs, inside a batched run's worker,
    join the next forward of the other decodes' blocks (`PendingSession.run_many`): each decode keeps its own
    exact cache, only the forward is shared. Everything else is the session's own."""

    def __init__(self, session: Any, together: Callable[[list], list[Tensor]]) -> None:
        self.session, self.together = session, together

    def __getattr__(self, name: str) -> Any:  # length, forwards, extend, truncate: the session's
        return getattr(self.session, name)

    def run(self, ids: Tensor) -> Tensor:
        slot = current()
        if slot is None:  # not in a batched run: the session itself
            return self.session.run(ids)
        return slot.submit(self.together, (self.session, ids))  # type: ignore[arg-type]


def routed_blocks(spec: Blocks) -> Blocks:
    """`spec` whose sessions are routed (RoutedSession) where the family runs several blocks in one forward."""
    probe = spec.open()
    if not getattr(probe, "pads", False):  # DiffusionGemma's session: one decode per forward
        return spec
    kind = type(probe)

    def together(requests: list[tuple[Any, Tensor]]) -> list[Tensor]:
        return kind.run_many([s for s, _ in requests], [ids for _, ids in requests])

    return dataclasses.replace(spec, open=lambda: RoutedSession(spec.open(), together))


def batched(dlm: Dlm) -> Dlm:
    """`dlm` with a Routed predict, cached predicts whose runs are routed too where the family
    batches them (`run_rows`), and a block family's sessions routed (`routed_blocks`): jobs built on
    it can be run by a Batcher (and alone, unchanged)."""
    if isinstance(dlm.predict, Routed):
        return dlm
    cached = dlm.cached
    if cached is not None and dlm.run_rows is not None:
        cached = routed_cache(cached, dlm.run_rows)
    spec = routed_blocks(dlm.blocks) if dlm.blocks is not None else None
    return dataclasses.replace(
        dlm, predict=Routed(dlm.forward_batch or one_by_one(dlm.predict)), cached=cached, blocks=spec
    )


def routed_cache(make: Callable, rows: Callable[[list], list[Tensor]]) -> Callable:
    """A `Dlm.cached` whose fresh predicts run the model through RoutedRun."""

    def cached(settings):
        predict = make(settings)
        predict.run = RoutedRun(predict.run, rows)
        return predict

    return cached


def current() -> Slot | None:
    """The Slot of the decode running in this thread, or None outside a batched run."""
    return getattr(_local, "slot", None)


class Slot:
    """One decode in a batched run: its pending request, the answer, and what its time was spent on."""

    def __init__(self, cond: threading.Condition, stopped: Callable[[], bool]) -> None:
        self.cond, self.stopped = cond, stopped
        self.forward: ForwardBatch | None = None
        self.request: Tensor | None = None  # (L,) tokens waiting for a forward
        self.response: Tensor | None = None  # (L, V) logits of that forward
        self.done = False
        self.value: object = None
        self.error: BaseException | None = None
        self.waited = 0.0  # seconds blocked in submit (others' decoder steps and the shared forwards)
        self.share = 0.0  # this decode's share of the forwards it took part in (forward seconds / rows)
        self.thread: threading.Thread | None = None

    def submit(self, forward: ForwardBatch, tokens: Tensor) -> Tensor:
        """Queue `tokens` for the next batched forward and block until its (L, V) logits come back."""
        start = time.perf_counter()
        with self.cond:
            if self.stopped():
                raise Stopped
            self.forward, self.request = forward, tokens
            self.cond.notify_all()
            while self.response is None and not self.stopped():
                self.cond.wait()
            if self.response is None:
                raise Stopped
            logits, self.response = self.response, None
        self.waited += time.perf_counter() - start
        return logits


class Batcher:
    """Runs up to `size` works at once in worker threads, sharing each model forward among them."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise UsageError(f"--batch-size {size}: give at least 1")
        self.size = size
        self.cond = threading.Condition()
        self.stop = False

    def map(self, works: Iterable[Callable[[], T]]) -> Iterator[T]:
        """Each work's value, in the order given, as soon as it and those before it are done.

        A work that raises stops the others (their next predict raises Stopped) and the error
        is raised here; so is Ctrl-C, which arrives in this (the calling) thread.
        """
        todo, n = enumerate(works), 0
        active: dict[int, Slot] = {}
        finished: dict[int, Slot] = {}
        following = 0  # index of the next value to yield
        self.stop = False
        try:
            while True:
                n += self.start(active, todo)
                if not active and following == n:
                    return
                done, asking = self.settle(active)
                for i in done:
                    finished[i] = active.pop(i)
                    if finished[i].error is not None:
                        raise finished[i].error
                if not done:  # everyone running is waiting: one forward per model
                    self.forward(asking)
                while following in finished:
                    yield finished.pop(following).value  # type: ignore[misc]
                    following += 1
        finally:
            self.shutdown(active)

    def start(self, active: dict[int, Slot], todo: Iterator[tuple[int, Callable[[], T]]]) -> int:
        """Start works until `size` run at once; how many were started."""
        started = 0
        while len(active) < self.size:
            item = next(todo, None)
            if item is None:
                break
            i, work = item
            slot = active[i] = Slot(self.cond, lambda: self.stop)
            slot.thread = threading.Thread(target=self.work, args=(slot, work), name=f"dlmcode-batch-{i}", daemon=True)
            slot.thread.start()
            started += 1
        return started

    def work(self, slot: Slot, work: Callable[[], T]) -> None:
        """A worker thread: run one work with its Slot as this thread's, record its value or error."""
        _local.slot = slot
        try:
            slot.value = work()
        except BaseException as err:  # handed to the caller by map(); Stopped ones are never looked at
            slot.error = err
        finally:
            _local.slot = None
            with self.cond:
                slot.done = True
                self.cond.notify_all()

    def settle(self, active: dict[int, Slot]) -> tuple[list[int], list[Slot]]:
        """Wait until every running work is done or waiting for a forward: (done ones, waiting slots)."""
        with self.cond:
            while not all(s.done or s.request is not None for s in active.values()):
                self.cond.wait()
            done = [i for i, s in active.items() if s.done]
            return done, [s for s in active.values() if s.request is not None]

    def forward(self, asking: list[Slot]) -> None:
        """One batched forward per model among the waiting slots; each gets its rows and its share of the time."""
        groups: dict[int, list[Slot]] = {}
        for slot in asking:
            groups.setdefault(id(slot.forward), []).append(slot)
        for group in groups.values():
            start = time.perf_counter()
            rows = group[0].forward([s.request for s in group])  # type: ignore[misc]
            share = (time.perf_counter() - start) / len(group)
            with self.cond:
                for slot, logits in zip(group, rows, strict=True):
                    slot.request, slot.response = None, logits
                    slot.share += share
                self.cond.notify_all()

    def shutdown(self, active: dict[int, Slot]) -> None:
        """Stop the works still running (their next predict raises Stopped) and wait for their threads."""
        with self.cond:
            self.stop = True
            self.cond.notify_all()
        for slot in active.values():
            if slot.thread is not None:
                slot.thread.join()


def run_job(job: Job) -> Result:
    """`job.run()`; in a batched run its `seconds` are its own decoder time plus its share of
    each shared forward, so that the seconds of a run's jobs add up to about its wall time."""
    result = job.run()
    slot = current()
    if slot is None:
        return result
    return dataclasses.replace(result, seconds=max(0.0, result.seconds - slot.waited + slot.share))


def run_batched(jobs: Iterable[Job], batch_size: int) -> list[Result]:
    """Run `jobs` (built on a `batched` model), `batch_size` at a time per forward; Results in job order."""
    jobs = list(jobs)
    for i, job in enumerate(jobs):
        if not isinstance(job.dlm.predict, Routed):
            raise ValueError(
                f"job {i}: its model's predict is not batched: build the jobs on batch.batched(dlm)"
                " (a KV-cached predict cannot be batched)"
            )
    return list(Batcher(batch_size).map([functools.partial(run_job, job) for job in jobs]))
