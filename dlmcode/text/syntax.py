"""Syntax checking: which languages dlmcode knows, the problems in a text, and breakage.

Owns the language table (grammars/languages.toml, read lazily), choosing a language from a
path or a name, loading tree-sitter grammars (imported on first use and cached, so that
importing this module stays cheap), collecting ERROR and MISSING nodes, the extra checkers
some languages have (Python's compile()), and the rule that compares the problems of the
user's code and an output to decide whether a fill broke the syntax (`breakage`).

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

import bisect
import functools
import importlib
import os.path
import re
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from types import MappingProxyType

from ..core.errors import DlmcodeError, UsageError
from .spans import LINE_BREAK, line_range

TABLE_PACKAGE = "dlmcode.grammars"
TABLE_FILE = "languages.toml"
# A source checkout that is not pip-installed has no `dlmcode.grammars` package: the
# directory it maps to (pyproject package-dir) sits next to dlmcode/.
# (os.path, not pathlib: pathlib costs ~6 ms of import time.)
SOURCE_TABLE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "grammars", TABLE_FILE
)

# Lone surrogates (from text decoded with surrogateescape) still get bytes, one-to-one.
ENCODE_ERRORS = "surrogatepass"
# Room for the longest ERROR excerpt in a message; longer ones end with an ellipsis.
EXCERPT_CHARS = 24
# Recent texts are re-checked often (`breakage` on the same input for every sample of a
# bench or compare run); Reports are immutable, so caching them is safe.
CHECK_CACHE_SIZE = 64

ERROR, MISSING, UNCLOSED, COMPILE = "ERROR", "MISSING", "unclosed", "compile"
# Problems are compared within the checker that found them: tree-sitter's ERROR and MISSING
# nodes are one pool (recovery can turn one into the other), each extra checker is another.
TREE_SITTER = "tree-sitter"
POOL_OF_KIND = {ERROR: TREE_SITTER, MISSING: TREE_SITTER, UNCLOSED: TREE_SITTER, COMPILE: COMPILE}


class Uncheckable(DlmcodeError):
    """Code a checker cannot take: nested deeper than it can follow (thousands of unary `-` or `not`
    in a row), or larger than MAX_CHECK. No verdict on it, so nothing that needs one can go on."""


# The most bytes of code checked, our bound: CPython's largest .py file is under 1 MiB, and a fill
# of any text up to it stays under 500 MB (a 2 MiB one-line list took 217 MB in tree-sitter and 376
# MB in compile(), besides torch's 250; an 8 MiB `x = 1 + 1 + ...` took 660 and 890).
MAX_CHECK = 1 << 20


def checkable(text: str) -> None:
    """Uncheckable when `text` is over MAX_CHECK bytes: a command asks before any model loads."""
    size = len(text.encode("utf-8", ENCODE_ERRORS)) if len(text) * 4 > MAX_CHECK else len(text)
    if size > MAX_CHECK:
        raise Uncheckable(
            f"the code is too large to check ({size / (1 << 20):.1f} MiB; dlmcode checks at most {MAX_CHECK >> 20} MiB)"
        )


# ---------------------------------------------------------------- the language table


@dataclass(frozen=True)
class LanguageEntry:
    """One language of grammars/languages.toml (that file documents each field)."""

    name: str
    extensions: tuple[str, ...]
    module: str  # the grammar package to import
    function: str  # its function that returns the language pointer
    aliases: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()  # names in CHECKS

    @property
    def package(self) -> str:
        """The pip name of the grammar package (import name with dashes)."""
        return self.module.replace("_", "-")


def __getattr__(name: str) -> object:
    # LANGUAGES is read on first access: importlib.resources and tomllib cost ~10 ms that
    # `dlmcode --help` should not pay.
    if name == "LANGUAGES":
        return _languages()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _read_table() -> str:
    from importlib.resources import files

    try:
        return (files(TABLE_PACKAGE) / TABLE_FILE).read_text(encoding="utf-8")
    except ModuleNotFoundError:
        with open(SOURCE_TABLE, encoding="utf-8") as f:
            return f.read()


@functools.cache
def _languages() -> Mapping[str, LanguageEntry]:
    import tomllib

    table = tomllib.loads(_read_table())
    entries = {name: _entry(name, fields) for name, fields in table.items()}
    _check_unique(entries.values())
    return MappingProxyType(entries)


def _entry(name: str, fields: dict) -> LanguageEntry:
    lists = {key: tuple(value) for key, value in fields.items() if isinstance(value, list)}
    return LanguageEntry(name=name, **{**fields, **lists})


def _check_unique(entries: Collection[LanguageEntry]) -> None:
    # An extension or alias claimed twice would silently pick one language: refuse the table.
    names = Counter(n for e in entries for n in (e.name, *e.aliases))
    exts = Counter(x for e in entries for x in e.extensions)
    clashes = [k for k, n in (names + exts).items() if n > 1]
    if clashes:
        raise ValueError(f"{TABLE_FILE}: claimed by two languages: {', '.join(clashes)}")


@functools.cache
def _by_name() -> dict[str, str]:
    return {n: e.name for e in _languages().values() for n in (e.name, *e.aliases)}


@functools.cache
def _by_extension() -> dict[str, str]:
    return {x: e.name for e in _languages().values() for x in e.extensions}


def _supported() -> str:
    return "supported: " + ", ".join(_languages())


def language_for(path: str | None = None, lang: str | None = None) -> str:
    """The language name for an explicit `lang` (name or alias), else for `path`'s extension.

    `lang` wins when both are given. Raises UsageError, one line listing the supported
    languages, when neither names a known language ("-", stdin, has no extension).
    """
    if lang:
        name = _by_name().get(lang.strip().lower())
        if name is None:
            raise UsageError(f"unknown language {lang!r}; {_supported()}")
        return name
    if not path or path == "-":
        raise UsageError(f"cannot tell the language without a file name; name it ({_supported()})")
    suffix = os.path.splitext(path)[1].lower()
    name = _by_extension().get(suffix)
    if name is None:
        what = f"extension {suffix!r}" if suffix else "no extension"
        raise UsageError(f"cannot tell the language of {path} ({what}); name it ({_supported()})")
    return name


# ---------------------------------------------------------------- problems and reports


@dataclass(frozen=True)
class Problem:
    """One syntax problem. `column` and the byte offsets count UTF-8 bytes (module docstring)."""

    line: int  # 1-based
    column: int  # 0-based, in bytes
    kind: str  # ERROR (text tree-sitter could not fit), MISSING (token it had to invent), compile
    message: str  # short human text: "missing ')'", "unexpected 'y = f(1'", a SyntaxError msg
    start_byte: int
    end_byte: int
    end_line: int  # 1-based, inclusive: the last line the problem covers

    def to_dict(self) -> dict:
        """The problem for JSON: `column` 1-based like `line` and the text `check` prints (module docstring)."""
        return asdict(self) | {"column": self.column + 1}


@dataclass(frozen=True)
class Report:
    """The problems of one text, in document order."""

    lang: str
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def errors(self) -> int:
        """How many mistakes, at least: the larger of the checkers' counts.

        tree-sitter and Python's compile() usually both report the same mistake, so
        summing would count one missing bracket twice; each count alone is a lower bound.
        """
        return max((len(pool) for pool in _pools(self.problems).values()), default=0)

    def to_dict(self) -> dict:
        problems = [p.to_dict() for p in self.problems]
        return {"lang": self.lang, "ok": self.ok, "errors": self.errors, "problems": problems}


def check(text: str, lang: str, *, raw: bool = False) -> Report:
    """Parse `text` as `lang` (a name or alias) and report every syntax problem, each mistake once.

    Where a precise checker (Python's compile()) places a mistake, tree-sitter problems whose
    lines contain that place are the same mistake seen coarsely (an ERROR node often starts
    at the enclosing class or at the file's top): they are left out (`narrow`), unless `raw`.
    """
    report = _check(text, language_for(lang=lang))
    return report if raw else Report(report.lang, narrow(report.problems))


def narrow(problems: Sequence[Problem]) -> tuple[Problem, ...]:
    """`problems` without the tree-sitter ones whose lines contain an extra checker's problem."""
    places = [p.line for p in problems if POOL_OF_KIND[p.kind] != TREE_SITTER]
    return tuple(p for p in problems if not _coarse(p, places))


def _coarse(problem: Problem, places: Sequence[int]) -> bool:
    return POOL_OF_KIND[problem.kind] == TREE_SITTER and any(problem.line <= x <= problem.end_line for x in places)


@functools.lru_cache(maxsize=CHECK_CACHE_SIZE)
def _check(text: str, name: str) -> Report:
    checkable(text)
    data = text.encode("utf-8", ENCODE_ERRORS)
    found = tree_problems(parser(name).parse(data), data, name)
    return Report(name, in_order(found + extra_problems(text, data, name)))


def extra_problems(text: str, data: bytes, name: str) -> list[Problem]:
    """The problems the language's extra checkers (Python's compile()) find in `text` (its bytes `data`)."""
    return [p for check_name in _languages()[name].checks for p in CHECKS[check_name](text, data)]


def in_order(problems: Sequence[Problem]) -> tuple[Problem, ...]:
    """Problems in document order, as a Report holds them."""
    return tuple(sorted(problems, key=lambda p: (p.start_byte, p.end_byte)))


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


def _pools(problems: tuple[Problem, ...] | list[Problem]) -> dict[str, list[Problem]]:
    pools: dict[str, list[Problem]] = {}
    for p in problems:
        pools.setdefault(POOL_OF_KIND[p.kind], []).append(p)
    return pools


# ---------------------------------------------------------------- tree-sitter


@functools.cache
def parser(name: str):  # -> tree_sitter.Parser; imported here so module import stays cheap
    """The one tree-sitter Parser of a language of the table (the checker, the oracle and the trivial-fill
    classifier share it); a missing grammar, or one built for another tree-sitter, is one line."""
    from tree_sitter import Language, Parser

    entry = _languages()[name]
    try:
        pointer = getattr(importlib.import_module(entry.module), entry.function)()
        return Parser(Language(pointer))
    except ImportError:
        raise DlmcodeError(f"the {name} grammar is not installed: pip install {entry.package}") from None
    except ValueError as e:  # a grammar built for another tree-sitter ABI
        raise DlmcodeError(f"the {name} grammar does not load ({e}): reinstall {entry.package}") from None


class Reparser:
    """Parses the texts of one evolving document, each from the last one's tree (`tree.edit`, then
    `parse(new, old_tree)`): tree-sitter re-reads only what the one changed run of bytes touches.
    The syntax oracle and the guard's judge each keep one per text they follow."""

    def __init__(self, name: str, incremental: int = 0) -> None:
        self.parser = parser(name)
        self.incremental = incremental  # bytes from which a text is re-parsed from the last tree (below: afresh)
        self.tree, self.last = None, b""

    def parse(self, data: bytes):  # -> tree_sitter.Tree
        """The tree of `data`."""
        if self.tree is None or len(data) < self.incremental:
            tree = self.parser.parse(data)
        else:
            tree, edit = self.tree, byte_edit(self.last, data)
            if edit is not None:
                tree.edit(**edit)
                tree = self.parser.parse(data, tree)
        self.tree, self.last = tree, data
        return tree


def byte_edit(old: bytes, new: bytes) -> dict | None:
    """The one edit (tree.edit arguments) that turns `old` into `new`: their common
    head and tail kept; None if equal."""
    if old == new:
        return None
    head = _common_bytes(min(len(old), len(new)), lambda n: (old[:n], new[:n]))
    room = min(len(old), len(new)) - head  # the tail may not reuse head bytes
    tail = _common_bytes(room, lambda n: (old[len(old) - n :], new[len(new) - n :]))
    start, old_end, new_end = head, len(old) - tail, len(new) - tail
    return {
        "start_byte": start,
        "old_end_byte": old_end,
        "new_end_byte": new_end,
        "start_point": _point(new, start),
        "old_end_point": _point(old, old_end),
        "new_end_point": _point(new, new_end),
    }


def _common_bytes(limit: int, cut: Callable[[int], tuple[bytes, bytes]]) -> int:
    """The largest n <= limit with cut(n) two equal slices, by bisection (slice compares run in C)."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        a, b = cut(mid)
        if a == b:
            low = mid
        else:
            high = mid - 1
    return low


def _point(data: bytes, offset: int) -> tuple[int, int]:
    """(row, column in bytes) of a byte offset, as tree-sitter counts them."""
    row = data.count(b"\n", 0, offset)
    return row, offset - (data.rfind(b"\n", 0, offset) + 1)


def tree_problems(tree, data: bytes, name: str) -> list[Problem]:
    """The problems of a tree-sitter tree of `data` in language `name`, as `check` finds them.

    A file-top ERROR is located by what it nests only where no precise checker locates the
    mistake: tree-sitter-python's nested nodes there are mostly recovery artifacts."""
    found = list(issues(tree, locate_top=not _languages()[name].checks))
    starts = _line_starts(data) if found else []
    return [_node_problem(kind, node, data, starts) for kind, node in found]


def issues(tree, locate_top: bool = False) -> Iterator[tuple[str, object]]:
    """ERROR and MISSING nodes in document order; an ERROR subtree is reported once.

    locate_top: an ERROR node that starts at the file's first byte, begins with valid code it
    swallowed (a whole construct, e.g. the file's first function) and nests other problems is
    reported as the first of them. Recovery wrapped everything up to the mistake in it, so
    its own place, 1:1, says nothing; the first nested problem is where parsing gave up.
    Where it nests none but holds a bracket it never closes (a `{` whose `}` is missing), that
    bracket is the place (UNCLOSED; the innermost one, nearest the mistake).
    Subtrees whose has_error is False are skipped, so a clean tree costs O(1).
    """
    if not tree.root_node.has_error:
        return
    cursor = tree.walk()
    while True:
        node = cursor.node
        descend = node.has_error
        if node.is_error:
            inner = _first_nested(node) if locate_top and node.start_byte == 0 else None
            if inner is not None and not _swallowed(node.children[0], inner):
                inner = None  # the ERROR starts with the broken construct itself: its place is right
            opener = _unclosed(node) if locate_top and node.start_byte == 0 and inner is None else None
            if opener is not None:
                yield UNCLOSED, opener
            else:
                yield (MISSING if inner is not None and inner.is_missing else ERROR), inner or node
            descend = False
        elif node.is_missing:
            yield MISSING, node
        if descend and cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return


def _swallowed(first, inner) -> bool:
    """Whether an ERROR's first child is valid code it swallowed: a whole construct, done before `inner`'s line."""
    return first.is_named and not first.has_error and first.end_point.row < inner.start_point.row


PAIRS = {"{": "}", "(": ")", "[": "]"}


def _unclosed(node):  # -> the innermost opening bracket among `node`'s children that none of them closes, or None
    stack = []
    for child in node.children:
        if child.type in PAIRS:
            stack.append(child)
        elif stack and child.type == PAIRS[stack[-1].type]:
            stack.pop()
    return stack[-1] if stack else None


def _first_nested(node):  # -> the first ERROR or MISSING node strictly inside `node`, or None
    pending = [iter(node.children)]  # a stack, not recursion: code nested thousands deep is a deep tree
    while pending:
        child = next(pending[-1], None)
        if child is None:
            pending.pop()
        elif child.is_error or child.is_missing:
            return child
        elif child.has_error:
            pending.append(iter(child.children))
    return None


def _node_problem(kind: str, node, data: bytes, starts: list[int]) -> Problem:
    if kind == UNCLOSED:
        message = f"{node.type!r} is never closed"
    else:
        message = _missing_message(node) if kind == MISSING else _error_message(data[node.start_byte : node.end_byte])
    line = bisect.bisect_right(starts, node.start_byte)  # not start_point.row: see the module docstring
    return Problem(
        line=line,
        column=node.start_byte - starts[line - 1],
        kind=kind,
        message=message,
        start_byte=node.start_byte,
        end_byte=node.end_byte,
        end_line=_last_line(line, node.end_byte, starts),
    )


def _last_line(line: int, end_byte: int, starts: list[int]) -> int:
    # An end just past a line break: the problem's last character is on the line before.
    end_line = bisect.bisect_right(starts, end_byte)
    return end_line - 1 if end_line > line and starts[end_line - 1] == end_byte else end_line


def _missing_message(node) -> str:
    # Named nodes are grammar symbols (identifier), anonymous ones literal tokens (')').
    return f"missing {node.type}" if node.is_named else f"missing {node.type!r}"


def _error_message(raw: bytes) -> str:
    excerpt = raw.decode("utf-8", "replace").strip().split("\n", 1)[0].strip()
    if not excerpt:
        return "syntax error"
    if len(excerpt) > EXCERPT_CHARS:
        excerpt = excerpt[: EXCERPT_CHARS - 1] + "…"
    return f"unexpected {excerpt!r}"


# ---------------------------------------------------------------- Python's compiler


def _python_compile(text: str, data: bytes) -> list[Problem]:
    """CPython's verdict: at most one problem, the first error compile() meets.

    A full compile (not PyCF_ONLY_AST) because it also runs the symbol table, which rejects
    `return`/`break`/`await` outside their blocks and duplicate arguments, and it measured
    faster (10 ms vs 20 ms on argparse.py: no AST objects are built). Top-level await is
    not allowed: a .py file that uses it does not run. Warnings (invalid escapes and the
    like) are silenced: they are not errors, and under `-W error` they would become ones.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(text, "<input>", "exec", dont_inherit=True)
        except SyntaxError as e:  # IndentationError and TabError are SyntaxErrors
            return [_compile_problem(text, data, e.msg, e.lineno, e.offset, e.end_lineno, e.end_offset)]
        except ValueError as e:  # null bytes (older CPythons), lone surrogates
            return [_compile_problem(text, data, str(e), None, None, None, None)]
        except (RecursionError, MemoryError):  # the compiler's own depth limits; its parser's says MemoryError
            raise Uncheckable("the code is too deeply nested to check (Python's compiler gives up)") from None
    return []


def _compile_problem(
    text: str,
    data: bytes,
    msg: str,
    lineno: int | None,
    offset: int | None,
    end_lineno: int | None,
    end_offset: int | None,
) -> Problem:
    # SyntaxError positions are 1-based, in characters, and often partly missing.
    starts = _line_starts(data)
    lines = LINE_BREAK.split(text)
    line = _clamp(lineno or 1, 1, len(lines))
    start = starts[line - 1] + _byte_column(lines[line - 1], offset)
    end_line, end = line, start
    if end_lineno and end_offset and end_offset > 0 and end_lineno <= len(lines):
        end_line, end = end_lineno, starts[end_lineno - 1] + _byte_column(lines[end_lineno - 1], end_offset)
    if end < start:
        end_line, end = line, start
    return Problem(line, start - starts[line - 1], COMPILE, msg, start, end, end_line)


def _byte_column(line: str, offset: int | None) -> int:
    # SyntaxError offsets are 1-based and count characters; Problem columns count bytes.
    chars = _clamp((offset or 1) - 1, 0, len(line))
    return len(line[:chars].encode("utf-8", ENCODE_ERRORS))


def _line_starts(data: bytes) -> list[int]:
    """The byte offset where each line starts."""
    return [0] + [m.end() for m in _BREAK_BYTES.finditer(data)]


_BREAK_BYTES = re.compile(LINE_BREAK.pattern.encode())


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


# Extra checkers by the name languages.toml uses: (text, its UTF-8 bytes) -> problems.
CHECKS: dict[str, Callable[[str, bytes], list[Problem]]] = {"python-compile": _python_compile}


# ---------------------------------------------------------------- breakage


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
