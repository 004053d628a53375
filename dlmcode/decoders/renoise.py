"""DiffusionGemma's sampler: entropy-bound acceptance over the whole block, the rest renoised, argmax at the end.

At every call the whole block is decided anew (transformers' EntropyBoundSampler with its
generate's stopping rule, restated): a token is sampled at every position of the block; the
positions are sorted by the entropy of their distribution, lowest first, and the longest
prefix whose entropies sum, less its largest, to at most `bound` is accepted (an upper bound
on the mutual information of the accepted tokens, EB-sampler, arXiv 2505.24857); every other
position goes back to being a hole, which a noise canvas shows as fresh noise at the next
call (core/canvas.py). Positions accepted before are taken back and decided again, so each
step reopens what the block holds and commits what it accepts. The block ends when the
argmax of every position has stayed the same for `stability` calls and the mean entropy is
under `confidence`, or after `steps` calls; the block is then the argmax at every position
(not the last sample), committed in that last call's step.

Its generate draws a sample and a renoising of the block at the last call too and throws them
away; so does this decoder (from the decode's generator), so that a seed gives its tokens exactly.
It decides where the logits are (no block of rows is copied to the CPU): on the CPU it draws from the
decode's generator, making only the accepted rows' numbers and advancing past the others'; on another
device (a GPU) from a generator there seeded by one draw from it, every row's numbers at once, as
torch.multinomial draws them there.
On a masked canvas it runs the same way (a reopened position is the mask token again).
Guarded, the last call commits what the guard admits of the argmax, and the holes left are
filled by argmax, one call each at least, as the shared loops do.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..core import sampling
from ..core.canvas import Canvas, Predict, Step, logits_at
from .base import EMPTY, Revising, blocks, check, open_gate, setting, with_holes

SKIP_CHUNK = 1 << 16  # 64-bit numbers `skip` draws at a time, into a buffer of 512 KiB kept per thread
SKIPPED = threading.local()  # each thread's buffer (decodes run one per thread in the server)


@dataclass(frozen=True)
class Renoise(Revising):
    """DiffusionGemma's own sampler: accept the lowest-entropy tokens under an entropy bound, renoise the rest,
    end on a stable, confident argmax.

    Every call decides the whole block again; `steps` calls at most per block.
    """

    temperature: float = setting(
        1.0, "samples from softmax(logits / T) (the family's schedule already applied); 0 = argmax"
    )
    steps: int = setting(48, "calls per block at most (DiffusionGemma's max_denoising_steps)")
    bound: float = setting(
        0.1, "entropy bound (nats): accepted tokens' entropies, less the largest, sum to at most this"
    )
    stability: int = setting(1, "calls the argmax must stay the same before a block may end (0: no such condition)")
    confidence: float = setting(0.005, "mean entropy (nats) under which a block may end")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.steps >= 1, "steps", self.steps, "must be >= 1")
        check(self.bound > 0, "bound", self.bound, "must be > 0")
        check(self.stability >= 0, "stability", self.stability, "must be >= 0")
        check(self.confidence > 0, "confidence", self.confidence, "must be > 0")

    def reopens(self, n_holes: int) -> int:
        """Each call but a block's first may take back every position of the block."""
        return (self.steps - 1) * n_holes

    def max_calls(self, n_holes: int) -> int:
        """`steps` calls per block (a block holds a hole at least); guarded, one more per hole at most."""
        return self.steps * n_holes + (n_holes if self.guard else 0)

    def __call__(self, canvas: Canvas, predict: Predict, rng: torch.Generator) -> Iterator[Step]:
        state: dict[str, Any] = {"calls": 0, "index": 0}  # and "rng": the generator that draws on the logits' device
        gate = open_gate(self, canvas)
        for number, positions in enumerate(blocks(canvas, self.block)):
            for step in self.block_steps(canvas, positions, number, predict, rng, gate, state):
                canvas = step.canvas
                yield step

    def block_steps(
        self,
        canvas: Canvas,
        positions: Tensor,
        number: int,
        predict: Predict,
        rng: torch.Generator,
        gate: object,
        state: dict[str, Any],
    ) -> Iterator[Step]:
        history: Tensor | None = None
        for call in range(self.steps):
            logits = rows_of(predict, canvas, positions, gate)  # (n, V); guarded: every hole's too, by position
            # the call's own rows (or a copy cut from every row): the mask column is dropped in place
            rows = sampling.without(block_rows(logits, positions, gate), canvas.mask_id, copy=False)  # (n, V)
            if "rng" not in state:
                state["rng"] = sampling.generator_on(rows.device, rng)
            entropy = categorical_entropy(rows)  # (n,) as its generate computes it
            best = sampling.argmax(rows)  # (n,)
            stable, history = self.stable(best, history)
            last = call == self.steps - 1 or (stable and bool(entropy.mean() < self.confidence))
            # a token is drawn at every position, at the last call too, as its generate draws them; only those
            # accepted are read, so only theirs are made (the others' numbers are drawn past)
            take = torch.ones_like(best, dtype=torch.bool) if last else accept(entropy, self.bound)
            drawn, probs = self.sample(rows, take if not last else None, state["rng"])
            ids = best if last else drawn
            canvas, step = self.commit(canvas, logits, positions, ids, take, rows, gate, state, number, True, probs)
            yield step
            if last:
                gen = state["rng"]  # the renoising its generate drops
                torch.randint(0, rows.shape[-1], (len(positions),), generator=gen, device=gen.device)
                break
        while bool(canvas.holes[positions].any()):  # guarded: what the guard left of the argmax
            logits = rows_of(predict, canvas, positions, gate)  # the guard reads every hole
            rows = sampling.without(block_rows(logits, positions, gate), canvas.mask_id)  # (n, V)
            holes = canvas.holes[positions].to(rows.device)  # (n,)
            canvas, step = self.commit(
                canvas, logits, positions, sampling.argmax(rows), holes, rows, gate, state, number, False
            )
            yield step

    def stable(self, best: Tensor, history: Tensor | None) -> tuple[bool, Tensor | None]:
        """Whether the argmax equals that of each of the last `stability` calls (never true before that many)."""
        if self.stability == 0:
            return True, None
        if history is None:
            history = torch.full((self.stability, len(best)), -1, dtype=best.dtype, device=best.device)  # (S, n)
        same = bool((history == best[None]).all())
        history = torch.roll(history, shifts=-1, dims=0)
        history[-1] = best
        return same, history

    def sample(self, rows: Tensor, read: Tensor | None, rng: torch.Generator) -> tuple[Tensor, Tensor | None]:
        """A token per row from softmax(rows / T) as torch.multinomial draws it (as its generate draws), or argmax at
        T = 0; and softmax(rows[read]) when it was computed here (T = 1, float32 rows), for the commit scores.

        `read` (n,) bool: the rows whose token is read (None: none); the generator advances as for every row, but
        only the read rows' tokens are drawn (the others' ids are -1); on the CPU only their numbers are made.
        `rng` draws where `rows` are."""
        if self.temperature == 0:
            return sampling.argmax(rows), None
        read = torch.zeros(len(rows), dtype=torch.bool, device=rows.device) if read is None else read
        picked = rows[read]  # (k, V): a row's softmax and draw do not depend on the other rows
        scaled = picked if self.temperature == 1 else picked / self.temperature
        probs = torch.softmax(scaled, dim=-1, dtype=torch.float32)  # (k, V)
        # then probs is softmax(rows[read]) itself
        same = self.temperature == 1 and rows.dtype == torch.float32 and bool(read.any())
        ids = torch.full((len(rows),), -1, dtype=torch.long, device=rows.device)
        some = multinomial_some if rows.device.type == "cpu" else multinomial_all
        ids[read] = some(probs, read, rows.shape[-1], rng)
        return ids, probs if same else None

    def commit(
        self,
        canvas: Canvas,
        logits: Tensor,
        positions: Tensor,
        ids: Tensor,
        take: Tensor,
        rows: Tensor,
        gate: object,
        state: dict[str, Any],
        number: int,
        renew: bool,
        probs: Tensor | None = None,
    ) -> tuple[Canvas, Step]:
        """Take back what the block holds (when `renew`), commit `ids` where `take` (through the guard), as one Step.
        `probs`: softmax(rows[take]) when the sampler made it (a row's softmax does not depend on the other rows)."""
        back = positions[~canvas.holes[positions]] if renew else EMPTY
        canvas = canvas.reopen(back) if back.numel() else canvas
        pos, new = positions[take.to(positions.device)], ids[take].to(canvas.tokens.device)
        taken = torch.softmax(rows[take], dim=-1) if probs is None else probs  # (k, V)
        scores = taken.gather(-1, ids[take][:, None]).squeeze(-1).to(positions.device)  # (k,) their probability
        if gate is not None and pos.numel():
            pos, new, scores = gate.admit(canvas.tokens, logits, pos, new, scores)
        canvas = canvas.fill(pos, new)
        state["calls"] += 1
        step = Step(state["index"], canvas, pos, scores, state["calls"], {"block": number}, back)
        state["index"] += 1
        return canvas, step


def categorical_entropy(rows: Tensor) -> Tensor:
    """(n,) torch.distributions.Categorical(logits=rows).entropy(), the same operations in the same order (so the
    same bits) without building the distribution, whose argument checks cost two more passes over (n, V)."""
    logits = rows - rows.logsumexp(dim=-1, keepdim=True)  # (n, V) normalised, as Categorical stores them
    probs = torch.softmax(logits, dim=-1)  # its `probs`
    return -(logits.clamp_(min=torch.finfo(logits.dtype).min).mul_(probs)).sum(-1)


def multinomial_one(probs: Tensor, rng: torch.Generator) -> Tensor:
    """(n,) torch.multinomial(probs, 1, generator=rng) for rows of probabilities, drawn as it draws one sample: an
    Exp(1) number per entry from `rng`, then argmax(probs / q), without its checks of the whole input
    (tests/test_diffusion_gemma.py holds it to torch.multinomial and to transformers' generate)."""
    q = torch.empty_like(probs).exponential_(1, generator=rng)  # (n, V)
    return sampling.argmax(torch.div(probs, q, out=q))


def multinomial_some(probs: Tensor, read: Tensor, vocab: int, rng: torch.Generator) -> Tensor:
    """(k,) multinomial_one's tokens of the rows `read` (n,) bool of an (n, vocab) draw, whose probabilities
    `probs` (k, vocab) are: the generator gives its numbers in row order, vocab to a row, and the rows not read
    are drawn past (as int64, one number each, as an Exp(1) number takes one), so the generator ends where
    multinomial_one leaves it and each read row gets the numbers it would have had."""
    q = torch.empty_like(probs)  # (k, vocab)
    done = 0
    for r, row in enumerate(read.nonzero().squeeze(-1).tolist()):
        skip(rng, (row - done) * vocab)
        q[r].exponential_(1, generator=rng)
        done = row + 1
    skip(rng, (len(read) - done) * vocab)
    return sampling.argmax(torch.div(probs, q, out=q))


def multinomial_all(probs: Tensor, read: Tensor, vocab: int, rng: torch.Generator) -> Tensor:
    """multinomial_some's tokens, with every row's Exp(1) numbers made, all at once (n, vocab), as torch.multinomial
    makes them: where drawing is cheap (a GPU) and advancing the generator past a row is not one of its operations."""
    q = torch.empty((len(read), vocab), dtype=probs.dtype, device=probs.device).exponential_(1, generator=rng)
    return sampling.argmax(torch.div(probs, q[read]))


def skip(rng: torch.Generator, count: int) -> None:
    """Advance `rng` past `count` of its 64-bit numbers (what `count` Exp(1) draws of exponential_ consume), drawn
    SKIP_CHUNK at a time into one buffer of this thread's: the generator gives its numbers in order however they are
    cut, and no (count,) buffer is made at every call (at a 262k vocabulary, 31 rows' worth was 65 MB a call)."""
    buffer = getattr(SKIPPED, "buffer", None)
    if buffer is None:
        buffer = SKIPPED.buffer = torch.empty(SKIP_CHUNK, dtype=torch.int64)
    while count > 0:
        n = min(count, SKIP_CHUNK)
        buffer[:n].random_(generator=rng)
        count -= n


def rows_of(predict: Predict, canvas: Canvas, positions: Tensor, gate: object) -> Tensor:
    """The block's logits (n, V); guarded, its rows and every hole's, by canvas position (base.with_holes)."""
    if gate is None:
        return logits_at(predict, canvas.tokens, positions)
    return with_holes(predict, canvas, positions)  # type: ignore[return-value]


def block_rows(logits: Tensor, positions: Tensor, gate: object) -> Tensor:
    """The block's rows: the call's own when it computed only them, else cut out of (L, V) (a guarded call)."""
    return logits if gate is None else logits[positions.to(logits.device)]


def accept(entropy: Tensor, bound: float) -> Tensor:
    """(n,) bool: the lowest-entropy positions whose entropies, less the largest of them, sum to at most `bound`."""
    ordered, order = torch.sort(entropy, dim=-1, descending=False)
    chosen = torch.cumsum(ordered, dim=-1) - ordered <= bound  # sorted ascending: the last is the largest
    return torch.zeros_like(chosen).scatter(-1, order, chosen)
