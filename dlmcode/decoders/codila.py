"""CoDiLA (arXiv 2603.20216): a small autoregressive assistant decodes each block of holes from
the dLLM's marginals, so tokens committed together come from one joint, not independent marginals.

Blocks are the holes split, in position order, into contiguous runs of at most `block` holes;
the candidates are the first `window` of them (the paper's window of 10 blocks; its exact rule
is UNVERIFIED). One dLLM call per step; the assistant runs on all candidates in one batch.
  static:  commit the whole candidate block with the lowest mean assistant entropy h(B);
  dynamic: commit the longest prefix k of the leftmost block with h(k) <= tau (k >= 2), else
           the one most confident hole of the window by the dLLM;
  verify:  the dLLM's threshold schedule over the window's holes, with the confidence of holes
           where the assistant's top-1 differs from the dLLM's top-1 lowered (form UNVERIFIED).
The assistant is passed in (`dataclasses.replace(decoder, assistant=...)`; dlmcode.jobs.wiring.with_assistant
does it for the CLI): decoders load nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from ..core import sampling
from ..core.assistant import TRAIN_HINT, Assistant, decode, marginals
from ..core.canvas import At, Canvas, Predict, Step, logits_at
from ..core.errors import ModelError
from .base import BaseDecoder, check, open_gate, setting, with_holes
from .threshold import select as threshold_select


@dataclass(frozen=True)
class Codila(BaseDecoder):
    """A small left-to-right assistant writes each run of `block` holes from the model's predictions, so a run agrees
    (CoDiLA)."""

    block: int = setting(4, "holes the assistant writes together as one run")  # CoDiLA's block B
    mode: Literal["static", "dynamic", "verify"] = setting(
        "static",
        "static: commit the assistant's surest run each call; dynamic: as much of a run as it is sure of; verify: it "
        "vetoes the model's commits",
    )
    window: int = setting(10, "runs the assistant considers per call, from the left (the paper's 10)")
    tau: float = setting(
        0.5, "dynamic: how unsure (mean entropy, nats) the assistant may be of what it commits; lower commits less"
    )  # paper: 0.2, 0.5
    threshold: float = setting(
        0.9, "verify: confidence (0-1) a hole needs to be committed alongside others"
    )  # Fast-dLLM's threshold
    penalty: float = setting(
        0.5, "verify: how much (0-1) a hole's confidence drops where the assistant disagrees with the model"
    )  # conf *= 1 - penalty (our choice)
    assistant: str | Assistant | None = field(default=None, repr=False, compare=False)  # set by the caller

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.block >= 1, "block", self.block, "must be >= 1")
        check(self.mode in MODES, "mode", self.mode, f"must be one of {'|'.join(MODES)}")
        check(self.window >= 1, "window", self.window, "must be >= 1")
        check(self.tau >= 0, "tau", self.tau, "must be >= 0")
        check(0 <= self.threshold <= 1, "threshold", self.threshold, "must be in [0, 1]")
        check(0 <= self.penalty <= 1, "penalty", self.penalty, "must be in [0, 1]")

    def __call__(self, canvas: Canvas, predict: Predict, rng: torch.Generator) -> Iterator[Step]:
        if canvas.n_holes and self.assistant is None:
            raise ModelError(f"codila needs an assistant for this model; {TRAIN_HINT}")
        if canvas.n_holes and isinstance(self.assistant, str):
            raise ModelError(
                f"codila: assistant {self.assistant!r} is a path; load it with dlmcode.jobs.wiring.with_assistant"
            )
        gate = open_gate(self, canvas)
        for index in range(canvas.n_holes):  # every step commits at least one hole (guarded too)
            if not canvas.n_holes:
                return
            blocks = candidates(canvas, self.block, self.window)
            logits = read(predict, canvas, blocks, gate is not None)
            pos, ids, scores, from_assistant = MODES[self.mode](self, logits, canvas, blocks, rng)
            if gate is not None:
                pos, ids, scores = gate.admit(canvas.tokens, logits, pos, ids, scores)
            canvas = canvas.fill(pos, ids.to(canvas.tokens.device))
            yield Step(index, canvas, pos, scores, index + 1, {"assistant": float(from_assistant)})


def read(predict: Predict, canvas: Canvas, blocks: list[Tensor], every: bool) -> At:
    """The logits of the window's holes, read by position (`every` hole's too for a guarded decode: the guard drafts
    every hole; never the user's code around them)."""
    rows = torch.cat(blocks)  # (H,) in position order
    if every:
        return with_holes(predict, canvas, rows)
    return At(logits_at(predict, canvas.tokens, rows), rows, len(canvas.tokens))


def candidates(canvas: Canvas, size: int, window: int) -> list[Tensor]:
    """The first `window` blocks: each contiguous run of holes split into pieces of <= `size`."""
    holes = canvas.holes.nonzero().squeeze(-1)  # (H,)
    runs = torch.tensor_split(holes, (torch.diff(holes) > 1).nonzero().squeeze(-1).add(1).tolist())
    return [piece for run in runs for piece in run.split(size)][:window]


def run_groups(
    decoder: Codila, logits: Tensor, blocks: list[Tensor], mask_id: int, temperature: float, rng: torch.Generator
) -> list[tuple[list[int], Tensor, Tensor]]:
    """The assistant's decode of the blocks, a batch per block length: (which blocks, ids (N, B), entropies (N, B))."""
    assistant = decoder.assistant
    device = assistant.table.device
    out = []
    for length in sorted({len(b) for b in blocks}):
        group = [i for i, b in enumerate(blocks) if len(b) == length]
        probs = marginals(block_rows(logits, blocks, group, length).to(device), assistant.vocab)  # (N, B, vocab)
        ids, entropies = decode(assistant, probs, temperature, rng, banned=mask_id)  # (N, B), (N, B)
        out.append((group, ids.cpu(), entropies.cpu()))
    return out


def block_rows(logits: Tensor | At, blocks: list[Tensor], group: list[int], length: int) -> Tensor:
    """The logits of the group's blocks (N, B, V). When the group is every block and `logits` holds the blocks' rows
    only, in their order (what `read` makes), they are those rows as they are: no copy."""
    if isinstance(logits, At) and len(group) == len(blocks) and len(logits.logits) == len(blocks) * length:
        return logits.logits.reshape(len(blocks), length, -1)
    return logits[torch.stack([blocks[i] for i in group])]


def run_assistant(
    decoder: Codila, logits: Tensor, blocks: list[Tensor], mask_id: int, temperature: float, rng: torch.Generator
) -> list[tuple[Tensor, Tensor]]:
    """(ids, entropies) of the assistant's decode of each block; blocks of one length share a batch."""
    out: list[tuple[Tensor, Tensor]] = [None] * len(blocks)  # type: ignore[list-item]
    for group, ids, entropies in run_groups(decoder, logits, blocks, mask_id, temperature, rng):
        for row, i in enumerate(group):
            out[i] = (ids[row], entropies[row])
    return out


def late(ids: Tensor, late_ids: tuple[int, ...]) -> Tensor:
    """Which ids are to be committed last (Canvas.late_ids, e.g. end-of-text)."""
    return (
        torch.isin(ids, torch.tensor(late_ids, dtype=ids.dtype))
        if late_ids
        else torch.zeros_like(ids, dtype=torch.bool)
    )


def static(d: Codila, logits: Tensor, canvas: Canvas, blocks: list[Tensor], rng: torch.Generator):
    """The candidate block with the lowest mean entropy, whole; blocks holding a late id rank last."""
    keys: list[tuple[bool, float]] = [None] * len(blocks)  # type: ignore[list-item]
    decoded: list[tuple[Tensor, Tensor]] = [None] * len(blocks)  # type: ignore[list-item]
    for group, ids, ent in run_groups(d, logits, blocks, canvas.mask_id, d.temperature, rng):
        # a group's rows at once: a row's mean here has the bits of its own (tests/test_codila.py)
        for row, key in enumerate(zip(late(ids, canvas.late_ids).any(-1).tolist(), ent.mean(-1).tolist(), strict=True)):
            keys[group[row]], decoded[group[row]] = key, (ids[row], ent[row])
    best = min(range(len(blocks)), key=keys.__getitem__)
    return blocks[best], decoded[best][0], decoded[best][1], len(blocks[best])


def prefix_length(entropies: Tensor, tau: float) -> int:
    """The largest k with mean(entropies[:k]) <= tau (0 when none)."""
    means = entropies.cumsum(0) / torch.arange(1, len(entropies) + 1)  # (B,)
    ok = (means <= tau).nonzero()
    return int(ok[-1]) + 1 if len(ok) else 0


def dynamic(d: Codila, logits: Tensor, canvas: Canvas, blocks: list[Tensor], rng: torch.Generator):
    """The longest low-entropy prefix of the leftmost block; one dLLM-confidence token when k < 2."""
    ((ids, ent),) = run_assistant(d, logits, blocks[:1], canvas.mask_id, d.temperature, rng)
    k = prefix_length(ent.masked_fill(late(ids, canvas.late_ids), math.inf), d.tau)
    if k >= 2:
        return blocks[0][:k], ids[:k], ent[:k], k
    holes = torch.cat(blocks)  # (H,)
    ids, conf = propose(d, logits[holes], canvas, rng)
    best = conf.argmax().view(1)
    return holes[best], ids[best], conf[best], 0


def propose(d: Codila, rows: Tensor, canvas: Canvas, rng: torch.Generator) -> tuple[Tensor, Tensor]:
    """The dLLM's own proposals and confidences for these rows, as the block decoders make them."""
    ids, conf, _ = sampling.propose(rows, d.temperature, rng, canvas.mask_id, canvas.late_ids)  # (H,), (H,)
    return ids.cpu(), conf.cpu()


def penalize(conf: Tensor, dlm_top: Tensor, assistant_top: Tensor, penalty: float) -> Tensor:
    """Confidence times 1 - penalty where the assistant's top-1 differs from the dLLM's."""
    return torch.where(dlm_top == assistant_top, conf, conf * (1 - penalty))


def verify(d: Codila, logits: Tensor, canvas: Canvas, blocks: list[Tensor], rng: torch.Generator):
    """Threshold commits over the window's holes, with the assistant's disagreements penalised."""
    holes = torch.cat(blocks)  # (H,)
    rows = logits[holes]  # (H, V)
    ids, conf = propose(d, rows, canvas, rng)
    checked = torch.cat([ids for ids, _ in run_assistant(d, logits, blocks, canvas.mask_id, 0.0, rng)])  # greedy top-1s
    conf = penalize(conf, sampling.argmax_without(rows, canvas.mask_id).cpu(), checked, d.penalty)
    pick = threshold_select(conf, d.threshold)
    return holes[pick], ids[pick], conf[pick], int((ids[pick].cpu() == checked[pick]).sum())


MODES = {"static": static, "dynamic": dynamic, "verify": verify}
