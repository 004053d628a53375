"""Syntax checking: which languages dlmcode knows, the problems in a text, and breakage.

Owns the language table (grammars/languages.toml, read lazily), choosing a language from a
path or a name, loading tree-sitter grammars (imported on first use and cached, so that
importing this module stays cheap), collecting ERROR and MISSING nodes, the extra checkers
some languages have (Python's compile()), and the rule that compares the problems of the
user's code and an output to decide whether a fill broke the syntax (`breakage`). The table and
the parsers are text/languages.py's, the problems a checker finds text/problems.py's; this module
checks a text and judges a fill, and its names stay the ones callers use (syntax.check, syntax.Problem).

Everything here is a pure function of texts, hole regions and language: nothing prints,
nothing reads the user's files.
Positions: lines are 1-based; columns and byte offsets count UTF-8 bytes of the text, as
tree-sitter does, so a column after a non-ASCII character is larger than its character index.
Lines end at "\\n", "\\r\\n" or a bare "\\r", as --span counts them (spans.LINE_BREAK) and as
Python does; tree-sitter's rows count "\\n" only, so a problem's line and column come from its
byte offset. A Problem's `column` is 0-based, as tree-sitter's; what users read (`check`'s text and its
JSON, Problem.to_dict) gives it 1-based like the line, as linters and editors do. Byte
offsets (start_byte, end_byte) stay 0-based: they are offsets, not positions.
"""

from __future__ import annotations

import functools
import os.path
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .languages import LanguageEntry, Reparser, _languages, byte_edit, language_for, parser  # noqa: F401 (syntax's names)
from .problems import (  # noqa: F401
    CHECKS,
    COMPILE,
    ENCODE_ERRORS,
    ERROR,
    MAX_CHECK,
    MISSING,
    POOL_OF_KIND,
    TREE_SITTER,
    UNCLOSED,
    Problem,
    Report,
    Uncheckable,
    _pools,
    checkable,
    in_order,
    issues,
    narrow,
    tree_problems,
)
from .spans import LINE_BREAK, line_range

# Recent texts are re-checked often (`breakage` on the same input for every sample of a
# bench or compare run); Reports are immutable, so caching them is safe.
CHECK_CACHE_SIZE = 64


def __getattr__(name: str) -> object:
    # LANGUAGES is read on first access (text/languages.py): `dlmcode --help` should not pay for the table.
    if name == "LANGUAGES":
        return _languages()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check(text: str, lang: str, *, raw: bool = False) -> Report:
    """Parse `text` as `lang` (a name or alias) and report every syntax problem, each mistake once.

    Where a precise checker (Python's compile()) places a mistake, tree-sitter problems whose
    lines contain that place are the same mistake seen coarsely (an ERROR node often starts
    at the enclosing class or at the file's top): they are left out (`narrow`), unless `raw`.
    """
    report = _check(text, language_for(lang=lang))
    return report if raw else Report(report.lang, narrow(report.problems))


@functools.lru_cache(maxsize=CHECK_CACHE_SIZE)
def _check(text: str, name: str) -> Report:
    checkable(text)
    data = text.encode("utf-8", ENCODE_ERRORS)
    found = tree_problems(parser(name).parse(data), data, name)
    return Report(name, in_order(found + extra_problems(text, data, name)))


def extra_problems(text: str, data: bytes, name: str) -> list[Problem]:
    """The problems the language's extra checkers (Python's compile()) find in `text` (its bytes `data`)."""
    return [p for check_name in _languages()[name].checks for p in CHECKS[check_name](text, data)]


def tree_errors(text: str, lang: str) -> int:
    """How many problems tree-sitter alone finds in `text` (as `check` counts its pool), without
    the extra checkers: a cheap first look for callers that only need to know a text is broken."""
    name = language_for(lang=lang)
    data = text.encode("utf-8", ENCODE_ERRORS)
    return len(tree_problems(parser(name).parse(data), data, name))


def outside_holes(before: str, holes: Sequence[tuple[int, int]], problems: Sequence[Problem]) -> list[Problem]:
    """The problems of `before` that the breakage rule counts as the user's (outside every hole's reach;
    `holes` as [start, end) chars of `before`)."""
    regions = [Region(h, h) for h in holes]
    return _Layout.of(before, before, regions, grow=True).user(list(problems))


@dataclass(frozen=True)
class Breakage:
    """What a fill did to the syntax: the errors of the output that the user's code did not have."""

    new_errors: int
    first_line: int | None  # 1-based line in the output where the first new error is (breakage docstring)
    touches_span: bool  # that first new error lies on a filled line

    @property
    def broken(self) -> bool:
        return self.new_errors > 0

    def to_dict(self) -> dict:
        return {
            "broken": self.broken,
            "new_errors": self.new_errors,
            "first_line": self.first_line,
            "touches_span": self.touches_span,
        }


NOT_BROKEN = Breakage(new_errors=0, first_line=None, touches_span=False)


@dataclass(frozen=True)
class Region:
    """One hole in the two texts `breakage` compares, as [start, end) characters.

    `before`: the user's own text for the hole in the reference (a --span's original lines;
    empty for a ⟦fill⟧ marker or a continuation, which are not the user's code).
    `after`: the hole's fill in the output.
    """

    before: tuple[int, int]
    after: tuple[int, int]


def breakage(
    before: str,
    after: str,
    lang: str,
    span: tuple[int, int] | None = None,
    *,
    holes: Sequence[Region] | None = None,
) -> Breakage:
    """The syntax errors of `after` (the output) that `before` (the user's code) did not have.

    `holes`, in text order, say where the fills are (Region); without them the one run of
    text that differs between the texts is taken as a rewritten hole, whose reach is its own
    lines (the texts alone cannot tell a removed marker from a rewrite). `span` = (first_line,
    last_line), 1-based inclusive lines of `after`, overrides the filled lines that decide
    where the first error is reported (`touches_span`; no span and no holes: False).

    The rule (docs/usage.md, "breakage"), per checker (tree-sitter; Python's compile()):
    - The user's errors are the problems of `before` that do not start in a hole's reach: the
      lines of its user text, and for an empty hole (a marker, a continuation) also the
      nearest non-blank line above and below it, since the code around an empty hole is
      incomplete and parsers report that there (`x = ` , `def f():` with no body).
    - Lines outside the holes are the same text in both; below a hole they move by its line
      shift. A problem of `after` is new unless it starts on the line where one of the user's
      errors moved to (each pairs once): so every problem on a fill's lines, or in an empty
      hole's reach, is new.
    - compile() stops at its first error, so it only says anything above its first error in
      `before`: its error in `after` is new when it lies in a hole's reach, when `before`
      compiled, or above (the moved place of) `before`'s first error; one that pairs with a
      user's error or lies below it was never looked at in `before` and counts for nothing.
    new_errors is the larger of the checkers' counts (both usually see the same mistake, as
    in Report.errors). first_line is where the first new error is: its first line, or the
    first filled line it covers when it starts above the fill (tree-sitter's ERROR nodes
    often start at the enclosing block or class), and a tree-sitter error whose lines
    contain a new compile() error is placed by the compiler; touches_span says whether that
    first line is a filled line.
    """
    if span is not None and not 1 <= span[0] <= span[1]:
        raise ValueError(f"span must be (first_line, last_line) with 1 <= first <= last, got {span}")
    name = language_for(lang=lang)
    return judged(before, after, _check(before, name).problems, _check(after, name).problems, span, holes=holes)


def judged(
    before: str,
    after: str,
    old: Sequence[Problem],
    new: Sequence[Problem],
    span: tuple[int, int] | None = None,
    *,
    holes: Sequence[Region] | None = None,
) -> Breakage:
    """`breakage` from the problems already found in `before` (`old`) and in `after` (`new`), each in
    document order as `check` finds them (raw): the rule without the parsing, for callers that parse their own way
    (the guard's judge: incrementally, on a window)."""
    given = holes is not None
    layout = _Layout.of(before, after, list(holes) if given else _changed(before, after), grow=given)
    old, new = _pools(tuple(old)), _pools(tuple(new))
    found = [NEW_IN_POOL[pool](old.get(pool, []), problems, layout) for pool, problems in new.items()]
    culprits = [p for _, candidates in found for p in candidates]
    if not culprits:
        return NOT_BROKEN
    filled = [span] if span is not None else (list(layout.after) if given else [])
    line, inside = min(_place(p, filled) for p in narrow(culprits))
    return Breakage(new_errors=max(count for count, _ in found), first_line=line, touches_span=inside)


def _changed(before: str, after: str) -> list[Region]:
    """The one run of characters that differs, as a hole (none when the texts are equal)."""
    if before == after:
        return []
    prefix = len(os.path.commonprefix([before, after]))
    room = min(len(before), len(after)) - prefix  # the tail may not reuse prefix characters
    suffix = len(os.path.commonprefix([before[::-1][:room], after[::-1][:room]]))
    return [Region((prefix, len(before) - suffix), (prefix, len(after) - suffix))]


Lines = tuple[int, int]  # 1-based, inclusive


@dataclass(frozen=True)
class _Layout:
    """Each hole's lines in `before` and in `after`, the line shift below it, and its reach in `before`."""

    before: tuple[Lines, ...]
    after: tuple[Lines, ...]
    shifts: tuple[int, ...]  # how far the lines below each hole move (the holes above it included)
    reach: tuple[Lines, ...]

    @classmethod
    def of(cls, before: str, after: str, holes: list[Region], grow: bool) -> _Layout:
        """grow: an empty hole's reach takes in the nearest non-blank line on each side."""
        old_lines = LINE_BREAK.split(before)
        b = tuple(_lines(before, *h.before) for h in holes)
        # The line where a hole's text ends is the same line in both texts, whatever the fill holds.
        shifts = tuple(_breaks(after, h.after[1]) - _breaks(before, h.before[1]) for h in holes)
        reach = tuple(
            _grown(old_lines, lines) if grow and h.before[0] == h.before[1] else lines
            for h, lines in zip(holes, b, strict=True)
        )
        return cls(b, tuple(_lines(after, *h.after) for h in holes), shifts, reach)

    def to_after(self, line: int) -> int:
        """Where a line of `before` is in `after`; a line of a hole goes to the hole's first line."""
        shift = 0
        for (b0, b1), (a0, _), below in zip(self.before, self.after, self.shifts, strict=True):
            if line < b0:
                break
            if line <= b1:
                return a0
            shift = below
        return line + shift

    def user(self, problems: list[Problem]) -> list[Problem]:
        """The problems of `before` that are the user's: they start outside every reach."""
        return [p for p in problems if not any(r0 <= p.line <= r1 for r0, r1 in self.reach)]

    def near_fill(self, line: int) -> bool:
        """Whether a line of `after` is on a fill or in an empty hole's reach."""
        for (r0, r1), (a0, a1) in zip(self.reach, self.after, strict=True):
            if min(self.to_after(r0), a0) <= line <= max(self.to_after(r1), a1):
                return True
        return False


def _lines(text: str, start: int, end: int) -> Lines:
    """Lines holding text[start:end]; an empty run is on the line where it stands."""
    return line_range(text, start, end)


def _breaks(text: str, end: int) -> int:
    """Line breaks in text[:end]."""
    return len(LINE_BREAK.findall(text, 0, end))


def _grown(lines: list[str], hole: Lines) -> Lines:
    """`hole` with the nearest non-blank line above and below it (1-based, in `lines`)."""
    above = next((n for n in range(hole[0] - 1, 0, -1) if lines[n - 1].strip()), hole[0])
    below = next((n for n in range(hole[1] + 1, len(lines) + 1) if lines[n - 1].strip()), hole[1])
    return above, below


Found = tuple[int, list[Problem]]  # (new errors, the problems that locate them)


def _new_unpaired(old: list[Problem], new: list[Problem], layout: _Layout) -> Found:
    """The `new` problems left after pairing each with a user's error moved to its line."""
    unused = Counter(layout.to_after(p.line) for p in layout.user(old))
    left = []
    for p in new:
        if unused[p.line] > 0:
            unused[p.line] -= 1
        else:
            left.append(p)
    return len(left), left


def _new_if_first(old: list[Problem], new: list[Problem], layout: _Layout) -> Found:
    first = new[0]
    if layout.near_fill(first.line) or not old or first.line < layout.to_after(old[0].line):
        return 1, [first]
    return 0, []


# How each checker's new errors are found (breakage docstring).
NEW_IN_POOL: dict[str, Callable[[list[Problem], list[Problem], _Layout], Found]] = {
    TREE_SITTER: _new_unpaired,
    COMPILE: _new_if_first,
}


def _place(problem: Problem, filled: Sequence[Lines]) -> tuple[int, bool]:
    """(line, on a filled line): the first filled line a problem covers, else its own first line."""
    for first, last in filled:
        if problem.line <= last and problem.end_line >= first:
            return max(problem.line, first), True
    return problem.line, False
