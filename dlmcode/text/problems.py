"""The problems a checker finds in a text: tree-sitter's ERROR and MISSING nodes (and the bracket an ERROR
leaves unclosed), and the extra checkers some languages have (Python's compile()). Positions as
text/syntax.py's docstring says: lines 1-based, columns and byte offsets in UTF-8 bytes."""

from __future__ import annotations

import bisect
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

from ..core.errors import DlmcodeError
from .languages import _languages
from .spans import LINE_BREAK

# Lone surrogates (from text decoded with surrogateescape) still get bytes, one-to-one.
ENCODE_ERRORS = "surrogatepass"


# Room for the longest ERROR excerpt in a message; longer ones end with an ellipsis.
EXCERPT_CHARS = 24

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


def narrow(problems: Sequence[Problem]) -> tuple[Problem, ...]:
    """`problems` without the tree-sitter ones whose lines contain an extra checker's problem."""
    places = [p.line for p in problems if POOL_OF_KIND[p.kind] != TREE_SITTER]
    return tuple(p for p in problems if not _coarse(p, places))


def _coarse(problem: Problem, places: Sequence[int]) -> bool:
    return POOL_OF_KIND[problem.kind] == TREE_SITTER and any(problem.line <= x <= problem.end_line for x in places)


def in_order(problems: Sequence[Problem]) -> tuple[Problem, ...]:
    """Problems in document order, as a Report holds them."""
    return tuple(sorted(problems, key=lambda p: (p.start_byte, p.end_byte)))


def _pools(problems: tuple[Problem, ...] | list[Problem]) -> dict[str, list[Problem]]:
    pools: dict[str, list[Problem]] = {}
    for p in problems:
        pools.setdefault(POOL_OF_KIND[p.kind], []).append(p)
    return pools


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
