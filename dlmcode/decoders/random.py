"""LLaDA random remasking (generate.py, remasking='random')."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..core import sampling
from .low_confidence import LowConfidence


@dataclass(frozen=True)
class Random(LowConfidence):
    """Commits holes in random order, one per call unless steps or tokens_per_step say more (LLaDA); a baseline."""

    def score(self, conf: Tensor, rng: torch.Generator) -> Tensor:
        return sampling.noise(tuple(conf.shape), rng, conf.device)  # (H,)
