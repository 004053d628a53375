"""Wrappers around a decoder's Step stream that a server needs, for every decoder alike.

- `Remember` wraps `predict` and keeps the last logits, so a stop can commit without a call.
- `bounded` follows a Step stream and ends it early, with one extra Step that commits every
  hole left, when (a) the fill has ended: an end token (pad, end-of-text) is committed and
  every hole before it is too, so what follows would be cut anyway, or the last call
  proposed an end token at every hole left (end tokens are committed last, so the
  content before them is done: without this a one-block decode would spend a call per
  pad), or the run of committed tokens at the fill's start is already complete (the
  server's line rule: what follows would be cut); (b) the time budget
  (`t_max_predict_ms`) has run out: the holes left get the last call's argmax; (c) the client
  has gone (`ClientGone`). A guarded decode's early end goes through the guard (`Bounds.settle`):
  the ids committed at once are those proposed if the guard's judge passes them, else the
  witness's, so no end, by time or otherwise, leaves the guard behind.
Decoders never know: they see `predict` and are simply not asked for more steps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..core import sampling
from ..core.canvas import Canvas, Step
from ..jobs.processors import Remember

ENDED = "end"  # the model ended the fill
TIME = "time"  # t_max_predict_ms ran out: the holes left were committed at once
FULL = "length"  # every hole was decoded


class ClientGone(Exception):
    """The request's client has gone; the decode stopped between two steps."""


@dataclass
class Bounds:
    """When to stop a decode early; `reason` says why it stopped once `bounded` is drained."""

    region: range  # the fill's canvas positions
    end_ids: tuple[int, ...] = ()  # tokens that end the fill
    complete: Callable[[list[int]], bool] | None = (
        None  # the fill's first ids (no hole among them) -> whether the fill is done
    )
    deadline: float | None = None  # time.perf_counter() value
    cancel: threading.Event = field(default_factory=threading.Event)
    reason: str = FULL
    # (canvas tokens, ids proposed at its holes) -> the ids to commit there: the guard's (jobs/guarding.JobGuard.ending)
    settle: Callable[[Tensor, Tensor], Tensor] | None = None


def bounded(steps: Iterator[Step], remember: Remember, bounds: Bounds) -> Iterator[Step]:
    """`steps`, cut short (with one committing Step) when the fill has ended or time is up."""
    for step in steps:
        yield step
        if bounds.cancel.is_set():
            raise ClientGone
        if not step.canvas.n_holes:
            return
        end = ended(step.canvas, bounds.region, bounds.end_ids, bounds.complete)
        if end is not None:
            bounds.reason = ENDED
            yield commit_rest(step, torch.full((step.canvas.n_holes,), end, dtype=torch.long), bounds.settle)
            return
        fresh = fits(remember, step.canvas)  # a grown fill: the next call's logits, not these
        if fresh and only_ends(remember, step.canvas, bounds.end_ids):
            bounds.reason = ENDED
            yield commit_rest(step, best(remember, step.canvas), bounds.settle)
            return
        if bounds.deadline is not None and time.perf_counter() > bounds.deadline and fresh:
            bounds.reason = TIME
            yield commit_rest(step, best(remember, step.canvas), bounds.settle)
            return


def ended(
    canvas: Canvas, region: range, end_ids: tuple[int, ...], complete: Callable[[list[int]], bool] | None = None
) -> int | None:
    """The end token to commit at every hole left, when the fill is over; else None.

    Over: an end token is committed with no hole before it, or the committed run at the
    fill's start (no hole in it) is `complete` (the server's line rule).
    """
    if not end_ids:
        return None
    tokens = canvas.tokens[region.start : region.stop]  # (H,)
    holes = (tokens == canvas.mask_id).nonzero()
    run = tokens[: int(holes[0]) if len(holes) else len(tokens)].tolist()  # committed ids before the first hole
    for token in run:
        if token in end_ids:
            return token
    return end_ids[0] if complete is not None and run and complete(run) else None


def fits(remember: Remember, canvas: Canvas) -> bool:
    """Whether the last logits belong to this canvas (a fill that grew or shrank since has other positions)."""
    return remember.logits is not None and remember.length == len(canvas.tokens)


def only_ends(remember: Remember, canvas: Canvas, end_ids: tuple[int, ...]) -> bool:
    """Whether the last call proposed an end token at every hole left: the model has finished the fill."""
    if remember.logits is None or not end_ids:
        return False
    proposed = best(remember, canvas)  # (h,)
    return bool(torch.isin(proposed, torch.tensor(end_ids, dtype=proposed.dtype)).all())


def best(remember: Remember, canvas: Canvas) -> Tensor:
    """(h,) the argmax of the last logits at each hole, never the mask token."""
    rows = remember.at(canvas.holes.nonzero().squeeze(-1))  # (h, V)
    return sampling.argmax(sampling.without(rows, canvas.mask_id)).cpu()  # (h,)


def commit_rest(step: Step, ids: Tensor, settle: Callable[[Tensor, Tensor], Tensor] | None = None) -> Step:
    """One more Step (no model call) committing `ids` at every hole left, or what `settle` makes of them."""
    if settle is not None:
        ids = settle(step.canvas.tokens, ids)
    pos = step.canvas.holes.nonzero().squeeze(-1)  # (h,)
    canvas = step.canvas.fill(pos, ids.to(step.canvas.tokens.device))
    return Step(step.index + 1, canvas, pos, torch.zeros(len(pos)), step.calls, {"committed_at_once": float(len(pos))})
