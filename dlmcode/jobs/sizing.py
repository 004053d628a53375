"""The length of a hole nobody gave a length to: one rule for serve, ⟦fill⟧ markers, `--length auto` and generate.

Editors send a prefix, a suffix and a ceiling; a bare ⟦fill⟧ marker, `--length auto` and
`generate --length auto` say nothing either. Opening the ceiling's worth of holes and letting
end tokens (pad, end-of-text) be committed last makes a small model fill every hole: the
late rule zeroes the ends' confidence, so each hole gets content first (measured on the
built-in model: 32 tokens used on every task; docs/length.md).

The rule (a probe before decoding, in the spirit of CAL, arXiv 2602.00476: read the first
denoising call over an over-allocated canvas, calibrate its length bias, then decode on the
chosen length):

1. Probe. Open `room` holes where the length is unknown and run the model once (this call is
   counted in the job's calls and seconds).
2. Read. At each of those holes take q_i, the probability of an end token (the family's
   `end_ids`), its log-odds shifted by the family's `bias` (the calibration: a small model
   under-reads ends far from the suffix). The length is the change point n that makes
   "content at holes < n, ends at holes >= n" most likely under independent marginals:
       n = argmax_n  sum_{i<n} log(1 - q_i) + sum_{i>=n} log q_i,   1 <= n <= room.
   A model trained with trailing pads (the built-in one: dlmcode/training/batches.py with_pads) or
   padding with end-of-text (LLaDA, Dream) scores exactly this shape.
3. Decode. The job re-plans with n holes per unknown hole and decodes them as a known length
   (end tokens never proposed, jobs/processors.exact_length).

Constants are per family (RULES), chosen on tasks no reported benchmark uses (docs/length.md).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..core.canvas import Predict, logits_at


@dataclass(frozen=True)
class Rule:
    """How a family's unknown lengths are read."""

    room: int  # holes opened for the probe (the most a sized hole can get)
    bias: float  # added to the end tokens' log-odds before the change point (calibration)


BUILTIN = Rule(
    room=32, bias=3.0
)  # room: the most pads it saw after content; bias: tuned on humaneval-infill-single[300:500]
OTHER = Rule(room=64, bias=0.0)  # LLaDA, Dream, ...: room about 3 lines; bias 0 (uncalibrated: our choice)
RULES = {"builtin": BUILTIN}


def rule_for(family: str) -> Rule:
    return RULES.get(family, OTHER)


def end_ids(dlm: Any) -> tuple[int, ...]:
    """Tokens that end a fill: pad for the built-in model (trained so), else end-of-text, end-of-turn, pad."""
    ids = (dlm.pad_id,) if dlm.family == "builtin" else (dlm.eos_id, dlm.eot_id, dlm.pad_id)
    return tuple(dict.fromkeys(i for i in ids if i is not None))


def end_probability(logits: Tensor, end_ids: Sequence[int]) -> Tensor:
    """(H,) the probability of any end token at each row of (H, V) logits."""
    probs = logits.float().softmax(-1)  # (H, V)
    return probs[:, list(end_ids)].sum(-1)  # (H,)


def change_point(p_end: Tensor, bias: float = 0.0) -> int:
    """The n in 1..H that makes 'content before n, ends from n on' most likely (module docstring, step 2)."""
    eps = 1e-6
    p = p_end.double().clamp(eps, 1 - eps)
    q = torch.sigmoid(torch.logit(p) + bias).clamp(eps, 1 - eps)  # (H,)
    content = torch.cat([q.new_zeros(1), torch.log1p(-q).cumsum(0)])  # (H+1,) sum_{i<n} log(1-q_i)
    ends = torch.cat([q.log().flip(0).cumsum(0).flip(0), q.new_zeros(1)])  # (H+1,) sum_{i>=n} log q_i
    score = (content + ends)[1:]  # n = 1..H: a sized hole holds at least one token
    return int(score.argmax()) + 1


def probe(predict: Predict, tokens: Tensor, regions: Sequence[range], end_ids: Sequence[int], bias: float) -> list[int]:
    """One call over `tokens` (holes opened at `regions`): the chosen length of each region."""
    rows = torch.cat([torch.arange(r.start, r.stop) for r in regions]) if regions else torch.empty(0, dtype=torch.long)
    with torch.no_grad():
        logits = logits_at(predict, tokens, rows)  # (R, V): the regions' rows only
    cuts = [0, *itertools.accumulate(len(r) for r in regions)]
    return [change_point(end_probability(logits[a:b], end_ids), bias) for a, b in itertools.pairwise(cuts)]


@dataclass(frozen=True)
class Sized:
    """What the probe chose, and what it cost (added to the job's calls and seconds)."""

    lengths: tuple[int, ...]  # per unknown hole
    calls: int
    seconds: float


def size(predict: Predict, tokens: Tensor, regions: Sequence[range], end_ids: Sequence[int], bias: float) -> Sized:
    """The probe over a canvas whose unknown holes (`regions`) have the rule's room: lengths and cost."""
    start = time.perf_counter()
    lengths = probe(predict, tokens, regions, end_ids, bias)
    return Sized(tuple(lengths), 1, time.perf_counter() - start)
