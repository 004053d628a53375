"""Transformer pieces shared by our own models: RoPE, the pre-norm block, GPT-2 style init.

The built-in dLLM (models/builtin.py, bidirectional) and CoDiLA's tiny assistant
(models/assistant.py, causal) have the same layout: pre-norm RMSNorm, fused qkv projection
without biases, RoPE on q and k, a GELU MLP, residual adds. They differ only in attention
(masking, KV cache), so `PreNormBlock` leaves `add_attention`/`attend` to each model.
Parameter names and the order in which modules are made are those of the shipped weights
and of seeded fresh models: `norm1`, the attention's, `norm2`, `up`, `down`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def rope_tables(length: int, head_dim: int, theta: float, device: torch.device, start: int = 0) -> tuple[Tensor, Tensor]:
    """cos/sin of the rotary angles for positions start..start+length-1 (RoFormer, Su et al. 2021)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    pos = torch.arange(start, start + length, device=device, dtype=torch.float32)
    ang = torch.outer(pos, inv)  # (L, hd/2)
    return ang.cos(), ang.sin()


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


def split_heads(qkv: Tensor, n_heads: int) -> Tensor:
    """A fused qkv projection (N, T, 3D) -> q, k, v stacked as (3, N, H, T, hd)."""
    n, length, three_d = qkv.shape
    return qkv.view(n, length, 3, n_heads, three_d // (3 * n_heads)).permute(2, 0, 3, 1, 4)


def merge_heads(y: Tensor) -> Tensor:
    """Attention output (N, H, T, hd) -> (N, T, D)."""
    n, heads, length, hd = y.shape
    return y.transpose(1, 2).reshape(n, length, heads * hd)


class PreNormBlock(nn.Module):
    """x + attend(norm1(x)), then x + down(gelu(up(norm2(x)))); subclasses supply the attention."""

    def __init__(self, dim: int, n_heads: int, ffn_mult: int, eps: float) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(dim, eps=eps)
        self.add_attention(dim, n_heads)  # registered here: module order is parameter order and init order
        self.norm2 = nn.RMSNorm(dim, eps=eps)
        self.up = nn.Linear(dim, ffn_mult * dim, bias=False)
        self.down = nn.Linear(ffn_mult * dim, dim, bias=False)

    def add_attention(self, dim: int, n_heads: int) -> None:
        """Register the attention's modules (their names are the state dict's)."""
        raise NotImplementedError

    def attend(self, x: Tensor, *args) -> Tensor:
        raise NotImplementedError

    def out_projection(self) -> nn.Linear:
        """The attention's output projection (scaled at init like `down`)."""
        raise NotImplementedError

    def forward(self, x: Tensor, *args) -> Tensor:
        x = x + self.attend(self.norm1(x), *args)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def init_weights(model: nn.Module, blocks: nn.ModuleList, n_layers: int) -> None:
    """N(0, 0.02) for every Linear and Embedding, in module order, then GPT-2's scaled init of
    each block's residual projections (attention out, MLP down)."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
    std = 0.02 / math.sqrt(2 * n_layers)
    for block in blocks:
        nn.init.normal_(block.out_projection().weight, std=std)
        nn.init.normal_(block.down.weight, std=std)
