"""Dream's margin order (Dream diffusion_generate, alg='topk_margin')."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ..core import sampling
from .entropy import Entropy


@dataclass(frozen=True)
class Margin(Entropy):
    """Commits first the holes where the model's first choice leads its second by most (Dream's margin order)."""

    def score(self, logits: Tensor) -> Tensor:
        return sampling.margin(logits)
