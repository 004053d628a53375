"""Python's logical lines and the shape they leave: strings and comments masked, bracketed lines joined
(`lines`), then replayed on a stack of open blocks as CPython's tokenizer and parser see their indentation
(`Shape`, `replay`), and the same read as a fold that resumes where a window's text was read before
(`Reading`). The questions the guard's fillers ask of it are text/pyshape.py's."""

from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

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
        return _word(self.code)  # read at every `feed`: each code's once (most lines are made anew, fed once)

    @property
    def head(self) -> bool:
        return self.code.endswith(":")


@functools.lru_cache(maxsize=1 << 14)
def _word(code: str) -> str:
    found = WORD.match(code)
    return found.group() if found else ""


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
        depth = max(0, depth + _net(raw))
        if depth == 0 and not raw.endswith("\\"):
            out.append(Line(indent, current.strip()))
            current, indent = "", None
    if indent is not None and current.strip():
        out.append(Line(indent, current.strip()))
    return out


def _net(raw: str) -> int:
    """Brackets `raw` opens less those it closes (counted, as the generators over "([{" did, a line at a time)."""
    return raw.count("(") + raw.count("[") + raw.count("{") - raw.count(")") - raw.count("]") - raw.count("}")


class Block(NamedTuple):
    """One open block (a value: a shape is copied by copying its list, thousands of times a call)."""

    head: str  # the indentation of its head line
    kind: str  # try, except, tryelse, if, elif, for, while, def, async, or "" (any other head)
    body: str | None = None  # the indentation of its body, once a body line is seen


@dataclass
class Shape:
    """A replay of logical lines on the stack of open blocks; `errors` counts what CPython would refuse."""

    blocks: list[Block] = field(default_factory=list)
    base: str | None = None
    errors: int = 0
    inline: tuple[str, str] | None = None  # the last line, when a compound statement on one line: (indent, kind)
    top: bool = False  # the replay began at the file's top: a `return` outside every `def` is an error

    def copy(self) -> Shape:
        return Shape(list(self.blocks), self.base, self.errors, self.inline, self.top)

    def key(self) -> tuple:
        """What a replay from here depends on (everything but the errors counted so far)."""
        return self.base, tuple(self.blocks), self.inline, self.top

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
            self.blocks[-1] = self.blocks[-1]._replace(body=d)
        else:
            if self.waiting:  # a head with no body: CPython's "expected an indented block"
                self.errors += 1
                self.blocks.pop()
            prev = self.dedent(d, word)
        if word == "return" and self.top and not any(b.kind in ("def", "async") for b in self.blocks):
            self.errors += 1  # `return` outside a function (known only when the replay began at the file's top)
        if word in ("break", "continue") and self.top and not self.in_loop():
            self.errors += 1  # CPython's "'break' outside loop" (the window must see every block around it)
        kind = kind_of(word, prev)
        if line.head:
            self.blocks.append(Block(d, kind))
        self.inline = (d, kind) if kind and not line.head else None  # a compound statement on one line
        return self

    def in_loop(self) -> bool:
        """Whether a `for` or `while` body is open inside the innermost function (an `async` head may be a loop)."""
        for b in reversed(self.blocks):
            if b.kind in ("for", "while", "async"):
                return True
            if b.kind == "def":
                return False
        return False

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
        if prev is None and self.inline is not None and self.inline[0] == d:  # `if x: y` then `else: z`
            prev = Block(d, self.inline[1])
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


READ = frozenset((*NEXT, *CONTINUATIONS, "def", "async", "return", "break", "continue"))  # the words `feed` tells apart


@functools.lru_cache(maxsize=1 << 14)
def skeleton(line: Line) -> Line:
    """What `Shape.feed` reads of `line`, as a line: its indentation, its first word where `feed` tells that word from
    others (`READ`; any other word is `x`), and whether it is a head. Every shape feeds it as it feeds `line` (the
    same blocks, base, errors and inline), so lines after a hole that differ only inside their statements (the
    draft of other holes, from one call to the next) replay as one (text/pyahead.py's `_ahead`)."""
    word = line.word
    code = (word if word in READ else "x" if word else "") + (":" if line.head else "")
    return line if code == line.code else Line(line.indent, code)


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
        self.depth = max(0, self.depth + _net(raw))
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
