"""Family adapter for SDAR (JetAstra; `SDARForCausalLM`, `SDARMoeForCausalLM`): block diffusion on Qwen3.

SDAR is Qwen3 (dense) or Qwen3-MoE, trained to denoise a block of masked tokens attending
bidirectionally inside the block and causally to the blocks before it (its modeling_sdar.py is
Qwen3's with that mask). Its weights are Qwen3's under the same names, so dlmcode runs them on
transformers' own Qwen3ForCausalLM / Qwen3MoeForCausalLM (no remote code), with a
block-causal mask and an exact cache of finished blocks (models/blocks.py). Blocks sit at
multiples of the block size from position 0, the prompt's tail in the first one (its
generate.py), 4 positions unless config.json says otherwise. Its own rule is the `dynamic`
decoder (low_confidence_dynamic: 4 steps a block, threshold 0.85, its generate.py defaults).

The prompt's whole blocks and each finished block go into the cache by forwards of their own,
as its generate.py runs them (its prefill and store_kv forwards; `PendingSession.apart`), so
that the logits are its bit for bit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.errors import ModelError
from . import blocks, hf
from .base import Dlm

ARCHS = ("SDARForCausalLM", "SDARMoeForCausalLM")
BLOCK = 4  # generate.py's block_length
STEPS = 4  # generate.py's denoising_steps
THRESHOLD = 0.85  # generate.py's confidence_threshold
MASK_TOKEN = "<|MASK|>"  # its tokenizer's mask token, looked up by name when the tokenizer does not say


def matches(config: dict) -> bool:
    return config.get("model_type") in ("sdar", "sdar_moe") or any(
        a in ARCHS for a in config.get("architectures") or []
    )


def block_mask(seen: Tensor, dtype: torch.dtype) -> Tensor:
    """(1, 1, q, k) additive mask from the bool one: 0 where a query sees a key, -inf elsewhere."""
    return torch.zeros(seen.shape, dtype=dtype, device=seen.device).masked_fill(~seen, float("-inf"))[None, None]


class CausalSession(blocks.PendingSession):
    """One decode's block-causal model with its exact cache (blocks.Session) over a transformers causal LM."""

    apart = True  # generate.py's prefill and store_kv forwards

    def __init__(self, model: Any, size: int) -> None:
        from transformers import DynamicCache

        super().__init__(next(model.parameters()).device, size)
        self.model = model
        self.cache = DynamicCache(config=model.config)

    def forward(self, x: Tensor, pos: Tensor, seen: Tensor) -> Tensor:
        mask = block_mask(seen, self.model.dtype)
        out = self.model(
            input_ids=x[None], attention_mask=mask, position_ids=pos[None], cache=self.cache, use_cache=True
        )
        return out.logits[0]  # (m, V)

    def crop(self, n: int) -> None:
        self.cache.crop(n - self.cache.get_seq_length())  # a negative count: that many keys dropped from the end

    pads = True

    def kv(self) -> list[tuple[Tensor | None, Tensor | None]]:
        return [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in self.cache.layers]

    def forward_padded(self, x: Tensor, pos: Tensor, seen: Tensor, past: list) -> Tensor:
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)  # this forward's own: dropped after it
        for i, kv in enumerate(past):
            if kv is not None:
                cache.update(kv[0], kv[1], i)
        mask = torch.zeros(seen.shape, dtype=self.model.dtype, device=seen.device).masked_fill(~seen, float("-inf"))
        mask = mask[:, None, None, :].expand(len(x), 1, x.shape[1], seen.shape[1])  # (B, 1, n, K)
        out = self.model(input_ids=x, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
        return out.logits  # (B, n, V)


def cost(config: Any) -> blocks.Cost:
    """Multiply-adds per token (attention projections, MLP or routed experts and router, head) and per key."""
    d, heads, kv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    hd = getattr(config, "head_dim", None) or d // heads
    experts = getattr(config, "num_experts", 0) or 0
    mlp = (
        d * experts + config.num_experts_per_tok * 3 * d * config.moe_intermediate_size
        if experts
        else 3 * d * config.intermediate_size
    )
    per_layer = d * hd * (2 * heads + 2 * kv) + mlp
    return blocks.Cost(
        config.num_hidden_layers * per_layer + d * config.vocab_size, config.num_hidden_layers * 2 * heads * hd
    )


def qwen3_config(config: dict) -> Any:
    """The folder's config.json as transformers' Qwen3 (or Qwen3-MoE) config: the same fields, another name."""
    from transformers import Qwen3Config, Qwen3MoeConfig

    moe = config.get("model_type") == "sdar_moe" or "SDARMoeForCausalLM" in (config.get("architectures") or [])
    return (Qwen3MoeConfig if moe else Qwen3Config)(**own_fields(config))


def own_fields(config: dict) -> dict:
    """config.json's fields but those naming its own class (model_type, architectures, auto_map, version)."""
    return {
        k: v for k, v in config.items() if k not in ("model_type", "architectures", "auto_map", "transformers_version")
    }


def load_model(path: Path, hf_config: Any, device: torch.device, dtype: torch.dtype, what: str = "SDAR") -> Any:
    """transformers' causal LM of `hf_config` on the folder's weights (a family whose weights are a stock model's)."""
    from transformers import AutoModelForCausalLM

    try:
        with hf.quiet():
            model = AutoModelForCausalLM.from_pretrained(path, config=hf_config, **hf.pretrained_kwargs(dtype, False))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ModelError(f"model {hf.label(path)!r}: cannot load it as {what} ({hf.first_line(err)})") from None
    return hf.aligned(model.to(device).eval())


def load(path: Path, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False) -> Dlm:
    config = hf.read_config(path)
    tok = hf.load_tokenizer(path, trust_remote_code=False)
    model = load_model(path, qwen3_config(config), device, dtype)
    vocab = int(model.config.vocab_size)
    size = int(config.get("block_size") or config.get("block_length") or BLOCK)
    mask_id = hf.require_mask(
        path,
        hf.first_id(tok.mask_token_id, hf.token_id(tok, MASK_TOKEN), config.get("mask_token_id"), vocab_size=vocab),
    )
    spec = blocks.Blocks(
        size=size, aligned=True, noise=0, open=lambda: CausalSession(model, size), cost=cost(model.config)
    )
    options = {"steps": STEPS, "threshold": THRESHOLD}
    eos = getattr(model.generation_config, "eos_token_id", None)
    return causal_dlm(path, config, tok, model, spec, mask_id, "sdar", options, vocab, eos)


def causal_dlm(
    path: Path,
    config: dict,
    tok: Any,
    model: Any,
    spec: blocks.Blocks,
    mask_id: int,
    family: str,
    options: dict,
    vocab: int,
    eos: Any = None,
    decoder: str = "dynamic",
) -> Dlm:
    """The Dlm of a block-causal masked family (SDAR, LLaDA2): ids from generation_config (`eos`), the tokenizer,
    then config.json."""
    eos_id = hf.first_id(eos, config.get("eos_token_id"), tok.eos_token_id, vocab_size=vocab)
    pad_id = hf.first_id(tok.pad_token_id, config.get("pad_token_id"), vocab_size=vocab)
    bos_id = hf.bos_of(hf.framing(tok))
    return Dlm(
        name=hf.label(path),
        family=family,
        tokenizer=hf.HfTokenizer(tok),
        mask_id=mask_id,
        eos_id=eos_id,
        pad_id=pad_id,
        bos_id=bos_id,
        context=int(config.get("max_position_embeddings") or 4096),
        predict=blocks.predict_once(spec, mask_id),
        device=next(model.parameters()).device,
        dtype=next(model.parameters()).dtype,
        chat=hf.chat_fn(tok, bos_id),
        special_ids=hf.special_ids(tok, mask_id, eos_id, pad_id, bos_id),
        blocks=spec,
        decoder=decoder,
        decoder_options=options,
        infill="prompt",
    )
