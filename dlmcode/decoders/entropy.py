"""Dream's entropy order (Dream diffusion_generate, alg='entropy'), on Dream's step schedule."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..core import sampling
from .base import BlockState, Choice, check, setting
from .scheduled import Scheduled


@dataclass(frozen=True)
class Entropy(Scheduled):
    """Commits first the holes the model is least unsure of (lowest entropy; Dream's entropy order)."""

    eps: float = setting(
        1e-3, "Dream's last timestep; a detail of its step schedule, there to match Dream"
    )  # timesteps run linspace(1, eps, steps + 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.eps < 1, "eps", self.eps, "must be in (0, 1)")

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: BlockState, rng: torch.Generator) -> Choice:
        steps = self.steps_for(block.holes, block.number, block.count)
        # tokens_per_step: exactly that many a call (DreamOn decodes one a step); else Dream's schedule
        k = self.tokens_per_step or sampling.dream_count(len(ids), block.step, steps, self.eps)
        scores = self.score(logits / self.temperature if self.temperature > 0 else logits)  # (H,)
        rows = sampling.top(scores, k)
        return Choice(rows, scores[rows])

    def score(self, logits: Tensor) -> Tensor:
        """Negative entropy (Dream's sum p log p): higher is more certain.

        `choose` passes tempered logits, as Dream's sample_tokens scores the tempered distribution."""
        return -sampling.entropy(logits)
