"""What the text layer needs of a model's tokens: its tokenizer, as a protocol.

spans.py plans canvases with it and the bench cuts tasks with it; neither loads model code
for an annotation.
"""

from __future__ import annotations

from typing import Protocol


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...  # no special tokens added

    def decode(self, ids: list[int]) -> str: ...  # special tokens kept out by the caller
