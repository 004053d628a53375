"""Pure tensor functions the decoders share: proposals, commit scores, step schedules.

All randomness comes from the caller's torch.Generator. A proposal samples where its logits
are: on the CPU from that generator itself, on another device (a GPU) from a generator there
seeded by one draw from it, so a seed gives the same tokens on a given device (not across
devices). Only the rows that sample draw anything (one uniform number each), and nothing is
drawn at temperature 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

CHUNK = 2048  # vocabulary columns per chunk of the two-level inverse CDF (`inverse_cdf`)
RUN = 128  # columns per run of `argmax`'s two-level search
SMALL = 1 << 16  # entries below which `argmax` takes torch's own (its fixed cost is then the larger)
BELOW_ONE = 1.0 - 2.0**-53  # the largest float64 below 1


def noise(shape: tuple[int, ...], rng: torch.Generator, device: torch.device) -> Tensor:
    """Uniform(0, 1) float64 noise from `rng`, drawn on the CPU and moved to `device` (small shapes only)."""
    return torch.rand(shape, generator=rng, dtype=torch.float64).to(device)


def generator_on(device: torch.device, rng: torch.Generator) -> torch.Generator:
    """A generator that draws on `device`: `rng` itself when it lives there, else one there seeded by one draw
    from `rng` (so a seed gives the same numbers on a given device)."""
    if rng.device == device or (device.type == "cpu" and rng.device.type == "cpu"):
        return rng
    seed = int(torch.randint(0, 2**62, (1,), generator=rng, device=rng.device))
    return torch.Generator(device=device).manual_seed(seed)


def uniform(n: int, rng: torch.Generator, device: torch.device) -> Tensor:
    """(n,) Uniform[0, 1) float64 drawn on `device` (`generator_on`: from `rng` itself when it lives there)."""
    return torch.rand(n, generator=generator_on(device, rng), dtype=torch.float64, device=device)


def gumbel_argmax(logits: Tensor, temperature: float, rng: torch.Generator) -> Tensor:
    """Token per row: argmax at temperature 0, else a Gumbel-max sample from softmax(logits / T).

    For small vocabularies (CoDiLA's assistant): it draws a number per token. LLaDA's
    add_gumbel_noise computes exp(l) / (-log u)^T in float64 (arXiv 2409.02908: low precision
    Gumbel hurts quality); we take its log, l - T log(-log u), which has the same argmax and
    cannot overflow. A dLLM's proposals use `propose`, which draws one number per row.
    """
    if temperature == 0:
        return argmax(logits)  # (H,)
    u = noise(tuple(logits.shape), rng, logits.device)  # (H, V)
    return (logits.double() - temperature * torch.log(-torch.log(u))).argmax(-1)  # (H,)


def argmax(rows: Tensor) -> Tensor:
    """(H,) rows.argmax(-1) of (H, V) rows: the same index (the first of equals, the first NaN), found in two levels on
    the CPU, where torch's argmax visits entries one by one and its amax is vectorised: each run of RUN columns'
    maximum, the first run holding the row's, then the first column of that run holding it (32 rows of 4k: 129 ->
    73 us on this machine; of 126k: 3.9 -> 0.49 ms). Elsewhere, or below SMALL entries, torch's own."""
    plain = rows.dim() != 2 or rows.device.type != "cpu" or rows.numel() < SMALL
    if plain or rows.stride(-1) != 1 or rows.shape[1] < RUN:
        return rows.argmax(-1)
    h, vocab = rows.shape
    full = vocab - vocab % RUN
    tops = rows[:, :full].view(h, full // RUN, RUN).amax(-1)  # (H, full / RUN): each run's maximum, NaN if it has one
    if full < vocab:
        tops = torch.cat([tops, rows[:, full:].amax(-1, keepdim=True)], -1)  # the last, shorter run
    start = tops.argmax(-1) * RUN  # (H,) where the first run holding the row's maximum begins
    # its columns, the last run's repeating its last column past the end (a repeat comes after the column itself)
    cols = (start[:, None] + torch.arange(RUN, device=rows.device)).clamp_max_(vocab - 1)  # (H, RUN)
    return start + rows.gather(-1, cols).argmax(-1)


def max_of(rows: Tensor) -> tuple[Tensor, Tensor]:
    """rows.max(-1) of (H, V) rows, its values and indices, by `argmax`."""
    best = argmax(rows)
    return rows.gather(-1, best[:, None]).squeeze(-1), best


class Softmax(NamedTuple):
    """softmax(logits) in float64, as LLaDA and Fast-dLLM score confidence (or in float32, as Saber's code does)."""

    probs: Tensor  # (H, V) float64 (or float32)

    def probability(self, ids: Tensor) -> Tensor:
        """(H,) the probability of ids[h] in row h."""
        return self.probs.gather(-1, ids.to(self.probs.device)[:, None]).squeeze(-1)


def softmax_in(logits: Tensor, dtype: torch.dtype = torch.float64) -> Softmax:
    """The float64 softmax the references score confidence with: the bits of F.softmax(logits.to(float64))
    (tests/test_sampling.py), by torch's fused kernel (max, exp and sum, scale), which is also cheaper than an
    unnormalised exp(l - max l) and its sum made op by op (0.74-0.83x on this CPU at 4k-126k vocabularies).
    The float64 copy it converts first lives only until the result is made. `dtype` float32: F.softmax(logits) of
    float32 logits, for a reference that scores in the logits' own precision (a third of the time on this CPU)."""
    return Softmax(torch.softmax(logits, -1, dtype=dtype))


def propose(
    logits: Tensor,
    temperature: float,
    rng: torch.Generator,
    mask_id: int,
    late_ids: tuple[int, ...] = (),
    among: tuple[int, Tensor] | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[Tensor, Tensor, Softmax]:
    """Each row's proposed token (never `mask_id`: argmax at temperature 0, else a sample from
    softmax(logits / T)), its probability under softmax(logits) (0 for `late_ids`, committed
    last), and that softmax: a float64 (H, V) buffer, and another at T other than 0 and 1.

    `among` (n, where): these rows are rows `where` (H,) of n rows proposed together; the generator
    advances as for all n, and each row gets the number it would have had among them. `dtype`: the
    softmax's (the scores'); a sample is drawn in float64 whatever it is."""
    soft = softmax_in(logits, dtype)
    ids = draw(logits, soft, temperature, rng, mask_id, among)  # (H,)
    conf = soft.probability(ids)  # (H,)
    if late_ids:
        conf = conf.masked_fill(torch.isin(ids, torch.tensor(late_ids, device=ids.device)), 0.0)
    return ids, conf, soft


def propose_unscored(logits: Tensor, mask_id: int, late_ids: tuple[int, ...] = ()) -> tuple[Tensor, Tensor]:
    """At temperature 0, for a decoder that reads of the confidences only which are 0: `propose`'s ids,
    and a conf that is 0 exactly where `propose`'s is and 1 elsewhere, without its (H, V) softmax.

    `propose`'s conf of row h is w / total, with w = exp(l[id] - max l) and total >= 1 (the maximum's
    own weight is 1) and <= V: it is 0 for a late id, and can be 0 otherwise only when l[id] sits far
    below the maximum (the mask id held it, and the next token is e^600 times less likely), or a logit
    is infinite or NaN. Any such row and the softmax is made after all, by `propose` itself.
    """
    peak, best = max_of(logits)  # (H,), (H,)
    ids = argmax_without(logits, mask_id, best.clone())  # (H,)
    gap = logits.gather(-1, ids[:, None]).squeeze(-1).double() - peak.double()  # (H,) 0 where the argmax is kept
    if not bool((gap > -600).all()):  # far below the maximum, or not finite (NaN compares false)
        ids, conf, _ = propose(logits, 0.0, torch.Generator(logits.device), mask_id, late_ids)  # draws nothing
        return ids, (conf != 0).double()
    conf = torch.ones(len(ids), dtype=torch.float64, device=ids.device)  # (H,)
    if late_ids:
        conf = conf.masked_fill(torch.isin(ids, torch.tensor(late_ids, device=ids.device)), 0.0)
    return ids, conf


def draw(
    logits: Tensor,
    soft: Softmax,
    temperature: float,
    rng: torch.Generator,
    mask_id: int,
    among: tuple[int, Tensor] | None = None,
) -> Tensor:
    """(H,) a token per row, never `mask_id`: argmax at T = 0 (nothing drawn), else an exact sample
    from softmax(logits / T) by its inverse CDF, one uniform number per row, in float64. `among`: as for
    `propose`."""
    if temperature == 0:
        return argmax_without(logits, mask_id)
    if temperature == 1 and soft.probs.dtype == torch.float64:
        weights = soft.probs
    else:
        weights = logits.to(torch.float64, copy=True)  # (H, V)
        weights.sub_(weights.amax(-1, keepdim=True)).div_(temperature).exp_()
    if among is None:
        u = uniform(len(weights), rng, weights.device)  # (H,)
    else:
        u = uniform(among[0], rng, weights.device)[among[1].to(weights.device)]  # (H,) of the n drawn
    return inverse_cdf(weights, u, mask_id)


def argmax_without(logits: Tensor, token: int, best: Tensor | None = None) -> Tensor:
    """(H,) argmax per row, never `token`: only rows whose argmax it is are copied and redone.
    `best`: the rows' argmax (the first of equals, as argmax and max(-1) both give it), edited in place."""
    ids = argmax(logits) if best is None else best  # (H,)
    if not 0 <= token < logits.shape[-1]:
        return ids
    bad = ids == token  # (H,)
    if bool(bad.any()):
        ids[bad] = argmax(without(logits[bad], token, copy=False))  # logits[bad] is a copy already
    return ids


def inverse_cdf(weights: Tensor, u: Tensor, banned: int) -> Tensor:
    """(H,) the token whose CDF interval holds u * total in each row of unnormalised `weights`
    (H, V) >= 0, with `banned` given weight 0: an exact sample, one uniform u per row.

    Two levels, so no (H, V) cumulative sum is made: chunk sums (H, V / CHUNK), the chunk that
    holds the point, then the cumulative sum inside that chunk only; the point's place in the
    chunk, as a share of the chunk's weight, is again uniform, so one u serves both levels.
    """
    h, vocab = weights.shape
    masked = 0 <= banned < vocab
    if masked:
        kept = weights[:, banned].clone()
        weights[:, banned] = 0
    size = min(CHUNK, vocab)
    sums = chunk_sums(weights, size)  # (H, n)
    chunk, share = locate(sums, u)  # (H,), (H,)
    cols = chunk[:, None] * size + torch.arange(size, device=weights.device)  # (H, C)
    inside = weights.gather(1, cols.clamp_max(vocab - 1)) * (cols < vocab)  # (H, C)
    if masked:
        weights[:, banned] = kept  # the caller's weights as they were
    col, _ = locate(inside, share)
    return (chunk * size + col).clamp_max(vocab - 1)


def chunk_sums(weights: Tensor, size: int) -> Tensor:
    """(H, ceil(V / size)) the sum of each run of `size` columns."""
    h, vocab = weights.shape
    full = vocab // size
    sums = weights[:, : full * size].reshape(h, full, size).sum(-1)  # (H, full)
    return torch.cat([sums, weights[:, full * size :].sum(-1, keepdim=True)], -1) if vocab % size else sums


def locate(weights: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
    """For weights (H, n) >= 0 and u (H,) in [0, 1): the index i whose interval of the cumulative
    sum holds u * total, never one of weight 0, and where in it the point lies (a share in [0, 1))."""
    cum = weights.cumsum(-1)  # (H, n)
    point = (u * cum[:, -1])[:, None]  # (H, 1)
    i = torch.searchsorted(cum, point, right=True)  # (H, 1): the first cumulative sum above the point
    last = weights.shape[1] - 1 - (weights > 0).flip(-1).to(torch.uint8).argmax(-1, keepdim=True)  # last weight > 0
    i = torch.minimum(i, last)  # the point rounded up to the total: the last token with weight
    before = torch.where(i > 0, cum.gather(1, (i - 1).clamp_min(0)), 0.0)  # (H, 1)
    share = ((point - before) / weights.gather(1, i)).clamp(0.0, BELOW_ONE)
    return i.squeeze(1), share.squeeze(1)


def likeliest_allowed(probs: Tensor, refused: Callable[[int], bool], read: int = 16) -> tuple[float, int] | None:
    """(probability, token) of the most likely token of one row of probabilities (V,) that `refused` lets through,
    among its `read` most likely; None: none of them (a comment start's stand-in: the guard's and syntax-guard's)."""
    top = probs.topk(min(read, len(probs)))
    pairs = zip(top.values.tolist(), top.indices.tolist(), strict=True)
    return next(((p, t) for p, t in pairs if not refused(t)), None)


def without(logits: Tensor, token: int, copy: bool = True) -> Tensor:
    """Logits with `token` made impossible: a hole is never filled with the mask token.

    Only the proposal drops it; confidences still use the full softmax, as the references do.
    `copy` False edits `logits` itself: for rows the caller just copied out (indexing by a mask or
    by positions makes a copy), so they are not copied twice.
    """
    if not 0 <= token < logits.shape[-1]:
        return logits  # a mask id outside the vocabulary cannot be proposed anyway
    if copy:
        logits = logits.clone()
    logits[:, token] = float("-inf")
    return logits


def log_probs(logits: Tensor) -> Tensor:
    """float64 log-softmax over the vocabulary, as LLaDA scores confidence."""
    return torch.log_softmax(logits.double(), dim=-1)  # (H, V)


def confidence(logits: Tensor, ids: Tensor, late_ids: tuple[int, ...] = ()) -> Tensor:
    """Probability of each proposed token; 0 for `late_ids` so they are committed last."""
    conf = log_probs(logits).gather(-1, ids[:, None]).squeeze(-1).exp()  # (H,)
    if late_ids:
        conf = conf.masked_fill(torch.isin(ids, torch.tensor(late_ids, device=ids.device)), 0.0)
    return conf


def margin(logits: Tensor) -> Tensor:
    """Top-1 minus top-2 probability (Dream's topk_margin)."""
    top = log_probs(logits).topk(2, dim=-1).values.exp()  # (H, 2)
    return top[:, 0] - top[:, 1]


def entropy(logits: Tensor) -> Tensor:
    """Shannon entropy in nats of each row's distribution."""
    logp = log_probs(logits)  # (H, V)
    return -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)  # (H,); an impossible token adds 0, not 0 * -inf


def even_split(n: int, steps: int) -> list[int]:
    """Tokens per step when `n` holes are spread evenly over `steps` (LLaDA's get_num_transfer_tokens).

    The first n % steps steps take one extra token.
    """
    base, extra = divmod(n, steps)
    return [base + (i < extra) for i in range(steps)]


def dream_count(remaining: int, step: int, steps: int, eps: float = 1e-3) -> int:
    """Holes Dream commits at `step`: int(remaining * (1 - s/t)) on timesteps linspace(1, eps, steps + 1).

    The last step commits everything left (Dream's diffusion_generate).
    """
    if step >= steps - 1:
        return remaining
    t = torch.linspace(1, eps, steps + 1)
    return int(remaining * (1 - t[step + 1] / t[step]))


def top(scores: Tensor, k: int) -> Tensor:
    """Indices of the k highest scores (torch.topk, as the reference implementations use)."""
    return scores.topk(min(k, scores.numel())).indices
