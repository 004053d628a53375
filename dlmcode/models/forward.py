"""Batched forwards: one model call over several canvases of different lengths.

`ForwardBatch` is what a family offers for that (built-in: `padded` over the model's mask
argument; masked LMs: hf.make_forward_batch with attention_mask): right padding to the
longest, a key-padding mask so padded positions are never attended, rows cut back to each
length. A family without one is called once per request (`one_by_one`), which is trivially
the same at every batch size. Running several decodes so that they share these forwards is
dlmcode/jobs/batch.py's, above the models: models never see a job.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

ForwardBatch = Callable[[list[Tensor]], list[Tensor]]
"""[(L_i,) token ids] -> [(L_i, V) float32 logits], one forward for all of them."""


def pad(seqs: list[Tensor], pad_id: int) -> tuple[Tensor, Tensor]:
    """Right padding to the longest: ids (B, P) and keep (B, P), True at real positions."""
    longest = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), longest), pad_id, dtype=torch.long, device=seqs[0].device)  # (B, P)
    keep = torch.zeros((len(seqs), longest), dtype=torch.bool, device=seqs[0].device)  # (B, P)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        keep[i, : len(s)] = True
    return ids, keep


def padded(run: Callable[[Tensor, Tensor], Tensor], pad_id: int, device: torch.device) -> ForwardBatch:
    """A ForwardBatch over `run(ids (B, P), keep (B, P)) -> (B, P, V)` logits."""

    def forward_batch(seqs: list[Tensor]) -> list[Tensor]:
        ids, keep = pad([s.to(device, torch.long) for s in seqs], pad_id)
        with torch.inference_mode():
            logits = run(ids, keep)  # (B, P, V)
        return [logits[i, : len(s)].to(torch.float32, copy=True) for i, s in enumerate(seqs)]  # (L_i, V) each

    return forward_batch


def one_by_one(predict: Callable[[Tensor], Tensor]) -> ForwardBatch:
    """The fallback for a family without a batched forward: one predict call per request."""
    return lambda seqs: [predict(s) for s in seqs]
