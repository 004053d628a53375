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
Every bridge is a candidate only: the judge (the breakage rule) still decides each witness.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import threading
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import scans

MASK = re.compile(
    r"[rRbBuUfF]{0,2}('''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\")|#[^\n]*", re.S
)
MASKED = scans.Prefixes(MASK, ("'''", '"""'), group=1)  # MASK's scans of the text before a hole, resumed
WORD = re.compile(r"[A-Za-z_]+")
NEXT = {  # the statements a continuation may follow, by the kind of the one before it
    "try": ("except", "finally"),
    "except": ("except", "else", "finally"),
    "tryelse": ("finally",),
    "if": ("elif", "else"),
    "elif": ("elif", "else"),
    "for": ("else",),
    "while": ("else",),
}
CONTINUATIONS = ("elif", "else", "except", "finally")
AHEAD = 40  # logical lines after the hole replayed for a bridge (ours: deeper errors are the judge's)
HEADS = ("", " x", "x", "()", "():", "(x)", ":", " x:", " = x", "x = x", " x()")  # what may finish a cut line
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


def mask(text: str) -> str:
    """`text` with every string a bare `S` (a multi-line one on one line) and every comment gone."""
    return MASK.sub(lambda m: "S" if m.group(1) else "", text)


@dataclass(frozen=True)
class Line:
    """One logical line: its indentation (as written) and its code, stripped."""

    indent: str
    code: str

    @property
    def word(self) -> str:
        found = WORD.match(self.code)
        return found.group() if found else ""

    @property
    def head(self) -> bool:
        return self.code.endswith(":")


def lines(text: str) -> list[Line]:
    """The logical lines of `text` (masked first): bracketed and backslash-continued lines joined."""
    out: list[Line] = []
    depth, current, indent = 0, "", None
    for raw in mask(text).split("\n"):
        if indent is None:
            if not raw.strip():
                continue
            indent = raw[: len(raw) - len(raw.lstrip())]
        current += " " + raw.strip()
        depth = max(0, depth + sum(raw.count(c) for c in "([{") - sum(raw.count(c) for c in ")]}"))
        if depth == 0 and not raw.endswith("\\"):
            out.append(Line(indent, current.strip()))
            current, indent = "", None
    if indent is not None and current.strip():
        out.append(Line(indent, current.strip()))
    return out


@dataclass
class Block:
    head: str  # the indentation of its head line
    kind: str  # try, except, tryelse, if, elif, for, while, def, async, or "" (any other head)
    body: str | None = None  # the indentation of its body, once a body line is seen


@dataclass
class Shape:
    """A replay of logical lines on the stack of open blocks; `errors` counts what CPython would refuse."""

    blocks: list[Block] = field(default_factory=list)
    base: str | None = None
    errors: int = 0

    def copy(self) -> Shape:
        return Shape([Block(b.head, b.kind, b.body) for b in self.blocks], self.base, self.errors)

    def key(self) -> tuple:
        """What a replay from here depends on (everything but the errors counted so far)."""
        return self.base, tuple((b.head, b.kind, b.body) for b in self.blocks)

    @property
    def waiting(self) -> bool:
        """Whether the last head still waits for its body."""
        return bool(self.blocks) and self.blocks[-1].body is None

    def levels(self) -> list[str]:
        """The indentations a statement may start at now, deepest first."""
        if self.waiting:
            return []
        found = [b.body for b in reversed(self.blocks) if b.body is not None]
        return found + [self.base if self.base is not None else ""]

    def step(self) -> str:
        """One level of indentation as this code writes it."""
        for b in reversed(self.blocks):
            if b.body is not None and b.body.startswith(b.head) and len(b.body) > len(b.head):
                return b.body[len(b.head) :]
        return "    "

    def feed(self, line: Line) -> Shape:
        """One more logical line: a body for a waiting head, or a statement at a level open now."""
        d, word = line.indent, line.word
        prev = None
        if self.waiting and len(d) > len(self.blocks[-1].head):
            self.blocks[-1].body = d
        else:
            if self.waiting:  # a head with no body: CPython's "expected an indented block"
                self.errors += 1
                self.blocks.pop()
            prev = self.dedent(d, word)
        if line.head:
            self.blocks.append(Block(d, kind_of(word, prev)))
        return self

    def dedent(self, d: str, word: str) -> Block | None:
        """Close the blocks deeper than `d` (a lost `try`, a dedent to no level and a misplaced continuation
        count); the compound statement just closed at `d`, if any."""
        prev: Block | None = None
        while self.blocks and self.blocks[-1].body is not None and len(d) < len(self.blocks[-1].body):
            closed = self.blocks.pop()
            if closed.kind == "try" and not (len(closed.head) == len(d) and word in ("except", "finally")):
                self.errors += 1
            prev = closed if len(closed.head) == len(d) else prev
        level = self.blocks[-1].body if self.blocks else self.base
        if level is None:
            self.base = level = d
        if not self.blocks and len(d) < len(level):
            self.base = level = d  # the window began inside blocks it cannot see: they close here
        if len(d) != len(level):
            self.errors += 1
        if word in CONTINUATIONS and (prev is None or word not in NEXT.get(prev.kind, ())):
            self.errors += 1
        return prev

    def end(self) -> int:
        """Errors once the file ends here: a head without a body, a `try` without its `except`."""
        return self.errors + self.waiting + sum(b.kind == "try" for b in self.blocks)


def kind_of(word: str, prev: Block | None) -> str:
    """The kind of a new head, for what may follow it (`else` after `except` takes a `finally`)."""
    if word == "else" and prev is not None and prev.kind in ("except", "tryelse"):
        return "tryelse"
    return word if word in NEXT or word in ("def", "async") else ""


def replay(found: list[Line], shape: Shape | None = None) -> Shape:
    shape = shape if shape is not None else Shape()
    for line in found:
        shape.feed(line)
    return shape


SIGNS = re.compile(r"[()\[\]{}\n]")


@dataclass
class Reading:
    """`lines` and `replay` of a text (masked), `_depth` of it and `_item`'s brackets, as a fold: read on from
    where a remembered prefix of the text left them (WINDOWS), instead of from the window's start every call."""

    masked: str = ""
    depth: int = 0  # lines(): bracket depth at the end of the last whole raw line
    current: str = ""  # lines(): the logical line being joined
    indent: str | None = None
    shape: Shape = field(default_factory=Shape)  # the replay of every logical line before `last`
    last: Line | None = None  # the last whole logical line
    chars: int = 0  # _depth of the masked text
    stack: list[tuple[str, int]] = field(default_factory=list)  # _item's open brackets (char, where in `masked`)
    start: int | None = None  # _item's start of the statement: after the last line break outside brackets

    def copy(self) -> Reading:
        return Reading(
            self.masked, self.depth, self.current, self.indent, self.shape.copy(), self.last, self.chars,
            list(self.stack), self.start,
        )  # fmt: skip

    def then(self, chunk: str) -> Reading:
        """The reading once `chunk` (masked) follows."""
        out = self.copy()
        base, pending = len(out.masked), out.masked[out.masked.rfind("\n") + 1 :]
        out.masked += chunk
        for m in SIGNS.finditer(chunk):
            ch = m.group()
            if ch in "([{":
                out.chars += 1
                out.stack.append((ch, base + m.start()))
            elif ch in ")]}":
                out.chars -= out.chars > 0
                if out.stack:
                    out.stack.pop()
            elif not out.stack:
                out.start = base + m.start() + 1
        for raw in (pending + chunk).split("\n")[:-1]:
            out.line(raw)
        return out

    def line(self, raw: str) -> None:
        """One raw line, as lines() reads it."""
        if self.indent is None:
            if not raw.strip():
                return
            self.indent = raw[: len(raw) - len(raw.lstrip())]
        self.current += " " + raw.strip()
        self.depth = max(0, self.depth + sum(raw.count(c) for c in "([{") - sum(raw.count(c) for c in ")]}"))
        if self.depth == 0 and not raw.endswith("\\"):
            self.emit(Line(self.indent, self.current.strip()))
            self.current, self.indent = "", None

    def emit(self, line: Line) -> None:
        if self.last is not None:
            self.shape.feed(self.last)
        self.last = line

    def ended(self) -> Reading:
        """The reading of the whole text: its last raw line read, and the logical line left open."""
        out = self.copy()
        out.line(out.masked[out.masked.rfind("\n") + 1 :])
        if out.indent is not None and out.current.strip():
            out.emit(Line(out.indent, out.current.strip()))
        return out

    def item(self) -> tuple[str, str] | None:
        """_item(masked): the open brackets outside the hole's item, and the item's text so far."""
        masked = self.masked
        if not self.stack:
            start = self.start if self.start is not None else masked.rfind("\n") + 1
            return "", masked[start:].strip()
        at = self.stack[-1][1]
        comma = max(masked.rfind(",", at), at)
        return "".join(c for c, _ in self.stack), masked[comma + 1 :].strip()


def _read(state: Reading, text: str, start: int, stop: int, spans: list[scans.Span]) -> Reading:
    """The fold of WINDOWS: text[start:stop] masked as `mask` does (a string is `S`, a comment nothing)."""
    pieces, at = [], start
    for s, e in spans:
        pieces += [text[at:s], "" if text[s] == "#" else "S"]
        at = e
    pieces.append(text[at:stop])
    return state.then("".join(pieces))


WINDOWS = scans.Prefixes(MASK, ("'''", '"""'), _read, Reading(), group=1)


def reading(window: str) -> Reading:
    """The Reading of a window of text before a hole (lines, replay, depth, item), resumed where it can be."""
    return WINDOWS.scan(window).state.ended()


@functools.lru_cache(maxsize=4096)
def parses(code: str) -> bool:
    """Whether one logical line (no indentation) parses on its own, in a function and a loop: a head gets a body,
    a continuation the statement it needs."""
    body = code + ("\n  pass" if code.rstrip().endswith(":") else "")
    word = WORD.match(code)
    if word and word.group() in ("elif", "else"):
        body = "if x:\n  pass\n" + body
    elif word and word.group() in ("except", "finally"):
        body = "try:\n  pass\n" + body
    wrapped = "async def _():\n for _ in x:\n" + "\n".join("  " + s for s in body.split("\n"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `(x)()` and the like warn; only errors count here
            compile(wrapped, "<bridge>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


@functools.lru_cache(maxsize=1024)
def bridges(before: str, after: str, limit: int = 8) -> tuple[tuple[str, str], ...]:
    """(start, end) pairs a hole between `before` and `after` may hold around its padding, shortest first:
    the rest of the cut line and the lines between (start), then the start of the line the hole ends in
    (end), such that the code after replays with no new error."""
    read = reading(before[code_start(before, len(before) - WINDOW) :])  # lines(window), replayed
    line = before[before.rfind("\n") + 1 :]
    cut = read.last if read.last is not None and (line.strip() or read.chars > 0) else None
    if cut is not None and len(cut.code) > LONG:
        return ()  # inside a long bracketed literal: the expression fillers' (`inline`)
    shape = read.shape.copy()  # the replay of the window's lines but the cut one
    if cut is None and read.last is not None:
        shape.feed(read.last)
    whole = len(after) < AFTER  # the file ends within the window: what is open at its end counts
    after = after[: code_end(after, AFTER)]
    tail, ahead = _tail(after)
    whole = whole and len(ahead) <= AHEAD
    rest = _ahead(ahead[:AHEAD])
    out: list[tuple[str, str]] = []
    for head in _heads(cut):
        start = shape.copy()
        if cut is not None:
            start.feed(Line(cut.indent, cut.code + mask(head)))
        for middle, ending in rest.middles(start, None if cut is not None else line, tail, whole):
            out.append((head + ("\n" + middle if cut is not None and middle else middle), ending))
            if len(out) >= limit:
                break
        if len(out) >= limit:
            break
    return tuple(sorted(set(out), key=lambda p: (len(p[0]) + len(p[1]), p)))


WINDOW = 16000  # characters before a hole the bridge replays (ours: blocks opened further away are assumed open)
AFTER = 4000  # characters after it (AHEAD logical lines at most)
LONG = 2000  # characters of a cut statement the bridge reads at most (ours)
MEMO = 4096  # shapes remembered per run of lines after a hole


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


@functools.lru_cache(maxsize=64)
def _tail(after: str) -> tuple[Line | None, tuple[Line, ...]]:
    """The statement the hole's last line begins (None when the hole ends its line and nothing is open), and the
    logical lines after it. Closers in `after` with no opener make the statement run on to the line they end."""
    masked = mask(after)
    depth = low = 0
    end = None
    for i, ch in enumerate(masked):
        depth += (ch in "([{") - (ch in ")]}")
        if depth < low:
            low, end = depth, i
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


def inline(before: str, after: str, quote: str = "") -> tuple[tuple[str, str], ...]:
    """(start, end) pairs for a hole inside one statement (brackets open at the hole, or the code after it
    starting inside a string of `quote`), such that the statement parses on its own: the innermost
    brackets' item around the hole, with the outer brackets as bare openers and closers."""
    head = reading(before[code_start(before, len(before) - WINDOW) :]).item()
    if head is None:
        return ()
    openers, fragment = head
    tail = _rest(mask(quote + after[: code_end(after, AFTER)]), len(openers))
    if tail is None or not (openers or quote or _openers(tail)):
        return ()
    out = []
    lead = "x = " + openers if openers else ""
    for start, end in (QUOTED if quote else ()) + INLINE:
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


def _item(masked: str) -> tuple[str, str] | None:
    """(the open brackets outside the hole's item, the item's text so far) of the statement `masked` ends in;
    None when it ends in no statement it can read."""
    stack: list[tuple[str, int]] = []
    start = masked.rfind("\n") + 1
    for i, ch in enumerate(masked):
        if ch in "([{":
            stack.append((ch, i))
        elif ch in ")]}" and stack:
            stack.pop()
        elif ch == "\n" and not stack:
            start = i + 1
    if not stack:
        return "", masked[start:].strip()
    inner, at = stack[-1]
    comma = max(masked.rfind(",", at), at)
    return "".join(c for c, _ in stack), masked[comma + 1 :].strip()


def _rest(masked: str, depth: int) -> str | None:
    """The text after the hole to the end of the innermost item (the next comma at its depth, or its closer),
    then nothing more: the closers of the outer brackets are added by the caller."""
    level = 0
    for i, ch in enumerate(masked):
        if ch in "([{":
            level += 1
        elif ch in ")]}":
            if level == 0 and depth:
                return masked[:i]
            level -= 1
        elif ch == "," and level == 0 and depth:
            return masked[:i]
        elif ch == "\n" and level <= 0 and not depth:
            return masked[:i]
    return masked if not depth else None


def _heads(cut: Line | None) -> Iterator[str]:
    """Texts that finish the cut logical line so that it parses (none on a blank line)."""
    if cut is None:
        yield ""
        return
    close = _closers(cut.code)
    for head in HEADS:
        if parses(cut.code + close + head):
            yield close + head


def _middles(shape: Shape, blank: str | None, tail: Line | None, rest: Ahead, whole: bool) -> Iterator[tuple[str, str]]:
    """(lines, ending) after the fixed head: the lines, then the start of the hole's last line, for which the
    code after replays cleanly. `blank`: the hole's own line, blank so far (its indentation may be typed)."""
    step = shape.step()
    for planned, now in _planned(shape, step):
        text = "\n".join(planned)
        if blank is not None and planned:
            text = text[len(blank) :] if text.startswith(blank) else "\n" + text
        for ending in itertools.islice(rest.endings(now, tail, step, whole), 2):  # now.errors == shape.errors
            yield text, ending  # a new line even after a blank one: the padding goes before it, not in its indentation


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
    for level in start.levels():
        closes = []
        for b in reversed(start.blocks):
            if b.kind == "try" and len(b.head) >= len(level):
                closes += [b.head + "except x:", b.head + step + "pass"]
        if closes:
            yield body + closes
            yield body + closes[:-1]  # the last `except` heads the lines below
            yield from _chains(body + closes[:-1], level + step, step, in_def)  # ... or heads of its own body do
        yield from _chains(body + closes, level, step, in_def)


def _chains(lines_: list[str], level: str, step: str, in_def: bool = True) -> Iterator[list[str]]:
    """`lines_` then heads nested from `level` down to a depth, the deepest an `if`, a `while` (the code below may
    `break`) or a `try`, the outermost a `def` too (it may `return`: first when no `def` is open, `in_def`), each
    with and without a body of its own."""
    for depth in range(1, 4):
        pairs = (("if x:", "if x:"), ("if x:", "while x:"), ("if x:", "try:"), ("def x():", "if x:"))
        for first, last in pairs if in_def else pairs[-1:] + pairs[:-1]:  # outside a def, the code below may return
            heads = [first if n == 0 else "if x:" for n in range(depth)]
            heads[-1] = last if depth > 1 or first != "def x():" else first
            chain = [level + step * n + head for n, head in enumerate(heads)]
            yield lines_ + chain
            yield lines_ + chain + [level + step * depth + "pass"]


def _endings(shape: Shape, tail: Line | None, rest: Ahead, step: str, whole: bool, base: int) -> Iterator[str]:
    """The end of the fill: nothing (the hole ends its line), or a new line's indentation and the start of a
    statement that the rest of the hole's last line (`tail`) finishes, at each level that replays cleanly."""
    if tail is None:
        if rest.clean(shape, whole, base):
            yield ""
        return
    levels = shape.levels() or [shape.blocks[-1].head + step]
    key = shape.key()
    for start, line in _starts(tail.code):
        for level in levels:
            if start:
                indent = level
            elif level.endswith(tail.indent) and len(level) >= len(tail.indent):
                indent = level[: len(level) - len(tail.indent)]
            else:
                continue
            if rest.clean_after(shape, key, level, line, whole, base):
                yield "\n" + indent + start
                break


@functools.lru_cache(maxsize=256)
def _starts(code: str) -> tuple[tuple[str, Line], ...]:
    """The starts of a statement that the rest of the hole's last line (`code`) finishes, each with the line they
    make (its indentation left to the caller), in the order tried (those that parse)."""
    opens = _openers(code)
    out = []
    for start in (s + opens + x for s in TAILS for x in ("", "x")) if opens else TAILS:
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

    def middles(self, shape: Shape, blank: str | None, tail: Line | None, whole: bool) -> Iterable[tuple[str, str]]:
        """`_middles` of these lines, each shape's read once (lazily: as far as a bridge has asked); the errors
        `shape` counted before do not change them."""
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

    def endings(self, shape: Shape, tail: Line | None, step: str, whole: bool) -> Iterable[str]:
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

    def errors(self, shape: Shape, whole: bool) -> int:
        """`replay(lines, shape).errors` (`.end()` when `whole`), without changing `shape`."""
        key = shape.key()
        found = self.memo.get(key)
        if found is None:
            end = replay(list(self.lines), Shape(shape.copy().blocks, shape.base))
            found = (end.errors, end.end() - end.errors)
            if len(self.memo) < MEMO:
                self.memo[key] = found
        return shape.errors + found[0] + (found[1] if whole else 0)


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
    """One Ahead per run of lines (the code after a hole stays while the decode writes before it)."""
    kept = AHEADS.__dict__.setdefault("kept", {})
    found = kept.get(lines_)
    if found is None:
        if len(kept) >= KEPT:
            kept.pop(next(iter(kept)))  # the oldest
        found = kept[lines_] = Ahead(lines_)
    return found


def forget() -> None:
    """This thread's Aheads and the bridges remembered (tests: a fresh replay)."""
    AHEADS.__dict__.pop("kept", None)
    PLANS.__dict__.pop("memo", None)
    bridges.cache_clear()


def _lead(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _depth(text: str) -> int:
    depth = 0
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}" and depth > 0
    return depth


def _closers(code: str) -> str:
    """What closes the brackets `code` leaves open, innermost first."""
    stack: list[str] = []
    for ch in code:
        if ch in "([{":
            stack.append(")]}"["([{".index(ch)])
        elif ch in ")]}" and stack and stack[-1] == ch:
            stack.pop()
    return "".join(reversed(stack))


def _openers(code: str) -> str:
    """What opens the closers `code` has no opener for, outermost first."""
    stack: list[str] = []
    for ch in reversed(code):
        if ch in ")]}":
            stack.append("([{"[")]}".index(ch)])
        elif ch in "([{" and stack and stack[-1] == ch:
            stack.pop()
    return "".join(stack)
