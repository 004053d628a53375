"""Saber: adaptive acceleration and backtracking remasking for code (arXiv 2510.18165; rule read
from zhaoyMa/Saber decoding.py, generate_with_saber).

Adaptive acceleration: a hole is committed when its confidence beats the mean confidence the
tokens committed so far had when they were committed (1 before any commit), and at least
`at_least` holes are committed per call; as the code settles, more clear the bar.
Backtracking: after committing, if holes remain, the committed tokens (this call's included)
whose top probability fell most since the previous call are reopened:
max(at_least // 2, ceil(commits x backtrack)) of them, always fewer than this call's commits,
so every call gains at least one token and a decode takes at most one call per hole.

As in the authors' code, confidence is the probability of the position's proposal (its argmax
at temperature 0), read at every position of the blocks so far, committed ones at their
visible positions, and a position's first reading counts as a rise from 0. It is scored as theirs is,
by a softmax in the logits' own precision (float32 here; `precision`), not LLaDA's float64. Ours: a token
reopened in the same call it was committed is simply not committed (the Step contract: only
tokens committed earlier are reopened).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from .base import BaseDecoder, Remasking, Revision, Window, check, setting


@dataclass(frozen=True)
class Saber(Remasking):
    """Commits more per call as the fill grows surer, and takes back the tokens whose confidence fell most (Saber)."""

    at_least: int = setting(2, "holes committed per call at least")  # the authors' n = 2
    backtrack: float = setting(
        0.125, "tokens taken back per call, as a share of the call's commits (at least at_least // 2)"
    )  # authors' code: 1/8

    precision: ClassVar[torch.dtype] = torch.float32  # its code: F.softmax(logits), confidences kept in float32

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.at_least >= 1, "at_least", self.at_least, "must be >= 1")
        check(0 <= self.backtrack < 1, "backtrack", self.backtrack, "must be in [0, 1)")

    def max_calls(self, n_holes: int) -> int:
        """Every call commits more tokens than it reopens: one call per hole at most (guarded, a
        call may commit one token only, so the reopen budget counts too)."""
        return BaseDecoder.max_calls(self, n_holes) + (self.reopens(n_holes) if self.guard else 0)

    def reads(self, holes: Tensor, current: Tensor, upto: Tensor) -> Tensor:
        """It reads the blocks so far only."""
        return upto

    def revise(self, window: Window, memory: dict[str, Any], rng: torch.Generator) -> Revision:
        seen = window.conf.masked_fill(~window.upto, float("-inf"))  # (P,)
        last = memory["last"] if "last" in memory else torch.zeros_like(seen)  # (P,)
        drop = torch.where(
            seen.isfinite() & last.isfinite(), seen - last, float("inf")
        )  # (P,) change since the last call
        memory["last"] = seen
        if "final" not in memory:  # (P,) confidence each position was last committed with
            memory["final"] = torch.full_like(seen, float("-inf"))
        final = memory["final"]
        commit = self.accelerate(seen, final, window.holes & window.upto)
        final[commit] = seen[commit]
        left = window.holes & window.upto  # (P,)
        left[commit] = False
        if not bool(left.any()):
            return Revision(commit, seen[commit])
        filled = ~left & window.upto  # (P,) committed after this call's commits
        rows = filled.nonzero().squeeze(-1)  # only committed rows may be taken back (a hole's drop may be inf too)
        reopen = rows[drop[rows].topk(self.backtracked(commit.numel(), len(rows)), largest=False).indices]
        return settle(commit, seen[commit], reopen)

    def accelerate(self, conf: Tensor, final: Tensor, active: Tensor) -> Tensor:
        """Active rows whose confidence beats the mean commit confidence so far (1 if none); at least `at_least`."""
        done = final.isfinite()  # (P,)
        bar = float(final[done].mean()) if bool(done.any()) else 1.0
        scores = conf.masked_fill(~active, float("-inf"))  # (P,)
        rows = (scores > bar).nonzero().squeeze(-1)
        if rows.numel() < self.at_least:
            rows = scores.topk(min(self.at_least, int(active.sum()))).indices
        return rows

    def backtracked(self, commits: int, committed: int) -> int:
        """How many to reopen: max(n // 2, ceil(commits x backtrack)), fewer than the commits, at most the committed."""
        count = max(self.at_least // 2, math.ceil(commits * self.backtrack))
        return max(0, min(count, commits - 1, committed))


def settle(commit: Tensor, scores: Tensor, reopen: Tensor) -> Revision:
    """Rows both committed and reopened in one call stay holes: drop them from both."""
    both = torch.isin(commit, reopen)
    return Revision(commit[~both], scores[~both], reopen[~torch.isin(reopen, commit)])
