"""Dream's margin order (Dream diffusion_generate, alg='topk_margin')."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from .. import sampling
from .entropy import Entropy


@dataclass(frozen=True)
class Margin(Entropy):
    """Dream: commit the holes with the widest top-1 minus top-2 probability margin."""

    def score(self, logits: Tensor) -> Tensor:
        return sampling.margin(logits)
