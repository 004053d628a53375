"""Fast-dLLM confidence-aware parallel decoding (NVlabs/Fast-dLLM llada/generate.py, get_transfer_index)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import Block, Choice, Decoder, check, setting


@dataclass(frozen=True)
class Threshold(Decoder):
    """Fast-dLLM: commit every hole of the block whose confidence is >= tau, at least the best."""

    tau: float = setting(0.9, "confidence a hole needs to be committed in parallel")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.tau <= 1, "tau", self.tau, "must be in [0, 1]")

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: Block, rng: torch.Generator) -> Choice:
        rows = select(conf, self.tau)
        return Choice(rows, conf[rows])


def select(conf: Tensor, tau: float) -> Tensor:
    """Rows with conf >= tau, plus the single most confident row."""
    keep = conf >= tau  # (H,)
    keep[conf.argmax()] = True
    return keep.nonzero().squeeze(-1)
