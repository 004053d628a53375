"""dlmcode's own LLaDA (GSAI-ML LLaDA-8B-Base/Instruct, LLaDA-1.5): no remote code, any transformers.

The architecture of the published modelling_llada.py in the configuration the checkpoints
use (block_type "llama"): pre-RMSNorm blocks with separate q/k/v projections, RoPE rotated
in float32 (rope_full_precision), bidirectional SDPA, a SiLU-gated MLP (ff_proj is the gate,
up_proj the linear half, ff_out the down projection), an untied output head. Module names
mirror the checkpoint (model.transformer.blocks.N.q_proj ...), so its safetensors load as
they are. Any other option of that code raises NotNative, and the adapter falls back to the
published code when the user allows it.
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

SUPPORTED = (  # (config key, the value we implement, the reference ModelConfig's default when absent)
    ("block_type", "llama", "sequential"),
    ("layer_norm_type", "rms", "default"),
    ("activation_type", "silu", "swiglu"),
    ("rope", True, False),
    ("alibi", False, False),
    ("attention_layer_norm", False, False),
    ("input_emb_norm", False, False),
    ("scale_logits", False, False),
    ("block_group_size", 1, 1),
    ("layer_norm_with_affine", True, True),
    ("multi_query_attention", None, None),
)


@dataclass(frozen=True)
class LladaConfig:
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    mlp_hidden: int  # mlp_hidden_size, else mlp_ratio * d_model
    vocab: int  # rows of the embedding and of the logits: embedding_size (LLaDA pads it past vocab_size)
    rope_theta: float
    eps: float  # rms_norm_eps
    tied: bool  # weight_tying: logits use the embedding matrix
    bias: bool  # include_bias: every linear and norm has a bias
    qkv_bias: bool  # include_qkv_bias
    norm_bias: bool  # bias_for_layer_norm (None in config.json means include_bias)
    rope_fp32: bool  # rope_full_precision

    @classmethod
    def from_json(cls, c: dict) -> LladaConfig:
        """The config.json of a LLaDA folder, or NotNative naming what we do not implement."""
        for key, supported, default in SUPPORTED:
            require(c, key, supported, default)
        d_model, n_heads = int(need(c, "d_model")), int(need(c, "n_heads"))
        if d_model % n_heads:
            raise NotNative(f"d_model {d_model} is not a multiple of n_heads {n_heads}")
        bias = bool(c.get("include_bias", False))
        norm_bias = c.get("bias_for_layer_norm")
        # each native family reads its own config.json keys into its own record (native_dream.py's alike in shape)
        return cls(
            d_model=d_model,
            n_layers=int(need(c, "n_layers")),
            n_heads=n_heads,
            n_kv_heads=int(c.get("n_kv_heads") or n_heads),
            mlp_hidden=int(c.get("mlp_hidden_size") or c.get("mlp_ratio", 4) * d_model),
            vocab=int(c.get("embedding_size") or need(c, "vocab_size")),
            rope_theta=float(c.get("rope_theta", 10000.0)),
            eps=float(c.get("rms_norm_eps", 1e-5)),
            tied=bool(c.get("weight_tying", True)),
            bias=bias,
            qkv_bias=bias or bool(c.get("include_qkv_bias", False)),
            norm_bias=bias if norm_bias is None else bool(norm_bias),
            rope_fp32=bool(c.get("rope_full_precision", True)),
        )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class LladaBlock(nn.Module):
    """One pre-norm block: attention then the gated MLP, each added to the residual."""

    def __init__(self, cfg: LladaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, kv = cfg.d_model, cfg.n_kv_heads * cfg.head_dim
        self.attn_norm = native.RMSNorm(d, cfg.eps, cfg.norm_bias)
        self.q_proj = nn.Linear(d, d, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(d, kv, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(d, kv, bias=cfg.qkv_bias)
        self.attn_out = nn.Linear(d, d, bias=cfg.bias)
        self.ff_norm = native.RMSNorm(d, cfg.eps, cfg.norm_bias)
        self.ff_proj = nn.Linear(d, cfg.mlp_hidden, bias=cfg.bias)
        self.up_proj = nn.Linear(d, cfg.mlp_hidden, bias=cfg.bias)
        self.ff_out = nn.Linear(cfg.mlp_hidden, d, bias=cfg.bias)

    def project(self, x: Tensor, cos: Tensor, sin: Tensor, rows: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        cfg = self.cfg
        return native.project(self, x, cos, sin, rows, cfg.n_heads, cfg.n_kv_heads, cfg.rope_fp32)

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        cache: Any = None,
        mask: Tensor | None = None,
        rows: Tensor | None = None,
    ) -> Tensor:
        """x (B, n, D) -> (B, n, D); with `rows` the output of those positions only (B, R, D): every
        position's keys and values, the queries, attention and MLP of `rows` alone."""
        q, k, v = self.project(self.attn_norm(x), cos, sin, rows)
        x = (x if rows is None else x[:, rows]) + self.attn_out(native.attend(q, k, v, cache, mask))
        return x + native.gated_mlp(self.ff_proj, self.up_proj, self.ff_out, self.ff_norm(x))


class LladaBody(nn.Module):
    """The published LLaDAModel's parameters under its names: transformer.{wte, blocks, ln_f, ff_out}."""

    def __init__(self, cfg: LladaConfig) -> None:
        super().__init__()
        layers = {
            "wte": nn.Embedding(cfg.vocab, cfg.d_model),
            "blocks": nn.ModuleList(LladaBlock(cfg) for _ in range(cfg.n_layers)),
            "ln_f": native.RMSNorm(cfg.d_model, cfg.eps, cfg.norm_bias),
        }
        if not cfg.tied:
            layers["ff_out"] = nn.Linear(cfg.d_model, cfg.vocab, bias=cfg.bias)
        self.transformer = nn.ModuleDict(layers)


class LladaLM(native.NativeLM):
    """LLaDA's model (native.NativeLM); the checkpoint's top level is `model.`."""

    def __init__(self, cfg: LladaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = LladaBody(cfg)

    def parts(self) -> tuple[nn.Embedding, nn.ModuleList, nn.Module]:
        t = self.model.transformer
        return t.wte, t.blocks, t.ln_f

    def head(self, h: Tensor) -> Tensor:
        t = self.model.transformer
        return F.linear(h, t.wte.weight) if self.cfg.tied else t.ff_out(h)


def load_model(path: Path, config: dict, device: torch.device, dtype: torch.dtype) -> LladaLM:
    """The checkpoint in `path` on `device` in `dtype`; NotNative when it is not the published layout."""
    cfg = LladaConfig.from_json(config)
    return native.load_checkpoint(path, lambda: LladaLM(cfg), (cfg.n_layers, "n_layers"), device, dtype)
