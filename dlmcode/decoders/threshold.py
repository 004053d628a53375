"""Fast-dLLM confidence-aware parallel decoding (NVlabs/Fast-dLLM llada/generate.py, get_transfer_index)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import BaseDecoder, BlockState, Choice, check, setting


@dataclass(frozen=True)
class Threshold(BaseDecoder):
    """Commits at once every hole the model is at least tau sure of, and always the surest one (Fast-dLLM)."""

    tau: float = setting(
        0.9, "confidence (0-1) a hole needs to be committed alongside others; lower is faster and breaks more"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.tau <= 1, "tau", self.tau, "must be in [0, 1]")

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: BlockState, rng: torch.Generator) -> Choice:
        rows = select(conf, self.tau)
        return Choice(rows, conf[rows])


def select(conf: Tensor, tau: float) -> Tensor:
    """Rows with conf >= tau, plus the single most confident row."""
    keep = conf >= tau  # (H,)
    keep[conf.argmax()] = True
    return keep.nonzero().squeeze(-1)
