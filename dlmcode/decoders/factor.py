"""Fast-dLLM's factor rule (NVlabs/Fast-dLLM llada/generate.py, get_transfer_index_dynamic)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import BaseDecoder, BlockState, Choice, check, setting


@dataclass(frozen=True)
class Factor(BaseDecoder):
    """Commits several of the surest holes per call, fewer when the model is unsure (Fast-dLLM's factor rule)."""

    factor: float = setting(
        1.0, "larger commits more holes per call (the n-th surest needs confidence 1 - factor/(n+1))"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.factor > 0, "factor", self.factor, "must be > 0")

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: BlockState, rng: torch.Generator) -> Choice:
        rows = select(conf, self.factor)
        return Choice(rows, conf[rows])


def select(conf: Tensor, factor: float) -> Tensor:
    """The longest prefix of rows by descending confidence whose every rank n clears 1 - f/(n+1).

    The reference commits every hole when only the last rank fails (its `top_i == len - 1`
    branch); we read that as an off-by-one and stop at the failing rank.
    """
    scores, order = conf.sort(descending=True)  # (H,), (H,)
    ranks = torch.arange(1, len(conf) + 1, device=conf.device, dtype=scores.dtype)
    ok = scores >= 1 - factor / (ranks + 1)
    ok[0] = True  # at least one commit per call
    return order[: int(ok.long().cumprod(0).sum())]
