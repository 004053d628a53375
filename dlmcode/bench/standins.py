"""Random models for timing, when the weights to time are not here: the built-in architecture,
or a published one at full size (`dlmcode speed --shape llada-8b`).

A stand-in runs dlmcode's own code for that architecture (models/builtin.py, native_llada.py,
native_dream.py) with random weights: every matrix product, cache and decoder costs what it
costs with the real weights, but its predictions are noise, so TPF and outputs mean nothing.
Prompts are tokenized with the built-in model's tokenizer (its ids exist in every vocabulary here).
Weights come from a generator of their own (`seed`): building a stand-in never touches torch's
global random state, so it cannot change what a caller's seeded code does next.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.errors import UsageError
from ..models.base import Dlm

# config.json of GSAI-ML/LLaDA-8B-Base (and -Instruct: same architecture), the fields the model reads
LLADA_8B: dict[str, Any] = {
    "model_type": "llada",
    "architectures": ["LLaDAModelLM"],
    "activation_type": "silu",
    "alibi": False,
    "attention_layer_norm": False,
    "bias_for_layer_norm": False,
    "block_group_size": 1,
    "block_type": "llama",
    "d_model": 4096,
    "embedding_size": 126464,
    "include_bias": False,
    "include_qkv_bias": False,
    "input_emb_norm": False,
    "layer_norm_type": "rms",
    "layer_norm_with_affine": True,
    "mlp_hidden_size": 12288,
    "mlp_ratio": 4,
    "n_heads": 32,
    "n_kv_heads": 32,
    "n_layers": 32,
    "rms_norm_eps": 1e-05,
    "rope": True,
    "rope_full_precision": True,
    "rope_theta": 500000.0,
    "scale_logits": False,
    "vocab_size": 126464,
    "weight_tying": False,
    "max_sequence_length": 4096,
    "mask_token_id": 126336,
    "eos_token_id": 126081,
}

# config.json of Dream-org/Dream-v0-Base-7B (Qwen2.5-7B shapes)
DREAM_7B: dict[str, Any] = {
    "model_type": "Dream",
    "architectures": ["DreamModel"],
    "hidden_act": "silu",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 131072,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "vocab_size": 152064,
    "mask_token_id": 151666,
}
SHAPES = {"llada-8b": ("llada", LLADA_8B), "dream-7b": ("dream", DREAM_7B)}


def builtin_stand_in(device: torch.device, seed: int = 0) -> Dlm:
    """A random model of the built-in architecture and size, for timing when the trained weights are not installed."""
    from ..models import builtin
    from ..models.builtin import train_tokenizer

    text = [p.read_text(encoding="utf-8") for p in sorted(Path(__file__).parent.parent.rglob("*.py"))]
    tok = train_tokenizer(text, builtin.BuiltinConfig().vocab_size)
    cfg = builtin.BuiltinConfig(vocab_size=tok.tok.get_vocab_size())
    with torch.device("meta"):  # no weights drawn from the global generator while building
        model = builtin.DlmcodeDiffusionLM(cfg, init_weights=False)
    model = randomize(model.to_empty(device=torch.device("cpu")), seed)
    with tempfile.TemporaryDirectory() as tmp:
        builtin.save(model, tok, Path(tmp), dtype=torch.float32)
        dlm = builtin.load(Path(tmp), device, torch.float32)
    return dataclasses.replace(dlm, name="random stand-in of the built-in architecture")


def published(
    shape: str, device: torch.device, dtype: torch.dtype, overrides: dict[str, Any] | None = None, seed: int = 0
) -> Dlm:
    """A random model with the published config.json of `shape` (SHAPES), built straight on `device` in `dtype`.

    `overrides` replace config.json fields (tests shrink the model with them).
    """
    from ..models import (
        builtin,
        builtin_path,
        dream,
        native,
        native_dream,
        native_llada,
    )

    if shape not in SHAPES:
        raise UsageError(f"--shape {shape!r}: use one of {', '.join(SHAPES)}")
    family, config = SHAPES[shape]
    config = config | (overrides or {})
    make = {
        "llada": lambda c: native_llada.LladaLM(native_llada.LladaConfig.from_json(c)),
        "dream": lambda c: native_dream.DreamLM(native_dream.DreamConfig.from_json(c)),
    }[family]
    with torch.device("meta"):
        model = make(config)
    model = randomize(model.to_empty(device=device).to(dtype), seed).eval()
    shift = dream.SHIFT if family == "dream" else 0  # Dream scores position i from hidden state i - 1
    tokenizer = builtin.BuiltinTokenizer.from_file(builtin_path() / "tokenizer.json")
    mask_id = int(config["mask_token_id"])
    return Dlm(
        name=f"random stand-in of {shape}",
        family=family,
        tokenizer=tokenizer,
        mask_id=mask_id,
        eos_id=config.get("eos_token_id"),
        pad_id=None,
        context=int(config.get("max_sequence_length") or config.get("max_position_embeddings")),
        predict=native.predict_of(model, shift),
        device=device,
        dtype=dtype,
        **native.wired(model, mask_id, 0, shift),
    )


@torch.no_grad()
def randomize(model: nn.Module, seed: int = 0) -> nn.Module:
    """Weights as a fresh transformer has them: matrices N(0, 0.02), norm scales 1, biases 0,
    drawn from a generator seeded with `seed` on each parameter's device (never the global one)."""
    generators: dict[torch.device, torch.Generator] = {}
    for name, p in model.named_parameters():
        if p.ndim > 1:
            g = generators.setdefault(p.device, torch.Generator(device=p.device).manual_seed(seed))
            p.normal_(0.0, 0.02, generator=g)
        elif name.endswith("bias"):
            p.zero_()
        else:
            p.fill_(1.0)
    return model
