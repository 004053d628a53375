"""DiCo, divide and conquer parallel decoding (arXiv 2602.23792; docs/research/seeds.md section 3).

Each call: Divide picks spread-out confident seed holes and grows each into a cluster of
neighbouring confident holes; Conquer commits inside the clusters with Fast-dLLM's factor
rule. When that stalls, or few holes are left, Finalize commits by a compound of top-1
probability and logit margin. The paper's formulas were not available: every piece below
is our stand-in, a setting with a documented default.

"Position" here is the order of the block's holes (row index): committed tokens between two
holes are context, not a break, so clusters are runs of consecutive rows (our choice).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..core import sampling
from . import factor, threshold
from .base import BaseDecoder, BlockState, Choice, check, setting


@dataclass(frozen=True)
class DiCo(BaseDecoder):
    """Commits sure holes in parallel inside small clusters of neighbours spread over the fill; a stricter rule finishes
    the last few (DiCo)."""

    seeds: int = setting(4, "clusters started per call (the paper finds 2 to 10 alike)")  # N; 4 is ours
    sigma: float = setting(
        4.0, "how far apart, in holes, the clusters' seeds are kept; larger spreads them more"
    )  # Soft-NMS: a seed scales a hole d away by 1 - exp(-d^2/2sigma^2) (ours)
    guidance: float = setting(
        0.05, "preference for seeds near the left of the fill; 0 = none"
    )  # seed score x exp(-guidance * holes from the leftmost hole) (ours)
    expand: float = setting(
        0.75, "how sure (0-1) the model must be of a neighbouring hole to add it to a cluster"
    )  # top-1 probability (ours)
    factor: float = setting(
        1.0, "commits inside a cluster as the factor decoder does; larger commits more"
    )  # Conquer: rank-n bar 1 - f/(n+1); the paper's rule is f = 1
    scope: Literal["cluster", "union"] = setting(
        "cluster", "cluster: the factor rule in each cluster on its own; union: over all clusters together"
    )  # ours: clusters are weakly dependent
    stall: int = setting(
        1, "a call that commits this many holes or fewer hands over to the finishing rule"
    )  # Conquer -> Finalize (ours)
    final: int = setting(
        4, "with this many holes or fewer left in the block, the finishing rule decides"
    )  # Finalize (ours)
    blend: float = setting(
        0.5, "finishing rule: weight of the top probability against the gap to the second choice (0-1)"
    )  # blend * p1 + (1 - blend) * sigmoid(logit margin) (ours)
    final_tau: float = setting(
        0.9, "finishing rule: score (0-1) a hole needs to be committed alongside others; at least one is"
    )  # compound score (ours)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.seeds >= 1, "seeds", self.seeds, "must be >= 1")
        check(self.sigma > 0, "sigma", self.sigma, "must be > 0")
        check(self.guidance >= 0, "guidance", self.guidance, "must be >= 0")
        check(0 <= self.expand <= 1, "expand", self.expand, "must be in [0, 1]")
        check(self.factor > 0, "factor", self.factor, "must be > 0")
        check(self.scope in ("cluster", "union"), "scope", self.scope, "must be cluster or union")
        check(self.stall >= 0, "stall", self.stall, "must be >= 0")
        check(self.final >= 0, "final", self.final, "must be >= 0")
        check(0 <= self.blend <= 1, "blend", self.blend, "must be in [0, 1]")
        check(0 <= self.final_tau <= 1, "final_tau", self.final_tau, "must be in [0, 1]")

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: BlockState, rng: torch.Generator) -> Choice:
        """Divide and Conquer while they commit more than `stall` holes a call, else Finalize.

        "Alternate until convergence" is read call by call, with no state kept between calls:
        a later call may go back to Conquer when new clusters appear (our choice).
        """
        if len(conf) > self.final:
            groups = clusters(conf, seeds(conf, self.seeds, self.sigma, self.guidance), self.expand)
            rows = conquer(conf, groups, self.factor, self.scope)
            if len(rows) > self.stall:
                return Choice(rows, conf[rows])
        scores = compound(conf, margins(logits, ids, conf), self.blend)  # (H,)
        rows = threshold.select(scores, self.final_tau)
        return Choice(rows, scores[rows])


def seeds(conf: Tensor, n: int, sigma: float, guidance: float) -> Tensor:
    """Up to n seed rows: greedy by guided confidence, each pick decaying the scores near it (Soft-NMS).

    Soft-NMS (Bodla et al. 2017) decays rather than drops neighbours; here the overlap is
    positional, a Gaussian of the distance in holes, so a pick zeroes itself (our choice).
    """
    rows = torch.arange(len(conf), device=conf.device, dtype=torch.float64)  # (H,)
    score = conf.double() * torch.exp(-guidance * rows)  # (H,) trajectory guidance W
    picked = []
    for _ in range(min(n, len(conf))):
        best = int(score.argmax())
        picked.append(best)
        score = score * -torch.expm1(-((rows - best) ** 2) / (2 * sigma**2))  # (H,) 1 - Gaussian
        score[best] = -1.0  # never picked twice, even when every score has decayed to 0
    return torch.tensor(picked, dtype=torch.long, device=conf.device)


def clusters(conf: Tensor, seed_rows: Tensor, expand: float) -> list[Tensor]:
    """Each seed grown both ways over consecutive rows with conf >= expand; overlapping or touching runs merged.

    Returns disjoint runs of consecutive rows in ascending order; a seed always belongs to its run.
    """
    ok = (conf >= expand).tolist()
    spans = sorted(grow(ok, int(s)) for s in seed_rows)
    merged: list[list[int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [torch.arange(lo, hi + 1, device=conf.device) for lo, hi in merged]


def grow(ok: list[bool], seed: int) -> tuple[int, int]:
    """The run [lo, hi] around `seed` whose other rows are all ok."""
    lo, hi = seed, seed
    while lo > 0 and ok[lo - 1]:
        lo -= 1
    while hi < len(ok) - 1 and ok[hi + 1]:
        hi += 1
    return lo, hi


def conquer(conf: Tensor, groups: list[Tensor], f: float, scope: str) -> Tensor:
    """Rows committed by the factor rule {i : (|S| + 1)(1 - c_i) <= f}, per cluster or over their union.

    Unlike Fast-dLLM, no rank-1 row is forced: a cluster whose best hole misses the bar
    1 - f/2 commits nothing (Finalize guarantees progress; our choice).
    """
    if scope == "union":
        groups = [torch.cat(groups)] if groups else []
    picked = [g[factor.select(conf[g], f)] for g in groups if conf[g].max() >= 1 - f / 2]
    rows = torch.cat(picked) if picked else torch.zeros(0, dtype=torch.long, device=conf.device)
    return rows.sort().values  # (k,)


def margins(logits: Tensor, ids: Tensor, conf: Tensor) -> Tensor:
    """log p(proposal) minus the best other log-probability: the top-1 minus top-2 logit at temperature 0.

    The proposal's probability is `conf`, so a late token (conf 0) gets margin -inf.
    """
    logp = sampling.log_probs(logits)  # (H, V)
    rival = logp.scatter(-1, ids[:, None], float("-inf")).amax(-1)  # (H,)
    return conf.double().log() - rival  # (H,)


def compound(p1: Tensor, margin: Tensor, blend: float) -> Tensor:
    """Finalize score: blend * p1 + (1 - blend) * sigmoid(margin), in [0, 1].

    sigmoid(log p1 - log p2) = p1 / (p1 + p2), the proposal's share of the top two (the
    blend's form is ours; the paper only says it combines both).
    """
    return blend * p1.double() + (1 - blend) * torch.sigmoid(margin)  # (H,)
