"""Mean-Field parallel decoding (arXiv 2606.15805): margins inhibited by pairwise similarity.

Which holes of the block to commit is MAP inference in a binary pairwise MRF (docs/research/seeds.md
section 2): unary c_i = top-1 minus top-2 log-probability, pairwise D_ij = 1 - JSD(pi_i, pi_j)/ln 2
(holes with alike distributions inhibit each other), solved by R parallel mean-field updates
q <- sigmoid(c - D q); the holes with q >= T are committed. No official code exists; every
choice the digests leave open is a setting below, marked as ours.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..core import sampling
from .base import BaseDecoder, BlockState, Choice, check, setting

BUFFER = 1 << 21  # elements of each (pairs, V) working buffer of `overlaps`: 16 MiB in float64


@dataclass(frozen=True)
class MeanField(BaseDecoder):
    """Commits sure holes in parallel but holds back holes whose predictions look alike, which tend to clash
    (Mean-Field)."""

    block: int = setting(
        32, "holes per block, decoded left to right; the time per call grows with its square"
    )  # S6's 32; the paper's is UNVERIFIED
    tau: float = setting(
        0.9, "score (0-1) a hole needs to be committed; lower commits more per call"
    )  # T; S6's 0.9; the paper's default UNVERIFIED
    iterations: int = setting(2, "refinement rounds of the scores per call (the paper finds 2 enough)")  # R
    normalize: Literal["max", "none"] = setting(
        "max", "max: scale the penalty for alike holes so its largest is 1; none: leave it as it is"
    )  # D /= max: S6's reading, UNVERIFIED; ours
    init: Literal["sigmoid", "zero", "half"] = setting(
        "sigmoid", "scores before refining: sigmoid of the margin, 0 or 1/2"
    )  # q0; S6: sigmoid; ours
    support: int = setting(
        32, "compare two holes on their top-N tokens only (faster; can only raise the penalty); 0 = every token"
    )  # ours

    scores = False  # choose reads of the confidences only which are 0 (late proposals)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.tau <= 1, "tau", self.tau, "must be in [0, 1]")
        check(self.iterations >= 0, "iterations", self.iterations, "must be >= 0")
        check(self.normalize in ("max", "none"), "normalize", self.normalize, "must be max or none")
        check(self.init in ("sigmoid", "zero", "half"), "init", self.init, "must be sigmoid, zero or half")
        check(self.support >= 0, "support", self.support, "must be >= 0")

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: BlockState, rng: torch.Generator) -> Choice:
        rows, q = select(
            logits, self.tau, self.iterations, self.normalize, self.init, late=conf == 0, support=self.support
        )
        return Choice(rows, q[rows])


def select(
    logits: Tensor,
    tau: float,
    iterations: int,
    normalize: str = "max",
    init: str = "sigmoid",
    late: Tensor | None = None,
    support: int = 0,
) -> tuple[Tensor, Tensor]:
    """Rows to commit (q >= tau, at least argmax q) and q, for the (H, V) logits of the active holes.

    `late` rows (proposals the canvas commits last, whose confidence the loop zeroed) get
    commit score -inf, so q = 0: committed only when nothing else is left (our choice).
    """
    logp = sampling.log_probs(logits)  # (H, V) float64
    vocab = logp.shape[-1]
    pooled = 0 < 2 * support < vocab
    top = logp.topk(
        min(max(support, 2) if pooled else 2, vocab), dim=-1
    )  # (H, k): sorted, so its first two give the margin
    c = top.values[:, 0] - top.values[:, min(1, top.values.shape[1] - 1)]  # (H,) top-2 log-probability gap
    if late is not None:
        c = c.masked_fill(late, -math.inf)
    d = pairwise_top(logp, top.indices[:, :support]) if pooled else pairwise(logp.exp())  # (H, H)
    peak = d.max() if normalize == "max" and d.numel() else None
    if peak is not None and peak > 0:
        d = d / peak  # S6: D / max_{i != j} D_ij; UNVERIFIED against the paper
    q = iterate(c, d, iterations, init)  # (H,)
    keep = q >= tau  # (H,)
    keep[q.argmax()] = True  # the paper leaves an empty set open; S6 commits argmax q (our choice too)
    return keep.nonzero().squeeze(-1), q


def pairwise_top(logp: Tensor, top: Tensor) -> Tensor:
    """D_ij as `pairwise`, but each pair compared on the union of the two rows' top tokens `top` (H, k),
    with the rest of each row's mass pooled in one extra bucket; `logp` (H, V) are log-probabilities.

    Pooling tokens can only shrink a JSD (data processing), so D can only rise: the inhibition
    stays conservative, and it is exact when the two top sets hold all the mass. Each pair
    then costs 2k + 1 columns instead of V (our choice, to keep the decoder cheap next to a
    forward even for a 152k vocabulary); only those columns are ever read or exponentiated.
    """
    h, k = top.shape
    d = torch.zeros(h, h, dtype=logp.dtype, device=logp.device)  # (H, H)
    i, j = pairs(h, logp.device)  # (P,), (P,)
    if not len(i):
        return d
    # Each row's probabilities at every row's tops, read and exponentiated once: probs[a, b] = p_a(top[b]) (H, H, k),
    # a small table the pairs' columns are gathered from (reading them from (H, V) pair by pair is slower);
    # gathered, not indexed by columns (logp[:, flat]): the same values in a third of the time
    every = top.reshape(1, -1).expand(h, -1)  # (H, H k): every row's tops, for each row
    probs = logp.gather(1, every).exp_().view(h, h, k)  # (H, H, k)
    member = torch.zeros(logp.shape, dtype=torch.bool, device=logp.device).scatter_(1, top, True)  # (H, V)
    outside = ~member.gather(1, every).view(h, h, k)[i, j]  # (P, k): j's tops that are not among i's
    # pair (i, j) is compared on the columns top[i], then top[j] less top[i], then the rest pooled (2k + 1);
    # both rows of every pair written into one buffer, never (P, V) copies
    pair = torch.empty(2, len(i), 2 * k + 1, dtype=logp.dtype, device=logp.device)  # [row i, row j] of each pair
    for side, row in enumerate((i, j)):
        pair[side, :, :k] = probs[row, i]
        torch.mul(probs[row, j], outside, out=pair[side, :, k:-1])
    pair[:, :, -1] = (1 - pair[:, :, :-1].sum(-1)).clamp_min_(0)
    d[i, j] = d[j, i] = overlap(pair[0], pair[1])
    return d


@functools.lru_cache(maxsize=64)
def pairs(h: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """(P,), (P,): the pairs i < j of `h` rows, made once per size (a call's operations cost more than their
    arithmetic here: docs/speed.md); read only, as indices."""
    i, j = torch.triu_indices(h, h, offset=1, device=device)
    return i, j


def iterate(c: Tensor, d: Tensor, iterations: int, init: str) -> Tensor:
    """R Jacobi mean-field updates q <- sigmoid(c - D q) from the chosen start."""
    q = torch.sigmoid(c) if init == "sigmoid" else torch.full_like(c, 0.0 if init == "zero" else 0.5)  # (H,)
    for _ in range(iterations):
        q = torch.sigmoid(c - d @ q)  # (H,)
    return q


def pairwise(probs: Tensor, buffer: int = BUFFER) -> Tensor:
    """D_ij = 1 - JSD(p_i, p_j) / ln 2 for the rows of `probs` (H, V); symmetric, zero diagonal, in [0, 1].

    The pairs i < j are done in chunks so the working buffers stay (chunk, V) with
    chunk * V <= `buffer`, even for a 152k vocabulary.
    """
    h = len(probs)
    d = torch.zeros(h, h, dtype=probs.dtype, device=probs.device)  # (H, H)
    i, j = pairs(h, probs.device)  # (P,), (P,)
    if len(i):
        d[i, j] = d[j, i] = torch.cat([overlaps(probs, a, b) for a, b in chunks(i, j, probs.shape[-1], buffer)])
    return d


def overlaps(probs: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """1 - JSD/ln 2 for each pair of rows (a, b) of `probs`."""
    return overlap(probs[a], probs[b])  # (chunk, V) copies


def overlap(p: Tensor, q: Tensor) -> Tensor:
    """1 - JSD(p, q)/ln 2 row by row, written as sum_v m_v h2(p_v / (p_v + q_v)) with m = (p + q)/2.

    Equal to the textbook H(m) - (H(p) + H(q))/2 form, but every term is >= 0 and a token in only
    one support adds exactly 0, so disjoint rows give D = 0 rather than rounding noise that max
    normalisation would blow up to 1.
    """
    s = (p + q).clamp_min_(torch.finfo(p.dtype).tiny)  # (n, V); 0/0 would be nan
    bits = torch.special.xlogy(p, p / s).add_(torch.special.xlogy(q, q / s))  # (n, V) <= 0
    return (-bits.sum(-1) / (2 * math.log(2))).clamp_(0, 1)  # (n,)


def chunks(i: Tensor, j: Tensor, vocab: int, buffer: int) -> list[tuple[Tensor, Tensor]]:
    """The pair index lists cut so that each chunk's (pairs, vocab) buffer has <= `buffer` elements."""
    size = pairs_per_chunk(vocab, buffer)
    return list(zip(i.split(size), j.split(size), strict=True))


def pairs_per_chunk(vocab: int, buffer: int) -> int:
    """Pairs whose (pairs, vocab) rows fit in a buffer of `buffer` elements (at least one)."""
    return max(1, buffer // vocab)
