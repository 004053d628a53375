"""Fast-dLLM v2's rule (NVlabs/Fast-dLLM v2/generation_functions.py, batch_sample, at temperature 0).

A block is decoded in sub-blocks of `small` positions, left to right: each call looks at the
first sub-block that still holds a hole, commits every hole there whose proposal is more than
`threshold` likely, and always the surest one. The first position of a block, when it is a hole,
is committed alone: Fast-dLLM v2 reads the logits one place back (an autoregressive model's
next token), and its generate commits a block's first token as the previous block's last
prediction before it runs the block (models/fast_dllm.py gives that position that prediction).
Restated from the reference; on other families the rule runs as it reads, the first position
of each block one call of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import BaseDecoder, BlockState, Choice, check, setting


@dataclass(frozen=True)
class SubBlocks(BaseDecoder):
    """Commits, in the first sub-block holding holes, every hole above a confidence bar and always the surest one
    (Fast-dLLM v2); a block's first position alone."""

    small: int = setting(8, "positions per sub-block (Fast-dLLM v2's small_block_size)")
    threshold: float = setting(0.9, "confidence (0-1) above which a sub-block's holes are committed together")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.small >= 1, "small", self.small, "must be >= 1")
        check(0 <= self.threshold <= 1, "threshold", self.threshold, "must be in [0, 1]")

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: BlockState, rng: torch.Generator) -> Choice:
        offsets = block.offsets if block.offsets is not None else torch.arange(len(conf))  # (H,)
        offsets = offsets.to(conf.device)
        if bool((offsets == 0).any()):  # the block's first position: its own call
            rows = (offsets == 0).nonzero().squeeze(-1)
            return Choice(rows, conf[rows])
        sub = offsets // self.small
        inside = sub == sub.min()  # (H,) the first sub-block that holds holes
        seen = torch.where(inside, conf, torch.full_like(conf, -torch.inf))
        keep = seen > self.threshold
        keep[seen.argmax()] = True
        rows = keep.nonzero().squeeze(-1)
        return Choice(rows, conf[rows])
