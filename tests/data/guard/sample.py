"""A small module with the syntax a fill must keep intact."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Point:
    x: float
    y: float = 0.0
    tags: list[str] = field(default_factory=list)

    def norm(self) -> float:
        return (self.x**2 + self.y**2) ** 0.5

    def __str__(self) -> str:
        return f"Point({self.x:.2f}, {self.y!r}) {'tagged' if self.tags else ''}"


@functools.cache
def fib(n: int) -> int:
    # the classic, memoised
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def parse(lines, *, strict=False):
    out = {}
    for number, line in enumerate(lines, start=1):
        key, _, value = line.partition("=")
        if not key.strip():
            if strict:
                raise ValueError(f"line {number}: no key in {line!r}")
            continue
        out[key.strip()] = [int(v) for v in value.split(",") if v.strip().isdigit()]
    return out


class Stack:
    """A stack with a limit."""

    def __init__(self, limit=8):
        self.items, self.limit = [], limit

    def push(self, item):
        if len(self.items) >= self.limit:
            raise OverflowError("full")
        self.items.append(item)
        return {"size": len(self.items), "top": item}

    async def drain(self):
        while self.items:
            yield self.items.pop()


TABLE = {
    "a": (1, 2),
    "b": [x * 2 for x in range(3) if x],
}
