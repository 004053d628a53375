"""LLaDA random remasking (generate.py, remasking='random')."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .. import sampling
from .low_confidence import LowConfidence


@dataclass(frozen=True)
class Random(LowConfidence):
    """LLaDA random remasking: each step commits a random even share of the block."""

    def score(self, conf: Tensor, rng: torch.Generator) -> Tensor:
        return sampling.noise(tuple(conf.shape), rng, conf.device)  # (H,)
