"""Which weights a continued run's optimizer step may move, and how far: the expand objective's two step
rules (a faster [EXPAND] row, expand_lr_mult; only the tied [EXPAND] and [PAD] rows, end_rows_only)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from ..models.builtin import DlmcodeDiffusionLM
from .config import TrainConfig, expand_id


@contextlib.contextmanager
def faster_expand_row(model: DlmcodeDiffusionLM, cfg: TrainConfig) -> Iterator[None]:
    """Scale the optimizer's step on [EXPAND]'s embedding row by `expand_lr_mult`. Continuing a trained
    model, the lr is kept low so its weights move little, but the new row starts from the mean
    embedding and must travel far: AdamW's step is about lr a coordinate whatever the gradient's size,
    so the row gets mult x that step (its moments stay the optimizer's own; embeddings have no decay)."""
    mult = cfg.expand_lr_mult if cfg.expand else 1.0
    if mult == 1.0:
        yield
        return
    row = model.embed.weight[expand_id(cfg)]
    before = row.detach().clone()
    yield
    with torch.no_grad():
        row.copy_(before + mult * (row - before))


def end_rows(cfg: TrainConfig) -> bool:
    return cfg.expand and cfg.end_rows_only


@contextlib.contextmanager
def only_end_rows(model: DlmcodeDiffusionLM, cfg: TrainConfig) -> Iterator[None]:
    """With end_rows_only, the optimizer's step changes the tied [EXPAND] and [PAD] rows and nothing else:
    every other row's gradient is zeroed before the step and its weights put back after it (the layers
    have no gradient at all: loss_fn runs them without a graph). A decode that bans both tokens (every
    hole of given length) then computes exactly init's logits for every other token, so its tokens are
    init's. Ours: the gate of issue 28 (no loss at the oracle length) met by construction."""
    if not end_rows(cfg):
        yield
        return
    weight = model.embed.weight
    rows = torch.tensor([expand_id(cfg), model.cfg.pad_id])
    others = torch.ones(weight.shape[0], dtype=torch.bool)
    others[rows] = False
    if weight.grad is not None:
        weight.grad[others] = 0.0
    before = weight.detach()[others].clone()
    yield
    with torch.no_grad():
        weight[others] = before
