"""LLaDA low-confidence remasking (ML-GSAI/LLaDA generate.py, remasking='low_confidence')."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..core import sampling
from .base import BlockState, Choice
from .scheduled import Scheduled


@dataclass(frozen=True)
class LowConfidence(Scheduled):
    """Commits the holes the model is surest of first, one per call unless steps or tokens_per_step say more (LLaDA)."""

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: BlockState, rng: torch.Generator) -> Choice:
        k = sampling.even_split(block.holes, self.steps_for(block.holes, block.number, block.count))[block.step]
        scores = self.score(conf, rng)  # (H,)
        rows = sampling.top(scores, k)
        return Choice(rows, scores[rows])

    def score(self, conf: Tensor, rng: torch.Generator) -> Tensor:
        """Commit order: the proposed token's probability."""
        return conf
