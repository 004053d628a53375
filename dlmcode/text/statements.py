"""Windows of a file that start and end on statement boundaries: never inside a string, a comment or brackets.

The server keeps a bounded part of a large file on each side of the cursor (dlmcode/serve/trim.py).
A window that began inside a docstring made everything after it a string: the fill's syntax was
judged inside a string (any fill passed; breakage said `false` for a broken one). Here a window
begins where a statement begins, and what encloses that statement in the file comes with it:

- A lexical scan (strings, comments, brackets; no parse, so it is linear and holds on broken
  code) marks what is code. A boundary is a line whose first character is code, outside
  brackets, not continuing the line above (a backslash) nor a clause of the statement above
  (`else`, `except`, ...).
- Python: the window starts at the least indented boundary after the cut; if that is indented,
  the heads of the blocks around it come first (`class A:`, `    def f(self):`), the file's own
  lines, with the statements between them left out (each block keeps a statement of its own, so
  the text still compiles as the file does); a clause head (`else:`) brings its partners with a
  `pass` body each.
- C-like languages: the window starts at a boundary after the cut; the heads of the braces still
  open there come first (`namespace n {`, `int f(void) {`), and the far end of the suffix closes
  what is open at its cut.
- The far end of the suffix is cut before a boundary, never after a block's head.
None of this is the user's text changed: every line kept is the file's, in the file's order.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator

PY_LITERAL = re.compile(
    r"'''.*?(?:'''|\Z)|\"\"\".*?(?:\"\"\"|\Z)|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"|#[^\n]*", re.S
)
C_LITERAL = re.compile(
    r"//[^\n]*|/\*.*?(?:\*/|\Z)|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.[^'\n]{0,8}|[^'\\\n])'|`(?:\\.|[^`\\])*(?:`|\Z)", re.S
)
HIDDEN = "\0"  # what a string or comment character becomes in the code view
OPENERS, CLOSERS = "([{", ")]}"
CLAUSES = re.compile(r"(else|elif|except|finally)\b")  # Python: a clause of the statement above
C_CLAUSES = re.compile(r"(else|catch|while\s*\(.*\)\s*;|#\s*(?:else|elif|endif))\b")
HEAD_LINES = 50  # a block's head may run over this many lines at most (ours)
REACH = 4  # windows' lengths (`keep`) the scan walks back for a statement's start (ours)
SCANNED = 1 << 20  # characters of a prefix scanned at most (from a line start): 8 MiB took 0.6 s (ours)


def code_view(text: str, lang: str) -> str:
    """`text` with every string and comment character replaced by HIDDEN (the same length, line breaks too)."""
    pattern = PY_LITERAL if lang == "python" else C_LITERAL
    return pattern.sub(lambda m: HIDDEN * len(m.group()), text)


def lines(text: str, start: int = 0, stop: int | None = None) -> Iterator[int]:
    """The line starts in text[start:stop] (a line starts at 0 or after a line break)."""
    stop = len(text) if stop is None else stop
    at = start if start == 0 or text[start - 1] == "\n" else text.find("\n", start) + 1
    while 0 < at < stop or (at == 0 and stop > 0):
        yield at
        nxt = text.find("\n", at)
        if nxt < 0:
            return
        at = nxt + 1


def depth(code: str, start: int, stop: int) -> int:
    """Brackets opened minus closed in code[start:stop]."""
    return sum(code.count(c, start, stop) for c in OPENERS) - sum(code.count(c, start, stop) for c in CLOSERS)


def first_code(text: str, at: int) -> int:
    """The first non-blank character of the line starting at `at` (its end if blank)."""
    end = text.find("\n", at)
    end = len(text) if end < 0 else end
    line = text[at:end]
    return at + len(line) - len(line.lstrip(" \t\f"))


def code_before(code: str, at: int) -> str:
    """The last character of code before `at` that is neither blank nor in a string or comment ("" if none)."""
    size = 256
    while True:
        start = max(0, at - size)
        tail = code[start:at].rstrip(" \t\f\r\n" + HIDDEN)
        if tail or start == 0:
            return tail[-1:]
        size *= 4


class Scan:
    """A text and its code view (strings and comments hidden), for finding where statements start."""

    def __init__(self, text: str, lang: str) -> None:
        self.text, self.lang, self.code = text, lang, code_view(text, lang)
        self.python = lang == "python"
        brackets = r"[\[\](){}]" if self.python else r"[\[\]()]"  # C-like: braces are blocks, whose heads come along
        self.marks = [m.start() for m in re.finditer(brackets, self.code)]
        self.levels = list(itertools.accumulate((1 if self.code[i] in OPENERS else -1 for i in self.marks), initial=0))

    def level(self, at: int) -> int:
        """Brackets open at `at`."""
        return self.levels[bisect.bisect_left(self.marks, at)]

    def depth(self, start: int, stop: int) -> int:
        """Brackets open at `stop` more than at `start`."""
        return self.level(stop) - self.level(start)

    def statement(self, at: int, level: int) -> bool:
        """Whether the line starting at `at` has code that starts a statement (`level`: brackets open at `at`),
        a clause of the one above (`else:`) included."""
        p = first_code(self.text, at)
        if level != 0 or p >= len(self.text) or self.text[p] in "\r\n" or self.code[p] == HIDDEN:
            return False
        return self.text[p] not in CLOSERS and code_before(self.code, at) != "\\"

    def boundary(self, at: int, level: int) -> bool:
        """Whether a window may start at the line starting at `at`: a statement that is not a clause."""
        p = first_code(self.text, at)
        return self.statement(at, level) and not (CLAUSES if self.python else C_CLAUSES).match(self.text, p)

    def indent(self, at: int) -> int:
        return first_code(self.text, at) - at

    def boundaries(self, start: int, stop: int) -> Iterator[int]:
        """Line starts in [start, stop) where a window may start, in order."""
        level, prev = self.depth(0, start), start
        for at in lines(self.text, start, stop):
            level, prev = level + self.depth(prev, at), at
            if self.boundary(at, level):
                yield at

    def head_before(self, pos: int, level: int) -> int | None:
        """Python: the nearest statement line before `pos` indented less than `level` (a block's head there),
        found by a regular expression over growing stretches before `pos` (a class may be 100 KB long)."""
        shallower = re.compile(rf"^[ \t]{{0,{level - 1}}}(?=\S)", re.M)
        stop, size = pos, 4096
        while stop > 0:
            start = max(0, stop - size)
            for m in reversed(list(shallower.finditer(self.text, start, stop))):
                if m.start() >= start and self.statement(m.start(), self.level(m.start())):
                    return m.start()
            stop, size = start, size * 4
        return None

    def statements_back(self, pos: int, reach: int = 0) -> Iterator[int]:
        """Line starts in [reach, pos) that start statements, nearest first."""
        text, at, level = self.text, pos, self.depth(0, pos)
        while at > reach:
            prev, at = at, text.rfind("\n", 0, at - 1) + 1
            level -= self.depth(at, prev)
            if self.statement(at, level):
                yield at


# ---------------------------------------------------------------- the start of a window


def window_start(text: str, keep: int, lang: str) -> str:
    """The end of `text` (a prefix) from a statement boundary at most about `keep` characters back, with the
    heads of what encloses it in front. When no boundary follows the cut (the cursor is inside one long
    statement), from the nearest one before it."""
    if len(text) <= keep:
        return text
    skip = text.find("\n", len(text) - SCANNED) + 1 if len(text) > SCANNED else 0
    return window_from(text[skip:], keep, lang)


def window_from(text: str, keep: int, lang: str) -> str:
    scan = Scan(text, lang)
    cut = text.find("\n", len(text) - keep - 1) + 1 or len(text)  # the first line start of the last `keep`
    reach = max(0, len(text) - REACH * keep)
    found = list(scan.boundaries(cut, len(text)))
    if not found:  # the cursor is in one long statement: from its start, or from a line outside strings
        back = next((at for at in scan.statements_back(cut, reach) if scan.boundary(at, 0)), None)
        outside = next((at for at in lines(text, cut) if scan.code[at - 1] == "\n"), len(text))
        found = [back if back is not None else outside]
    if not scan.python:
        return c_heads(scan, found[0]) + text[found[0] :]
    start = min(found, key=lambda at: (scan.indent(at), at))
    heads = python_heads(scan, start)
    return text[start:] if heads is None else heads + text[start:]


def python_heads(scan: Scan, start: int) -> str | None:
    """The heads of the blocks around the statement at `start`, outermost first, as the file has them (clause
    heads with their partners, each with a `pass` body); "" at top level; None when the scan cannot tell."""
    level, pos, chains = scan.indent(start), start, []
    while level > 0:
        head = scan.head_before(pos, level)
        chain = None if head is None else clause_chain(scan, head)
        if chain is None:
            return None
        chains.append(chain[0])
        level, pos = scan.indent(head), chain[1]
    return "".join(reversed(chains))


def head_text(scan: Scan, at: int) -> str | None:
    """The block head starting at `at`, up to the line whose code ends with ':' outside brackets."""
    text, code, level = scan.text, scan.code, 0
    for n, line in enumerate(lines(text, at)):
        if n >= HEAD_LINES:
            return None
        end = text.find("\n", line)
        end = len(text) if end < 0 else end
        level += depth(code, line, end)
        if level == 0 and code_before(code, end) == ":":
            return text[at : end + 1] if end < len(text) else text[at:] + "\n"
    return None


def clause_chain(scan: Scan, head: int) -> tuple[str, int] | None:
    """The head at `head` (`else:` brings the `if` or `try` it belongs to and the clauses between, each with
    `pass` for its body), and where the chain starts."""
    own = head_text(scan, head)
    if own is None:
        return None
    parts, at, level = [own], head, scan.indent(head)
    while CLAUSES.match(scan.text, first_code(scan.text, at)):
        at = scan.head_before(at, level + 1)
        earlier = None if at is None or scan.indent(at) != level else head_text(scan, at)
        if earlier is None:
            return None
        parts.insert(0, earlier + " " * level + "    pass\n")
    return "".join(parts), at


C_OPEN = re.compile(r"[{}]|^[ \t]*#[ \t]*(?:(if|ifdef|ifndef)|endif)\b", re.M)
DECLARED = re.compile(r"\b(struct|enum|union|class)\b|=\s*$")  # a brace closed by `};`


def c_open(scan: Scan, stop: int) -> list[tuple[int, str]]:
    """C-like: the braces and preprocessor conditionals (`#if`) still open at `stop`, outermost first:
    (position, "{" or "#")."""
    opened: list[tuple[int, str]] = []
    for m in C_OPEN.finditer(scan.code, 0, stop):
        kind = "{" if m.group() == "{" else "#" if m.group(1) else None
        if kind is not None:
            opened.append((m.start(), kind))
            continue
        closing = "{" if m.group() == "}" else "#"
        at = next((i for i in range(len(opened) - 1, -1, -1) if opened[i][1] == closing), None)
        if at is not None:
            del opened[at]
    return opened


def c_head(scan: Scan, at: int, kind: str) -> str:
    """The line of a `#if`, or the declaration a brace opens (from the statement before it, past any
    preprocessor line), as one line."""
    text, code = scan.text, scan.code
    if kind == "#":
        return text[at : (text.find("\n", at) + 1 or len(text))].strip() + "\n"
    begin = max(code.rfind(c, 0, at) for c in ";{}" + HIDDEN) + 1  # after the statement or comment before it
    lines_ = text[begin : at + 1].strip().split("\n")
    kept = [x for i, x in enumerate(lines_) if not any(y.lstrip().startswith("#") for y in lines_[i:])]
    return "\n".join(kept).strip() + "\n"


def c_heads(scan: Scan, start: int) -> str:
    """The heads of the braces and conditionals open at `start` (a C-like language), outermost first."""
    return "".join(c_head(scan, at, kind) for at, kind in c_open(scan, start))


def c_closers(scan: Scan, stop: int) -> str:
    """What closes the braces and conditionals open at `stop`, innermost first."""
    out = []
    for at, kind in reversed(c_open(scan, stop)):
        if kind == "#":
            out.append("#endif\n")
        else:
            out.append("};\n" if DECLARED.search(c_head(scan, at, kind)[:-2]) else "}\n")
    return "".join(out)


# ---------------------------------------------------------------- the end of a window


def window_end(before: str, text: str, keep: int, lang: str) -> str:
    """The start of `text` (a suffix after `before`, the window's start) up to a statement boundary at most
    `keep` characters in, never right after a block's head; in a C-like language, with the braces still
    open there closed."""
    if len(text) <= keep:
        return text
    seen = text.find("\n", keep, keep + 4096) + 1 or keep + 1  # the line at the cut whole: is it an `else:`?
    scan, base = Scan(before + text[:seen], lang), len(before)
    stop = base + text.rfind("\n", 0, keep) + 1
    ends = [at for at in scan.boundaries(base, stop + 1) if at > base and not after_head(scan, at)]
    end = next((at for at in reversed(ends) if not scan.python or not in_try(scan, at)), None)
    if end is None:  # inside one long statement (a table of data): cut at a line outside strings, close brackets
        end = max((at for at in lines(scan.text, base, stop + 1) if scan.code[at - 1] == "\n"), default=base)
        return text[: end - base] + closers(scan.code[:end] if scan.python else "", lang) + "\n"
    kept = text[: end - base]
    return kept if scan.python else kept + c_closers(scan, end)


def after_head(scan: Scan, at: int) -> bool:
    """Whether the line at `at` comes right after a block's head or a decorator (a cut there leaves it bare)."""
    if code_before(scan.code, at) == ":":
        return True
    above = scan.text.rfind("\n", 0, at - 1) + 1 if at > 0 else 0
    return scan.python and scan.text[first_code(scan.text, above) : first_code(scan.text, above) + 1] == "@"


def closers(code: str, lang: str) -> str:
    """What closes the brackets `code` leaves open, innermost first."""
    stack: list[str] = []
    for m in re.finditer(r"[\[\](){}]", code):
        c = m.group()
        if c in OPENERS:
            stack.append(c)
        elif stack and OPENERS.index(stack[-1]) == CLOSERS.index(c):
            stack.pop()
    return "".join(CLOSERS[OPENERS.index(c)] for c in reversed(stack))


def in_try(scan: Scan, at: int) -> bool:
    """Python: whether the statement at `at` is in a `try:` block's body (a cut there leaves it without except)."""
    level, pos = scan.indent(at), at
    while level > 0:
        head = scan.head_before(pos, level)
        if head is None:
            return False
        if re.match(r"try\s*:", scan.text[first_code(scan.text, head) :]):
            return True
        level, pos = scan.indent(head), head
    return False
