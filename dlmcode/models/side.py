"""The built-in model's side branch: the [EXPAND] and [PAD] (delete) logits from a few blocks of their own.

A model trained to expand and delete (issue 28) must decide at each hole whether the holes left can
hold the code (expand when they cannot, delete when there are too many). A frozen model's last
hidden states alone cannot say "too few holes" (docs/training-v2.md 7.2). The side branch reads
them, adds what the decision needs that the trunk never had (each hole's run: its length, how far
the hole is from the run's start and from its end, i.e. where the suffix begins), runs
`side_layers` blocks of the trunk's shape over the canvas, and gives two logits per position that
replace the trunk's [EXPAND] and [PAD] logits. Every other logit is the trunk's, untouched: a hole
of given length bans both tokens, so every decode at a given length is the trunk's token for token.

Under a KV cache the side blocks keep their keys and values as the trunk's do (layers n_layers..),
and a call's hole-run features are computed from the positions that call runs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

RUN_CAP = 64  # run lengths and offsets are read up to this; longer ones share the last embedding


def hole_runs(ids: Tensor, mask_id: int) -> Tensor:
    """(B, L) ids -> (B, L, 3) long: for each hole, its run's length, its offset from the run's start and
    from its end, each capped at RUN_CAP and plus 1; 0 at every position that is not a hole."""
    hole = ids == mask_id
    left, right = run_offsets(hole), run_offsets(hole.flip(-1)).flip(-1)
    feats = torch.stack([left + right + 1, left, right], -1).clamp(max=RUN_CAP) + 1
    return torch.where(hole[..., None], feats, 0)


def run_offsets(hole: Tensor) -> Tensor:
    """(B, L) bool -> each position's distance from the start of its run of holes (0 where not a hole)."""
    idx = torch.arange(hole.shape[-1], device=hole.device).expand_as(hole)
    start = torch.where(hole, 0, idx + 1).cummax(-1).values  # the first position of the run holding each hole
    return torch.where(hole, idx - start, 0)


class SideBranch(nn.Module):
    """Trunk's pre-norm state + hole-run features -> side blocks -> norm -> 2 logits ([EXPAND], [PAD])."""

    def __init__(self, dim: int, n_blocks: int, make_block: Callable[[], nn.Module], eps: float) -> None:
        super().__init__()
        self.feat = nn.Embedding(3 * (RUN_CAP + 2), dim)
        self.blocks = nn.ModuleList(make_block() for _ in range(n_blocks))
        self.norm = nn.RMSNorm(dim, eps=eps)
        self.rows = nn.Parameter(torch.zeros(2, dim))  # output rows: [EXPAND], [PAD]

    def forward(self, x: Tensor, ids: Tensor, mask_id: int, cos: Tensor, sin: Tensor, first: int, kv, mask) -> Tensor:
        """x (B, L, D): the trunk's last block's output (before its final norm) -> (B, L, 2) logits."""
        runs = hole_runs(ids, mask_id) + torch.arange(3, device=ids.device) * (RUN_CAP + 2)
        x = x + self.feat(runs).sum(-2)
        for j, block in enumerate(self.blocks):
            x = block(x, cos, sin, None if kv is None else kv.layer(first + j), mask)
        return self.norm(x) @ self.rows.t()

    @torch.no_grad()
    def start_from(self, trunk_norm: nn.RMSNorm, expand_row: Tensor, pad_row: Tensor) -> None:
        """At the start of training: the branch gives exactly the trunk's own [EXPAND] and [PAD] logits
        (features and each block's residual outputs zero, the trunk's final norm, the given rows)."""
        nn.init.zeros_(self.feat.weight)
        for block in self.blocks:
            nn.init.zeros_(block.attn.out.weight)
            nn.init.zeros_(block.down.weight)
        self.norm.weight.copy_(trunk_norm.weight)
        self.rows.copy_(torch.stack([expand_row, pad_row]))


def layout(dim: int, n_blocks: int, block: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The side branch's tensors and shapes under `side.` (block: one block's own layout)."""
    shapes = {"side.feat.weight": (3 * (RUN_CAP + 2), dim), "side.norm.weight": (dim,), "side.rows": (2, dim)}
    for j in range(n_blocks):
        shapes.update({f"side.blocks.{j}.{name}": shape for name, shape in block.items()})
    return shapes
