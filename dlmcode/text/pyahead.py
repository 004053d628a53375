"""The logical lines after a hole, replayed from the many shapes a bridge may leave (`Ahead`), and the plans
(lines a hole may write) that add no error: text/pyshape.py's bridges read them. Each thread keeps its own
(`AHEADS`, `PLANS`): their remembered iterators are read by one thread at a time."""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from .pylines import Line, Shape, _lead, _openers, parses, skeleton

MEMO = 4096  # shapes remembered per run of lines after a hole
TAILS = (
    "",
    "x",
    "x =",
    "x = x",
    "x.",
    "def x",
    "if",
    "if x",
    "return",
    "import",
    "for x in",
    "with x",
    "class x",
    "del x",
)


def _middles(shape: Shape, blank: str | None, tail: Tail, rest: Ahead, whole: bool) -> Iterator[tuple[str, str]]:
    """(lines, ending) after the fixed head: the lines, then the start of the hole's last line, for which the
    code after replays cleanly. `blank`: the hole's own line, blank so far (its indentation may be typed); `tail`:
    what is read of the rest of that line (`read_tail`)."""
    own = shape.step()
    for step in dict.fromkeys([own, rest.step or own]):  # the code after may indent by another step than above
        for planned, now in _planned(shape, step):
            text = "\n".join(planned)
            if blank is not None and planned:
                text = text[len(blank) :] if text.startswith(blank) else "\n" + text
            for ending in itertools.islice(rest.endings(now, tail, step, whole), 2):  # now.errors == shape.errors
                yield text, ending  # a new line even after a blank one: the padding goes before it, not in its indent


PLANS = threading.local()  # each thread's plans per shape


def _planned(shape: Shape, step: str) -> list[tuple[list[str], Shape]]:
    """The plans for `shape` that add no error, each with the shape it leaves (remembered per shape: a plan's
    lines and errors do not depend on the errors counted before)."""
    memo = PLANS.__dict__.setdefault("memo", {})
    key = (shape.key(), step)
    found = memo.get(key)
    if found is None:
        found = []
        for planned in _plans(shape, step):
            now = shape.copy()
            for text in planned:
                now.feed(Line(_lead(text), text.strip()))
            if now.errors == shape.errors:
                found.append((planned, now))
        if len(memo) >= MEMO:
            memo.clear()
        memo[key] = found
    return found


def _plans(shape: Shape, step: str) -> Iterator[list[str]]:
    """Candidate lines: a body for a waiting head, an `except` for open `try`s, then heads down to a depth."""
    yield []  # nothing: the code after the hole fits as it is (it may be the body a head waits for)
    in_def = any(b.kind in ("def", "async") for b in shape.blocks)
    if shape.waiting:  # heads that are themselves the body the last head waits for
        yield from _chains([], shape.blocks[-1].head + step, step, in_def)
        body = [shape.blocks[-1].head + step + "pass"]
        yield body
    else:
        body = []
    start = shape.copy()
    for text in body:
        start.feed(Line(_lead(text), "pass"))
    ends = []
    for level in start.levels():
        closes = []
        for b in reversed(start.blocks):
            if b.kind == "try" and len(b.head) >= len(level):
                closes += [b.head + "except:", b.head + step + "pass"]  # a bare `except`: one token less
        if closes:
            yield body + closes
            yield body + closes[:-1]  # the last `except` heads the lines below
            yield from _chains(body + closes[:-1], level + step, step, in_def)  # ... or heads of its own body do
        yield from _chains(body + closes, level, step, in_def)
        ends.append((body + closes, level))
    for lines_, level in ends:  # last, at every level: chains whose outermost head is a loop or a `try`
        yield from _chains(lines_, level, step, in_def, OUTER)


PAIRS = (("if x:", "if x:"), ("if x:", "while x:"), ("if x:", "try:"), ("def x():", "if x:"))  # (outermost, deepest)
# two or more heads: the code below may `break` or `except` at several depths; a loop around a `try` whose `else`
# breaks out of it (multiprocessing/connection.py's PipeClient)
OUTER = (("while x:", "if x:"), ("try:", "if x:"), ("while x:", "try:"))


def _chains(
    lines_: list[str], level: str, step: str, in_def: bool = True, pairs: tuple[tuple[str, str], ...] = PAIRS
) -> Iterator[list[str]]:
    """`lines_` then heads nested from `level` down to a depth, the deepest an `if`, a `while` (the code below may
    `break`) or a `try`, the outermost a `def` too (it may `return`: first when no `def` is open, `in_def`), each
    with and without a body of its own (`pairs`: the outermost and deepest heads; OUTER: a loop or `try` around
    `if`s, from two heads deep)."""
    for depth in range(1, 4) if pairs is PAIRS else range(2, 4):
        for first, last in pairs if in_def or pairs is not PAIRS else pairs[-1:] + pairs[:-1]:  # it may return
            heads = [first if n == 0 else "if x:" for n in range(depth)]
            heads[-1] = last if depth > 1 or first != "def x():" else first
            chain = [level + step * n + head for n, head in enumerate(heads)]
            yield lines_ + chain
            yield lines_ + chain + [level + step * depth + "pass"]


def _endings(shape: Shape, tail: Tail, rest: Ahead, step: str, whole: bool, base: int) -> Iterator[str]:
    """The end of the fill: nothing (the hole ends its line), or a new line's indentation and the start of a
    statement that the rest of the hole's last line finishes (`tail`: its `read_tail`), at each level that
    replays cleanly."""
    if tail is None:
        if rest.clean(shape, whole, base):
            yield ""
        return
    levels = shape.levels() or [shape.blocks[-1].head + step]
    key = shape.key()
    lead, starts = tail
    for start, line in starts:
        for level in levels:
            if start:
                indent = level
            elif level.endswith(lead) and len(level) >= len(lead):
                indent = level[: len(level) - len(lead)]
            else:
                continue
            if rest.clean_after(shape, key, level, line, whole, base):
                yield "\n" + indent + start
                break


Tail = tuple[str, tuple[tuple[str, Line], ...]] | None  # what `_endings` reads of the rest of a hole's last line


@functools.lru_cache(maxsize=1024)
def read_tail(tail: Line | None) -> Tail:
    """What `_endings` reads of `tail` (the rest of the hole's last line; None: the hole ends its line): its
    indentation, and each start of a statement that finishes it with the line they make, as `feed` reads that
    line (`skeleton`). Tails that read the same (the other holes' drafts on the line, from one call to the next)
    share their middles and endings."""
    return None if tail is None else (tail.indent, tuple((start, skeleton(line)) for start, line in _starts(tail.code)))


@functools.lru_cache(maxsize=256)
def _starts(code: str) -> tuple[tuple[str, Line], ...]:
    """The starts of a statement that the rest of the hole's last line (`code`) finishes, each with the line they
    make (its indentation left to the caller), in the order tried (those that parse)."""
    opens = _openers(code)
    out = []
    within = (opens, opens[0] + "x for x in " + opens[1:]) if opens else ()  # `[x for x in (x` | `y) if f(x)]`
    for start in (s + o + x for s in TAILS for o in within for x in ("", "x")) if opens else TAILS:
        start = start + " " if start and start[-1] not in "([{." else start
        if parses(start + code):
            out.append((start, Line("", start + code)))
    return tuple(out)


class Ahead:
    """The logical lines after a hole, replayed from the many shapes a bridge may leave (each distinct shape once:
    a replay's errors do not depend on those counted before it)."""

    def __init__(self, lines_: tuple[Line, ...]) -> None:
        self.lines = lines_
        self.memo: dict[tuple, tuple[int, int]] = {}
        self.found: dict[tuple, Remembered] = {}
        self.fed: dict[tuple, int] = {}
        self.ends: dict[tuple, Remembered] = {}
        self.named: tuple[int, list[int]] | None = None  # (the names' age, `suffixes` of the lines)

    @functools.cached_property
    def step(self) -> str | None:
        """The smallest step of indentation between two lines in a row (None: no line is deeper than another)."""
        best = None
        for a, b in itertools.pairwise(self.lines):
            low, high = sorted((a.indent, b.indent), key=len)
            if len(high) > len(low) and high.startswith(low) and (best is None or len(high) - len(low) < len(best)):
                best = high[len(low) :]
        return best

    def middles(self, shape: Shape, blank: str | None, line: Line | None, whole: bool) -> Iterable[tuple[str, str]]:
        """`_middles` of these lines, each shape's read once (lazily: as far as a bridge has asked); the errors
        `shape` counted before do not change them."""
        tail = read_tail(line)  # `line`: the rest of the hole's last line (None: it ends the line)
        key = (shape.key(), blank, tail, whole)
        found = self.found.get(key)
        if found is None:
            found = Remembered(_middles(shape.copy(), blank, tail, self, whole))
            if len(self.found) < MEMO:
                self.found[key] = found
        return found

    def clean(self, shape: Shape, whole: bool, base: int) -> bool:
        """Whether the lines replay from `shape` with `base` errors in all (at the end of the file when `whole`)."""
        return self.errors(shape, whole) == base

    def endings(self, shape: Shape, tail: Tail, step: str, whole: bool) -> Iterable[str]:
        """`_endings` of these lines after `shape` with no new error, each shape's read once (lazily); the errors
        counted before do not change them."""
        key = (shape.key(), tail, step, whole)
        found = self.ends.get(key)
        if found is None:
            found = Remembered(_endings(shape.copy(), tail, self, step, whole, shape.errors))
            if len(self.ends) < MEMO:
                self.ends[key] = found
        return found

    def clean_after(self, shape: Shape, key: tuple, indent: str, line: Line, whole: bool, base: int) -> bool:
        """`clean(shape.copy().feed(Line(indent, line.code)), whole, base)`, remembered per shape (`key`) and what
        `feed` reads of the line (its indentation, first word, and whether it is a head)."""
        at = (key, indent, line.word, line.head, whole)
        found = self.fed.get(at)
        if found is None:
            found = self.errors(shape.copy().feed(Line(indent, line.code)), whole) - shape.errors
            if len(self.fed) < MEMO:
                self.fed[at] = found
        return shape.errors + found == base

    def runs(self) -> list[int]:
        """`suffixes(self.lines)`, named once while the thread's names last."""
        if self.named is None or self.named[0] != SUFFIXES.__dict__.get("age", 0):
            runs = suffixes(self.lines)
            self.named = (SUFFIXES.__dict__.get("age", 0), runs)
        return self.named[1]

    def errors(self, shape: Shape, whole: bool) -> int:
        """`replay(lines, shape).errors` (`.end()` when `whole`), without changing `shape`."""
        key = shape.key()
        found = self.memo.get(key)
        if found is None:
            start = Shape(shape.copy().blocks, shape.base, 0, shape.inline, shape.top)
            found = replayed(self.lines, start, self.runs())
            if len(self.memo) < MEMO:
                self.memo[key] = found
        return shape.errors + found[0] + (found[1] if whole else 0)


SUFFIXES = threading.local()  # each thread's runs of lines (by id) and the replays over them from each shape
RUNS = 1 << 16  # runs of lines a thread names before it starts over (and forgets every replay with them)
REPLAYS = 1 << 18  # replays a thread remembers before it starts over


def replayed(lines_: tuple[Line, ...], shape: Shape, runs: list[int] | None = None) -> tuple[int, int]:
    """(errors, then the errors the end of the file adds) of `replay(lines_, shape)`, `shape`'s own errors left
    out, `shape` used up. The same as the replay: a replay's next step depends on its shape's key and the lines
    left, not on the errors counted (`Shape.key`), so the replay of a run of lines from a shape is remembered per
    (run, key) at every line, and one from another shape stops where it meets a remembered one. The lines after a
    hole differ from one call's draft to the next only in their first lines; the shapes a bridge leaves meet again
    once the code after the hole closes their blocks (most within a line or two). `runs`: `suffixes(lines_)`, named
    since the thread last started over."""
    runs = suffixes(lines_) if runs is None else runs
    memo = SUFFIXES.__dict__.setdefault("memo", {})
    start, seen = shape.errors, []
    for j, line in enumerate(lines_):
        at = (runs[j], shape.key())
        hit = memo.get(at)
        if hit is not None:
            errors, extra = shape.errors + hit[0], hit[1]
            break
        seen.append((at, shape.errors))
        shape.feed(line)
    else:
        errors, extra = shape.errors, shape.end() - shape.errors
    if len(memo) + len(seen) > REPLAYS:
        memo.clear()
    for at, before in seen:
        memo[at] = (errors - before, extra)
    return errors - start, extra


def suffixes(lines_: tuple[Line, ...]) -> list[int]:
    """An id for each run of lines `lines_[j:]` (the same run, the same id, within a thread), the empty run's last."""
    if len(SUFFIXES.__dict__.get("names", ())) + len(lines_) > RUNS:  # no id may name two runs: start over
        start_over()
    names = SUFFIXES.__dict__.setdefault("names", {})
    out = [0] * (len(lines_) + 1)  # 0: no lines
    for j in range(len(lines_) - 1, -1, -1):
        key = (lines_[j], out[j + 1])
        found = names.get(key)
        if found is None:
            found = names[key] = len(names) + 1
        out[j] = found
    return out


def start_over() -> None:
    """Forget this thread's names of runs of lines and every replay with them; names given before are stale (`age`)."""
    SUFFIXES.__dict__.pop("names", None)
    SUFFIXES.__dict__.pop("memo", None)
    SUFFIXES.age = SUFFIXES.__dict__.get("age", 0) + 1


class Remembered:
    """An iterator's items, kept as they come, so that it can be read again from the start (and on past where it
    was left) without redoing its work."""

    def __init__(self, items: Iterator[Any]) -> None:
        self.items, self.seen = items, []

    def __iter__(self) -> Iterator[Any]:
        at = 0
        while True:
            if at == len(self.seen):
                nxt = next(self.items, None)
                if nxt is None:
                    return
                self.seen.append(nxt)
            yield self.seen[at]
            at += 1


AHEADS = threading.local()  # each thread's Aheads: their remembered iterators are read by one thread at a time
KEPT = 64  # Aheads a thread keeps


def _ahead(lines_: tuple[Line, ...]) -> Ahead:
    """One Ahead per run of lines (the code after a hole stays while the decode writes before it), as `feed` reads
    them (`skeleton`: an Ahead reads its lines by feeding them and by their indentation only, so the lines of two
    drafts that differ only inside their statements share one Ahead and every replay it remembers)."""
    lines_ = tuple(map(skeleton, lines_))
    kept = AHEADS.__dict__.setdefault("kept", {})
    found = kept.get(lines_)
    if found is None:
        if len(kept) >= KEPT:
            kept.pop(next(iter(kept)))  # the oldest
        found = kept[lines_] = Ahead(lines_)
    return found
