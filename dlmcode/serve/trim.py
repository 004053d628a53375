"""What of an editor's text can reach the model: far ends cut before anything is tokenized.

The model sees at most `context` tokens, so text far from the cursor is windowed out anyway
(spans.fit_window, token-exact, whole lines, `truncated` in the answer). Tokenizing a
megabyte to learn that costs seconds (the tokenizer holds the GIL, so the event loop stalls)
and hundreds of MB the allocator keeps. Here the far ends go first, by characters: the
prefix (after input_extra) keeps its last CHARS_PER_TOKEN x context characters, the suffix
its first as many, each cut at a line break, so a request costs at most a bounded amount of
tokenizing, parsing and syntax checking, whatever its size (the body cap bounds the rest).
"""

from __future__ import annotations

from dataclasses import replace

from .request import Fill

CHARS_PER_TOKEN = (
    32  # generous: code averages 3-4 characters a token; a longer run only drops text the window would drop
)


def budget(context: int) -> int:
    """Characters of each side of the cursor that could still fit in `context` tokens."""
    return context * CHARS_PER_TOKEN


def nearest_end(text: str, keep: int) -> str:
    """The last `keep` characters of `text` or fewer, from a line start when one is there."""
    if len(text) <= keep:
        return text
    start = len(text) - keep
    newline = text.find("\n", start - 1)
    return text[newline + 1 :] if 0 <= newline < len(text) - 1 else text[start:]


def nearest_start(text: str, keep: int) -> str:
    """The first `keep` characters of `text` or fewer, up to a line end when one is there."""
    if len(text) <= keep:
        return text
    newline = text.rfind("\n", 0, keep)
    return text[: newline + 1] if newline > 0 else text[:keep]


def trim(req: Fill, context: int) -> tuple[Fill, bool]:
    """`req` with its far ends cut to the budget, and whether any code (not input_extra) was cut."""
    keep = budget(context)
    prefix, suffix = nearest_end(req.prefix, keep), nearest_start(req.suffix, keep)
    extra = nearest_end(req.extra, keep - len(prefix)) if len(prefix) < keep else ""
    if (len(prefix), len(suffix), len(extra)) == (len(req.prefix), len(req.suffix), len(req.extra)):
        return req, False
    return replace(req, prefix=prefix, suffix=suffix, extra=extra), len(prefix) < len(req.prefix) or len(suffix) < len(
        req.suffix
    )
