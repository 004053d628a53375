"""The strings, comments and brackets around a hole: what the text before it leaves open, what the text after
it starts inside of, and the brackets a filler must close or open (roughly, per language family; scans
resumed call after call, text/scans.py)."""

from __future__ import annotations

import functools
import re

from . import pyshape, scans

OPEN, CLOSE = "([{", ")]}"


CONTEXT = 4000  # characters each side a filler looks at (brackets opened further away are not closed by fillers)


TEXTS = 32  # texts whose literal and bracket scans are remembered (a hole's text is asked for several times a call)


STRINGS = re.compile(
    r"'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\""
    r"|#[ \t]*define\b(?:[^\n]*\\\n)*[^\n]*"  # a C macro with its continued lines (`#x` in its body is no comment)
    r"|#[^\n]*|//[^\n]*|/\*.*?\*/"
    r"|`(?:\\.|[^`\\])*`",  # a template literal's brackets, `${` included, are its text (roughly)
    re.S,
)


LEXED = {  # literals and comments, leftmost first, each to the end of the text when it is not closed
    "python": re.compile(
        r"""(?P<q>'''|\"\"\")(?:.*?(?P=q)|.*)|(?P<s>['"])(?:\\(?:.|\Z)|(?!(?P=s))[^\\\n])*(?:(?P=s)|\Z)|#[^\n]*""", re.S
    ),
    "c": re.compile(
        r"""/\*(?:.*?\*/|.*)|//[^\n]*|`(?:\\(?:.|\Z)|[^`\\])*(?:`|\Z)"""
        r"""|(?P<s>['"])(?:\\(?:.|\Z)|(?!(?P=s))[^\\\n])*(?:(?P=s)|\Z)""",
        re.S,
    ),
}


@functools.lru_cache(maxsize=TEXTS)
def open_literal(before: str, lang: str) -> str:
    """What ends the string or comment that `before` stops inside ("" when it stops in code), roughly:
    quotes with backslash escapes, Python's triple quotes, line and block comments, JavaScript's template
    literals. The whole text is lexed (a window could begin inside a docstring and read it inside out);
    a one-line string cut by a line break counts as ended there (the user's code is broken, not ours)."""
    spans = LITERALS["python" if lang == "python" else "c"].scan(before).spans
    if not spans or spans[-1][1] != len(before):
        return ""
    text = before[spans[-1][0] :]
    if text.startswith(("#", "//")):
        return "\n"
    for opener in ("'''", '"""', "/*", "`", "'", '"'):
        if text.startswith(opener):
            closer = "*/" if opener == "/*" else opener
            done = len(text) >= 2 * len(opener) and text.endswith(closer) and not _escaped(text, len(closer))
            return "" if done else closer
    return ""


def literal_at(text: str, at: int, lang: str) -> str:
    """The literal `text` is inside of at `at` (open_literal), a line comment counting as code when the rest of
    its line is blank (nothing of the user's is commented out)."""
    found = open_literal(text[:at], lang)
    rest = text[at : text.find("\n", at) if "\n" in text[at:] else len(text)]
    return "" if found == "\n" and not rest.strip() else found


def _escaped(text: str, tail: int) -> bool:
    """Whether the closer that ends `text` is escaped by an odd run of backslashes before it."""
    body = text[: len(text) - tail]
    return (len(body) - len(body.rstrip("\\"))) % 2 == 1


def openers_of(quote: str, after: str, lang: str) -> list[str]:
    """What may open the string `after` starts inside of: the quote, or a raw string's opener that its end
    names (Rust's `r#"` for `"#`, C++'s `R"(` for `)"`)."""
    first = after.split("\n", 1)[0]
    raw = {"rust": ('"#', 'r#"'), "cpp": (')"', 'R"(')}.get(lang)
    return [quote] + ([raw[1]] if raw is not None and quote == '"' and raw[0] in first else [])


@functools.lru_cache(maxsize=TEXTS)
def opened_after(after: str, lang: str) -> str:
    """The quote of a string that `after` starts inside of, roughly ("" when it starts in code). Python: a
    triple quote whose count is odd up to the next top-level statement, or under which the lines after
    replay with fewer errors than as code (pyshape.py); else a backtick count that is odd; or a one-line
    quote that is odd on its first line."""
    window = after[:CONTEXT]
    if lang == "python":
        top = re.search(r"^(def|class|import|from|@|if __name__)\b", window, re.M)  # no docstring goes on past it
        odd = [q for q in ('"""', "'''") if _odd(window[: top.start()] if top is not None else window, q)]
        if odd:
            return odd[0]
        code = pyshape.replay(pyshape.lines(window)).errors
        inside = {q: pyshape.replay(pyshape.lines(q + window)).errors for q in ('"""', "'''") if q in window}
        best = min(inside, key=inside.__getitem__, default=None)
        if best is not None and inside[best] < code:
            return best
    elif _odd(window, "`"):
        return "`"
    first = window.split("\n", 1)[0]
    if '"""' in first or "'''" in first:
        return ""
    return next((q for q in ('"', "'") if _odd(first, q)), "")


def _odd(text: str, quote: str) -> bool:
    return (text.count(quote) - text.count("\\" + quote)) % 2 == 1


@functools.lru_cache(maxsize=TEXTS)
def balance(before: str, after: str) -> tuple[str, str]:
    """(closers, openers): what a hole must close of the brackets `before` leaves open, and open for the
    closers `after` has no opener for, so that the brackets match (strings and comments skipped, roughly).
    The enclosing brackets that `after` closes itself stay open: only the difference is made up."""
    left = _open_stack(before)  # bottom..top
    need = _unopened(after)  # in order of appearance: the first closes the innermost
    if len(need) >= len(left):
        extra = need[: len(need) - len(left)]
        return "", "".join(OPEN[CLOSE.index(c)] for c in reversed(extra))
    return "".join(CLOSE[OPEN.index(b)] for b in reversed(left[len(need) :])), ""


def _open_stack(text: str) -> list[str]:
    return list(OPENED.scan(text).state)


def _unopened(text: str) -> list[str]:
    return list(UNOPENED.scan(text).state)[::-1]


BRACKET = re.compile(r"[()\[\]{}]")


def _push(stack: tuple[str, ...], text: str, start: int, stop: int, spans: list[scans.Span]) -> tuple[str, ...]:
    """The brackets open after text[start:stop] outside strings and comments (`spans`), from `stack`."""
    found = BRACKET.findall("".join(scans.gaps(text, start, stop, spans)))
    if not found:
        return stack
    out = list(stack)
    for ch in found:
        if ch in OPEN:
            out.append(ch)
        elif out and out[-1] == OPEN[CLOSE.index(ch)]:
            out.pop()
    return tuple(out)


def _pull(stack: tuple[str, ...], text: str, start: int, stop: int, spans: list[scans.Span]) -> tuple[str, ...]:
    """The closers without an opener in text[start:stop] and after it (`stack`), outside strings and comments,
    read right to left."""
    found = BRACKET.findall("".join(scans.gaps(text, start, stop, spans)))
    if not found:
        return stack
    out = list(stack)
    for ch in reversed(found):
        if ch in CLOSE:
            out.append(ch)
        elif out and out[-1] == CLOSE[OPEN.index(ch)]:
            out.pop()
    return tuple(out)


# Scans of a hole's text before and after it, resumed call after call (text/scans.py): the brackets outside
# strings and comments, and the literal a text ends inside of.
OPENED = scans.Prefixes(STRINGS, ("'''", '"""', "/*", "`"), _push, ())


UNOPENED = scans.Suffixes(STRINGS, _pull, ())


LITERALS = {lang: scans.Prefixes(pattern) for lang, pattern in LEXED.items()}
