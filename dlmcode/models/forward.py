"""Batched forwards: one model call over several canvases of different lengths.

`ForwardBatch` is what a family offers for that (built-in: `padded` over the model's mask
argument; masked LMs: hf.make_forward_batch with attention_mask): right padding to the
longest, a key-padding mask so padded positions are never attended, rows cut back to each
length. A family without one is called once per request (`one_by_one`), which is trivially
the same at every batch size. Running several decodes so that they share these forwards is
dlmcode/jobs/batch.py's, above the models: models never see a job.

Rows on demand (core/canvas.Predict): a model runs every position through its layers (it is
bidirectional: every position is attended), then `head_rows` runs the output head and the
float conversion on the rows a caller reads only. A family whose head is shifted by one
(Dream: position i is scored from hidden state i - 1) says so with `shift`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..core.canvas import logits_at, rowwise

ForwardBatch = Callable[..., list[Tensor]]
"""[(L_i,) token ids] -> [(L_i, V) float32 logits], one forward for all of them. One that
`takes_rows` (core/canvas.rowwise) also takes `rows`, one (R_i,) tensor of positions (or None)
per canvas, and returns [(R_i, V)]."""

Hidden = Callable[..., Tensor]
"""ids (B, n) [, start, kv, mask] -> final hidden states (B, n, D), before the output head."""


def source(rows: Tensor, shift: int) -> Tensor:
    """The hidden-state rows that score positions `rows`: row i - shift (position 0 scores from itself,
    as Dream's own sampler pads its shifted logits)."""
    return (rows - shift).clamp_min_(0) if shift else rows


def head_rows(head: Callable[[Tensor], Tensor], hidden: Tensor, rows: Tensor | None, shift: int = 0) -> Tensor:
    """hidden (L, D) -> float32 logits (R, V) of positions `rows` ((L, V) for None).

    Run outside inference mode (under no_grad), so the logits are an ordinary tensor a caller
    may edit in place, without the copy an inference tensor would need.
    """
    if rows is None:
        picked = hidden if not shift else hidden[source(torch.arange(len(hidden), device=hidden.device), shift)]
    else:
        picked = hidden[source(rows.to(hidden.device, torch.long), shift)]  # (R, D)
    with torch.no_grad():
        return head(picked).float()  # (R, V)


def make_predict(
    hidden: Hidden, head: Callable[[Tensor], Tensor], device: torch.device, shift: int = 0, narrow: bool = False
):
    """A Predict that takes rows (core/canvas.Predict) over a model's hidden states and head. `narrow`:
    `hidden` takes `rows` too and runs its last layer for those positions only (the native models)."""

    def predict(tokens: Tensor, rows: Tensor | None = None) -> Tensor:
        ids = tokens.to(device, torch.long)[None]  # (1, L)
        if rows is None or not narrow:
            with torch.inference_mode():
                states = hidden(ids)[0]  # (L, D)
            return head_rows(head, states, rows, shift)
        picked, where = torch.unique(source(rows.to(device, torch.long), shift), return_inverse=True)  # sorted
        with torch.inference_mode():
            states = hidden(ids, rows=picked)[0]  # (P, D): the hidden states the rows are scored from
        return head_rows(head, states, where)  # (R, V)

    return rowwise(predict)


def pad(seqs: list[Tensor], pad_id: int) -> tuple[Tensor, Tensor]:
    """Right padding to the longest: ids (B, P) and keep (B, P), True at real positions."""
    longest = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), longest), pad_id, dtype=torch.long, device=seqs[0].device)  # (B, P)
    keep = torch.zeros((len(seqs), longest), dtype=torch.bool, device=seqs[0].device)  # (B, P)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        keep[i, : len(s)] = True
    return ids, keep


def padded(
    hidden: Callable[[Tensor, Tensor], Tensor],
    head: Callable[[Tensor], Tensor],
    pad_id: int,
    device: torch.device,
    shift: int = 0,
) -> ForwardBatch:
    """A ForwardBatch over `hidden(ids (B, P), keep (B, P)) -> (B, P, D)`, the head on each canvas's rows."""

    def forward_batch(seqs: list[Tensor], rows: list[Tensor | None] | None = None) -> list[Tensor]:
        ids, keep = pad([s.to(device, torch.long) for s in seqs], pad_id)
        with torch.inference_mode():
            states = hidden(ids, keep)  # (B, P, D)
        wanted = rows or [None] * len(seqs)
        return [
            head_rows(head, states[i, : len(s)], r, shift) for i, (s, r) in enumerate(zip(seqs, wanted, strict=True))
        ]

    return rowwise(forward_batch)


def one_by_one(predict: Callable[..., Tensor]) -> ForwardBatch:
    """The fallback for a family without a batched forward: one predict call per request."""

    def forward_batch(seqs: list[Tensor], rows: list[Tensor | None] | None = None) -> list[Tensor]:
        return [logits_at(predict, s, r) for s, r in zip(seqs, rows or [None] * len(seqs), strict=True)]

    return rowwise(forward_batch)
