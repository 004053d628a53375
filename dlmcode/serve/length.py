"""The server's length rule: how many holes to open for an editor, and where the fill ends.

Editors send a ceiling (`n_predict`, `max_tokens`, `num_predict`), never the middle's length.

0. Whitespace. Trailing spaces and tabs of the prefix (the indentation the user typed)
   are left off the canvas and taken back out of the fill (`heal`): tokens join a space to
   the word after it, and a canvas that ends on bare spaces shifts the fill by one.
1. Holes. The length rule of every face (dlmcode/jobs/sizing.py) chooses them: one probe call
   over min(ceiling, the family's room) holes reads the end tokens' marginals (the
   built-in model's pad; end-of-text, end-of-turn and pad for the others), the change point
   from content to ends is the fill's length, and the holes then hold code only. The probe's
   call counts in the answer's calls. No ceiling (-1) means the room.
2. End. The fill is cut at the first end token if any (none is proposed on a sized canvas),
   and a decode stops as soon as its lines are complete (rule 3, steps.bounded).
3. Lines. The fill ends after its first LINES non-blank lines (the server's --lines,
   default 1; the last line break is kept when the hole stands for whole lines): an editor
   completes the line at the cursor, and asks again for the next (llama.vim, llama.vscode
   accept a suggestion line by line). Decoding left to right
   (a decoder's `block`), the decode stops as soon as those lines are committed.
4. Stop strings (llama.cpp `stop`, OpenAI `stop`, Ollama `options.stop`) cut at their first
   occurrence; llama.cpp's `n_indent` cuts before the first later line indented less.
5. Syntax. When the language is known and the fill breaks the syntax around it
   (syntax.breakage), it is cut back, a line at a time, to the longest run of its first
   lines that breaks nothing (at least one line is kept; if all of them break, the whole
   fill is kept and its breakage reported).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..jobs import sizing as rule
from ..models.base import Dlm
from ..text import syntax

NO_CEILING = -1  # llama.cpp's and Ollama's "no limit"

STOP_STRING = "stop"  # a stop string cut the fill
SYNTAX = "syntax"  # the fill was cut back to keep the syntax


def cap(dlm: Dlm) -> int:
    """The most holes a fill may get: the length rule's room for the family."""
    return rule.rule_for(dlm.family).room


def holes(ceiling: int | None, dlm: Dlm) -> int:
    """Holes to open for an editor's ceiling (None or NO_CEILING: the family's cap)."""
    most = cap(dlm)
    return most if ceiling is None or ceiling == NO_CEILING else min(ceiling, most)


def heal(prefix: str) -> tuple[str, str]:
    """(prefix without its trailing spaces and tabs, those spaces): the canvas gets the first.

    Byte-level BPE joins a space to the word after it (" return"), so a prefix cut after
    its indentation ends on a token the model rarely saw there, and the fill starts with one
    space too many. The model writes the whitespace itself; `unheal` takes it back out.
    """
    core = prefix.rstrip(" \t")
    return core, prefix[len(core) :]


def unheal(middle: str, space: str) -> str:
    """The fill after the user's own trailing whitespace: that whitespace dropped from its start,
    or, when it starts otherwise, its own leading spaces (the user's indentation stands)."""
    if not space:
        return middle
    return middle[len(space) :] if middle.startswith(space) else middle.lstrip(" \t")


def cut_at_end(ids: Sequence[int], ends: tuple[int, ...]) -> tuple[list[int], bool]:
    """The fill's ids before the first end token, and whether there was one."""
    for i, token in enumerate(ids):
        if token in ends:
            return list(ids[:i]), True
    return list(ids), False


def cut_lines(text: str, lines: int, keep_break: bool = False) -> tuple[str, bool]:
    """`text` up to the line break that ends its `lines`-th non-blank line (0: no cut), and whether it was cut.

    `keep_break`: the break stays in the fill (the hole is whole lines: the code after it
    starts a line of its own, see `whole_lines`).
    """
    if lines <= 0:
        return text, False
    seen, start = 0, 0
    while True:
        end = text.find("\n", start)
        if end < 0:
            return text, False
        seen += bool(text[start:end].strip())
        if seen >= lines:
            return text[: end + keep_break], True
        start = end + 1


def whole_lines(prefix: str, suffix: str) -> bool:
    """Whether the hole stands for whole lines: it starts a line and the suffix starts the next one.

    Then a cut fill keeps its last line break (HumanEval-infilling's holes); at an editor's
    cursor the suffix starts with the rest of the line, or with its line break.
    """
    return (not prefix or prefix.endswith("\n")) and bool(suffix) and not suffix.startswith(("\n", "\r\n"))


def complete(tokenizer, lines: int):
    """The decode-time form of cut_lines: whether the fill's first ids already hold `lines` whole non-blank lines."""
    return None if lines <= 0 else (lambda ids: cut_lines(tokenizer.decode(ids), lines)[1])


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """`text` up to the earliest stop string, and whether one was found."""
    at = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:at], True) if at >= 0 else (text, False)


def cut_at_indent(text: str, indent: int) -> tuple[str, bool]:
    """`text` up to the first line after the first that is indented less than `indent` (llama.cpp n_indent)."""
    if indent <= 0:
        return text, False
    lines = text.split("\n")
    for i, line in enumerate(lines[1:], 1):
        if line.strip() and len(line) - len(line.lstrip(" \t")) < indent:
            return "\n".join(lines[:i]), True
    return text, False


@dataclass(frozen=True)
class Cut:
    """A fill after rules 0 and 2-4: the text the client splices, and which rule ended it."""

    text: str
    ids: list[int]  # the fill's ids before its first end token
    ended: bool  # an end token ended it (rule 2)
    by_lines: bool  # the line rule cut it (rule 3)
    stopped: bool  # a stop string or n_indent cut it (rule 4)


@dataclass(frozen=True)
class Splice:
    """Rules 0 and 2-4 for one request, on a fill's token ids: what the client will splice.

    One function for the answer and for the guard's judge (jobs/guarding.Client), so that the text the
    guard passes is the text the client gets: healed whitespace, line, stop and indent cuts included."""

    tokenizer: Any
    special_ids: frozenset[int]
    ends: tuple[int, ...]  # end tokens (rule 2)
    space: str  # the prefix's trailing whitespace, left off the canvas (rule 0)
    lines: int  # rule 3's limit; 0: none
    keep_break: bool  # rule 3 keeps the last line break (whole_lines)
    stop: tuple[str, ...] = ()
    indent: int = 0  # llama.cpp n_indent

    def __call__(self, ids: Sequence[int]) -> Cut:
        ids, ended = cut_at_end(ids, self.ends)
        kept = [i for i in ids if i not in self.special_ids]
        middle = unheal(self.tokenizer.decode(kept) if kept else "", self.space)
        middle, by_lines = cut_lines(middle, self.lines, self.keep_break)
        middle, stopped = cut_at_stop(middle, self.stop)
        middle, dedented = cut_at_indent(middle, self.indent)
        return Cut(middle, ids, ended, by_lines, stopped or dedented)

    def text(self, ids: Sequence[int]) -> str:
        return self(ids).text


@dataclass(frozen=True)
class Kept:
    """The fill after the syntax rule, and what it breaks (None: language unknown)."""

    text: str
    breakage: syntax.Breakage | None
    cut: bool


def keep_syntax(prefix: str, middle: str, suffix: str, lang: str | None, least: int = 1) -> Kept:
    """The longest run of `middle`'s first lines that breaks nothing around it (rule 5); never
    fewer than `least` lines (a stream has already sent them)."""
    if lang is None:
        return Kept(middle, None, False)
    before = prefix + suffix
    found = breaks(before, prefix, middle, suffix, lang)
    if not found.broken:
        return Kept(middle, found, False)
    lines = middle.split("\n")
    for n in range(len(lines) - 1, max(least, 1) - 1, -1):
        shorter = "\n".join(lines[:n])
        shorter_breaks = breaks(before, prefix, shorter, suffix, lang)
        if not shorter_breaks.broken:
            return Kept(shorter, shorter_breaks, True)
    return Kept(middle, found, False)


def breaks(before: str, prefix: str, middle: str, suffix: str, lang: str) -> syntax.Breakage:
    first = prefix.count("\n") + 1
    return syntax.breakage(before, prefix + middle + suffix, lang, (first, first + middle.count("\n")))
