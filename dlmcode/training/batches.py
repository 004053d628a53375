"""What one training step sees: a window of the token stream, its holes and their noise (the objective's
modes, train.py's docstring), batch k drawn from (seed, k) alone, and batches built ahead by forked workers."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from ..core.errors import DlmcodeError
from . import expand
from .config import TrainConfig, expand_id
from .data import (
    BOS,
    IS_NEWLINE,
    MASK,
    PAD,
    Stream,
)


def window(stream: Stream, seq: int, rng: np.random.Generator) -> np.ndarray:
    """[BOS] then `seq - 1` tokens from a random line start: spans.py starts every canvas,
    windowed or not, with [BOS] and cuts windows at line starts."""
    # line_starts is sorted: the usable ones are one slice of it (no per-window copy of millions of starts)
    lo = int(np.searchsorted(stream.line_starts, 1))
    hi = int(np.searchsorted(stream.line_starts, len(stream.ids) - seq, side="right"))
    s = int(stream.line_starts[lo + rng.integers(hi - lo)]) - 1
    x = stream.ids[s : s + seq].copy()
    x[0] = BOS  # at a file start x[0] already is [BOS]
    return x


def line_bounds(x: np.ndarray, line_end: np.ndarray) -> np.ndarray:
    """Start offsets of the lines in window x (always includes 0 and len(x))."""
    ends = np.flatnonzero(line_end[x] > 0) + 1
    return np.unique(np.concatenate([[0], ends, [len(x)]]))


def pick_holes(
    x: np.ndarray, line_end: np.ndarray, cfg: TrainConfig, rng: np.random.Generator
) -> list[tuple[int, int, int]]:
    """(start, end, extra_pads) holes for "spans" mode, non-overlapping."""
    bounds = line_bounds(x, line_end)
    holes, taken = [], np.zeros(len(x), dtype=bool)
    for _ in range(int(rng.integers(1, cfg.max_holes + 1))):
        if rng.random() < cfg.p_line_hole and len(bounds) > 2:
            i = int(rng.integers(len(bounds) - 1))
            n = int(rng.choice([1, 1, 1, 1, 2, 2, 3, 3, 4, 5]))
            a, b = int(bounds[i]), int(bounds[min(i + n, len(bounds) - 1)])
            b -= int(line_end[x[b - 1]] == IS_NEWLINE)  # spans.py keeps the last line break as context
        else:
            n = int(rng.integers(1, cfg.max_span_tokens + 1))
            a = int(rng.integers(0, max(1, len(x) - n)))
            b = a + n
        if b <= a or taken[max(0, a - 1) : b + 1].any():
            continue
        taken[a:b] = True
        extra = int(rng.integers(1, cfg.max_extra_pads + 1)) if rng.random() < cfg.p_overalloc else 0
        holes.append((a, b, extra))
    return sorted(holes)


def noise(x: np.ndarray, seq: int, line_end: np.ndarray, cfg: TrainConfig, rng: np.random.Generator):
    """One training example: (input ids, target ids, masked) of length `seq` each."""
    mode = rng.random()
    if cfg.expand and cfg.p_iid + cfg.p_suffix <= mode < cfg.p_iid + cfg.p_suffix + cfg.p_expand:
        return expand.example(x, seq, line_end, cfg, rng, expand_id(cfg))
    x = x[:seq]  # the other modes see the window they always saw
    if mode < cfg.p_iid:
        target, hole = x, np.ones(len(x), dtype=bool)
    elif mode < cfg.p_iid + cfg.p_suffix:
        bounds = line_bounds(x, line_end)
        cut = int(bounds[rng.integers(len(bounds) - 1)])
        target, hole = x, np.arange(len(x)) >= cut
    else:
        target, hole = with_pads(x, pick_holes(x, line_end, cfg, rng))
    if not hole[1:seq].any():  # no hole inside the window: fall back to plain MDLM
        target, hole = x, np.ones(len(x), dtype=bool)
    target, hole = target[:seq], hole[:seq].copy()
    hole[0] = False  # position 0 is always [BOS], as on every inference canvas
    t = rng.uniform(cfg.t_min, 1.0)
    masked = hole & (rng.random(seq) < t)
    if not masked.any():
        masked[rng.choice(np.flatnonzero(hole))] = True
    return np.where(masked, MASK, target), target, masked


def with_pads(x: np.ndarray, holes: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Insert each hole's extra [PAD] targets after its content; mark hole positions."""
    parts, flags, prev = [], [], 0
    for a, b, extra in holes:
        parts += [x[prev:a], x[a:b], np.full(extra, PAD, dtype=x.dtype)]
        flags += [np.zeros(a - prev, bool), np.ones(b - a + extra, bool)]
        prev = b
    parts.append(x[prev:])
    flags.append(np.zeros(len(x) - prev, bool))
    return np.concatenate(parts), np.concatenate(flags)


def batch(stream: Stream, line_end: np.ndarray, cfg: TrainConfig, rng: np.random.Generator):
    span = cfg.seq + (expand.EXTRA if cfg.expand else 0)  # merges shorten an expand example: draw more
    examples = [noise(window(stream, span, rng), cfg.seq, line_end, cfg, rng) for _ in range(cfg.batch)]
    inp, tgt, msk = (torch.from_numpy(np.stack(col)) for col in zip(*examples, strict=True))
    return inp, tgt, msk  # (B, L) long, (B, L) long, (B, L) bool


def step_batch(stream: Stream, line_end: np.ndarray, cfg: TrainConfig, step: int):
    """The batch of training step `step`: a function of (seed, step) alone, so resuming or
    building it in another process gives the same tensors."""
    return batch(stream, line_end, cfg, np.random.default_rng([cfg.seed, step]))


_SHARED: tuple = ()  # (stream, line_end, cfg) for batch workers, inherited through fork


def _worker_batch(step: int) -> tuple[np.ndarray, ...]:
    return tuple(
        t.numpy() for t in step_batch(*_SHARED, step)
    )  # plain arrays: no tensor sharing through file descriptors


def worker_died(step: int, workers: int) -> DlmcodeError:
    return DlmcodeError(
        f"a batch worker died before step {step}'s batch was built (out of memory? try fewer than {workers} workers)"
    )


def batches(stream: Stream, line_end: np.ndarray, cfg: TrainConfig, first: int) -> Iterator[tuple]:
    """Batches for steps first, first+1, ...; with cfg.workers, built ahead by forked
    processes (at most 4 per worker in flight).

    Closing the generator lets the batches in flight finish and the workers exit on their own:
    a worker is never killed, because one killed while it writes a result leaves the result
    queue's lock held for ever (multiprocessing.Pool.terminate hung that way, 4 times in 572
    closes). A worker that dies (the OOM killer) stops training with one line."""
    if not cfg.workers:
        step = first
        while True:
            yield step_batch(stream, line_end, cfg, step)
            step += 1
    import multiprocessing
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    global _SHARED
    _SHARED = (stream, line_end, cfg)  # fork shares the token stream copy-on-write
    pool = ProcessPoolExecutor(cfg.workers, mp_context=multiprocessing.get_context("fork"))
    try:
        window = 4 * cfg.workers  # steps being built or queued: always step .. step + window - 1
        ahead = deque((s, pool.submit(_worker_batch, s)) for s in range(first, first + window))
        while True:
            step, future = ahead.popleft()
            try:
                arrays = future.result()
            except BrokenProcessPool:
                raise worker_died(step, cfg.workers) from None
            yield tuple(torch.from_numpy(a) for a in arrays)
            try:
                ahead.append((step + window, pool.submit(_worker_batch, step + window)))
            except BrokenProcessPool:  # a worker died since: the pool takes no more work
                raise worker_died(step + 1, cfg.workers) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
