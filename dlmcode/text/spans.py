"""Source text <-> Canvas: line spans, in-file markers, windows, splicing.

Spans. `--span A:B` (1-based, inclusive; `--span 7` is `7:7`) makes lines A..B one hole.
The hole covers the text of those lines but NOT the line break that ends line B: the
break stays as context, so a fill cannot glue line B+1 onto its last line. A line break is
"\\n", "\\r\\n" or a bare "\\r" (LINE_BREAK): the lines Python's compile() and tokenizer
count, and most editors show. Not str.splitlines(), which also breaks at form feeds and
other separators that Python source holds as plain whitespace; and not "\\n" alone, which
made a file with bare-CR endings one line to --span and many to Python's error messages.

Markers. Several holes at once are written into the file itself:

    ⟦fill⟧       a hole whose length the job's length rule chooses (dlmcode/jobs/sizing.py; or --length N);
                 planned alone, DEFAULT_MARKER_LENGTH tokens
    ⟦fill:32⟧    a hole of exactly 32 tokens

The brackets are U+27E6 and U+27E7 (MATHEMATICAL WHITE SQUARE BRACKETS). No mainstream
programming language uses them in its syntax, they are not ASCII (so no operator, string
escape or template syntax can form them by accident), and the word `fill` inside them
rules out the odd math text (Lean's `⟦a⟧`) that does use them. A marker is replaced by
its fill and by nothing else: the text around it (indentation, the rest of the line, the
line break) stays as context. So one rule covers a marker inside a line (`x = ⟦fill:4⟧`)
and a marker alone on an indented line, where the indentation tells the model the depth
of the block; either kind of fill may run over several lines. Anything that starts like
a marker but is not one (`⟦fill:0⟧`, `⟦fill:x⟧`, an unclosed `⟦fill`) is an error rather
than text, so a typo never reaches the model silently.

Token boundaries. Each piece of context and the original text of each hole are tokenised
on their own, so a line span's hole is exactly the tokens of the lines it replaces.
splice() decodes each hole's ids as one run and joins strings, copying the context from
the original text rather than decoding it: putting the original tokens back reproduces
the file byte for byte, and a character whose bytes fall in two tokens decodes whole.
The price is that no token merges across a hole's edge (the model sees "\\n" then
"    return" where whole-file tokenisation might give "\\n   " then " return").

Windows. When the canvas would be longer than the model's context, windows.py cuts whole lines
from the far ends (the holes and the text between them are always kept); the cut text is kept in
the Plan, so splice() returns the whole file. BOS starts every canvas; EOS ends it only when the
window reaches the end of the file, since a cut suffix is not the end of the text (its slot is
reserved either way).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.errors import InputError, UsageError
from ..core.vocab import Tokenizer, Vocab
from .windows import fit_window

if TYPE_CHECKING:  # torch is imported where a canvas is built: the CLI checks --span before paying ~2 s for torch
    from torch import Tensor

    from ..core.canvas import Canvas

DEFAULT_MARKER_LENGTH = 16  # tokens for a bare ⟦fill⟧: about one line of code; our choice
MARKER_HELP = "write ⟦fill⟧ or ⟦fill:N⟧ with N tokens, N ≥ 1"

_MARKER = re.compile(r"⟦fill(?::([1-9][0-9]*))?⟧")
# Anything that looks like a marker, well formed or not, up to the closing bracket or line end.
_MARKER_LIKE = re.compile(r"⟦[ \t]*fill\b[^⟧\n]*⟧?")
_SPAN = re.compile(r"([0-9]+)(?::([0-9]+))?")  # [0-9], not \d or int(): no "+3", "1_0", "٣"
_SPAN_HELP = "expected A:B or A (1-based line numbers, A ≤ B)"
LINE_BREAK = re.compile(r"\r\n|\r|\n")  # the module docstring says why these three


@dataclass(frozen=True)
class Hole:
    """One hole: the region [start_char, end_char) of the original text it replaces."""

    start_char: int
    end_char: int
    length: int  # tokens on the canvas
    user_text: bool = False  # the replaced text is the user's code (a --span's lines), not a marker


@dataclass(frozen=True)
class Plan:
    """A canvas ready to decode, and what splice() needs to turn it back into the file."""

    text: str  # the whole original text (the canvas may show only a window of it)
    canvas: Canvas
    holes: tuple[Hole, ...]  # in text order
    positions: tuple[range, ...]  # per hole, its canvas positions
    window: tuple[int, int]  # [start, end) chars of `text` the canvas shows


@dataclass(frozen=True)
class Filled:
    """The text after decoding, and what went into the holes."""

    text: str  # the whole file, holes replaced by their fills
    ids: list[int]  # every hole position's id, in position order, before trim_at and drop_ids
    fills: list[str]  # the decoded text of each hole
    span_lines: list[tuple[int, int]]  # 1-based inclusive lines of each fill in `text`
    regions: list[tuple[int, int]]  # [start, end) chars of each fill in `text`


# ---------------------------------------------------------------- spans and markers


def parse_span(value: str, text: str | None = None) -> tuple[int, int]:
    """'10:20' -> (10, 20); '7' -> (7, 7). Given the text, the span must also lie inside it."""
    match = _SPAN.fullmatch(value.strip())
    if match is None:
        raise UsageError(f"bad --span {value!r}: {_SPAN_HELP}")
    first = int(match[1])
    last = int(match[2]) if match[2] is not None else first
    if first == 0 or last == 0:
        raise UsageError(f"bad --span {value!r}: line numbers start at 1")
    if first > last:
        raise UsageError(f"bad --span {value!r}: line {first} comes after line {last}")
    if text is not None:
        check_span((first, last), text)
    return first, last


def check_span(span: tuple[int, int], text: str) -> None:
    """A span past the last line is a UsageError that says how long the file is."""
    n = count_lines(text)
    if span[1] > n:
        raise UsageError(f"--span {span[0]}:{span[1]} is past the end of the file, which has {_lines(n)}")


def count_lines(text: str) -> int:
    """Lines as an editor counts them: a final line break does not start another line."""
    return len(LINE_BREAK.findall(text)) + (0 if text.endswith(("\n", "\r")) else 1)


def line_span(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """[start, end) chars of lines span[0]..span[1], without the last line's line break."""
    check_span(span, text)
    first, last = span
    breaks = list(LINE_BREAK.finditer(text))
    start = breaks[first - 2].end() if first > 1 else 0
    end = breaks[last - 1].start() if last <= len(breaks) else len(text)  # the line break or the end of text
    return start, end


def line_of(text: str, pos: int) -> int:
    """The 1-based line of text[pos]."""
    return len(LINE_BREAK.findall(text, 0, pos)) + 1


def find_markers(text: str) -> list[tuple[int, int, int | None]]:
    """(start, end, count or None) of each ⟦fill⟧ marker; a malformed one is a UsageError."""
    found = []
    for like in _MARKER_LIKE.finditer(text):
        marker = _MARKER.fullmatch(like[0])
        if marker is None:
            line = line_of(text, like.start())
            raise UsageError(f"line {line}: bad marker {like[0]!r}; {MARKER_HELP}")
        found.append((like.start(), like.end(), int(marker[1]) if marker[1] else None))
    return found


def has_markers(text: str) -> bool:
    """Whether `text` holds a ⟦fill⟧ marker, or something written as one (a malformed one too)."""
    return _MARKER_LIKE.search(text) is not None


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


# ---------------------------------------------------------------- planning


def plan_infill(
    text: str, vocab: Vocab, span: tuple[int, int] | None, length: int | None, bare: Sequence[int] | None = None
) -> Plan:
    """Holes for lines `span` of `text`, or for its ⟦fill⟧ markers when span is None.

    length None: a span's hole is as long as the span's own tokens (at least 1), a bare
    marker gets DEFAULT_MARKER_LENGTH. A given length sizes the span or every bare marker.
    `bare`: one length per bare marker, in text order (the length rule's, dlmcode/jobs/sizing.py).
    """
    _check_text(text)
    _check_length(length)
    markers = find_markers(text)
    if span is not None and markers:
        raise UsageError("the file has ⟦fill⟧ markers: give --span or markers, not both")
    if span is not None:
        holes = [_span_hole(text, span, length, vocab.tokenizer)]
    elif markers:
        sizes = iter(bare or ())
        holes = [Hole(s, e, count or next(sizes, None) or length or DEFAULT_MARKER_LENGTH) for s, e, count in markers]
    else:
        raise UsageError("give --span A:B or put ⟦fill⟧ markers in the file")
    return _plan(text, holes, vocab, length)


def plan_generate(prompt: str, vocab: Vocab, length: int) -> Plan:
    """The prompt's tokens followed by `length` holes, as LLaDA generates (no end-of-text after them)."""
    _check_text(prompt)
    _check_length(length)
    hole = Hole(len(prompt), len(prompt), length)
    return _plan(prompt, [hole], dataclasses.replace(vocab, eos_id=None), length)


def plan_middle(prefix: str, suffix: str, vocab: Vocab, length: int) -> Plan:
    """`length` holes between `prefix` and `suffix` (an editor's cursor); either side may be empty."""
    _check_length(length)
    hole = Hole(len(prefix), len(prefix), length)
    return _plan(prefix + suffix, [hole], vocab, length)


def _check_text(text: str) -> None:
    if not text.strip():
        raise InputError("the input is empty")


def _check_length(length: int | None) -> None:
    if length is not None and length < 1:
        raise UsageError(f"--length must be at least 1, got {length}")


def _span_hole(text: str, span: tuple[int, int], length: int | None, tokenizer: Tokenizer) -> Hole:
    start, end = line_span(text, span)
    return Hole(start, end, length or max(1, len(tokenizer.encode(text[start:end]))), user_text=True)


def _plan(text: str, holes: Sequence[Hole], vocab: Vocab, length: int | None) -> Plan:
    """Tokenise the pieces between holes, fit the window, lay out the canvas."""
    tokenizer, mask_id, context, bos_id, eos_id = (
        vocab.tokenizer,
        vocab.mask_id,
        vocab.context,
        vocab.bos_id,
        vocab.eos_id,
    )
    head, tail = text[: holes[0].start_char], text[holes[-1].end_char :]
    middles = [tokenizer.encode(text[a.end_char : b.start_char]) for a, b in zip(holes, holes[1:], strict=False)]
    specials = (bos_id is not None) + (eos_id is not None)
    fixed = specials + sum(h.length for h in holes) + sum(map(len, middles))
    if fixed > context:
        raise UsageError(_too_long(holes, fixed, context, length))
    cut_head, keep_tail = fit_window(head, tail, context - fixed, tokenizer)
    ids = [] if bos_id is None else [bos_id]
    ids += tokenizer.encode(head[cut_head:])
    positions = []
    for i, hole in enumerate(holes):
        positions.append(range(len(ids), len(ids) + hole.length))
        ids += [mask_id] * hole.length + (middles[i] if i < len(middles) else [])
    ids += tokenizer.encode(tail[:keep_tail])
    if keep_tail == len(tail) and eos_id is not None:
        ids.append(eos_id)
    _check_no_mask(ids, positions, mask_id)
    import torch

    from ..core.canvas import Canvas

    window = (cut_head, holes[-1].end_char + keep_tail)
    canvas = Canvas(torch.tensor(ids, dtype=torch.long), mask_id)
    return Plan(text, canvas, tuple(holes), tuple(positions), window)


def _too_long(holes: Sequence[Hole], need: int, context: int, length: int | None) -> str:
    if len(holes) == 1 and holes[0].length == length:
        return f"--length {length} is longer than the model's context ({context} tokens)"
    return f"the holes and the text between them need {need} tokens, more than the model's context ({context} tokens)"


def _check_no_mask(ids: list[int], positions: Sequence[range], mask_id: int) -> None:
    """A mask id in the context would turn text into a hole: refuse such text."""
    if ids.count(mask_id) != sum(len(r) for r in positions):
        raise InputError(f"the text contains the model's mask token (id {mask_id}); remove it first")


# ---------------------------------------------------------------- splicing


def splice(
    plan: Plan,
    canvas: Canvas,
    tokenizer: Tokenizer,
    drop_ids: frozenset[int] = frozenset(),
    trim_at: int | None = None,
) -> Filled:
    """The whole text with each hole replaced by its decoded ids.

    Per hole: the ids are cut at the first `trim_at` (generate: end of text), then any id in
    `drop_ids` is removed (pad that fills an over-long hole), then the rest decodes as one run.
    """
    assert canvas.tokens.shape == plan.canvas.tokens.shape, "canvas does not belong to this plan"
    runs = [canvas.tokens[r.start : r.stop].tolist() for r in plan.positions]
    if any(canvas.mask_id in run for run in runs):
        raise ValueError("splice needs a finished canvas: some holes are still masked")
    fills = [decode_fill(run, tokenizer, drop_ids, trim_at) for run in runs]
    text, spans = _join(plan.text, plan.holes, fills)
    return Filled(text, [i for run in runs for i in run], fills, [line_range(text, s, e) for s, e in spans], spans)


def joined(
    plan: Plan, tokens: Tensor, tokenizer: Tokenizer, drop_ids: frozenset[int] = frozenset(), trim_at: int | None = None
) -> tuple[str, list[tuple[int, int]]]:
    """`splice`'s text and each fill's [start, end) in it, without its line ranges (a count over the whole text
    that the guard's every check does not read)."""
    ids = tokens.tolist()
    fills = [decode_fill(ids[r.start : r.stop], tokenizer, drop_ids, trim_at) for r in plan.positions]
    return _join(plan.text, plan.holes, fills)


def reference(plan: Plan, originals: Sequence[str] | None = None) -> tuple[str, list[tuple[int, int]]]:
    """The user's code, what breakage is measured against, and each hole's [start, end) chars in it.

    It is the plan's text with each hole holding the user's text for it: `originals`, one per
    hole, when the plan does not hold that text (a benchmark's hidden middle); else a --span's
    own lines, and nothing for a ⟦fill⟧ marker or a continuation, which are not code.
    """
    if originals is None:
        originals = [plan.text[h.start_char : h.end_char] if h.user_text else "" for h in plan.holes]
    if len(originals) != len(plan.holes):
        raise ValueError(f"{len(originals)} original texts for {len(plan.holes)} holes")
    return _join(plan.text, plan.holes, list(originals))


def decode_fill(run: list[int], tokenizer: Tokenizer, drop_ids: frozenset[int], trim_at: int | None) -> str:
    """One hole's text as splice makes it: cut at the first `trim_at`, `drop_ids` removed, decoded as one run."""
    if trim_at is not None and trim_at in run:
        run = run[: run.index(trim_at)]
    kept = [i for i in run if i not in drop_ids]
    return tokenizer.decode(kept) if kept else ""


def _join(text: str, holes: Sequence[Hole], fills: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """Original text between holes, fills in them; also each fill's [start, end) in the result."""
    parts, spans, cursor, size = [], [], 0, 0
    for hole, fill in zip(holes, fills, strict=True):
        parts += [text[cursor : hole.start_char], fill]
        size += hole.start_char - cursor
        spans.append((size, size + len(fill)))
        size += len(fill)
        cursor = hole.end_char
    parts.append(text[cursor:])
    return "".join(parts), spans


def line_range(text: str, start: int, end: int) -> tuple[int, int]:
    """1-based lines holding text[start:end]; an empty fill is on the line where it stands."""
    first = line_of(text, start)
    inside = sum(
        1 for m in LINE_BREAK.finditer(text, start, end) if m.end() < end
    )  # a break ending the fill starts no line of it
    return first, first + inside
