"""The block-diffusion models' own rule: a per-block schedule as a floor, a confidence bar above it.

SDAR (JetAstra/SDAR generate.py, remasking 'low_confidence_dynamic') and LLaDA2
(inclusionAI's generate) decode a block in `steps` calls at most: call i of a block owes k_i
tokens, the block's width spread evenly over the steps (LLaDA's get_num_transfer_tokens), and
commits every hole whose proposal is more than `threshold` likely when there are at least k_i
of them, else the k_i surest (never more than the holes left). The width is the family's block
(BlockState.size, which counts the prompt's tail in the first block, as both references do),
or the holes of a block elsewhere.

Restated from both references; they differ only where SDAR's top-k could pick a position that
is not a hole (k_i above the holes left, which its defaults never reach: block 4, 4 steps):
here, as in LLaDA2, never more than the holes left.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..core import sampling
from .base import BaseDecoder, BlockState, Choice, check, setting


@dataclass(frozen=True)
class Dynamic(BaseDecoder):
    """Commits every hole above a confidence bar when there are enough, else the surest few a per-block schedule owes
    (SDAR, LLaDA2)."""

    steps: int = setting(32, "calls per block at most: the block's width spread over them is the floor per call")
    threshold: float = setting(
        0.95, "confidence (0-1) above which holes are committed together (SDAR 0.85, LLaDA2 0.95)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.steps >= 1, "steps", self.steps, "must be >= 1")
        check(0 <= self.threshold <= 1, "threshold", self.threshold, "must be in [0, 1]")

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: BlockState, rng: torch.Generator) -> Choice:
        width = max(block.size, block.holes)
        owed = sampling.even_split(width, self.steps)[block.step] if block.step < self.steps else len(conf)
        k = min(max(owed, 1), len(conf))  # a call commits one at least (a schedule of more steps than width owes 0)
        high = conf > self.threshold  # (H,)
        rows = high.nonzero().squeeze(-1) if int(high.sum()) >= k else sampling.top(conf, k)
        return Choice(rows, conf[rows])
