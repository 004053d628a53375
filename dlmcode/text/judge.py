"""The guard's judge: how many new syntax errors the splice of a canvas has, at a cost a GPU can spare.

Owns turning a canvas (no holes) into the text to judge, choosing that text (a window of the
file), and checking it: one tree-sitter parse per check, incremental from the last check's tree
(`syntax.Reparser`), then Python's compile() only for a text tree-sitter passes, and
`syntax.judged`, the breakage rule itself, on the window's problems against the user's window's.

The window (Python): the outermost function around the holes when only classes enclose it
(each enclosing class stands as a `class _:` line above it), else the top-level statement
around them (`python_window`); the file's `__future__` imports go above it, and the statement
after it stands as `pass` at that statement's indentation below it, so that the window ends
as it does in the file. Why it answers as the whole file does: the window is a run of whole
statements of the user's code that parses alone (a window whose user's code has an error
outside the holes is not taken: the next one out is, up to the whole file), and the code
above and below it is the user's, unchanged; what a statement can see of the others
(`__future__` imports, a module-level `global`) makes the fill be judged on the whole file.
Other languages are judged on the whole file (one incremental parse a check).

Why the user's own errors do not blind it: compile() stops at the first error of a file, so
a typo above the holes used to hide every error of the fill from it; the window leaves the
user's errors outside it out, and judges the fill against the code as it is once they are
fixed. A fill that opens a string or a bracket that the window does not close is broken in the
window; in the file, the user's statements below would be read as its inside.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from . import spans, syntax

INCREMENTAL_FROM = 1024  # bytes: below, a fresh parse is faster than an incremental one (oracle.INCREMENTAL_FROM)
PY_LITERALS = re.compile(r"'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"|#[^\n]*", re.S)
FUTURE = re.compile(r"^from[ \t]+__future__[ \t]+import[^\n]*", re.M)
MODULE_GLOBAL = re.compile(r"(?:^|\n)global\b")
CONTINUATIONS = ("else", "elif", "except", "finally")  # a line that goes on the statement above it, at its level
# the words a block's head begins with
HEADS = ("def", "class", "async", "if", "for", "while", "try", "with", "match", "case", *CONTINUATIONS)
WRAP = "class _:\n"  # what stands for an enclosing class above a window
ANY = 1 << 30  # deeper than any line


@dataclass
class Window:
    """A run of the file judged alone: the plan's text [start, stop), every hole inside it, between `head` and
    `tail`; and the user's code of it, judged once."""

    start: int
    stop: int
    head: str = ""  # the file's __future__ imports and a `class _:` per enclosing class
    tail: str = ""  # `pass` where the statement after the window stands ("" at the end of the file)
    level: int = 0  # the depth of its statements' indentation (0: top-level statements)
    before: str = ""  # the user's code of the window, head and tail included
    holes: tuple[tuple[int, int], ...] = ()  # each hole's [start, end) chars in `before`
    problems: tuple[syntax.Problem, ...] = ()  # the problems of `before` (raw, in document order)
    reparser: Any = None  # syntax.Reparser of the texts judged in this window

    @property
    def clean_tree(self) -> bool:
        return not any(syntax.POOL_OF_KIND[p.kind] == syntax.TREE_SITTER for p in self.problems)


class Judge:
    """New syntax errors of a canvas's splice (0: it passes), by the breakage rule, judged on a window (module
    docstring). Built for one plan; the window is found at the first check."""

    def __init__(
        self,
        plan: spans.Plan,
        tokenizer: Any,
        lang: str,
        reference: tuple[str, list[tuple[int, int]]],
        drop_ids: frozenset[int] = frozenset(),
        trim_at: int | None = None,
        windowed: bool = True,
        decode: Callable[[list[int]], str] | None = None,
    ) -> None:
        self.plan, self.tokenizer, self.name = plan, tokenizer, syntax.language_for(lang=lang)
        self.reference, self.drop_ids, self.trim_at = reference, drop_ids, trim_at
        self.decode = decode  # a hole's ids -> its text (None: the plan's splice; serve: what its client splices)
        self.windowed = windowed  # False: always the whole file (the property tests' yardstick)
        self._small: Window | None | bool = False  # False: not looked for yet; None: none holds
        self._whole: Window | None = None
        self.seconds = 0.0  # spent judging (the rest of the guard's time is its search's: bench/guard_cost.py)

    def __call__(self, tokens: Tensor) -> int:
        start = time.perf_counter()
        found = self.errors(self.fills(tokens.tolist()))
        self.seconds += time.perf_counter() - start
        return found

    def fills(self, ids: list[int]) -> list[str]:
        """Each hole's text in a canvas's ids (as the plan splices it, or as the client does)."""
        return [
            self.decode(ids[r.start : r.stop])
            if self.decode is not None
            else spans.decode_fill(ids[r.start : r.stop], self.tokenizer, self.drop_ids, self.trim_at)
            for r in self.plan.positions
        ]

    def errors(self, fills: Sequence[str]) -> int:
        """New errors of the text with `fills` in the holes."""
        return self.judge(self.window_for(fills), fills)

    def window_for(self, fills: Sequence[str]) -> Window:
        small = self.small()
        return self.whole() if small is None or needs_whole(fills, small) else small

    def first_break(self, tokens: Tensor) -> int | None:
        """The canvas position of the hole's token on whose line the first new error of `tokens`' splice is, or
        of the last hole's token before that line (None: no new error). Where a repair of the canvas should
        start (the guard's sweep: text/witness.py); one more parse, not a verdict. A token's place in its hole's
        text is counted token by token, as the plan decodes them: a client's healed splice may shift it a
        little, which moves only where a search starts."""
        start = time.perf_counter()
        try:
            ids = tokens.tolist()
            fills = self.fills(ids)
            window = self.window_for(fills)
            text, holes, data, found = self.parsed(window, fills)
            line = self.verdict(window, text, holes, data, found).first_line
            if line is None:
                return None
            offset = sum(len(x) + 1 for x in text.split("\n", line - 1)[: line - 1])  # where that line starts
            hole = max((k for k, (a, _) in enumerate(holes) if a <= offset), default=0)
            return self.token_at(ids, hole, offset - holes[hole][0])
        finally:
            self.seconds += time.perf_counter() - start

    def token_at(self, ids: list[int], hole: int, chars: int) -> int:
        """The position of the token of hole `hole` whose text holds its `chars`-th character (the last token when
        the hole's text is shorter)."""
        run = self.plan.positions[hole]
        size = 0
        for p in range(run.start, run.stop):
            size += 0 if ids[p] in self.drop_ids else len(self.tokenizer.decode([ids[p]]))
            if size > chars:
                return p
        return max(run.start, run.stop - 1)

    def judge(self, window: Window, fills: Sequence[str]) -> int:
        text, holes, data, found = self.parsed(window, fills)
        if found and window.clean_tree:  # every tree-sitter problem is new, and its count is the larger: exact
            return len(found)
        return self.verdict(window, text, holes, data, found).new_errors

    def parsed(
        self, window: Window, fills: Sequence[str]
    ) -> tuple[str, tuple[tuple[int, int], ...], bytes, list[syntax.Problem]]:
        """The window's text with `fills` in it, each fill's [start, end) in it, its bytes, and tree-sitter's problems
        of it (one incremental parse)."""
        text, holes = self.text(window, fills)
        data = text.encode("utf-8", syntax.ENCODE_ERRORS)
        return text, holes, data, syntax.tree_problems(window.reparser.parse(data), data, self.name)

    def verdict(
        self, window: Window, text: str, holes: tuple[tuple[int, int], ...], data: bytes, found: list[syntax.Problem]
    ) -> syntax.Breakage:
        """The breakage rule on the window's text: tree-sitter's problems (`found`) and the compiler's, against the
        user's window's."""
        found = found + syntax.extra_problems(text, data, self.name)
        regions = [syntax.Region(b, a) for b, a in zip(window.holes, holes, strict=True)]
        return syntax.judged(window.before, text, window.problems, syntax.in_order(found), holes=regions)

    # ------------------------------------------------------------ windows

    def small(self) -> Window | None:
        """The smallest window whose user's code parses outside the holes (Python), or None (the whole file)."""
        if self._small is False:
            self._small = None
            if self.windowed and self.name == "python":
                text, holes = self.reference
                for found in python_windows(text, holes):
                    window = self.made(*found)
                    if not syntax.outside_holes(window.before, window.holes, window.problems):
                        self._small = window
                        break
        return self._small  # type: ignore[return-value]

    def whole(self) -> Window:
        if self._whole is None:
            self._whole = self.made(0, len(self.reference[0]), "", "", 0)
        return self._whole

    def made(self, start: int, stop: int, head: str, tail: str, level: int) -> Window:
        """The window of the user's code [start, stop) (in the reference), in the plan's text, judged once."""
        shift = len(self.plan.text) - len(self.reference[0])  # the text after the last hole is the same in both
        window = Window(start, stop + shift, head, tail, level)
        text, holes = self.reference
        window.before, window.holes = self.text(window, [text[a:b] for a, b in holes])
        window.problems = syntax.check(window.before, self.name, raw=True).problems
        window.reparser = syntax.Reparser(self.name, INCREMENTAL_FROM)
        return window

    def text(self, window: Window, fills: Sequence[str]) -> tuple[str, tuple[tuple[int, int], ...]]:
        """The window's text with `fills` in the holes, and each fill's [start, end) chars in it."""
        source, at = self.plan.text, window.start
        parts, holes, size = [window.head], [], len(window.head)
        for hole, fill in zip(self.plan.holes, fills, strict=True):
            parts += [source[at : hole.start_char], fill]
            size += hole.start_char - at
            holes.append((size, size + len(fill)))
            size += len(fill)
            at = hole.end_char
        parts += [source[at : window.stop], window.tail]
        return "".join(parts), tuple(holes)


def needs_whole(fills: Sequence[str], window: Window) -> bool:
    """Whether a fill writes what a window cannot judge alone: a `__future__` import (legal only at the file's
    top), or a module-level `global` (the symbol table reads the module's other statements)."""
    return any("__future__" in f or (window.level == 0 and MODULE_GLOBAL.search(f)) for f in fills)


# ---------------------------------------------------------------- Python's windows


class Lines:
    """The lines of the user's code, read for statement boundaries (not inside a string, not a continuation)."""

    def __init__(self, text: str) -> None:
        self.text, self.lines = text, text.split("\n")
        self.starts = list(itertools.accumulate(map((1).__add__, map(len, self.lines)), initial=0))  # no Python loop
        self.indents = [-1] * len(self.lines)  # each line's indentation, measured when a walk first reads it (-1: not
        # yet): a window's walk reads up to a long class's head, not the whole file (a 229 KB file: 4 of 13 ms)
        self.literals = PY_LITERALS.finditer(text)  # read as far as `in_string` asks (a window near the top of a
        # long file reads only its top)
        self.read_to = 0  # every literal starting before this offset is read
        self.string_starts: list[int] = []  # the multi-line literals read so far
        self.string_ends: list[int] = []

    @functools.cached_property
    def futures(self) -> list[re.Match[str]]:
        """The file's `__future__` import lines (read once: every candidate window asks; a file without the word is
        not read line by line)."""
        return list(FUTURE.finditer(self.text)) if "__future__" in self.text else []

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset) - 1

    def indent(self, i: int) -> int:
        found = self.indents[i]
        if found < 0:
            line = self.lines[i]
            found = self.indents[i] = len(line) - len(line.lstrip(" \t"))
        return found

    def lead(self, i: int) -> str:
        return self.lines[i][: self.indent(i)]

    def word(self, i: int) -> str:
        return re.split(r"[^\w]", self.lines[i].lstrip(" \t"), maxsplit=1)[0]

    def reach(self, start: int, end: int) -> tuple[int, int]:
        """The first and last line of a hole's reach, as the breakage rule draws it: its lines, and for an empty
        hole the nearest non-blank line above and below (parsers report an empty hole there). The last is the line
        its text runs on into: a fill may join it."""
        first, last = self.line_of(start), self.line_of(end)
        if start == end:
            first = next((i for i in range(first - 1, -1, -1) if self.lines[i].strip()), first)
            last = next((i for i in range(last + 1, len(self.lines)) if self.lines[i].strip()), last)
        return first, last

    def in_string(self, i: int) -> bool:
        at = self.starts[i]
        while self.read_to < at:  # literals do not overlap: past the last one read, none starts before `read_to`
            found = next(self.literals, None)
            if found is None:
                self.read_to = len(self.text) + 1
                break
            if "\n" in found.group():
                self.string_starts.append(found.start())
                self.string_ends.append(found.end())
            self.read_to = found.end()
        k = bisect.bisect_left(self.string_starts, at) - 1
        return k >= 0 and self.string_ends[k] > at

    def statement(self, i: int) -> bool:
        """Whether line i starts a statement: code, not a comment or a closing bracket, not inside a string,
        not after a line that ends in a backslash."""
        body = self.lines[i].strip()
        if not body or body[0] in "#)]}" or self.in_string(i):
            return False
        return i == 0 or not self.lines[i - 1].rstrip().endswith("\\")


def python_windows(text: str, holes: Sequence[tuple[int, int]]) -> Iterator[tuple[int, int, str, str, int]]:
    """Candidate windows (start, stop, head, tail, level) around `holes` in the user's code, smallest first, each
    found when it is asked for: the first whose user's code parses is taken, and the walks to the larger ones (to
    the end of a long class) are then not made."""
    lines = Lines(text)
    reaches = [lines.reach(a, b) for a, b in holes]
    first, last = min(r[0] for r in reaches), max(r[1] for r in reaches)
    if any(lines.line_of(a) == first and not lines.lines[first][: a - lines.starts[first]].strip() for a, _ in holes):
        first = joined_above(lines, first)
    inner = [lines.indent(i) for i in range(first, last + 1) if lines.statement(i)]
    level = min(inner, default=ANY)  # holes in a string or blank lines: the statement above is the innermost block
    outer = enclosing(lines, first, level)[::-1]  # the blocks around the holes, outermost first

    def levels() -> Iterator[tuple[int, Sequence[int]]]:
        function = outermost_function(lines, outer)
        if function is not None:
            yield function
        if all(lines.word(h) == "class" for h in outer):  # the statements at the holes' own level, in a class
            yield level, outer
        yield 0, []
        # last: the function as it is once a line of the user's that heads no block (a typo at column 0 inside a
        # class) is set aside; a window is still taken only where its own user's code parses outside the holes
        past_typo = outermost_function(lines, enclosing(lines, first, level, True)[::-1])
        if past_typo is not None:
            yield past_typo

    tried = set()
    for depth, classes in levels():
        if (key := (depth, tuple(classes))) in tried:
            continue
        tried.add(key)
        found = window_at(lines, first, last, depth, classes)
        if found is not None:
            yield found


def outermost_function(lines: Lines, outer: Sequence[int]) -> tuple[int, Sequence[int]] | None:
    """The indentation of the outermost function among the block heads `outer` (outermost first) when only classes
    are around it, with those classes' heads; None when there is none."""
    for k, head in enumerate(outer):
        if lines.word(head) in ("def", "async"):
            return lines.indent(head), outer[:k]
        if lines.word(head) != "class":
            return None
    return None


def joined_above(lines: Lines, first: int) -> int:
    """The line a window must reach up to when a hole begins a line's code (line `first`): its statement above.
    A fill there may write no line head of its own, and then the lines after it go on the statement above
    (a `try:` replaced by blanks leaves its body and `except` to the `try` before it)."""
    return next((i for i in range(first - 1, -1, -1) if lines.statement(i)), first)


def enclosing(lines: Lines, first: int, level: int, heads_only: bool = False) -> list[int]:
    """The lines that head the blocks around line `first` (whose statements are at `level`), innermost first.
    `heads_only`: passing over a shallower line that heads no block (a line in brackets, or a typo of the user's)."""
    out = []
    for i in range(first - 1, -1, -1):
        if level == 0:
            break
        if lines.indent(i) < level and lines.statement(i):
            if heads_only and lines.word(i) not in HEADS:
                continue
            out.append(i)
            level = lines.indent(i)
    return out


def window_at(
    lines: Lines, first: int, last: int, depth: int, classes: Sequence[int]
) -> tuple[int, int, str, str, int] | None:
    """The whole statements at indentation `depth` that lines first..last lie in, or None."""
    top = next((i for i in range(first, -1, -1) if lines.statement(i) and lines.indent(i) <= depth), None)
    while top is not None and lines.word(top) in CONTINUATIONS:  # `else:` goes on the statement above it
        top = next((i for i in range(top - 1, -1, -1) if lines.statement(i) and lines.indent(i) <= depth), None)
    if top is None or lines.indent(top) != depth:
        return None
    futures = [m.start() for m in lines.futures]
    if futures and lines.starts[top] <= futures[-1]:  # the file's head, where __future__ imports must come first
        top, last = 0, max(last, lines.line_of(futures[-1]))
    while True:  # its decorators
        above = next((i for i in range(top - 1, -1, -1) if lines.statement(i)), None)
        if above is None or lines.indent(above) != depth or not lines.lines[above].lstrip().startswith("@"):
            break
        top = above
    below = next(
        (
            i
            for i in range(last + 1, len(lines.lines))
            if lines.statement(i)
            and lines.indent(i) <= depth
            and not (lines.indent(i) == depth and lines.word(i) in CONTINUATIONS)
        ),
        None,
    )
    start = lines.starts[top]
    stop = lines.starts[below] if below is not None else len(lines.text)
    tail = lines.lead(below) + "pass\n" if below is not None else ""
    head = future_head(lines, start)
    if head is None:
        return None
    head += "".join(lines.lead(h) + WRAP for h in classes)
    if classes and any(lines.statement(i) for i in range(classes[-1] + 1, top)):
        head += lines.lead(top) + "pass\n"  # the statements of the class above the window: it has a body without it
    return start, stop, head, tail, depth


def future_head(lines: Lines, start: int) -> str | None:
    """The file's `__future__` imports above `start` (a line's start), each on its line (they change what
    compiles); None when one spans lines."""
    found = [m.group() for m in lines.futures if m.end() <= start]
    if any("(" in f and ")" not in f for f in found):
        return None
    return "".join(f + "\n" for f in found)
