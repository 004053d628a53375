"""What the guard's witness search remembers of answers that depend on their input alone: a list made only as far as
it is read (`Lazy`: the fillers of a hole, most of which no search reaches), and a tokenizer's encodings of
fillers' texts (`Remembered`, one per tokenizer and thread, so that a decode after another starts warm).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

CACHE = 8192  # texts remembered per tokenizer
KEPT = 4  # tokenizers a thread keeps the texts of
_END = object()


class Lazy:
    """A list made only as far as it is read (a filler after the one the judge passes is never built), and kept:
    read again, from the start or past where it was left, it is the same list."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items: Iterator[Any] | None = iter(items)
        self.seen: list[Any] = []

    def has(self, i: int) -> bool:
        """Whether the list has an item i (made up to it)."""
        while len(self.seen) <= i and self.items is not None:
            found = next(self.items, _END)
            if found is _END:
                self.items = None  # all made: what it read is let go
            else:
                self.seen.append(found)
        return i < len(self.seen)

    def __getitem__(self, i: int) -> Any:
        if not self.has(i):
            raise IndexError(i)
        return self.seen[i]

    def __iter__(self) -> Iterator[Any]:
        at = 0
        while self.has(at):
            yield self.seen[at]
            at += 1

    def __bool__(self) -> bool:
        return self.has(0)


def has(items: Lazy | list[Any], i: int) -> bool:
    """Whether `items` (a Lazy or a plain list) has an item i."""
    return items.has(i) if isinstance(items, Lazy) else i < len(items)


class Remembered:
    """A tokenizer's encode and decode, each text's answer kept (a tokenizer's answer depends on the text alone)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.encoded: dict[str, tuple[int, ...]] = {}
        self.decoded: dict[tuple[int, ...], str] = {}

    def encode(self, text: str) -> list[int]:
        found = self.encoded.get(text)
        if found is None:
            found = tuple(self.tokenizer.encode(text))
            if len(self.encoded) < CACHE:
                self.encoded[text] = found
        return list(found)

    def decode(self, ids: list[int]) -> str:
        key = tuple(ids)
        found = self.decoded.get(key)
        if found is None:
            found = self.tokenizer.decode(ids)
            if len(self.decoded) < CACHE:
                self.decoded[key] = found
        return found


CODERS = threading.local()  # each thread's Remembered per tokenizer


def remembered(tokenizer: Any) -> Remembered:
    """This thread's Remembered of `tokenizer` (the entry holds the tokenizer, so its id names no other while kept)."""
    kept: dict[int, Remembered] = CODERS.__dict__.setdefault("kept", {})
    found = kept.get(id(tokenizer))
    if found is None or found.tokenizer is not tokenizer:
        if len(kept) >= KEPT:
            kept.pop(next(iter(kept)))  # the oldest
        found = kept[id(tokenizer)] = Remembered(tokenizer)
    return found
