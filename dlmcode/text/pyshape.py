"""Python's line structure, for the guard's fillers: what a hole must write so that the code after it fits.

The guard's first witness (dlmcode/text/guard.py) must bridge the code before a hole to the code
after it. In Python that is a question of lines: a docstring the hole must close before it opens a
block, a `try:` whose `except` the hole replaced, a body the line above still waits for, the head
of a statement the hole cut in two. This module answers it without the judge:
- `Shape` replays logical lines (strings and comments masked, bracketed lines joined) on a stack
  of open blocks, as CPython's tokenizer and parser would see their indentation: an indented body
  after every head, dedents only to a level seen before, `except`/`else`/`elif`/`finally` only
  after their own kind of statement, no `try` left without its `except`;
- `bridges` lists the shortest texts (head fix, then lines, then the start of the line the hole
  ends in) under which the code after the hole replays with no such error, the pieces of a line
  checked by CPython's parser on that line alone.
The replay is text/pylines.py's, the lines after a hole replayed from each shape a bridge may leave
text/pyahead.py's; this module asks them for bridges and inline pieces.
Every bridge is a candidate only: the judge (the breakage rule) still decides each witness.
"""

from __future__ import annotations

import bisect
import functools
import keyword
import re
from collections.abc import Iterator

from .pyahead import AHEADS, PLANS, SUFFIXES, Ahead, _ahead, start_over  # noqa: F401 (pyshape's names)
from .pylines import (  # noqa: F401
    MASK,
    MASKED,
    Block,
    Line,
    Reading,
    Shape,
    _closers,
    _lead,
    _openers,
    lines,
    mask,
    parses,
    reading,
    replay,
)

AHEAD = 40  # logical lines after the hole replayed for a bridge (ours: deeper errors are the judge's)
OPERANDS = (" x", "x")  # what may end a cut line's expression inside its open brackets, before they close
HEADS = ("", " x", "x", "()", "():", "(x)", ":", " x:", " = x", "x = x", " x()")  # what may finish a cut line


@functools.lru_cache(maxsize=1024)
def bridges(before: str, after: str, limit: int = 16) -> tuple[tuple[str, str], ...]:
    """(start, end) pairs a hole between `before` and `after` may hold around its padding, shortest first:
    the rest of the cut line and the lines between (start), then the start of the line the hole ends in
    (end), such that the code after replays with no new error."""
    start = code_start(before, len(before) - WINDOW)
    read = reading(before[start:])  # lines(window), replayed
    line = before[before.rfind("\n") + 1 :]
    cut = read.last if read.last is not None and (line.strip() or read.chars > 0) else None
    if cut is not None and len(cut.code) > LONG:
        return ()  # inside a long bracketed literal: the expression fillers' (`inline`)
    shape = read.shape.copy()  # the replay of the window's lines but the cut one
    shape.top = start == 0 and shape.base in (None, "")  # the window begins at the file's top
    if cut is None and read.last is not None:
        shape.feed(read.last)
    whole = len(after) < AFTER  # the file ends within the window: what is open at its end counts
    after = after[: code_end(after, AFTER)]
    tail, ahead = _tail(after)
    whole = whole and len(ahead) <= AHEAD
    rest = _ahead(ahead[:AHEAD])
    out: list[tuple[str, str]] = []
    lead = continued(cut, line)
    for head in _heads(cut):
        start = shape.copy()
        if cut is not None:
            start.feed(Line(cut.indent, cut.code + mask(head)))
        for middle, ending in rest.middles(start, None if cut is not None else line, tail, whole):
            out.append((lead + head + ("\n" + middle if cut is not None and middle else middle), ending))
            if len(out) >= limit:
                break
        if len(out) >= limit:
            break
    return tuple(sorted(set(out), key=lambda p: (len(p[0]) + len(p[1]), p)))


WINDOW = 16000  # characters before a hole the bridge replays (ours: blocks opened further away are assumed open)
AFTER = 4000  # characters after it (AHEAD logical lines at most)
LONG = 2000  # characters of a cut statement the bridge reads at most (ours)


def code_start(text: str, at: int) -> int:
    """The first line start at or after `at` that is not inside a string (0 when `at` <= 0)."""
    if at <= 0:
        return 0
    spans = MASKED.scan(text).spans
    k = bisect.bisect_right(spans, (at, len(text) + 1))  # the first match that may end after `at`: the one
    k = k - 1 if k and spans[k - 1][1] > at else k  # starting at or before it, else the next
    if k < len(spans) and spans[k][0] < at:
        at = max(at, spans[k][1])
    line = text.find("\n", at - 1)
    return len(text) if line < 0 else line + 1


BRACKETS = re.compile(r"[()\[\]{}]")


@functools.lru_cache(maxsize=64)
def _tail(after: str) -> tuple[Line | None, tuple[Line, ...]]:
    """The statement the hole's last line begins (None when the hole ends its line and nothing is open), and the
    logical lines after it. Closers in `after` with no opener make the statement run on to the line they end."""
    masked = mask(after)
    depth = low = 0
    end = None
    for found in BRACKETS.finditer(masked):  # the brackets alone (a loop over every character cost 2 ms a call)
        depth += 1 if found.group() in "([{" else -1
        if depth < low:
            low, end = depth, found.start()
    if end is not None:  # the hole opens what these close: one statement up to the end of that line
        stop = masked.find("\n", end)
        stop = len(masked) if stop < 0 else stop
        head = masked[:stop]
        first = next((x for x in head.split("\n") if x.strip()), "")
        return Line(_lead(first), " ".join(x.strip() for x in head.split("\n")).strip()), tuple(lines(masked[stop:]))
    ahead = tuple(lines(masked))
    if ahead and after[:1] not in ("\n", "\r") and masked.split("\n", 1)[0].strip():
        return ahead[0], ahead[1:]
    return None, ahead


def code_end(text: str, at: int) -> int:
    """The last line end at or before `at` that is not inside a string (`len(text)` when `at` reaches it)."""
    if at >= len(text):
        return len(text)
    for found in MASK.finditer(text, 0, at + 4 * AFTER):
        if found.end() > at:
            at = min(at, found.start())
            break
    line = text.rfind("\n", 0, at)
    return max(line, 0)


def inline(before: str, after: str, quote: str = "", outer: str = "") -> tuple[tuple[str, str], ...]:
    """(start, end) pairs for a hole inside one statement (brackets open at the hole, or the code after it
    starting inside a string of `quote`), such that the statement parses on its own: the innermost
    brackets' item around the hole, with the outer brackets as bare openers and closers. `outer`: the
    brackets open at the hole in the whole text, for a window that begins inside them (a long literal)."""
    head = reading(before[code_start(before, len(before) - WINDOW) :]).item()
    if head is None:
        return ()
    openers, fragment = head
    if len(outer) > len(openers) and outer.endswith(openers):
        openers = outer
    tail = _rest(mask(quote + after[: code_end(after, AFTER)]), len(openers), openers[-1:])
    if tail is None or not (openers or quote or _openers(tail)):
        return ()
    out = []
    lead = "x = " + openers if openers else ""
    opened = tuple((s + _openers(tail), "") for s in (" x: ", "x: ", " x", "")) if _openers(tail) else ()
    for start, end in (QUOTED if quote else ()) + opened + INLINE:
        if parses(lead + fragment + start + end + tail + _closers(openers)):
            out.append((start, end + quote))
            if len(out) >= 3:
                break
    return tuple(out)


INLINE = (  # expression pieces a hole inside brackets may hold around its padding (ours)
    ("x", ""),
    (" x", ""),
    (" x", ","),
    ("x", ","),
    (" x", ":"),
    ("x", ":"),
    (" x", ", x"),
    (" x:", " x,"),
    ("", ", x"),
    (" x", ")"),
    ("x(x", ""),
    ("(x", ""),
    (" = x(", ""),
    (" x(", ""),
    ("(", ""),
    ("x(", ""),
    ("[", ""),
    (" + x(", ""),
    ("[x", ""),
    ("x[x", ""),
)


QUOTED = ((":", ""), (",", ""), (" +", ""))  # first when the code after starts inside a string: a dict's key cut


def _rest(masked: str, depth: int, inner: str = "") -> str | None:
    """The text after the hole to the end of the innermost item (the next comma at its depth, or its closer),
    then nothing more: the closers of the outer brackets are added by the caller. A closer that does not
    close `inner` (the innermost open bracket) is the item's own: the hole opens it."""
    level = 0
    for i, ch in enumerate(masked):
        if ch in "([{":
            level += 1
        elif ch in ")]}":
            if level == 0 and depth and (not inner or ch == ")]}"["([{".index(inner)]):
                return masked[:i]
            level -= level > 0
        elif ch == "," and level == 0 and depth:
            return masked[:i]
        elif ch == "\n" and level <= 0 and not depth:
            return masked[:i]
    return masked if not depth else None


def continued(cut: Line | None, line: str) -> str:
    """The indentation a hole that starts a continuation line of `cut` (inside its brackets, or after a backslash)
    writes before the rest of it: the cut line's own and one level more. Python reads a continuation line at any
    indentation; tree-sitter (the judge's first parse) reads one shallower than the block around as an error."""
    if cut is None or line.strip():
        return ""
    want = cut.indent + "    "
    return want[len(line) :] if want.startswith(line) else ""


def _heads(cut: Line | None) -> Iterator[str]:
    """Texts that finish the cut logical line so that it parses (none on a blank line)."""
    if cut is None:
        yield ""
        return
    close = _closers(cut.code)
    glued = not close and keyword.iskeyword(cut.code.rsplit(None, 1)[-1] if cut.code.strip() else "")
    for head in sorted(HEADS, key=lambda h: glued and h == "x"):  # `if` cut: `ifx` is a name, not the `if`, so last
        if parses(cut.code + close + head):
            yield close + head
    for operand in OPERANDS if close else ():  # `if (a and` cut: the operand goes inside the brackets it closes
        for end in ("", ":"):
            if parses(cut.code + operand + close + end):
                yield operand + close + end


def forget() -> None:
    """This thread's Aheads and the bridges remembered (tests: a fresh replay)."""
    AHEADS.__dict__.pop("kept", None)
    PLANS.__dict__.pop("memo", None)
    start_over()
    bridges.cache_clear()
