"""Prefix and dual KV caches for semi-autoregressive block decoding, behind `predict` (docs/design.md).

Fast-dLLM (arXiv 2505.22618, Sec. 3.2): at a block's first call, run every position and keep
each layer's keys and values. The prefix cache then runs only the positions from the block's
start to the end of the canvas, attending to the kept k/v of the positions before it; the
dual cache runs only the block, attending to the kept k/v on both sides. For a bidirectional
model this is an approximation: the kept k/v were computed while the block still held holes.

Decoders never know. A cached predict works the block out from the canvas itself: on a new
canvas it splits the holes, in position order, into runs of `block` holes, exactly as
decoders/base.blocks() does, and the active block is the run holding the first hole. It runs
every position (a refresh) when the active block changes, when a token outside the positions
it would run has changed since it last ran them (another canvas, or a decoder that commits
outside the block), and, if `refresh` > 0, after that many calls (1: every call, which is
exactly the uncached model). Positions it did not run keep their last computed hidden states.

It keeps each position's final hidden state (L, D), not its logits (L, V): a call runs the
output head on the rows it is asked for only (core/canvas.Predict), from those states.

A model is cacheable when it has a `Runner`: one that runs ids at positions start.. to their
final hidden states and passes each layer's new k/v through `kv.layer(i).join(k, v)` before
attention (builtin.Attention, native.attend), and an output head.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from ..core.errors import UsageError
from ..core.run import CacheSettings
from . import forward

if TYPE_CHECKING:
    from .base import Dlm


class Runner(Protocol):
    def __call__(self, ids: Tensor, start: int = 0, kv: KV | None = None) -> Tensor: ...  # (1, n) -> (1, n, D)


class KV:
    """Each layer's keys and values for every canvas position, as last computed, and what the call runs."""

    def __init__(self) -> None:
        self.k: dict[int, Tensor] = {}  # layer -> (B, Hkv, L, hd)
        self.v: dict[int, Tensor] = {}
        self.span: tuple[int, int] | None = None  # positions this call runs; None: all of them (keep what they give)

    def layer(self, i: int) -> LayerKV:
        return LayerKV(self, i)


@dataclass(frozen=True)
class LayerKV:
    kv: KV
    i: int

    def join(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """k/v (B, Hkv, n, hd) of the positions this call runs -> k/v of every position (B, Hkv, L, hd)."""
        kv = self.kv
        if kv.span is None:  # a full run: attention sees exactly these, as without a cache
            kv.k[self.i], kv.v[self.i] = k.contiguous(), v.contiguous()  # contiguous: cheap in-place updates later
            return k, v
        a, b = kv.span
        kv.k[self.i][:, :, a:b] = k  # the freshest k/v of these positions, for later calls
        kv.v[self.i][:, :, a:b] = v
        return kv.k[self.i], kv.v[self.i]


# The same layer()/join() shape as KV and LayerKV on purpose: attention (native.attend) joins through either, one
# decode's cache or a batch of them.
class RowsKV:
    """Several decodes' KV caches as one batch (run_rows): row r runs its first `sizes[r]` query
    positions through its own cache, and attention sees each row's keys padded to the longest."""

    def __init__(self, kvs: list[KV], sizes: list[int]) -> None:
        self.kvs, self.sizes = kvs, sizes

    def layer(self, i: int) -> RowsLayerKV:
        return RowsLayerKV(self, i)


# RowsKV and RowsLayerKV mirror KV and LayerKV (the same two-class shape, one cache a row): attention asks each the same
@dataclass(frozen=True)
class RowsLayerKV:
    rows: RowsKV
    i: int

    def join(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """k/v (B, Hkv, n, hd) -> each row's own join, right-padded to (B, Hkv, K, hd)
        (the caller masks the padding)."""
        joined = [
            kv.layer(self.i).join(k[r : r + 1, :, :n], v[r : r + 1, :, :n])
            for r, (kv, n) in enumerate(zip(self.rows.kvs, self.rows.sizes, strict=True))
        ]
        return pad_keys([a for a, _ in joined]), pad_keys([b for _, b in joined])


def pad_keys(rows: list[Tensor]) -> Tensor:
    """[(1, H, K_r, hd)] -> (B, H, max K_r, hd), zeros after each row's keys."""
    longest = max(r.shape[2] for r in rows)
    out = rows[0].new_zeros((len(rows), rows[0].shape[1], longest, rows[0].shape[3]))
    for i, r in enumerate(rows):
        out[i, :, : r.shape[2]] = r[0]
    return out


RowRun = tuple[Tensor, int, KV]  # one cached predict's run: (n,) ids at positions start.., its cache (kv.span set)


def run_rows(
    hidden: Callable[..., Tensor], pad_id: int, device: torch.device
) -> Callable[[list[RowRun]], list[Tensor]]:
    """Several cached predicts' runs in at most two forwards of `hidden` (a Runner's hidden
    states, taking a key mask and per-row starts, as builtin's): the full runs together
    (right-padded, as forward.padded) and the partial runs together (each row's few positions
    against its own cached keys, padded keys masked). Each gets back its (1, n, D) hidden states,
    as its Runner would have given them (each CachedPredict runs the head on the rows it is asked for).
    Why: a partial run is a few positions, so a forward costs about the same for one row as for
    eight: sharing it is where batching pays on a CPU (batch.py routes the runs here)."""

    def run(requests: list[RowRun]) -> list[Tensor]:
        out: list[Tensor | None] = [None] * len(requests)
        for partial in (False, True):
            group = [i for i, (_, _, kv) in enumerate(requests) if (kv.span is not None) == partial]
            if group:
                for i, states in zip(group, forward_rows([requests[i] for i in group], partial), strict=True):
                    out[i] = states
        return out  # type: ignore[return-value]

    def forward_rows(rows: list[RowRun], partial: bool) -> list[Tensor]:
        sizes = [len(ids) for ids, _, _ in rows]
        ids = torch.full((len(rows), max(sizes)), pad_id, dtype=torch.long, device=device)  # (B, n)
        for r, (row, _, _) in enumerate(rows):
            ids[r, : len(row)] = row.to(device)
        keys = [
            kv.k[0].shape[2] if partial else n for (_, _, kv), n in zip(rows, sizes, strict=True)
        ]  # each row's key count
        mask = torch.arange(max(keys), device=device)[None] < torch.tensor(keys, device=device)[:, None]  # (B, K)
        starts = torch.tensor([start for _, start, _ in rows], device=device)  # (B,)
        with torch.inference_mode():  # the batch runs in the batcher's thread; the caches are inference tensors
            states = hidden(ids, starts, RowsKV([kv for _, _, kv in rows], sizes), mask)  # (B, n, D)
            return [states[r : r + 1, :n] for r, n in enumerate(sizes)]  # (1, n_r, D) each

    return run


def block_spans(holes: Tensor, size: int) -> list[tuple[int, int]]:
    """[first, last + 1) position of each run of `size` holes (0: one run), as decoders/base.blocks splits them."""
    runs = holes.split(size) if size > 0 else [holes]
    return [(int(r[0]), int(r[-1]) + 1) for r in runs if r.numel()]


class CachedPredict:
    """A Predict over a Runner that reuses k/v across the calls of a block (see the module docstring)."""

    takes_rows = True  # computes only the rows asked for (core/canvas.Predict)

    def __init__(
        self,
        run: Runner,
        head: Callable[[Tensor], Tensor],
        settings: CacheSettings,
        mask_id: int,
        device: torch.device,
        shift: int = 0,
    ) -> None:
        self.run, self.head, self.settings, self.mask_id, self.device = run, head, settings, mask_id, device
        self.shift = shift  # the head at hidden state i scores position i + shift (Dream: 1)
        self.lookback = shift  # so a cached call runs that many positions before the block too
        self.kv = KV()
        self.hidden: Tensor | None = None  # (L, D) last computed final hidden state of every position
        self.seen: Tensor | None = None  # (L,) tokens at the last refresh: when each position outside the span last ran
        self.prev: Tensor | None = None  # (L,) tokens at the previous call
        self.spans: list[tuple[int, int]] = []  # the blocks of the current canvas
        self.span: tuple[int, int] | None = None  # positions the cached calls run
        self.age = 0  # cached calls since the last refresh
        self.full_calls = self.cached_calls = 0  # counters, for the speed bench and tests

    def __call__(self, tokens: Tensor, rows: Tensor | None = None) -> Tensor:
        ids = tokens.to(self.device, torch.long)  # (L,)
        with torch.inference_mode():
            if not self.continues(ids):  # a new decode: split its holes into blocks and start afresh
                self.spans, self.hidden = (
                    block_spans((ids == self.mask_id).nonzero().squeeze(-1), self.settings.block),
                    None,
                )
            self.keep_prev(ids)
            span = self.plan(ids)
            if span is None:
                self.refresh(ids)
            else:
                self.partial(ids, span)
        return forward.head_rows(self.head, self.hidden, rows, self.shift)  # (R, V); never our buffer

    def keep_prev(self, ids: Tensor) -> None:
        """Remember this call's canvas, in the same buffer as the last call's when the length is the same (every call
        of a decode): no new tensor per call at a fixed shape."""
        if self.prev is not None and self.prev.shape == ids.shape:
            self.prev.copy_(ids)
        else:
            self.prev = ids.clone()

    def plan(self, ids: Tensor) -> tuple[int, int] | None:
        """The positions to run for `ids`, or None to run them all."""
        if self.settings.mode == "none" or self.hidden is None:
            return None
        if self.settings.refresh and self.age + 1 >= self.settings.refresh:
            return None
        span = self.active(ids)
        if span is None or span != self.span:
            return None
        a, b = span
        same_before = torch.equal(ids[:a], self.seen[:a])
        return span if same_before and (b == len(ids) or torch.equal(ids[b:], self.seen[b:])) else None

    def active(self, ids: Tensor) -> tuple[int, int] | None:
        """Positions of the block holding the first hole, widened as the mode runs them; None when it is unknown."""
        first = (ids == self.mask_id).nonzero()
        if first.numel() == 0:
            return None
        h = int(first[0])
        block = next(((a, b) for a, b in self.spans if a <= h < b), None)
        if block is None:
            return None
        a = max(0, block[0] - self.lookback)
        return (a, len(ids)) if self.settings.mode == "prefix" else (a, block[1])

    def refresh(self, ids: Tensor) -> None:
        """Run every position and keep the k/v of all of them."""
        self.kv.span = None
        self.hidden = self.run(ids[None], 0, self.kv)[0]  # (L, D)
        self.seen = ids.clone()
        self.span = self.active(ids)
        self.age = 0
        self.full_calls += 1

    def continues(self, ids: Tensor) -> bool:
        """Whether `ids` is the previous call's canvas with some holes committed since (holes never reopen in a decode).

        Anything else starts afresh, so a decode never depends on what ran before it.
        """
        if self.prev is None or len(ids) != len(self.prev):
            return False
        kept = self.prev != self.mask_id  # (L,)
        return torch.equal(ids[kept], self.prev[kept])

    def partial(self, ids: Tensor, span: tuple[int, int]) -> None:
        """Run only positions span[0]..span[1]-1; every other position's k/v come from the cache."""
        a, b = span
        self.kv.span = span
        self.hidden[a:b] = self.run(ids[None, a:b], a, self.kv)[0]  # (b - a, D)
        self.age += 1
        self.cached_calls += 1


def with_cache(dlm: Dlm, mode: str = "none", refresh: int = 0, block: int = 0) -> Dlm:
    """`dlm` with a fresh cached predict for one decode job (mode "none": `dlm` itself).

    `block` is the decoder's block setting, so the cache's blocks are the decoder's.
    """
    settings = CacheSettings(mode, block, refresh)
    if mode == "none":
        return dlm
    if dlm.cached is None:
        raise UsageError(
            f"--cache {mode}: model {dlm.name!r} ({dlm.family}) has no KV cache; builtin, llada and dream do"
        )
    return dataclasses.replace(dlm, predict=dlm.cached(settings))
