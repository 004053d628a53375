"""dlmcode's own Dream architecture (Dream-v0, Dream-Coder, DiffuCoder, DreamOn, Open-dCoder): Qwen2, bidirectional.

The published modeling_dream.py is Qwen2 with the causal mask removed: pre-RMSNorm layers,
q/k/v projections with biases and grouped key/value heads, RoPE rotated in the model dtype,
SDPA without a mask, a SiLU-gated MLP, and an output head that keeps the autoregressive
parent's one-position shift (undone by the family adapter, not here). Module names mirror
the checkpoint (model.layers.N.self_attn.q_proj ..., lm_head), so its safetensors load as
they are; a tied head (Open-dCoder) reuses model.embed_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import native
from .native import NotNative, need, require

HEAD = "lm_head.weight"


# DreamConfig and the layer below have native_llada's shape (a config read from config.json,
# head_dim, q/k/v projections, a layer's forward over the cache and rows): each keeps its
# checkpoint's own names, which one shared class would hide; what they compute alike is native.py's.
@dataclass(frozen=True)
class DreamConfig:
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    intermediate: int
    vocab: int
    rope_theta: float
    eps: float  # rms_norm_eps
    tied: bool  # tie_word_embeddings

    @classmethod
    def from_json(cls, c: dict) -> DreamConfig:
        """The config.json of a Dream-family folder, or NotNative naming what we do not implement."""
        require(c, "hidden_act", "silu", "silu")
        scaling = c.get("rope_scaling")
        if scaling and (scaling.get("rope_type") or scaling.get("type")) != "default":
            raise NotNative(f"rope_scaling {scaling!r} is not supported")
        hidden, n_heads = int(need(c, "hidden_size")), int(need(c, "num_attention_heads"))
        if hidden % n_heads:
            raise NotNative(f"hidden_size {hidden} is not a multiple of num_attention_heads {n_heads}")
        # each native family reads its own config.json keys into its own record (native_llada.py's alike in shape)
        return cls(
            hidden=hidden,
            n_layers=int(need(c, "num_hidden_layers")),
            n_heads=n_heads,
            n_kv_heads=int(c.get("num_key_value_heads") or n_heads),
            intermediate=int(need(c, "intermediate_size")),
            vocab=int(need(c, "vocab_size")),
            rope_theta=float(c.get("rope_theta", 10000.0)),
            eps=float(c.get("rms_norm_eps", 1e-6)),
            tied=bool(c.get("tie_word_embeddings", False)),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads


class DreamAttention(nn.Module):
    def __init__(self, cfg: DreamConfig) -> None:
        super().__init__()
        self.cfg = cfg
        kv = cfg.n_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=True)
        self.k_proj = nn.Linear(cfg.hidden, kv, bias=True)
        self.v_proj = nn.Linear(cfg.hidden, kv, bias=True)
        self.o_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)

    def project(self, x: Tensor, cos: Tensor, sin: Tensor, rows: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        return native.project(self, x, cos, sin, rows, self.cfg.n_heads, self.cfg.n_kv_heads, False)


class DreamMLP(nn.Module):
    def __init__(self, cfg: DreamConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return native.gated_mlp(self.gate_proj, self.up_proj, self.down_proj, x)


class DreamLayer(nn.Module):
    def __init__(self, cfg: DreamConfig) -> None:
        super().__init__()
        self.input_layernorm = native.RMSNorm(cfg.hidden, cfg.eps)
        self.self_attn = DreamAttention(cfg)
        self.post_attention_layernorm = native.RMSNorm(cfg.hidden, cfg.eps)
        self.mlp = DreamMLP(cfg)

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        cache: Any = None,
        mask: Tensor | None = None,
        rows: Tensor | None = None,
    ) -> Tensor:
        """x (B, n, D) -> (B, n, D); with `rows` the output of those positions only (B, R, D)."""
        q, k, v = self.self_attn.project(self.input_layernorm(x), cos, sin, rows)
        x = (x if rows is None else x[:, rows]) + self.self_attn.o_proj(native.attend(q, k, v, cache, mask))
        return x + self.mlp(self.post_attention_layernorm(x))


class DreamBody(nn.Module):
    def __init__(self, cfg: DreamConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(DreamLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = native.RMSNorm(cfg.hidden, cfg.eps)


class DreamLM(native.NativeLM):
    """The Dream family's model (native.NativeLM); its logits are still shifted: row i scores position i + 1."""

    def __init__(self, cfg: DreamConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = DreamBody(cfg)
        self.lm_head = None if cfg.tied else nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def parts(self) -> tuple[nn.Embedding, nn.ModuleList, nn.Module]:
        return self.model.embed_tokens, self.model.layers, self.model.norm

    def head(self, h: Tensor) -> Tensor:
        return F.linear(h, self.model.embed_tokens.weight) if self.lm_head is None else self.lm_head(h)


def load_model(path: Path, config: dict, device: torch.device, dtype: torch.dtype) -> DreamLM:
    """The checkpoint in `path` on `device` in `dtype`; NotNative when it is not the published layout."""
    cfg = DreamConfig.from_json(config)
    # some tied checkpoints store the head as well: it is the embedding
    drop = (HEAD,) if cfg.tied else ()
    layers = (cfg.n_layers, "num_hidden_layers")
    return native.load_checkpoint(path, lambda: DreamLM(cfg), layers, device, dtype, drop)
