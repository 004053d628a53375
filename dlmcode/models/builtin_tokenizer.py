"""The built-in model's tokenizer: byte-level BPE behind models.base's encode/decode, and how one is made
(training, stand-ins). models/builtin.py re-exports all three names."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from ..core.errors import ModelError
from .hf import first_line

SPECIAL_TOKENS = ("[PAD]", "[MASK]", "[BOS]", "[EOS]")  # ids 0..3, in this order


class BuiltinTokenizer:
    """`tokenizers` byte-level BPE behind the encode/decode protocol of models.base."""

    def __init__(self, tok) -> None:  # tok: tokenizers.Tokenizer
        self.tok = tok
        self.tok.encode_special_tokens = True  # "[MASK]" written in source code is text, not a hole

    @classmethod
    def from_file(cls, path: Path) -> BuiltinTokenizer:
        """The tokenizer in tokenizer.json; ModelError when the file is not a tokenizer."""
        from tokenizers import Tokenizer

        try:
            return cls(Tokenizer.from_file(str(path)))
        except Exception as err:  # tokenizers raises a bare Exception for a corrupt file
            raise ModelError(
                f"model folder {str(Path(path).parent)!r}: {Path(path).name} is not a readable tokenizer "
                f"({first_line(err)})"
            ) from None

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    @functools.cached_property
    def lines_add_up(self) -> bool:
        """Whether no token crosses a newline, so that encode(a + b) == encode(a) + encode(b) whenever a ends with
        one: true of the pre-tokenizer `new_tokenizer` makes, with no normalizer (windows.fit_window then counts a
        window's tokens line by line, without tokenizing the file whole). A folder's own tokenizer.json may differ."""
        made = json.loads(new_tokenizer().to_str())
        mine = json.loads(self.tok.to_str())
        return mine.get("normalizer") is None and mine.get("pre_tokenizer") == made["pre_tokenizer"]

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def save(self, path: Path) -> None:
        self.tok.save(str(path))


# ---------------------------------------------------------------- making a tokenizer (training, stand-ins)


def new_tokenizer():
    """Byte-level BPE whose pre-tokenizer ends a piece at every newline: no token crosses a
    line boundary, so encode(a + b) == encode(a) + encode(b) whenever a ends with a newline."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex("\n"), behavior="merged_with_previous"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(texts: list[str], vocab_size: int) -> BuiltinTokenizer:
    from tokenizers import pre_tokenizers, trainers

    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return BuiltinTokenizer(tok)
