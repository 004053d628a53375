"""Family adapter for LLaDA2.0 / 2.1 (inclusionAI; `LLaDA2MoeModelLM`): block diffusion on a Ling-style MoE.

LLaDA2 exists only as hub remote code, written for transformers 4.x, so dlmcode runs its own
implementation of the published architecture on the checkpoint's safetensors: pre-RMSNorm
layers with one fused query-key-value projection, RMSNorm on each head's queries and keys,
RoPE on the first `partial_rotary_factor` of each head, attention under the block-diffusion
mask (bidirectional in a block, causal between blocks), and a mixture of experts after the
first `first_k_dense_replace` dense layers: a sigmoid router whose expert bias steers the
choice only, the top `topk_group` of `n_group` expert groups (each scored by its two best
experts), the top `num_experts_per_tok` experts in them weighted by their sigmoid scores
normalised and scaled by `routed_scaling_factor`, plus always-on shared experts.
Module names mirror the checkpoint (model.layers.N.attention.query_key_value ...).

Blocks of 32 at multiples of 32 from position 0, the prompt's tail in the first; its own rule
is the `dynamic` decoder (32 steps a block, threshold 0.95: its generate's defaults), whose
recomputation of every position before the block is here an exact cache (models/blocks.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import blocks, hf, native, sdar
from .base import Dlm
from .native import NotNative, need

ARCH = "LLaDA2MoeModelLM"
BLOCK = 32  # its generate's block_length
STEPS = 32  # its generate's steps
THRESHOLD = 0.95  # its generate's threshold
MASK_ID = 156895  # its generate's mask_id, used when neither tokenizer nor config.json names one
MASK_TOKEN = "<|mask|>"


def matches(config: dict) -> bool:
    return config.get("model_type") in ("llada2_moe", "llada2") or ARCH in (config.get("architectures") or [])


@dataclass(frozen=True)
class Llada2Config:
    d: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rotary: int  # dims of a head that RoPE turns (partial_rotary_factor)
    theta: float
    eps: float
    vocab: int
    inter: int  # a dense layer's MLP width
    experts: int
    top_k: int
    groups: int
    top_groups: int
    scale: float  # routed_scaling_factor
    expert_inter: int
    shared: int  # shared experts (their MLP is shared * expert_inter wide)
    dense_layers: int  # first_k_dense_replace
    qkv_bias: bool
    qk_norm: bool
    bias: bool  # the attention output's bias (use_bias)
    tied: bool

    @classmethod
    def from_json(cls, c: dict) -> Llada2Config:
        if (c.get("rope_scaling") or {}).get("type", "default") not in ("default", None):
            raise NotNative(f"rope_scaling {c['rope_scaling']!r} is not supported")
        if c.get("hidden_act", "silu") != "silu":
            raise NotNative(f"hidden_act {c.get('hidden_act')!r} is not supported (only 'silu')")
        d, heads = int(need(c, "hidden_size")), int(need(c, "num_attention_heads"))
        head_dim = int(c.get("head_dim") or d // heads)
        return cls(
            d=d,
            layers=int(need(c, "num_hidden_layers")),
            heads=heads,
            kv_heads=int(c.get("num_key_value_heads") or heads),
            head_dim=head_dim,
            rotary=int(head_dim * float(c.get("partial_rotary_factor", 1.0))),
            theta=float(c.get("rope_theta", 10000.0)),
            eps=float(c.get("rms_norm_eps", 1e-6)),
            vocab=int(need(c, "vocab_size")),
            inter=int(need(c, "intermediate_size")),
            experts=int(c.get("num_experts") or 0),
            top_k=int(c.get("num_experts_per_tok") or 1),
            groups=int(c.get("n_group") or 1),
            top_groups=int(c.get("topk_group") or 1),
            scale=float(c.get("routed_scaling_factor", 1.0)),
            expert_inter=int(c.get("moe_intermediate_size") or 0),
            shared=int(c.get("num_shared_experts") or 0),
            dense_layers=int(c.get("first_k_dense_replace") or 0),
            qkv_bias=bool(c.get("use_qkv_bias", False)),
            qk_norm=bool(c.get("use_qk_norm", False)),
            bias=bool(c.get("use_bias", False)),
            tied=bool(c.get("tie_word_embeddings", False)),
        )


class Mlp(nn.Module):
    def __init__(self, d: int, width: int) -> None:
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, width, bias=False), nn.Linear(d, width, bias=False)
        self.down_proj = nn.Linear(width, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return native.gated_mlp(self.gate_proj, self.up_proj, self.down_proj, x)


class Gate(nn.Module):
    """The router: which experts a token goes to, and their weights (see the module docstring)."""

    def __init__(self, cfg: Llada2Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.weight = nn.Parameter(torch.empty(cfg.experts, cfg.d))
        self.register_buffer("expert_bias", torch.zeros(cfg.experts))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (T, d) -> expert ids (T, k) and float32 weights (T, k)."""
        cfg = self.cfg
        scores = torch.sigmoid(F.linear(x.float(), self.weight.float()))  # (T, E)
        steer = scores + self.expert_bias  # the bias picks experts; it never weighs them
        best = steer.view(len(x), cfg.groups, -1).topk(2, dim=-1)[0].sum(-1)  # (T, G) a group's two best
        groups = best.topk(cfg.top_groups, dim=-1, sorted=False)[1]  # (T, g)
        keep = torch.zeros_like(best).scatter_(1, groups, 1).repeat_interleave(cfg.experts // cfg.groups, dim=1)
        ids = steer.masked_fill(keep == 0, float("-inf")).topk(cfg.top_k, dim=-1)[1]  # (T, k)
        weights = scores.gather(1, ids)
        if cfg.top_k > 1:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return ids, weights * cfg.scale


class Moe(nn.Module):
    def __init__(self, cfg: Llada2Config) -> None:
        super().__init__()
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList(Mlp(cfg.d, cfg.expert_inter) for _ in range(cfg.experts))
        self.shared_experts = Mlp(cfg.d, cfg.expert_inter * cfg.shared) if cfg.shared else None

    def forward(self, x: Tensor) -> Tensor:
        """The reference's inference path (its moe_infer), op for op, so that float32 sums round as its do: the
        (token, slot) pairs sorted by expert with its unstable argsort (a row's neighbours in an expert's batch change
        how a small matmul rounds), each expert's rows in one batch, then the slots weighted and summed per token."""
        flat = x.reshape(-1, x.shape[-1])  # (T, d)
        ids, weights = self.gate(flat)  # (T, k)
        order = ids.view(-1).argsort()  # (T*k,) pairs by expert
        counts = torch.bincount(ids.view(-1), minlength=len(self.experts)).tolist()
        rows = flat[order // ids.shape[1]]
        outs = [self.experts[e](part) for e, part in enumerate(rows.split(counts)) if counts[e]]
        done = torch.empty_like(rows)
        done[order] = torch.cat(outs)
        y = done.view(*ids.shape, -1).to(weights.dtype).mul_(weights[..., None]).sum(dim=1).to(x.dtype).view(x.shape)
        return y + self.shared_experts(x) if self.shared_experts is not None else y


class Attention(nn.Module):
    def __init__(self, cfg: Llada2Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.query_key_value = nn.Linear(cfg.d, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim, bias=cfg.qkv_bias)
        if cfg.qk_norm:
            self.query_layernorm = native.RMSNorm(cfg.head_dim, cfg.eps)
            self.key_layernorm = native.RMSNorm(cfg.head_dim, cfg.eps)
        self.dense = nn.Linear(cfg.heads * cfg.head_dim, cfg.d, bias=cfg.bias)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, past: list[Tensor], mask: Tensor) -> Tensor:
        cfg = self.cfg
        b, n, _ = x.shape
        qkv = self.query_key_value(x).view(b, n, cfg.heads + 2 * cfg.kv_heads, cfg.head_dim)
        q, k, v = (t.transpose(1, 2) for t in qkv.split([cfg.heads, cfg.kv_heads, cfg.kv_heads], dim=2))
        if cfg.qk_norm:
            q, k = self.query_layernorm(q), self.key_layernorm(k)
        q, k = turn(q, cos, sin, cfg.rotary), turn(k, cos, sin, cfg.rotary)
        if past:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        past[:] = [k, v]  # (B, Hkv, K, hd): the caller keeps what it needs
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=cfg.kv_heads != cfg.heads)
        return self.dense(y.transpose(1, 2).flatten(2))


def turn(x: Tensor, cos: Tensor, sin: Tensor, rotary: int) -> Tensor:
    """RoPE on the first `rotary` dims of each head (rotate-half over that slice), the rest as they are."""
    turned, rest = x[..., :rotary], x[..., rotary:]
    half = torch.cat([-turned[..., rotary // 2 :], turned[..., : rotary // 2]], dim=-1)
    return torch.cat([turned * cos + half * sin, rest], dim=-1)


class Layer(nn.Module):
    def __init__(self, cfg: Llada2Config, i: int) -> None:
        super().__init__()
        self.input_layernorm = native.RMSNorm(cfg.d, cfg.eps)
        self.attention = Attention(cfg)
        self.post_attention_layernorm = native.RMSNorm(cfg.d, cfg.eps)
        self.mlp = Moe(cfg) if cfg.experts and i >= cfg.dense_layers else Mlp(cfg.d, cfg.inter)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, past: list[Tensor], mask: Tensor) -> Tensor:
        x = x + self.attention(self.input_layernorm(x), cos, sin, past, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg: Llada2Config) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.d)
        self.layers = nn.ModuleList(Layer(cfg, i) for i in range(cfg.layers))
        self.norm = native.RMSNorm(cfg.d, cfg.eps)


class Llada2LM(nn.Module):
    """ids (B, n) at positions `pos` ((n,), or (B, n)) after the cached keys `past` (one [k, v] per layer, updated
    in place) under `mask` (B or 1, 1, n or 1, K) -> logits (B, n, V)."""

    def __init__(self, cfg: Llada2Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        self.lm_head = nn.Linear(cfg.d, cfg.vocab, bias=False)

    def forward(self, ids: Tensor, pos: Tensor, past: list[list[Tensor]], mask: Tensor) -> Tensor:
        cfg = self.cfg
        inv = 1.0 / cfg.theta ** (torch.arange(0, cfg.rotary, 2, device=ids.device, dtype=torch.float32) / cfg.rotary)
        ang = pos.float()[..., None] * inv  # (n, rotary/2), or (B, n, rotary/2): a position per row
        emb = torch.cat([ang, ang], dim=-1)
        x = self.model.word_embeddings(ids)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        if pos.dim() == 2:  # (B, 1, n, rotary) against (B, heads, n, head_dim)
            cos, sin = cos[:, None], sin[:, None]
        for layer, kv in zip(self.model.layers, past, strict=True):
            x = layer(x, cos, sin, kv, mask)
        return self.lm_head(self.model.norm(x)).float()


class NativeSession(blocks.PendingSession):
    """One decode's LLaDA2 with its exact cache (blocks.Session): each layer's keys and values of every finished
    token."""

    def __init__(self, model: Llada2LM, size: int) -> None:
        super().__init__(next(model.parameters()).device, size)
        self.model = model
        self.past: list[list[Tensor]] = [[] for _ in range(model.cfg.layers)]

    pads = True

    def forward(self, x: Tensor, pos: Tensor, seen: Tensor) -> Tensor:
        return self.model(x[None], pos, self.past, seen[None, None])[0]  # (m, V)

    def kv(self) -> list[tuple[Tensor | None, Tensor | None]]:
        return [(kv[0], kv[1]) if kv else (None, None) for kv in self.past]

    def forward_padded(self, x: Tensor, pos: Tensor, seen: Tensor, past: list) -> Tensor:
        layers = [list(kv) if kv is not None else [] for kv in past]  # this forward's own: dropped after it
        return self.model(x, pos, layers, seen[:, None, None, :])  # (B, n, V)

    def crop(self, n: int) -> None:
        self.past = [[t[:, :, :n] for t in kv] for kv in self.past]


def cost(cfg: Llada2Config) -> blocks.Cost:
    attention = cfg.d * cfg.head_dim * (2 * cfg.heads + 2 * cfg.kv_heads)
    moe = cfg.d * cfg.experts + 3 * cfg.d * cfg.expert_inter * (cfg.top_k + cfg.shared)
    dense = 3 * cfg.d * cfg.inter
    mlps = dense * min(cfg.dense_layers, cfg.layers) + (moe if cfg.experts else dense) * max(
        cfg.layers - cfg.dense_layers, 0
    )
    return blocks.Cost(cfg.layers * attention + mlps + cfg.d * cfg.vocab, cfg.layers * 2 * cfg.heads * cfg.head_dim)


def load_model(path: Path, config: dict, device: torch.device, dtype: torch.dtype) -> Llada2LM:
    cfg = Llada2Config.from_json(config)
    native.shard_files(path)
    native.check_layers(path, cfg.layers, "num_hidden_layers")
    with torch.device("meta"):
        model = Llada2LM(cfg)
    state = native.read_state(path, device, dtype)
    for name in model.state_dict():  # checkpoints trained without the routing bias: a bias of zeros
        if name.endswith("expert_bias") and name not in state:
            state[name] = torch.zeros(cfg.experts, device=device)
    state = {k: v.float() if k.endswith("expert_bias") else v for k, v in state.items()}  # a routing bias stays exact
    return native.load_weights(model, state, path, tied={"lm_head.weight": "model.word_embeddings.weight"})


def load(path: Path, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False) -> Dlm:
    config = hf.read_config(path)
    try:
        model = load_model(path, config, device, dtype)
    except NotNative as why:
        raise native.not_native_error(hf.label(path), "LLaDA2", str(why)) from None
    tok = hf.load_tokenizer(path, trust_remote_code=False)
    vocab = model.cfg.vocab
    mask_id = hf.require_mask(
        path,
        hf.first_id(
            tok.mask_token_id, hf.token_id(tok, MASK_TOKEN), config.get("mask_token_id"), MASK_ID, vocab_size=vocab
        ),
    )
    size = int(config.get("block_size") or config.get("block_length") or BLOCK)
    spec = blocks.Blocks(
        size=size, aligned=True, noise=0, open=lambda: NativeSession(model, size), cost=cost(model.cfg)
    )
    options = {"steps": STEPS, "threshold": THRESHOLD}
    return sdar.causal_dlm(path, config, tok, model, spec, mask_id, "llada2", options, vocab, generation_eos(path))


def generation_eos(path: Path) -> Any:
    """generation_config.json's eos_token_id, if the folder has one (its generate stops there)."""
    import json

    try:
        return json.loads((path / "generation_config.json").read_text(encoding="utf-8")).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return None
