"""Fillers: do-nothing text that fits a hole of any length, given the code around it.

The first witness comes from fillers that fit any hole length (`first_witness`): `pass  #xxx`
at a candidate indentation, block heads nested as deep as the lines below, a name `xxx`, a
block comment `/*xxx*/`, the quote or brackets the code around needs. When none passes, each
call's draft is tried (one token a call meanwhile); a decode that never finds one ran
unguarded, and the job says so (docs/guard.md).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator
from typing import Any

from . import pyshape
from .cfillers import C_BODIES, C_LIKE, c_more, directive_ends, directives, stems
from .literals import CONTEXT, _odd, _open_stack, balance, open_literal, opened_after, openers_of
from .memo import Lazy, Remembered, remembered  # noqa: F401 (Remembered: the guard's name)
from .witness import CACHE, Filler


class Fillers:
    """Fillers of an exact token count for a stretch of holes, given the text around it (cached)."""

    def __init__(self, lang: str, tokenizer: Any, blank: int | None, rare: bool = False) -> None:
        self.lang, self.tokenizer, self.blank = lang, tokenizer, blank
        self.coder = remembered(tokenizer)  # fillers' texts are the same few dozen call after call, decode after decode
        self.rare = rare  # also the costly fillers for rare cuts (`fillers`): a second first search, every call's
        self.memo: dict[tuple[int, str, str, int, int], Lazy] = {}
        self.escapes: dict[int, bool] = {}

    def escape(self, token: int) -> bool:
        """Whether a token starts a comment: the universal way to make the rest of a line
        parse, so never a replacement."""
        found = self.escapes.get(token)
        if found is None:
            text = self.tokenizer.decode([token])
            found = self.escapes[token] = any(mark in text for mark in COMMENTS.get(self.lang, ()))
        return found

    def __call__(self, before: str, after: str, n: int) -> Lazy:
        """The fillers of `n` ids, made as far as the search reads them (the first that passes ends it)."""
        key = (len(before), before[-CONTEXT:], after[:CONTEXT], len(after), n)  # a hole's text before it is
        found = self.memo.get(key)  # the plan's, up to what the decode wrote in it: its end and length tell it
        if found is None:
            made = made_lazily(self.lang, before, after, self.blank is not None, self.rare)
            found = Lazy(fitted(made, n, self.coder, self.blank))
            if len(self.memo) >= CACHE:
                self.memo.pop(next(iter(self.memo)))  # the oldest (a list not made to its end holds its texts)
            self.memo[key] = found
        return found


COMMENTS = {"python": ("#",)} | {
    lang: ("//", "/*") for lang in ("c", "cpp", "java", "javascript", "typescript", "tsx", "go", "rust")
}


def fits(candidates: Iterable[Filler], length: int, tokenizer: Any, blank: int | None) -> list[list[int]]:
    """Each filler as exactly `length` token ids (those that cannot reach that length are left out), no repeats."""
    return list(fitted(candidates, length, tokenizer, blank))


def fitted(candidates: Iterable[Filler], length: int, tokenizer: Any, blank: int | None) -> Iterator[list[int]]:
    """`fits`, one at a time."""
    seen: set[tuple[int, ...]] = set()
    for f in candidates:
        unit = blank if f.unit == "" else single_token(tokenizer, f.unit)
        if unit is None:
            continue
        pre = tokenizer.encode(f.pre) if f.pre else []
        post = tokenizer.encode(f.post) if f.post else []
        m = length - len(pre) - len(post)
        ids = pre + [unit] * m + post
        if m >= f.least and tuple(ids) not in seen:
            seen.add(tuple(ids))
            yield ids


def single_token(tokenizer: Any, text: str) -> int | None:
    """The id of a token whose text is exactly `text`, if the tokenizer has one."""
    ids = tokenizer.encode(text)
    return ids[0] if len(ids) == 1 and tokenizer.decode(ids) == text else None


def fillers(lang: str, before: str, after: str, blank: bool, rare: bool = False) -> list[Filler]:
    """Every filler of `made_lazily`, in its order."""
    return list(made_lazily(lang, before, after, blank, rare))


def made_lazily(lang: str, before: str, after: str, blank: bool, rare: bool = False) -> Iterator[Filler]:
    """Fillers worth trying for a hole between `before` and `after`, most neutral first (each made when asked
    for): each body as it is, then with the brackets `after` closes opened before it and those `before` left open
    closed after it.
    `rare`: also those that cost a second replay of the lines around (a comment the code after starts inside
    of, a head before the string it starts inside of): the first witness search tries them only when the
    others found none; every call's search has them (they let more proposals be admitted together)."""
    inside = open_literal(before, lang)
    close, opens = balance(before + inside, after)  # brackets inside the open literal are its text
    if blank:
        yield Filler("", "", "")
    if inside:  # the hole starts inside a string or comment: end it first
        yield from [Filler("", "x", inside + close), Filler("", "x", inside), Filler("", " ", inside + close)]
    quote = opened_after(after, lang)
    if inside in ("'", '"') and quote == inside * 3:  # `r"` before, `""` cut: the hole completes a triple quote
        yield Filler(inside * 2, "x", "")
    if lang == "python" and not inside:  # a hole inside leading indentation: complete it, nothing more
        levels = dict.fromkeys([*indents(before, after), *completions(before, after)])
        yield from [Filler(i, " ", "") for i in levels if i]
    if quote and not inside:  # the code after the hole starts inside a string: open it
        yield from [
            Filler(i + q, "x", "")
            for q in openers_of(quote, after, lang)
            for i in [*indents(before, after), " ", ""][:3]
        ]
    if lang in ("c", "cpp"):
        yield from directives(before, after) + directive_ends(before, after, close)
    if lang == "python":  # lines that fit the blocks around, checked line by line (pyshape.py)
        outer = "".join(_open_stack(before + inside))  # a window may begin inside a long literal
        yield from [
            Filler(inside + start, " ", end) for start, end in pyshape.inline(before + inside, after, quote, outer)
        ]
        yield from [Filler(inside + start, " ", end) for start, end in pyshape.bridges(before + inside, after)]
    for body in bodies(lang, before, after):
        yield body
        if close or opens:
            yield Filler(opens + body.pre, body.unit, body.post + close, body.least)
    if blank:
        yield from [Filler(opens + "x" + close, "", ""), Filler(opens + "pass", "", "")]
    if lang == "python" and inside != "\n":
        yield from python_more(before, after, inside, close, quote, rare)
    if lang in C_LIKE:
        yield from c_more(lang, before, after, inside, close, opens, quote, rare, made_lazily)


PY_WORDS = ("except", "return", "raise", "import", "from", "if", "elif", "else", "for", "while", "with", "def", "class")


def python_more(before: str, after: str, inside: str, close: str, quote: str, rare: bool = False) -> Iterator[Filler]:
    """Python's fillers for what the others miss (the held-out suites' give-ups): a head before the docstring the
    code after the hole starts inside of, a line in brackets at the indentation of the line above, a line the
    code after goes on with a backslash, a head whose colon and line break the hole holds, and, where the
    code after starts inside a comment, any filler of the code below that line with the comment opened at its
    end (the escape rule admits that only where the user's own code is a comment there). Each made when the
    search reads that far (most searches end before: these are the last fillers tried)."""
    line = before[before.rfind("\n") + 1 :]
    first, _, rest = after.partition("\n")
    short = next((q for q in ('"', "'") if _odd(first, q)), "")  # a one-line string, where a docstring was read
    for q in dict.fromkeys(q for q in (quote, short) if q and not inside):
        yield from [Filler(start, " ", end + q) for start, end in pyshape.bridges(before, q + after)] if rare else []
        yield from [Filler(" = " + q, "x", "")] if line.strip() else []
    lead = _lead(next((x for x in itertools.islice(upward(before), 1, None) if x.strip()), ""))
    if close and not inside and not line.strip() and lead.startswith(line):  # a new line inside brackets
        yield from [Filler(lead[len(line) :] + "x", "x", close), Filler(lead[len(line) :] + "x", "x", "")]
    below = rest.split("\n", 1)[0]
    if not first.strip() and below.strip() and not pyshape.parses(below.strip()):  # `\`: it goes on this line
        yield from [Filler(s, " ", e + " \\") for s, e in pyshape.bridges(before + inside, " " + rest.lstrip(" \t"))]
    if line.strip() and first[:1] in (" ", "\t") and len(_lead(first)) > len(_lead(line)):  # the hole ends a head
        yield from [Filler("", "x", inside + close + ":\n"), Filler(" x", "x", inside + close + ":\n")]
    for stem in stems(after, PY_WORDS) if not inside and not line.strip() else ():  # `  ex` | `cept x:`
        yield from [Filler(i, " ", stem) for i in indents(before, after)[:2]]
    if rare and first.strip():  # the code after starts inside a comment
        below_line = made_lazily("python", before, "\n" + rest, False)
        yield from (Filler(f.pre, f.unit, f.post + "  #", f.least) for f in below_line if not f.post.endswith("\\"))


ANY_BODIES = (
    Filler("x", "x", ""),
    Filler(" x", "x", ""),
    Filler("", "x", "", least=1),
    Filler("0", " ", ""),
    Filler("", " ", ""),
)


def bodies(lang: str, before: str, after: str) -> list[Filler]:
    """The language's do-nothing code that stretches to any length: statements first, then expressions."""
    if lang != "python":
        return (list(C_BODIES) if lang in C_LIKE else []) + list(ANY_BODIES)
    at = indents(before, after)
    # a hole that ends where code goes on (a benchmark middle ends with its line break): its statements end the line
    end = "\n" if at and after[:1] not in ("", "\n", "\r") else ""
    out = [Filler(i + "pass", " ", end) for i in at] + [Filler(i + "pass  #", "x", end) for i in at]
    if after.lstrip(" \t").startswith(":"):  # a block's head whose colon is already there
        out += [Filler(i + "if x", " ", "") for i in at] + [Filler(i + "if x", "x", "") for i in at]
    line = next((line for line in downward(after) if line.strip()), "")
    below, word = _lead(line), line.strip().split(" ")[0].rstrip(":")
    close, opens = balance(before, after)
    if close and at:  # close the brackets first, then the lines below need a block's head at some shallower level
        out += [
            Filler(close + "\n" + openers_chain(i, below), " ", end)
            for i in dict.fromkeys(["", "    ", "        ", *at])
        ]
    loops = re.search(r"^[ \t]+(break|continue)\b", after[:CONTEXT], re.M) is not None  # a loop must be around them
    for i in at:  # blocks that the lines below indent under, as many levels deep as they are
        chain = openers_chain(i, below)
        out += [Filler(chain, " ", end), Filler(chain + "  #", "x", end)]
        out += [Filler(openers_chain(i, below, first="while x:"), " ", end)] if loops and chain.count("\n") else []
        if word in CONTINUATIONS:  # `elif`/`else`/`except` below: a block of its own kind, with a body, at its level
            kind = "try:" if word in ("except", "finally") else "if x:"
            for first in ("if x:", "while x:") if loops else ("if x:",):
                body = openers_chain(i, below + "    ", kind, first)
                out.append(Filler(body + "\n" + below + "    pass", " ", end))
        if opens:  # the lines below close brackets: open them in a statement (or a block's head)
            out += [Filler(i + "x = " + opens, " ", end), Filler(i + "if x" + opens, " ", end)]
    if opens_block(before, after):  # the hole ends a line whose next one is deeper: it ends with a colon
        close, _ = balance(before, after)
        out += [
            Filler(" x", "x", close + ":"),
            Filler("", "x", close + ":"),
            Filler(" x", " ", close + ":"),
            Filler("", "x", open_literal(before, lang) + close + ":"),
        ]
    return out + list(ANY_BODIES)


def opens_block(before: str, after: str) -> bool:
    """Whether the line the hole ends starts a block: the hole's line has code, the next line is deeper."""
    line = before[before.rfind("\n") + 1 :]
    if not line.strip() or not after.startswith("\n"):
        return False
    below = next((x for x in itertools.islice(downward(after), 1, None) if x.strip()), "")
    return len(_lead(below)) > len(_lead(line))


CONTINUATIONS = ("elif", "else", "except", "finally")


def openers_chain(indent: str, below: str, last: str = "if x:", first: str = "if x:") -> str:
    """`if x:` at `indent`, nested as many levels as `below` is deeper (at least one); the deepest is `last`, the
    outermost of two or more `first`."""
    deeper = below[len(indent) :] if below.startswith(indent) and len(below) > len(indent) else "    "
    step = "\t" if deeper.startswith("\t") else "    "
    levels = max(1, len(deeper) // len(step))
    heads = [first if n == 0 and levels > 1 else "if x:" if n < levels - 1 else last for n in range(levels)]
    return "\n".join(indent + step * n + head for n, head in enumerate(heads))


def downward(text: str) -> Iterator[str]:
    """`text.split("\\n")`, made as far as it is read (the text after a hole is the rest of the file)."""
    at = 0
    while (end := text.find("\n", at)) >= 0:
        yield text[at:end]
        at = end + 1
    yield text[at:]


def upward(text: str, stop: int | None = None) -> Iterator[str]:
    """`reversed(text[:stop].split("\\n"))`, made as far as it is read (the text before a hole is the file's)."""
    end = len(text) if stop is None else stop
    while (at := text.rfind("\n", 0, end)) >= 0:
        yield text[at + 1 : end]
        end = at
    yield text[:end]


def _lead(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def indents(before: str, after: str) -> list[str]:
    """Indentation a statement in the hole may still need: none when the hole's line already has code; else
    what completes the line's own leading whitespace to the line above's (deeper after a ':'), the line
    below's, one level out of either (a head over a body), or nothing more."""
    line = before[before.rfind("\n") + 1 :]
    if line.strip():
        return []
    above = next((x for x in upward(before, len(before) - len(line)) if x.strip()), "")
    below = next((x for x in downward(after) if x.strip()), "")
    levels = [_lead(above) + "    "] if above.rstrip().endswith(":") else []
    levels += [_lead(above), _lead(below), ""]
    levels += [
        x[:-4] for x in (_lead(below), _lead(above)) if x.endswith("    ")
    ]  # a head one level out (a body below it)
    return list(dict.fromkeys(x[len(line) :] for x in levels if x.startswith(line))) or [""]


def completions(before: str, after: str) -> list[str]:
    """Whitespace that completes a line's indentation, typed partly before the hole and partly after it, to a
    level some line around uses."""
    line = before[before.rfind("\n") + 1 :]
    first = after.split("\n", 1)[0]
    if line.strip() or not first.strip():
        return []
    tail = _lead(first)
    seen = {_lead(x) for x in (before[-2000:] + "\n" + after[:2000]).split("\n") if x.strip()}
    levels = seen | {x + "    " for x in seen} | {x + "\t" for x in seen}
    out = [x[len(line) : len(x) - len(tail)] for x in levels if x.startswith(line) and x.endswith(tail)]
    return sorted((x for x in out if x), key=len)
