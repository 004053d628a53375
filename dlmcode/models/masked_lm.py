"""Family adapter for any Hugging Face masked LM (BERT, RoBERTa, ModernBERT, ...) as a dLLM.

A masked LM scores every [MASK] at once from both sides, which is all a decoder needs. It was
trained with its special tokens around the text ([CLS] ... [SEP]): the canvas starts with
bos_id ([CLS]) and ends with eos_id ([SEP]) when spans puts them there, and predict adds
whichever is missing (a windowed canvas) and cuts its rows off again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..core.errors import ModelError
from . import hf
from .base import Dlm


def matches(config: dict) -> bool:
    """Declared *ForMaskedLM, or (configs without architectures) a model type transformers has a masked-LM head for."""
    archs = config.get("architectures") or []
    if archs:
        return any(str(a).endswith("ForMaskedLM") for a in archs)
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return config.get("model_type") in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def context(model: Any, frame: tuple[list[int], list[int]]) -> int:
    """Longest canvas: the position table less the framing tokens (predict may add them all) and,
    for RoBERTa-style models (positions numbered from padding_idx + 1), the rows below that offset."""
    table = getattr(getattr(model.base_model, "embeddings", None), "position_embeddings", None)
    pad = getattr(table, "padding_idx", None)
    offset = pad + 1 if pad is not None else 0
    return getattr(model.config, "max_position_embeddings", 512) - offset - len(frame[0]) - len(frame[1])


def load_model(path: Path, device: torch.device, dtype: torch.dtype, trust_remote_code: bool) -> Any:
    from transformers import AutoModelForMaskedLM

    try:
        kwargs = hf.pretrained_kwargs(dtype, trust_remote_code)
        with hf.quiet():
            model, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True, **kwargs)
    except (OSError, ValueError, KeyError) as err:  # ValueError: not a masked LM, or remote code not trusted
        raise ModelError(f"model {hf.label(path)!r}: cannot load it as a masked LM ({hf.first_line(err)})") from None
    missing = sorted(k for k in info["missing_keys"] if not k.endswith("bias"))  # a lone bias is usually a tie artifact
    if missing:  # e.g. a bare BertModel checkpoint: the LM head would be random
        raise ModelError(
            f"model {hf.label(path)!r}: the checkpoint lacks {len(missing)} masked-LM weight(s) such as {missing[0]!r};"
            " it is not a trained masked LM"
        )
    return model.to(device).eval()


def load(path: Path, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False) -> Dlm:
    tok = hf.load_tokenizer(path, trust_remote_code)
    if tok.mask_token_id is None:
        raise ModelError(f"model {hf.label(path)!r}: its tokenizer has no mask token, so it cannot fill holes")
    model = load_model(path, device, dtype, trust_remote_code)
    vocab = hf.vocab_size(model)
    mask_id = hf.require_mask(path, hf.first_id(tok.mask_token_id, vocab_size=vocab))
    frame = hf.framing(tok)
    eos_id = hf.first_id(tok.sep_token_id, tok.eos_token_id, vocab_size=vocab)
    pad_id = hf.first_id(tok.pad_token_id, vocab_size=vocab)
    # every family fills the Dlm record field by field (models/base.py): the shape repeats, the values are its own
    return Dlm(
        name=hf.label(path),
        family="masked-lm",
        tokenizer=hf.HfTokenizer(tok),
        mask_id=mask_id,
        eos_id=eos_id,
        pad_id=pad_id,
        bos_id=hf.bos_of(frame),
        context=context(model, frame),
        predict=hf.make_predict(model, frame=frame),
        device=device,
        dtype=dtype,
        special_ids=hf.special_ids(tok, mask_id, eos_id, pad_id),
        forward_batch=hf.make_forward_batch(model, pad_id if pad_id is not None else mask_id, frame=frame),
    )
