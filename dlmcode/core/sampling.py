"""Pure tensor functions the decoders share: proposals, commit scores, step schedules.

All randomness comes from the caller's torch.Generator, drawn on the CPU so that a seed
gives the same noise on every device.
"""

from __future__ import annotations

import torch
from torch import Tensor


def noise(shape: tuple[int, ...], rng: torch.Generator, device: torch.device) -> Tensor:
    """Uniform(0, 1) float64 noise from `rng`, drawn on the CPU and moved to `device`."""
    return torch.rand(shape, generator=rng, dtype=torch.float64).to(device)


def gumbel_argmax(logits: Tensor, temperature: float, rng: torch.Generator) -> Tensor:
    """Token per row: argmax at temperature 0, else a Gumbel-max sample from softmax(logits / T).

    LLaDA's add_gumbel_noise computes exp(l) / (-log u)^T in float64 (arXiv 2409.02908: low
    precision Gumbel hurts quality); we take its log, l - T log(-log u), which has the same
    argmax and cannot overflow.
    """
    if temperature == 0:
        return logits.argmax(-1)  # (H,)
    u = noise(tuple(logits.shape), rng, logits.device)  # (H, V)
    return (logits.double() - temperature * torch.log(-torch.log(u))).argmax(-1)  # (H,)


def without(logits: Tensor, token: int) -> Tensor:
    """Logits with `token` made impossible: a hole is never filled with the mask token.

    Only the proposal drops it; confidences still use the full softmax, as the references do.
    """
    if not 0 <= token < logits.shape[-1]:
        return logits  # a mask id outside the vocabulary cannot be proposed anyway
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
