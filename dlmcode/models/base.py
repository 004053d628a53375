"""What every model family's adapter returns: a Dlm (tokenizer, special ids, predict)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.canvas import Predict
from ..core.run import CacheSettings
from ..core.vocab import Tokenizer, Vocab
from .blocks import Blocks


@dataclass
class Dlm:
    """A loaded diffusion language model, ready for decoders."""

    name: str  # what the user asked for (path or hub id), or "builtin"
    family: str  # registry key of the adapter: "builtin", "llada", "dream", "masked-lm"
    tokenizer: Tokenizer
    mask_id: int
    eos_id: int | None  # end-of-text
    pad_id: int | None
    context: int  # longest canvas the model takes
    predict: Predict  # (L,) ids -> (L, V) logits aligned to positions
    device: torch.device
    dtype: torch.dtype
    chat: Callable[[str], str] | None = None  # wraps a request in the chat template; None for base models
    special_ids: frozenset[int] = field(default_factory=frozenset)  # ids never shown as code (mask, pad, eos, ...)
    eot_id: int | None = None  # end-of-turn, where the family has one (LLaDA 126348)
    bos_id: int | None = None  # put first on every canvas, for models trained that way
    cached: Callable[[CacheSettings], Predict] | None = (
        None  # a fresh predict with a prefix/dual KV cache; None: no cache
    )
    forward_batch: Callable[[list[torch.Tensor]], list[torch.Tensor]] | None = (
        None  # [(L_i,)] -> [(L_i, V)] in one padded forward (models/forward.py); None: one predict each
    )
    run_rows: Callable[[list[Any]], list[torch.Tensor]] | None = (
        None  # several cached predicts' runs in one forward (cache.run_rows); None: each runs alone
    )
    expand_id: int | None = None  # a hole that decodes it becomes two (trained to: DreamOn); None: the model never was
    delete_id: int | None = None  # with expand_id: a hole that decodes it ends its fill there (jobs/expanding.py)
    blocks: Blocks | None = None  # a block-diffusion family's blocks, exact cache and noise (models/blocks.py)
    decoder: str = "low-confidence"  # the family's own decoder, what a run without --decoder uses
    decoder_options: Mapping[str, Any] = field(default_factory=dict)  # its settings as the family publishes them
    infill: str = "native"  # how it fills a span: native (both sides seen) or prompt (the suffix goes before)

    @property
    def vocab(self) -> Vocab:
        """The token facts a canvas plan needs (text/spans.py)."""
        return Vocab(self.tokenizer, self.mask_id, self.context, self.bos_id, self.eos_id)
