"""Family adapter for Fast-dLLM v2 (NVlabs; `Fast_dLLM_QwenForCausalLM`): block diffusion on Qwen2.5.

Fast-dLLM v2 is Qwen2.5 fine-tuned to denoise blocks of 32 under the block-causal mask (its
model code's `eval_block_diff_mask`: a query sees every key of its block and of the blocks before
it). Its weights are Qwen2's under the same names, so dlmcode runs them on transformers' own
Qwen2ForCausalLM (no remote code), with the exact cache of SDAR's sessions (models/sdar.py): the
prompt's whole blocks and each finished block stored by forwards of their own, as its generate
(v2/generation_functions.py, batch_sample) runs them.

Two things are its own. Its logits are read one place back, as an autoregressive model's: a
position's prediction is the logits at the position before it, and a block's first position's
is the last logit of the forward that stored the block before it (its generate commits that
token by argmax before it runs the block; `ShiftedSession`). And its rule decodes a block in
sub-blocks of 8, the `subblocks` decoder (threshold 0.9, its eval.py's). Blocks sit at multiples
of 32 from position 0 (config.json's bd_size), the prompt's tail in the first one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from . import blocks, hf, sdar
from .base import Dlm

ARCH = "Fast_dLLM_QwenForCausalLM"
BLOCK = 32  # its bd_size and generate's block_size
SMALL = 8  # its generate's small_block_size
THRESHOLD = 0.9  # its eval.py's threshold
MASK_ID = 151665  # its generate's mask_id, used when neither tokenizer nor config.json names one
MASK_TOKEN = "|<MASK>|"


def matches(config: dict) -> bool:
    return ARCH in (config.get("architectures") or []) or str(config.get("model_type", "")).lower().startswith(
        "fast_dllm"
    )


class ShiftedSession(sdar.CausalSession):
    """SDAR's session over Qwen2, its logits read one place back: row i of a block is the model's logits at
    position i - 1, row 0 the last logit of the forward that stored what comes before the block (before any
    such forward, the block's own first logit, as its generate reads it there)."""

    def __init__(self, model: Any, size: int) -> None:
        super().__init__(model, size)
        self.last: Tensor | None = None  # (V,) the last stored token's logits

    def store(self) -> Tensor:
        logits = super().store()
        self.last = logits[-1].float()
        return logits

    def truncate(self, n: int) -> None:
        if n < self.stored:
            self.last = None  # the stored tokens change: their last logit is gone with them
        super().truncate(n)

    def run(self, ids: Tensor) -> Tensor:
        return self.shift(super().run(ids))

    def shift(self, logits: Tensor) -> Tensor:
        """(n, V) logits at the block's own positions -> each row the prediction for its position."""
        first = self.last[None] if self.last is not None and self.stored else logits[:1]
        return torch.cat([first.to(logits.dtype), logits[:-1]])

    @classmethod
    def padded_run(cls, sessions: list[blocks.PendingSession], ids: list[Tensor]) -> list[Tensor]:
        rows = super().padded_run(sessions, ids)  # each session's store() ran first: its `last` is set
        return [s.shift(r) for s, r in zip(sessions, rows, strict=True)]  # type: ignore[attr-defined]


def qwen2_config(config: dict) -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(**sdar.own_fields(config))


def load(path: Path, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False) -> Dlm:
    config = hf.read_config(path)
    tok = hf.load_tokenizer(path, trust_remote_code=False)
    model = sdar.load_model(path, qwen2_config(config), device, dtype, "Fast-dLLM v2")
    vocab = int(model.config.vocab_size)
    size = int(config.get("bd_size") or BLOCK)
    mask_id = hf.require_mask(
        path,
        hf.first_id(
            tok.mask_token_id, hf.token_id(tok, MASK_TOKEN), config.get("mask_token_id"), MASK_ID, vocab_size=vocab
        ),
    )
    spec = blocks.Blocks(
        size=size, aligned=True, noise=0, open=lambda: ShiftedSession(model, size), cost=sdar.cost(model.config)
    )
    options = {"small": SMALL, "threshold": THRESHOLD}
    eos = getattr(model.generation_config, "eos_token_id", None)
    return sdar.causal_dlm(path, config, tok, model, spec, mask_id, "fast-dllm-v2", options, vocab, eos, "subblocks")
