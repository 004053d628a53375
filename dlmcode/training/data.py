"""The token stream a built-in model trains on: files as [BOS] file [EOS] ..., and where lines end.

Shared by training (batches.py samples windows and holes from it) and the corpus's tokenizer step
(corpus/tokens.py writes it to disk), so that neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..models.builtin import BuiltinTokenizer

PAD, MASK, BOS, EOS = range(4)  # ids of the built-in model's SPECIAL_TOKENS
ENDS_LINE, IS_NEWLINE = 1, 2  # codes in the line-end table


def line_end_table(tokenizer: BuiltinTokenizer, vocab_size: int) -> np.ndarray:
    """(V,) uint8: 0, ENDS_LINE (token ends with a newline; newlines only ever end a token)
    or IS_NEWLINE (the token is exactly "\n")."""
    table = np.zeros(vocab_size, dtype=np.uint8)
    for piece, i in tokenizer.tok.get_vocab().items():
        if piece.endswith("Ċ"):  # ByteLevel's printable form of "\n"
            table[i] = IS_NEWLINE if piece == "Ċ" else ENDS_LINE
    return table


@dataclass
class Stream:
    """All files as one token stream [BOS] file [EOS] [BOS] file ..., with line starts."""

    ids: np.ndarray  # (N,) int64
    line_starts: np.ndarray  # positions where a line begins (incl. right after [BOS])


def encode_stream(tokenizer: BuiltinTokenizer, texts: list[str], line_end: np.ndarray, chunk: int = 256) -> Stream:
    """[BOS] text [EOS] ... for all texts; encoded `chunk` files at a time, because a
    tokenizers Encoding keeps offsets and strings per token (GBs for a 50M-token corpus)."""
    parts = []
    for i in range(0, len(texts), chunk):
        encs = tokenizer.tok.encode_batch(texts[i : i + chunk], add_special_tokens=False)
        parts += [np.array([BOS] + e.ids + [EOS], dtype=np.int64) for e in encs]
    return stream_of(np.concatenate(parts), line_end)


def stream_of(ids: np.ndarray, line_end: np.ndarray) -> Stream:
    """A Stream over ready token ids (a tokenized corpus), its line starts found from the ids."""
    starts = np.flatnonzero((line_end[ids] > 0) | (ids == BOS)) + 1
    return Stream(ids, starts[starts < len(ids)])
