"""Syntax checking: which languages dlmcode knows, the problems in a text, and breakage.

Owns the language table (grammars/languages.toml, read lazily), choosing a language from a
path or a name, loading tree-sitter grammars (imported on first use and cached, so that
importing this module stays cheap), collecting ERROR and MISSING nodes, the extra checkers
some languages have (Python's compile()), and the rule that compares the problems of an
input and an output to decide whether a fill broke the syntax (`breakage`).

Everything here is a pure function of text and language: nothing prints, nothing reads
the user's files.
Positions: lines are 1-based; columns and byte offsets count UTF-8 bytes of the text, as
tree-sitter does, so a column after a non-ASCII character is larger than its character index.
"""

from __future__ import annotations

import functools
import importlib
import os.path
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType

from .errors import DlmcodeError, UsageError

TABLE_PACKAGE = "dlmcode.grammars"
TABLE_FILE = "languages.toml"
# A source checkout that is not pip-installed has no `dlmcode.grammars` package: the
# directory it maps to (pyproject package-dir) sits next to dlmcode/.
# (os.path, not pathlib: pathlib costs ~6 ms of import time.)
SOURCE_TABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "grammars", TABLE_FILE)

# Lone surrogates (from text decoded with surrogateescape) still get bytes, one-to-one.
ENCODE_ERRORS = "surrogatepass"
# Room for the longest ERROR excerpt in a message; longer ones end with an ellipsis.
EXCERPT_CHARS = 24
# Recent texts are re-checked often (`breakage` on the same input for every sample of a
# bench or compare run); Reports are immutable, so caching them is safe.
CHECK_CACHE_SIZE = 64

ERROR, MISSING, COMPILE = "ERROR", "MISSING", "compile"
# Problems are compared within the checker that found them: tree-sitter's ERROR and MISSING
# nodes are one pool (recovery can turn one into the other), each extra checker is another.
TREE_SITTER = "tree-sitter"
POOL_OF_KIND = {ERROR: TREE_SITTER, MISSING: TREE_SITTER, COMPILE: COMPILE}


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
        return asdict(self)


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


def check(text: str, lang: str) -> Report:
    """Parse `text` as `lang` (a name or alias) and report every syntax problem."""
    return _check(text, language_for(lang=lang))


@functools.lru_cache(maxsize=CHECK_CACHE_SIZE)
def _check(text: str, name: str) -> Report:
    data = text.encode("utf-8", ENCODE_ERRORS)
    entry = _languages()[name]
    found = _tree_problems(data, name)
    for check_name in entry.checks:
        found.extend(CHECKS[check_name](text, data))
    return Report(name, tuple(sorted(found, key=lambda p: (p.start_byte, p.end_byte))))


def _pools(problems: tuple[Problem, ...] | list[Problem]) -> dict[str, list[Problem]]:
    pools: dict[str, list[Problem]] = {}
    for p in problems:
        pools.setdefault(POOL_OF_KIND[p.kind], []).append(p)
    return pools


# ---------------------------------------------------------------- tree-sitter


@functools.cache
def _parser(name: str):  # -> tree_sitter.Parser; imported here so module import stays cheap
    from tree_sitter import Language, Parser

    entry = _languages()[name]
    try:
        pointer = getattr(importlib.import_module(entry.module), entry.function)()
        return Parser(Language(pointer))
    except ImportError:
        raise DlmcodeError(f"the {name} grammar is not installed: pip install {entry.package}") from None
    except ValueError as e:  # a grammar built for another tree-sitter ABI
        raise DlmcodeError(f"the {name} grammar does not load ({e}): reinstall {entry.package}") from None


def _tree_problems(data: bytes, name: str) -> list[Problem]:
    tree = _parser(name).parse(data)
    return [_node_problem(kind, node, data) for kind, node in _issues(tree)]


def _issues(tree) -> Iterator[tuple[str, object]]:
    """ERROR and MISSING nodes in document order; an ERROR subtree is reported once.

    Subtrees whose has_error is False are skipped, so a clean tree costs O(1).
    """
    if not tree.root_node.has_error:
        return
    cursor = tree.walk()
    while True:
        node = cursor.node
        descend = node.has_error
        if node.is_error:
            yield ERROR, node
            descend = False
        elif node.is_missing:
            yield MISSING, node
        if descend and cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return


def _node_problem(kind: str, node, data: bytes) -> Problem:
    start, end = node.start_point, node.end_point
    message = _missing_message(node) if kind == MISSING else _error_message(data[node.start_byte : node.end_byte])
    return Problem(
        line=start.row + 1,
        column=start.column,
        kind=kind,
        message=message,
        start_byte=node.start_byte,
        end_byte=node.end_byte,
        end_line=_last_line(start.row, end.row, end.column),
    )


def _last_line(start_row: int, end_row: int, end_column: int) -> int:
    # An end at column 0 is just past a newline: the problem's last character is on the row before.
    if end_row > start_row and end_column == 0:
        return end_row
    return end_row + 1


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
        except (ValueError, RecursionError) as e:  # null bytes (older CPythons), lone surrogates, deep nesting
            return [_compile_problem(text, data, str(e), None, None, None, None)]
    return []


def _compile_problem(
    text: str, data: bytes, msg: str,
    lineno: int | None, offset: int | None, end_lineno: int | None, end_offset: int | None,
) -> Problem:
    # SyntaxError positions are 1-based, in characters, and often partly missing.
    starts = _line_starts(data)
    lines = text.split("\n")
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
    starts = [0]
    index = data.find(b"\n")
    while index != -1:
        starts.append(index + 1)
        index = data.find(b"\n", index + 1)
    return starts


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


# Extra checkers by the name languages.toml uses: (text, its UTF-8 bytes) -> problems.
CHECKS: dict[str, Callable[[str, bytes], list[Problem]]] = {"python-compile": _python_compile}


# ---------------------------------------------------------------- breakage


@dataclass(frozen=True)
class Breakage:
    """What a fill did to the syntax: the errors of the output that the input did not have."""

    new_errors: int
    first_line: int | None  # 1-based line in the output of the first new error
    touches_span: bool  # some new error overlaps the filled span

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


def breakage(before: str, after: str, lang: str, span: tuple[int, int] | None = None) -> Breakage:
    """Compare the problems of `after` (the output) with those of `before` (the input).

    `span` = (first_line, last_line), 1-based inclusive, is the filled region in `after`; it
    only decides `touches_span` (False without a span): lines are matched from the texts.

    The rule. The common leading and trailing lines of the two texts are unchanged; the
    lines between are the edit, and lines below it move by the edit's line shift. Then, for
    each checker separately (tree-sitter; Python's compile()):
    - tree-sitter's recovery is coarse (one bad line can become one ERROR node swallowing
      several statements, and an edit can re-group old errors), so its new errors are
      max(0, count(after) - count(before)): robust, blind only to a fix and a break that
      cancel out. To locate them, each `after` problem is paired with a `before` problem on
      the same line (moved by the shift; any line inside the edit pairs with any other);
      the unpaired ones are the new errors' candidates.
    - compile() stops at the first error, so its error in `after` is new when `before`
      compiled, or when it lies above `before`'s error (shifted; one inside the edit counts as
      at the edit's first line). One below was never looked at in `before`, so it proves
      nothing. This catches a break above an old error that tree-sitter merges into one node.
    new_errors is the larger of the checkers' counts (both usually see the same mistake, as
    in Report.errors); first_line is the first line of a new error's candidates, and
    touches_span says whether any candidate's lines meet the span.
    """
    if span is not None and not 1 <= span[0] <= span[1]:
        raise ValueError(f"span must be (first_line, last_line) with 1 <= first <= last, got {span}")
    old, new = _pools(check(before, lang).problems), _pools(check(after, lang).problems)
    edit = _Edit.between(before, after)
    found = [NEW_IN_POOL[pool](old.get(pool, []), problems, edit) for pool, problems in new.items()]
    culprits = [p for _, candidates in found for p in candidates]
    if not culprits:
        return NOT_BROKEN
    return Breakage(
        new_errors=max(count for count, _ in found),
        first_line=min(p.line for p in culprits),
        touches_span=span is not None and any(_meets(p, span) for p in culprits),
    )


EDITED = "edited"  # the pairing key of every line inside the edit


@dataclass(frozen=True)
class _Edit:
    """The one changed run of lines between two texts, found by common prefix and suffix."""

    prefix: int  # lines equal at the top
    before_below: int  # first line of `before` in the equal tail (1-based)
    after_below: int  # the same line in `after`

    @classmethod
    def between(cls, before: str, after: str) -> _Edit:
        old, new = before.split("\n"), after.split("\n")
        prefix = _common_prefix(old, new)
        room = min(len(old), len(new)) - prefix  # the tail may not reuse prefix lines
        suffix = _common_prefix(old[::-1][:room], new[::-1][:room])
        return cls(prefix, len(old) - suffix + 1, len(new) - suffix + 1)

    def to_after(self, line: int) -> int:
        """Where a `before` line is in `after`; a line inside the edit goes to its first line."""
        if line <= self.prefix:
            return line
        if line >= self.before_below:
            return line + self.after_below - self.before_below
        return self.prefix + 1

    def before_key(self, line: int) -> int | str:
        inside = self.prefix < line < self.before_below
        return EDITED if inside else self.to_after(line)

    def after_key(self, line: int) -> int | str:
        inside = self.prefix < line < self.after_below
        return EDITED if inside else line


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


Found = tuple[int, list[Problem]]  # (new errors, the problems that locate them)


def _new_by_count(old: list[Problem], new: list[Problem], edit: _Edit) -> Found:
    count = max(0, len(new) - len(old))
    return count, (_unpaired(old, new, edit) if count else [])


def _unpaired(old: list[Problem], new: list[Problem], edit: _Edit) -> list[Problem]:
    """The `new` problems left after pairing each with an `old` one of the same line key."""
    unused = Counter(edit.before_key(p.line) for p in old)
    left = []
    for p in new:
        key = edit.after_key(p.line)
        if unused[key] > 0:
            unused[key] -= 1
        else:
            left.append(p)
    return left


def _new_if_above(old: list[Problem], new: list[Problem], edit: _Edit) -> Found:
    first = new[0]
    if old and edit.to_after(old[0].line) <= first.line:
        return 0, []
    return 1, [first]


# How each checker's new errors are found (breakage docstring).
NEW_IN_POOL: dict[str, Callable[[list[Problem], list[Problem], _Edit], Found]] = {
    TREE_SITTER: _new_by_count,
    COMPILE: _new_if_above,
}


def _meets(problem: Problem, span: tuple[int, int]) -> bool:
    return problem.line <= span[1] and problem.end_line >= span[0]
