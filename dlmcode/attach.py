"""What a job hands a decoder beyond `predict`: codila's assistant (DESIGN.md: decoders load nothing).

Lives above dlmcode.models and dlmcode.decoders, so that neither imports the other's side:
fill.py and the bench call `attach` when they build a job.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .assistant import TRAIN_HINT, check, token_table
from .errors import ModelError
from .models.assistant import load_cached, shipped_path


def attach(decoder: Any, dlm: Any) -> Any:
    """Give a decoder that takes an assistant (codila) one that fits `dlm`; other decoders pass through.

    No assistant set: the shipped one for the built-in model, else a ModelError saying how to
    train one. A path (`-o assistant=DIR`) is loaded. Either way the tokenizer must match.
    """
    if not dataclasses.is_dataclass(decoder) or "assistant" not in {f.name for f in dataclasses.fields(decoder)}:
        return decoder  # a custom decoder (any object meeting the Decoder contract) passes through too
    assistant = decoder.assistant
    if assistant is None and dlm.family != "builtin":
        raise ModelError(f"codila needs an assistant for this model; {TRAIN_HINT}")
    if assistant is None or isinstance(assistant, (str, Path)):
        where = shipped_path() if assistant is None else Path(assistant)
        if assistant is None and not where.is_dir():
            raise ModelError(f"the built-in model's assistant is not installed (no folder {where}); reinstall dlmcode or {TRAIN_HINT}")
        assistant = load_cached(str(where), str(dlm.device), dlm.dtype)
    check(assistant, token_table(dlm.tokenizer), repr(dlm.name))
    return dataclasses.replace(decoder, assistant=assistant)
