"""What decoders share: the settings base class and the semi-autoregressive block loop.

A block decoder only says which holes of the active block to commit from the model's
logits (`choose`); `blockwise` owns calling the model, proposing tokens, committing and
yielding Steps, so the loop exists once (style: one loop per algorithm).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .. import sampling
from ..canvas import Canvas, Predict, Step


def setting(default: Any, help: str) -> Any:
    """A decoder setting: a dataclass field with a default and a one-line help text."""
    return field(default=default, metadata={"help": help})


class Block(NamedTuple):
    """Where a block decoder is: which block, how many, its size at the start, the step in it."""

    number: int
    count: int
    holes: int  # holes in the block when it started
    step: int  # 0-based step within the block


class Choice(NamedTuple):
    """Rows (indices into the active holes) to commit, and the score each was chosen by."""

    rows: Tensor  # (k,) long
    scores: Tensor  # (k,)


def blocks(canvas: Canvas, size: int) -> list[Tensor]:
    """Hole positions split, in position order, into runs of `size` holes (0: one run).

    On a LLaDA generate canvas (prompt then holes) these are exactly LLaDA's positional blocks.
    """
    holes = canvas.holes.nonzero().squeeze(-1)  # (H,)
    if holes.numel() == 0:
        return []
    return list(holes.split(size)) if size > 0 else [holes]


@dataclass(frozen=True)
class Decoder:
    """Base of every decoder: settings every decoder has."""

    temperature: float = setting(0.0, "0 = argmax tokens; > 0 samples them (Gumbel-max in float64)")
    block: int = setting(0, "holes per semi-autoregressive block, left to right; 0 = one block")

    def __post_init__(self) -> None:
        check(self.temperature >= 0, "temperature", self.temperature, "must be >= 0")
        check(self.block >= 0, "block", self.block, "must be >= 0")

    def __call__(self, canvas: Canvas, predict: Predict, rng: torch.Generator) -> Iterator[Step]:
        return blockwise(self, canvas, predict, rng)

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: Block, rng: torch.Generator) -> Choice:
        """Which active holes to commit, given their logits (H, V), proposed ids and confidences (H,)."""
        raise NotImplementedError

    def steps_for(self, holes: int, number: int, count: int) -> int:
        """Calls a block of `holes` may take: at most one per hole (at least one token a call)."""
        return holes

    def max_calls(self, n_holes: int) -> int:
        """Upper bound on model calls for a canvas with `n_holes` holes."""
        sizes = [n_holes] if self.block == 0 else [min(self.block, n_holes - i) for i in range(0, n_holes, self.block)]
        return sum(self.steps_for(n, b, len(sizes)) for b, n in enumerate(sizes))


def check(ok: bool, name: str, value: Any, why: str) -> None:
    """Reject a bad setting with a message naming it."""
    if not ok:
        raise ValueError(f"{name}={value!r} {why}")


def blockwise(decoder: Decoder, canvas: Canvas, predict: Predict, rng: torch.Generator) -> Iterator[Step]:
    """The semi-autoregressive loop: per block, call the model until the block has no holes."""
    calls = index = 0
    runs = blocks(canvas, decoder.block)
    for number, positions in enumerate(runs):
        step = 0
        while bool(canvas.holes[positions].any()):
            logits = predict(canvas.tokens)  # (L, V)
            calls += 1
            active = positions[canvas.holes[positions]]  # (H,)
            rows = logits[active]  # (H, V)
            ids = sampling.gumbel_argmax(sampling.without(rows, canvas.mask_id), decoder.temperature, rng)  # (H,)
            conf = sampling.confidence(rows, ids, canvas.late_ids)  # (H,)
            choice = decoder.choose(rows, ids, conf, Block(number, len(runs), len(positions), step), rng)
            chosen = choice.rows.to(active.device)  # decoders work where the logits are (a GPU); the canvas stays put
            canvas = canvas.fill(active[chosen], ids[choice.rows].to(active.device))
            yield Step(index, canvas, active[chosen], choice.scores.to(active.device), calls, {"block": number})
            index += 1
            step += 1
