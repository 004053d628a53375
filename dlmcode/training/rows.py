"""Which weights a continued run's optimizer step may move, and how far: the expand objective's two step
rules (a faster [EXPAND] row, expand_lr_mult; only the tied [EXPAND] and [PAD] rows, end_rows_only)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
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
    """The layers are frozen: only the tied [EXPAND] and [PAD] rows learn, or only a side branch."""
    return cfg.expand and (cfg.end_rows_only or cfg.side_layers > 0)


def start_side(model: DlmcodeDiffusionLM, cfg: TrainConfig) -> None:
    """A side branch starts giving init's own [EXPAND] and [PAD] logits (models/side.start_from), or those of
    the tied rows in checkpoint `side_rows` (an end_rows_only run)."""
    weight = model.embed.weight.detach()
    if cfg.side_rows:
        weight = torch.load(cfg.side_rows, map_location="cpu", weights_only=False)["model"]["embed.weight"].float()
    model.side.start_from(model.norm, weight[expand_id(cfg)], weight[model.cfg.pad_id])


@contextlib.contextmanager
def only_end_rows(model: DlmcodeDiffusionLM, cfg: TrainConfig) -> Iterator[None]:
    """With end_rows_only, the optimizer's step changes the tied [EXPAND] and [PAD] rows and nothing else:
    every other row's gradient is zeroed before the step and its weights put back after it (the layers
    have no gradient at all: loss_fn runs them without a graph). A decode that bans both tokens (every
    hole of given length) then computes exactly init's logits for every other token, so its tokens are
    init's. Ours: the gate of issue 28 (no loss at the oracle length) met by construction."""
    if not end_rows(cfg) or model.side is not None:  # a side branch: the trunk has no gradient at all
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


@torch.no_grad()
def expand_report(model: DlmcodeDiffusionLM, stream, line_end, cfg: TrainConfig, autocast, windows: int = 32) -> dict:
    """How well [EXPAND] and the delete are told apart from other targets on held-out expand examples (fixed
    seed 4321): at masked positions, the binary cross-entropy of p([EXPAND]) against "the target is
    [EXPAND]" next to the base rate's entropy (what a constant guess scores), the same for [PAD], and the
    mean log p([EXPAND]) where it is the target. A readout that learned nothing sits at the base rate."""
    from dataclasses import replace

    from .batches import batch

    only = replace(cfg, p_iid=0.0, p_suffix=0.0, p_expand=1.0)
    rng = np.random.default_rng(4321)
    was = model.training
    model.eval()
    probs, targets = [], []
    for _ in range(max(1, windows // cfg.batch)):
        inp, tgt, msk = batch(stream, line_end, only, rng)
        with autocast():
            logp = torch.log_softmax(model(inp)[msk].float(), -1)
        probs.append(logp[:, [expand_id(cfg), model.cfg.pad_id]])
        targets.append(tgt[msk])
    model.train(was)
    logp, tgt = torch.cat(probs), torch.cat(targets)
    report = {"masked": len(tgt)}
    for j, (name, token) in enumerate((("expand", expand_id(cfg)), ("delete", model.cfg.pad_id))):
        label = (tgt == token).float()
        rate = float(label.mean().clamp(1e-6, 1 - 1e-6))
        p = logp[:, j].exp().clamp(1e-6, 1 - 1e-6)
        bce = float(-(label * p.log() + (1 - label) * (1 - p).log()).mean())
        prior = -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate))
        report.update({f"{name}_rate": rate, f"{name}_bce": bce, f"{name}_prior": float(prior)})
        report[f"{name}_logp_at_target"] = float(logp[label > 0, j].mean()) if label.any() else None
    return report
