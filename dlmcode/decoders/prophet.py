"""Prophet, early commit (arXiv 2508.19982; rule read from pixeli99/Prophet generate_earlyexit.py).

Decode as LLaDA's low-confidence schedule does, but on every call first measure the gap between
the top two logits, averaged over the answer's positions; when it clears the bar of the decode's
phase (progress = calls so far / the schedule's calls: below 1/3, below 2/3, the rest), commit
every hole left, in every block, with its proposal, and stop.

Ours: the authors average over a few answer positions they choose by hand (a math answer);
a fill has no such place, so we average over every hole still open. The gap is read with the
mask token left out, since it can never be committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..core import sampling
from .base import Revising, Revision, Window, check, setting
from .scheduled import Scheduled

PHASES = (1 / 3, 2 / 3)  # the authors' progress bounds between early, mid and late (0.33, 0.67)


@dataclass(frozen=True)
class Prophet(Revising, Scheduled):
    """Commits one hole per call until the model's answer has settled, then every hole left at once (Prophet)."""

    gap_early: float = setting(
        7.5,
        "settled: the gap between the top two choices (mean logit) that commits the rest in the first third of the "
        "steps",
    )  # authors: 7.5
    gap_mid: float = setting(5.0, "... in the second third")  # authors: 5.0
    gap_late: float = setting(2.5, "... in the last third")  # authors: 2.5

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("gap_early", "gap_mid", "gap_late"):
            check(getattr(self, name) >= 0, name, getattr(self, name), "must be >= 0")

    def reads(self, holes: Tensor, current: Tensor, upto: Tensor) -> Tensor:
        """It commits holes only: the active block's, or every one left once settled (its gap reads the logits, not
        the proposals). At temperature 0 it proposes the active block's alone, and the others' only once settled
        (`propose_unread`); a sample draws a number for every hole it reads, so then it reads them all at once."""
        return holes & current if self.temperature == 0 else holes

    def revise(self, window: Window, memory: dict[str, Any], rng: torch.Generator) -> Revision:
        if self.settled(window):
            rows = window.holes.nonzero().squeeze(-1)
            propose_unread(window, window.holes & ~self.reads(window.holes, window.current, window.upto), rng)
            return Revision(rows, window.conf[rows])
        active = window.holes & window.current  # (P,)
        k = sampling.even_split(
            window.block.holes, self.steps_for(window.block.holes, window.block.number, window.block.count)
        )[window.block.step]
        rows = sampling.top(window.conf.masked_fill(~active, -1.0), min(k, int(active.sum())))
        return Revision(rows, window.conf[rows])

    def settled(self, window: Window) -> bool:
        """Whether the mean top-2 gap over the open holes clears the bar of this phase of the schedule."""
        progress = window.calls / self.max_calls(window.span)
        bar = self.gap_early if progress < PHASES[0] else self.gap_mid if progress < PHASES[1] else self.gap_late
        holes = window.logits[window.holes]  # (H, V) a copy (indexed by a mask): the mask id is dropped in it
        return float(gap(sampling.without(holes, window.mask_id, copy=False)).mean()) >= bar


def propose_unread(window: Window, unread: Tensor, rng: torch.Generator) -> None:
    """The proposals of the `unread` rows (P,) bool, at temperature 0 (`reads` leaves rows out only then), written into
    the window's `ids` and `conf`: the same as reading them with the others, since a row's argmax and softmax do not
    depend on the other rows, and nothing is drawn."""
    rows = unread.nonzero().squeeze(-1)  # (R,)
    if rows.numel():
        ids, conf, _ = sampling.propose(window.logits[rows], 0.0, rng, window.mask_id, window.late_ids)
        window.ids[rows], window.conf[rows] = ids, conf


def gap(logits: Tensor) -> Tensor:
    """Top-1 minus top-2 logit of each row (H,)."""
    top = logits.float().topk(2, dim=-1).values  # (H, 2)
    return top[:, 0] - top[:, 1]
