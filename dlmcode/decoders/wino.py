"""WINO, Wide-In Narrow-Out (arXiv 2507.18578; rule read from Feng-Hong/WINO-DLLM LLaDA/decoding.py, decoding_wino).

Wide in: each call commits the holes of the block whose confidence clears a low bar `tau_wide`
(at most `max_accept` of them, at least the most confident one). Narrow out: on the same call,
if more than one hole was committed, the tokens committed on earlier calls whose confidence has
fallen below a high bar `tau_narrow` are reopened; when as many as the previous call committed
fell below it, only the previous call's count less one, the least confident first.

Ours: the authors verify each committed token on a shadow copy of the block in which that
position is masked (a custom attention mask, one extra block of positions per call). `predict`
runs one sequence, so we read the verdict at the token's own, visible position on the next call
(Window.kept). With the built-in model that probability tracks the masked one (correlation
0.65-0.88 on four heldout-multi fills) but runs lower, so the same `tau_narrow` reopens more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .base import EMPTY, Remasking, Revision, Window, check, setting

FIRST_LAST_ACCEPT = (
    30  # the authors' code starts `last_accept` at 30, so the first call's narrow-out is uncapped in practice
)


@dataclass(frozen=True)
class Wino(Remasking):
    """Commits drafts readily, then takes back tokens the model has grown unsure of and fills them again (WINO)."""

    tau_wide: float = setting(
        0.7, "confidence (0-1) a hole needs to be committed; lower commits more per call"
    )  # wide in; authors' HumanEval/MBPP config: 0.7
    tau_narrow: float = setting(
        0.9, "a committed token the model grows less sure of than this (0-1) may be taken back"
    )  # narrow out; authors: 0.9
    accept_share: float = setting(
        0.7, "commits per call: at most this share of the block's holes ..."
    )  # authors' code: 0.7
    accept_min: int = setting(5, "... but that cap is never below this many ...")  # authors' code: 5
    accept_max: int = setting(20, "... nor above this many")  # authors' code: 20

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.tau_wide <= 1, "tau_wide", self.tau_wide, "must be in [0, 1]")
        check(0 <= self.tau_narrow <= 1, "tau_narrow", self.tau_narrow, "must be in [0, 1]")
        check(0 < self.accept_share <= 1, "accept_share", self.accept_share, "must be in (0, 1]")
        check(self.accept_min >= 1, "accept_min", self.accept_min, "must be >= 1")
        check(self.accept_max >= self.accept_min, "accept_max", self.accept_max, "must be >= accept_min")

    def reads(self, holes: Tensor, current: Tensor, upto: Tensor) -> Tensor:
        """It commits and reopens in the active block only."""
        return current

    def revise(self, window: Window, memory: dict[str, Any], rng: torch.Generator) -> Revision:
        active = window.holes & window.current  # (P,)
        commit = self.wide_in(window.conf, active)
        reopen = EMPTY.to(commit.device)
        if commit.numel() > 1:
            committed = ~window.holes & window.current  # (P,) committed before this call
            reopen = narrow_out(window.kept, committed, self.tau_narrow, memory.get("last_accept", FIRST_LAST_ACCEPT))
        memory["last_accept"] = commit.numel()
        return Revision(commit, window.conf[commit], reopen)

    def wide_in(self, conf: Tensor, active: Tensor) -> Tensor:
        """Rows to commit: active holes above tau_wide, at most the cap (the most confident), at least the best."""
        scores = conf.masked_fill(~active, -1.0)  # (P,) below any probability
        cap = min(max(int(int(active.sum()) * self.accept_share), self.accept_min), self.accept_max)
        rows = (scores > self.tau_wide).nonzero().squeeze(-1)
        if rows.numel() > cap:
            rows = scores.topk(cap).indices
        if rows.numel() == 0:
            rows = scores.argmax().reshape(1)
        return rows


def narrow_out(kept: Tensor, committed: Tensor, tau: float, last_accept: int) -> Tensor:
    """Committed rows below `tau`, least confident first; when `last_accept` or more fell, only last_accept - 1."""
    scores = kept.masked_fill(~committed, float("inf"))  # (P,)
    low = int((scores < tau).sum())
    count = low if low < last_accept else last_accept - 1
    return scores.topk(count, largest=False).indices if count > 0 else EMPTY.to(kept.device)
