"""Family adapter for LLaDA-8B-Base/Instruct and LLaDA-1.5 (GSAI-ML): logits used in place, no shift.

LLaDA exists only as hub remote code (docs/research/field.md A.3), and under transformers 5.x that code
fails (A.4.1), so dlmcode runs its own implementation (native_llada) on the published
safetensors, with any transformers and without --trust-remote-code. A folder the native code
cannot run (another block type, no safetensors) runs on its own code only with
--trust-remote-code; both refusals are one clear ModelError. Ids come from the tokenizer and
config.json first; the constants below are the published values, used only when those are silent.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from ..core.canvas import Predict
from . import hf, native, native_llada
from .base import Dlm

LLADA_MASK_ID = 126336  # <|mdm_mask|>
LLADA_EOS_ID = 126081  # <|endoftext|>
LLADA_EOT_ID = 126348  # <|eot_id|>, end of a chat turn
EOT_TOKEN = "<|eot_id|>"
LLADA_CONTEXT = 4096  # max_sequence_length of LLaDA-8B's config.json
TITLE = "LLaDA"


def matches(config: dict) -> bool:
    """model_type "llada" or the LLaDAModelLM architecture (not LLaDA-MoE / LLaDA2: other ids, block diffusion)."""
    return str(config.get("model_type", "")).lower() == "llada" or "LLaDAModelLM" in (config.get("architectures") or [])


def load(path: Path, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False) -> Dlm:
    config = hf.read_config(path)
    if not native.runs(path, hf.label(path), TITLE, config, native_llada.LladaConfig.from_json, trust_remote_code):
        return load_remote(path, config, device, dtype)
    tok = hf.load_tokenizer(path, trust_remote_code=False)
    model = native.load_or_explain(native_llada.load_model, path, hf.label(path), TITLE, config, device, dtype)
    dlm = adapt(path, config, tok, model.cfg.vocab, native.predict_of(model), device, dtype)
    return dataclasses.replace(dlm, **native.wired(model, dlm.mask_id, dlm.eos_id or 0))


def load_remote(path: Path, config: dict, device: torch.device, dtype: torch.dtype) -> Dlm:
    """LLaDA on the folder's published modelling code (--trust-remote-code), for what the native code does not run."""
    hf.require_remote_code(path, TITLE, config, True)
    tok = hf.load_remote_tokenizer(path, TITLE)
    model = hf.load_remote(path, TITLE, device, dtype)
    return adapt(path, config, tok, hf.vocab_size(model), hf.make_predict(model), device, dtype)


# As dream.adapt: hf.adapt builds every transformers family's Dlm; each adapter passes its published ids by name.
def adapt(
    path: Path, config: dict, tok: Any, vocab: int, predict: Predict, device: torch.device, dtype: torch.dtype
) -> Dlm:
    """The Dlm around a LLaDA model: hf.adapt with LLaDA's published ids and its config.json's context."""
    context = int(config.get("max_sequence_length") or config.get("max_position_embeddings") or LLADA_CONTEXT)
    # every hf family calls hf.adapt with its own published ids (dream.adapt's call alike in shape)
    return hf.adapt(
        path,
        config,
        tok,
        vocab,
        predict,
        device,
        dtype,
        family="llada",
        context=context,
        mask_id=LLADA_MASK_ID,
        eos_id=LLADA_EOS_ID,
        eot_token=EOT_TOKEN,
        eot_id=LLADA_EOT_ID,
    )
