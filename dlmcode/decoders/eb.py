"""EB-sampler (arXiv 2505.24857): entropy-bounded parallel commits."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..core import sampling
from .base import BaseDecoder, BlockState, Choice, check, setting


@dataclass(frozen=True)
class EntropyBound(BaseDecoder):
    """Commits the holes the model is least unsure of while their combined uncertainty
    stays under gamma (EB-sampler)."""

    gamma: float = setting(
        0.1, "uncertainty (entropy, nats) one call may commit besides its surest hole; larger commits more"
    )  # DiffusionGemma's default 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.gamma >= 0, "gamma", self.gamma, "must be >= 0")

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: BlockState, rng: torch.Generator) -> Choice:
        entropies = sampling.entropy(logits)  # (H,)
        rows = select(entropies, self.gamma)
        return Choice(rows, entropies[rows])


def select(entropies: Tensor, gamma: float) -> Tensor:
    """The largest k of rows by ascending entropy with sum(H_1..H_k) - max(H_1..H_k) <= gamma, k >= 1."""
    values, order = entropies.sort()  # (H,) ascending
    bound = values.cumsum(0) - values.cummax(0).values  # (H,) non-decreasing
    return order[: max(1, int((bound <= gamma).sum()))]
