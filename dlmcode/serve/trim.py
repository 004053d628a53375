"""What of an editor's text can reach the model: far ends cut before anything is tokenized.

The model sees at most `context` tokens, so text far from the cursor is windowed out anyway
(windows.fit_window, token-exact, whole lines, `truncated` in the answer). Tokenizing a
megabyte to learn that costs seconds (the tokenizer holds the GIL, so the event loop stalls)
and hundreds of MB the allocator keeps. Here the far ends go first, by characters: the
prefix (after input_extra) keeps its last CHARS_PER_TOKEN x context characters, the suffix
its first as many, so a request costs at most a bounded amount of tokenizing, parsing and
syntax checking, whatever its size (the body cap bounds the rest). In a known language each
cut falls on a statement boundary (text/statements.py: never inside a string, a comment or
brackets; the heads of the blocks around the kept prefix come with it); otherwise, or when
the cursor sits in one statement longer than LONGEST budgets, at a line break.
"""

from __future__ import annotations

from dataclasses import replace

from ..text import statements
from .request import Fill

CHARS_PER_TOKEN = (
    32  # generous: code averages 3-4 characters a token; a longer run only drops text the window would drop
)


LONGEST = 4  # budgets a statement-bounded prefix may reach (one long statement around the cut) before a line cut


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


def trim(req: Fill, context: int, lang: str | None = None) -> tuple[Fill, bool]:
    """`req` with its far ends cut to the budget, and whether any code (not input_extra) was cut.

    In a known language the cuts fall on statement boundaries (text/statements.py): the kept
    prefix starts with a statement, after the heads of the blocks around it, and the kept suffix
    ends before one, never inside a string or a comment, so that the text the guard judges and
    breakage measures is code as the file has it."""
    keep = budget(context)
    if lang is None:
        prefix, suffix = nearest_end(req.prefix, keep), nearest_start(req.suffix, keep)
    else:
        prefix = statements.window_start(req.prefix, keep, lang)
        prefix = prefix if len(prefix) <= LONGEST * keep else nearest_end(req.prefix, keep)
        suffix = statements.window_end(prefix, req.suffix, keep, lang)
    extra = nearest_end(req.extra, keep - len(prefix)) if len(prefix) < keep else ""
    if (prefix, suffix, len(extra)) == (req.prefix, req.suffix, len(req.extra)):
        return req, False
    return replace(req, prefix=prefix, suffix=suffix, extra=extra), (prefix, suffix) != (req.prefix, req.suffix)
