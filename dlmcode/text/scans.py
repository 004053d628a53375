"""Regex scans of texts that differ from one scanned before only at one end, resumed instead of redone.

The guard's fillers (text/guard.py, text/pyshape.py) lex the whole text before a hole and after it
for strings, comments and brackets (a bracket opened 100 KB above a hole is still open at it). A
decode asks about the same hole call after call, and each time the text before it is the user's
text plus what the decode wrote at the hole's start, and the text after it what it wrote at the
hole's end plus the user's text: scanning those from scratch was most of the guard's time on
large files (issue 26). `Prefixes` resumes a scan from the longest remembered prefix, `Suffixes`
joins a scan of a new start to a remembered scan of the same end; both give exactly the matches
that `pattern.finditer(text)` gives (tests/test_guard_cache.py checks them against it).

Why resuming is exact. A regex scan tries every position that no earlier match covers; our
patterns (strings and comments) have no anchors and no lookbehind, so from a position it tries,
the scan depends only on the text from there on. So:
- after a start that changes (Suffixes): once the new scan tries a position that the old scan
  also tried at the same distance from the end, the rest of both scans is the same;
- before an end that changes (Prefixes): the matches before a checkpoint stay the same whatever
  follows it when no attempt before it reads past it. An attempt reads past a line break only
  through an escaped line break (a checkpoint never follows a backslash), a match that reaches
  the end of the text (a literal or comment left open), or an opener (`'''`, `\"\"\"`, `/*`)
  whose closer was not found: each of those makes everything from its position on provisional.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Span = tuple[int, int]  # a match's [start, end)
Fold = Callable[[Any, str, int, int, list["Span"]], Any]  # (state, text, start, stop, the matches inside) -> the state
# after text[start:stop] (Prefixes: read left to right; Suffixes: right to left, the state being the text after it)
KEEP = 12  # texts remembered per scan
BEHIND = 2048  # a second checkpoint this far before the end: still in the user's text when the end changes


@dataclass
class Entry:
    text: str  # the remembered prefix (Prefixes) or suffix (Suffixes)
    spans: list[Span]  # its matches (Suffixes: as offsets from the suffix's start)
    state: Any = None  # the fold's state there (Prefixes: after the prefix; Suffixes: over the suffix, from the end)


@dataclass
class Scanned:
    """A text's matches and, when the scan has a fold, the fold's state over the text outside them."""

    made: list[Span] | Callable[[], list[Span]]  # the matches, or what lists them (read by few callers)
    state: Any = None

    @property
    def spans(self) -> list[Span]:
        if callable(self.made):
            self.made = self.made()
        return self.made


@dataclass
class Prefixes:
    """`pattern.finditer(text)` for texts that begin as one scanned before, and a fold over the text outside the
    matches (left to right), resumed from a remembered checkpoint."""

    pattern: re.Pattern[str]
    openers: tuple[str, ...] = ()  # lazy openers whose closer may come later: `'''`, `\"\"\"`, `/*`
    fold: Fold | None = None
    start: Any = None  # the fold's state before any text
    group: int = 0  # the pattern's group where a literal starts (after prefixes such as `rb`)
    local: threading.local = field(default_factory=threading.local, repr=False)  # each thread's entries (serve
    # decodes in a thread per request)

    def __post_init__(self) -> None:
        self.opener = re.compile("|".join(map(re.escape, self.openers))) if self.openers else None

    @property
    def entries(self) -> list[Entry]:
        return self.local.__dict__.setdefault("entries", [])

    def scan(self, text: str) -> Scanned:
        entry = max((e for e in self.entries if text.startswith(e.text)), key=lambda e: len(e.text), default=None)
        at, spans, state = (0, [], self.start) if entry is None else (len(entry.text), list(entry.spans), entry.state)
        if entry is not None:  # most recently used last
            self.entries.remove(entry)
            self.entries.append(entry)
        known = len(spans)
        spans += [m.span() for m in self.pattern.finditer(text, at)]
        settled = self.settled(text, spans, known, at)
        marks = sorted(
            {
                c
                for c in (self.checkpoint(text, spans, settled), self.checkpoint(text, spans, settled - BEHIND))
                if c > at
            }
        )
        for mark in marks:  # fold up to each new checkpoint, remember it, go on
            state = self.folded(state, text, spans, at, mark)
            self.remember(Entry(text[:mark], spans[: bisect.bisect_left(spans, (mark, -1))], state))
            at = mark
        return Scanned(spans, self.folded(state, text, spans, at, len(text)))

    def settled(self, text: str, spans: list[Span], known: int, at: int) -> int:
        """The first position from which the matches may change once the text goes on (len(text): none)."""
        gap = at
        for k in range(known, len(spans)):
            start, end = spans[k]
            if self.opener is not None:
                found = self.opener.search(text, gap, start)
                if found is not None:
                    return found.start()  # an opener tried and not closed: no match there
            if end == len(text) or self.unclosed(text, start, end):
                return start
            gap = end
        found = self.opener.search(text, gap) if self.opener is not None else None
        return found.start() if found is not None else len(text)

    def unclosed(self, text: str, start: int, end: int) -> bool:
        """Whether the match at `start` begins with an opener but is not that opener's literal (its closer was not
        found, and a shorter literal matched instead)."""
        if not self.openers:
            return False
        found = self.pattern.match(text, start, end) if self.group else None
        lit = found.start(self.group) if found is not None and found.start(self.group) >= 0 else start
        return any(text.startswith(o, lit) and end - lit < 2 * len(o) for o in self.openers)

    def checkpoint(self, text: str, spans: list[Span], limit: int) -> int:
        """The last line start at or before `limit` that no match covers and no escaped line break reaches (0:
        none)."""
        at = text.rfind("\n", 0, max(limit, 0))
        while at >= 0:
            mark = at + 1
            k = bisect.bisect_left(spans, (mark, -1)) - 1  # the last match starting before the mark
            if not (at > 0 and text[at - 1] == "\\") and (k < 0 or spans[k][1] <= mark):
                return mark
            at = text.rfind("\n", 0, spans[k][0] if k >= 0 and spans[k][1] > mark else at)
        return 0

    def folded(self, state: Any, text: str, spans: list[Span], start: int, stop: int) -> Any:
        """The fold over text[start:stop] (never inside a match)."""
        if self.fold is None or start >= stop:
            return state
        inside = spans[bisect.bisect_left(spans, (start, -1)) : bisect.bisect_left(spans, (stop, -1))]
        return self.fold(state, text, start, stop, inside)

    def remember(self, entry: Entry) -> None:
        self.local.entries = [e for e in self.entries if e.text != entry.text][-(KEEP - 1) :] + [entry]


@dataclass
class Suffixes:
    """`pattern.finditer(text)` for texts that end as one scanned before, and a fold over the text outside the
    matches (right to left), joined to a remembered scan of the end."""

    pattern: re.Pattern[str]
    fold: Fold | None = None  # applied to the stretches outside matches from the last to the first
    start: Any = None
    head: int = 512  # the remembered end begins this far into a text (what a decode writes at a hole's end is short)
    local: threading.local = field(default_factory=threading.local, repr=False)  # each thread's entries

    @property
    def entries(self) -> list[Entry]:
        return self.local.__dict__.setdefault("entries", [])

    def scan(self, text: str) -> Scanned:
        for entry in reversed(self.entries):
            if len(entry.text) <= len(text) and text.endswith(entry.text):
                found = self.joined(text, entry)
                if found is not None:
                    return found
        return self.fresh(text)

    def joined(self, text: str, entry: Entry) -> Scanned | None:
        """The scan of `text` from its start until it tries the position where the remembered end begins; None
        when a match covers it."""
        at = len(text) - len(entry.text)
        spans = []
        for m in self.pattern.finditer(text):
            if m.start() >= at:
                break
            if m.end() > at:
                return None
            spans.append(m.span())
        state = self.backwards(entry.state, text, spans, 0, at)
        return Scanned(lambda: spans + [(s + at, e + at) for s, e in entry.spans], state)  # the end's: a whole file

    def fresh(self, text: str) -> Scanned:
        spans = [m.span() for m in self.pattern.finditer(text)]
        mark = min(self.head, len(text))
        k = bisect.bisect_left(spans, (mark, -1)) - 1
        if k >= 0 and spans[k][1] > mark:
            mark = spans[k][1]  # not inside a match
        tail = [(s - mark, e - mark) for s, e in spans if s >= mark]
        end = self.backwards(self.start, text, spans, mark, len(text))
        self.local.entries = [e for e in self.entries if e.text != text[mark:]][-(KEEP - 1) :] + [
            Entry(text[mark:], tail, end)
        ]
        return Scanned(spans, self.backwards(end, text, spans, 0, mark))

    def backwards(self, state: Any, text: str, spans: list[Span], start: int, stop: int) -> Any:
        """The fold over text[start:stop] (never inside a match), from its end to its start."""
        if self.fold is None or start >= stop:
            return state
        inside = spans[bisect.bisect_left(spans, (start, -1)) : bisect.bisect_left(spans, (stop, -1))]
        return self.fold(state, text, start, stop, inside)


def gaps(text: str, start: int, stop: int, spans: list[Span]) -> list[str]:
    """The stretches of text[start:stop] outside `spans` (the matches inside it), in order."""
    out, at = [], start
    for s, e in spans:
        out.append(text[at:s])
        at = e
    out.append(text[at:stop])
    return out
