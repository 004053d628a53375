"""Family adapter for Dream-v0, Dream-Coder, DreamOn and DiffuCoder (Qwen2.5 trained as masked diffusion).

Dream keeps its autoregressive parent's head: the logits at row i score position i+1
(docs/field.md A.2). `align` shifts them back so row i scores position i, exactly as Dream's
own sampler does, and decoders never know. Like LLaDA, Dream exists only as hub remote code
and breaks under transformers 5.x (A.4.3); see hf.remote_code_error.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from . import hf
from .base import Dlm

DREAM_MASK_ID = 151666  # <|mask|>
DREAM_EOS_ID = 151643  # <|endoftext|>, also Dream's pad
DREAM_CONTEXT = 2048  # Dream README: trained at 2,048 tokens (config.json inherits Qwen2.5's 131072); our choice to cap at it
PAD_TOKEN = "<|dlm_pad|>"  # DiffuCoder pads generations with its own token
EOT_TOKEN = "<|im_end|>"  # Qwen ChatML end of turn (Instruct models)
TITLE = "Dream"


def align(logits: Tensor) -> Tensor:
    """(L, V) -> (L, V): row i of the result scores position i (Dream: torch.cat([logits[:,:1], logits[:,:-1]], 1))."""
    return torch.cat([logits[:1], logits[:-1]], dim=0)


def matches(config: dict) -> bool:
    """model_type "Dream", a Dream* architecture, modeling_dream in auto_map, or Qwen2 carrying a mask_token_id.

    The last rule catches Qwen2 checkpoints trained as masked diffusion (Open-dCoder style): a
    plain autoregressive Qwen2 config has no mask_token_id. Anything else needs --family dream.
    """
    model_type = str(config.get("model_type", "")).lower()
    archs = [str(a) for a in config.get("architectures") or []]
    code = " ".join(str(v) for v in (config.get("auto_map") or {}).values())
    return (
        model_type == "dream"
        or any(a.startswith("Dream") for a in archs)
        or "modeling_dream." in code
        or (model_type == "qwen2" and config.get("mask_token_id") is not None)
    )


def load(path: Path, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False) -> Dlm:
    config = hf.read_config(path)
    hf.require_remote_code(path, TITLE, config, trust_remote_code)
    tok = hf.load_remote_tokenizer(path, TITLE)
    model = hf.load_remote(path, TITLE, device, dtype)
    vocab = hf.vocab_size(model)
    bos_id = hf.bos_of(hf.framing(tok))
    mask_id = hf.require_mask(path, hf.first_id(tok.mask_token_id, config.get("mask_token_id"), DREAM_MASK_ID, vocab_size=vocab))
    eos_id = hf.first_id(config.get("eos_token_id"), hf.token_id(tok, "<|endoftext|>"), DREAM_EOS_ID, vocab_size=vocab)
    pad_id = hf.first_id(hf.token_id(tok, PAD_TOKEN), tok.pad_token_id, config.get("pad_token_id"), vocab_size=vocab)
    eot_id = hf.first_id(hf.token_id(tok, EOT_TOKEN), vocab_size=vocab)
    return Dlm(
        name=hf.label(path),
        family="dream",
        tokenizer=hf.HfTokenizer(tok),
        mask_id=mask_id,
        eos_id=eos_id,
        pad_id=pad_id,
        bos_id=bos_id,
        context=min(int(config.get("max_position_embeddings") or DREAM_CONTEXT), DREAM_CONTEXT),
        predict=hf.make_predict(model, align=align),
        device=device,
        dtype=dtype,
        chat=hf.chat_fn(tok, bos_id),
        special_ids=hf.special_ids(tok, mask_id, eos_id, eot_id, pad_id, bos_id),
        eot_id=eot_id,
    )
