"""Family adapter for Dream-v0, Dream-Coder, DreamOn, DiffuCoder and Open-dCoder (Qwen2 trained as masked diffusion).

DreamOn (arXiv 2602.01326) is Dream-Coder's architecture trained to expand and delete holes: its
tokenizer has an expand token (a hole that decodes it becomes two) and a hole that decodes
end-of-text is deleted, with the holes after it (its generator's `pad_eos_to_right` and
`delete_eos_token`). Such a folder declares both on its Dlm (`expand_id`, `delete_id`), and
every face without a given length then lets the fill grow and shrink (jobs/expanding.py).

Dream keeps its autoregressive parent's head: the logits at row i score position i+1
(docs/research/field.md A.2). `align` shifts them back so row i scores position i, exactly as Dream's
own sampler does, and decoders never know. Dream exists only as hub remote code, which breaks
under transformers 5.x (A.4.3), so dlmcode runs its own implementation (native_dream) on the
published safetensors and reads the vocabulary with transformers' Qwen2 tokenizer when the
folder's tokenizer is remote code. A folder the native code cannot run runs on its own code
only with --trust-remote-code.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.canvas import Predict
from ..core.errors import ModelError
from . import hf, native, native_dream
from .base import Dlm

DREAM_MASK_ID = 151666  # <|mask|>
DREAM_EOS_ID = 151643  # <|endoftext|>, also Dream's pad
DREAM_CONTEXT = (
    2048  # Dream README: trained at 2,048 tokens (config.json inherits Qwen2.5's 131072); our choice to cap at it
)
PAD_TOKEN = "<|dlm_pad|>"  # DiffuCoder pads generations with its own token
EOT_TOKEN = "<|im_end|>"  # Qwen ChatML end of turn (Instruct models)
TITLE = "Dream"
EXPAND_TOKEN = "<|expand|>"  # DreamOn's expand token, by name (UNVERIFIED: its training code sets id 151667 by hand)
SHIFT = 1  # the head at hidden state i scores position i + 1 (align, and native.wired's shift)


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
    if not native.runs(path, hf.label(path), TITLE, config, native_dream.DreamConfig.from_json, trust_remote_code):
        return load_remote(path, config, device, dtype)
    tok = load_tokenizer(path)
    model = native.load_or_explain(native_dream.load_model, path, hf.label(path), TITLE, config, device, dtype)
    dlm = adapt(path, config, tok, model.cfg.vocab, native.predict_of(model, SHIFT), device, dtype)
    return dataclasses.replace(dlm, **native.wired(model, dlm.mask_id, dlm.eos_id or 0, shift=SHIFT))


def load_tokenizer(path: Path) -> Any:
    """The folder's tokenizer without running its code: Dream's tokenization_dream.py is Qwen2's BPE, so a folder
    whose tokenizer is remote code is read with transformers' Qwen2Tokenizer (vocab.json, merges.txt, added tokens)."""
    with warnings.catch_warnings():  # transformers reads config.json too, and warns about Qwen2 fields Dream still uses
        warnings.simplefilter("ignore")
        try:
            return hf.load_tokenizer(path, trust_remote_code=False)
        except ModelError:
            if not ((path / "vocab.json").is_file() and (path / "merges.txt").is_file()):
                raise
        return qwen2_tokenizer(path)


def qwen2_tokenizer(path: Path) -> Any:
    from transformers import Qwen2Tokenizer

    try:
        return Qwen2Tokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as err:
        raise ModelError(
            f"model {hf.label(path)!r}: cannot load its tokenizer as Qwen2's ({hf.first_line(err)})"
        ) from None


def load_remote(path: Path, config: dict, device: torch.device, dtype: torch.dtype) -> Dlm:
    """Dream on the folder's published modelling code (--trust-remote-code), for what the native code does not run."""
    hf.require_remote_code(path, TITLE, config, True)
    tok = hf.load_remote_tokenizer(path, TITLE)
    model = hf.load_remote(path, TITLE, device, dtype)
    return adapt(path, config, tok, hf.vocab_size(model), hf.make_predict(model, align=align), device, dtype)


# As llada.adapt: hf.adapt builds every transformers family's Dlm; each adapter passes its published ids by name.
def adapt(
    path: Path, config: dict, tok: Any, vocab: int, predict: Predict, device: torch.device, dtype: torch.dtype
) -> Dlm:
    """The Dlm around a Dream-family model: hf.adapt with Dream's published ids, its pad token, and its context cap."""
    context = min(int(config.get("max_position_embeddings") or DREAM_CONTEXT), DREAM_CONTEXT)
    # every hf family calls hf.adapt with its own published ids (llada.adapt's call alike in shape)
    dlm = hf.adapt(
        path,
        config,
        tok,
        vocab,
        predict,
        device,
        dtype,
        family="dream",
        context=context,
        mask_id=DREAM_MASK_ID,
        eos_id=DREAM_EOS_ID,
        eot_token=EOT_TOKEN,
        pad_token=PAD_TOKEN,
    )
    return with_expand(
        dlm, hf.first_id(config.get("expand_token_id"), hf.token_id(tok, EXPAND_TOKEN), vocab_size=vocab)
    )


def with_expand(dlm: Dlm, expand: int | None) -> Dlm:
    """DreamOn: the Dlm declares its expand token, and end-of-text as the delete (None: a Dream without them)."""
    if expand is None or dlm.eos_id is None:
        return dlm
    return dataclasses.replace(dlm, expand_id=expand, delete_id=dlm.eos_id, special_ids=dlm.special_ids | {expand})
