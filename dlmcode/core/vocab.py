"""What the text layer needs of a model's tokens: the tokenizer protocol, and the token facts
a canvas plan needs (`Vocab`).

spans.py plans canvases with them and the bench cuts tasks with the tokenizer; neither loads
model code for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Tokenizer(Protocol):
    """encode and decode. One may also say `lines_add_up = True`: no token of it crosses a newline, so a text's
    tokens are its lines' (the built-in tokenizer; text/windows.py then never tokenizes a file whole)."""

    def encode(self, text: str) -> list[int]: ...  # no special tokens added

    def decode(self, ids: list[int]) -> str: ...  # special tokens kept out by the caller


@dataclass(frozen=True)
class Vocab:
    """A model's token facts as a canvas plan needs them: one object where one thing is meant.

    `Dlm.vocab` gives a loaded model's; tests build one around a hand-made tokenizer.
    """

    tokenizer: Tokenizer
    mask_id: int
    context: int  # the longest canvas the model takes
    bos_id: int | None = None  # put first on every canvas, for models trained that way
    eos_id: int | None = None  # end-of-text, put after an infill's suffix
