"""What our own models share: RoPE and GPT-2 style initialisation.

The built-in dLLM (models/builtin.py, bidirectional) and CoDiLA's tiny assistant
(models/assistant.py, causal) each write out their own attention and block; the native
LLaDA and Dream (models/native_*.py) rotate with the same RoPE. Norms are torch's
nn.RMSNorm (ours) or native.RMSNorm (the published float32 one).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import torch
from torch import Tensor, nn


def rope_tables(
    length: int, head_dim: int, theta: float, device: torch.device, start: int = 0
) -> tuple[Tensor, Tensor]:
    """cos/sin of the rotary angles for positions start..start+length-1 (RoFormer, Su et al. 2021)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    pos = torch.arange(start, start + length, device=device, dtype=torch.float32)
    ang = torch.outer(pos, inv)  # (L, hd/2)
    return ang.cos(), ang.sin()


ROPE_KEPT = 16  # rope tables kept per process: a decode asks for the same one or two (per block) at every call


def rope_kept(length: int, head_dim: int, theta: float, device: torch.device, start: int = 0) -> tuple[Tensor, Tensor]:
    """rope_tables(length, head_dim, theta, device, start), made once per shape and reused: a model call
    at a fixed shape needs no new tables (the same computation, so the same bits). Under torch.compile
    they are made afresh, so a compiled graph holds no guard on this cache."""
    if torch.compiler.is_compiling() or not isinstance(start, int):
        return rope_tables(length, head_dim, theta, device, start)
    return _rope_kept(length, head_dim, float(theta), torch.device(device), start)


@functools.lru_cache(maxsize=ROPE_KEPT)  # thread-safe: batch.py's workers call models from several threads
def _rope_kept(length: int, head_dim: int, theta: float, device: torch.device, start: int) -> tuple[Tensor, Tensor]:
    with torch.inference_mode(False):  # made during decoding, used by training too: never an inference tensor
        return rope_tables(length, head_dim, theta, device, start)


def rope_rows(length: int, head_dim: int, theta: float, device: torch.device, starts: Tensor) -> tuple[Tensor, Tensor]:
    """rope_tables for a batch whose row r starts at position starts[r]: cos/sin (B, 1, L, hd/2).
    The same products as rope_tables (position x inverse frequency), so each row's angles equal its own."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    pos = starts.to(device, torch.float32)[:, None] + torch.arange(length, device=device, dtype=torch.float32)  # (B, L)
    ang = pos[..., None] * inv  # (B, L, hd/2)
    return ang.cos()[:, None], ang.sin()[:, None]


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate halves of the head dim: x (..., L, hd), cos/sin (L, hd/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def init_weights(model: nn.Module, n_layers: int, residual: Iterable[nn.Linear]) -> None:
    """N(0, 0.02) for every Linear and Embedding, in module order, then GPT-2's scaled init of
    the residual projections (each block's attention out and MLP down, in that order)."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
    std = 0.02 / math.sqrt(2 * n_layers)
    for linear in residual:
        nn.init.normal_(linear.weight, std=std)
