"""DUS, dilated unmasking (arXiv 2506.19037, Luxembourg, Permuter and Nachmani; omerlux/DUS).

Planner-free: each block of B holes is committed in ceil(log2 B) calls, one dilated group per
call, whatever the model's confidence. The groups halve their spacing call by call, so the
tokens of a group are never neighbours (for B >= 4) and every group lands between tokens
already committed: under a first-order Markov view, the tokens of one call are nearly
independent given the context, which bounds the joint-entropy error of committing them together.

Ours (the authors' code was not reachable here; this is our reading of the paper): with
k = ceil(log2 B), the hole at index i of its block (0-based, in position order) belongs to group
max(1, k - t(i)), t(i) being the number of trailing zero bits of i (index 0 joins group 1): for
B = 8 the calls commit {0, 4}, then {2, 6}, then {1, 3, 5, 7}. The block size is a setting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import BaseDecoder, BlockState, Choice, setting


@dataclass(frozen=True)
class Dus(BaseDecoder):
    """Commits each block of `block` holes in about log2(block) calls, never two
    neighbouring holes in one call (DUS)."""

    block: int = setting(
        8, "holes per block, each block committed in about log2(block) calls; 0 = all holes in one block"
    )  # B: ceil(log2 B) calls, TPF about B / log2 B

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: BlockState, rng: torch.Generator) -> Choice:
        groups = dilated_groups(block.holes)
        left = groups[groups >= block.step + 1]  # (H,) the group of each hole still open, in position order
        rows = (left == block.step + 1).nonzero().squeeze(-1).to(conf.device)
        return Choice(rows, conf[rows])

    def steps_for(self, holes: int, number: int, count: int) -> int:
        return calls_for(holes)


def calls_for(holes: int) -> int:
    """Calls a block of `holes` takes: ceil(log2 holes), at least one."""
    return max(1, math.ceil(math.log2(holes))) if holes > 1 else 1


def dilated_groups(holes: int) -> Tensor:
    """(B,) the 1-based call at which each index of a block of `holes` is committed."""
    k = calls_for(holes)
    index = torch.arange(holes)
    trailing = torch.zeros(holes, dtype=torch.long)
    for bit in range(k):  # trailing zero bits of each index, up to k (index 0 has all k)
        trailing += (index % 2 ** (bit + 1) == 0).long()
    return (k - trailing).clamp(min=1)
