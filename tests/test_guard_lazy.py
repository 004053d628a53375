"""Fillers made only as far as the witness search reads them (issue 26: the guard's cost per model call) are the
fillers made all at once: the same list in the same order, however far and however often it is read, so the search
judges the same candidates and admits the same tokens; and a tokenizer's remembered texts are its own.

Texts: the guard's sample and files of this interpreter's standard library, cut at random places.
"""

from __future__ import annotations

import itertools
import random

import torch
from test_guard_cache import cuts, sources

from dlmcode.text import fillers, guard, memo, pyshape


class Chars:
    """A tokenizer with one token per character (every filler's unit is one token)."""

    shift = 0

    def encode(self, text: str) -> list[int]:
        return [ord(c) + self.shift for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i - self.shift) for i in ids)


class Shifted(Chars):
    shift = 1


JS = (
    "function f(a) {\n  const s = `x ${a} y`;\n  if (a) {\n"
    "    return [a, /* b */ 2];\n  } else {\n    g('q');\n  }\n}\n"
)


def test_fillers_read_in_part_then_whole_are_the_fillers_made_at_once():
    rnd = random.Random(26)
    pairs = [("python", b, a) for text in sources() for b, a in cuts(rnd, text, 6)]
    pairs += [("javascript", b, a) for b, a in cuts(rnd, JS * 3, 6)]
    longer = repeats = 0
    for lang, before, after in pairs:
        n = rnd.randrange(1, 24)
        each = [guard.fits([f], n, Chars(), None) for f in guard.fillers(lang, before, after, False, True)]
        made = [list(ids) for ids in dict.fromkeys(tuple(ids) for one in each for ids in one)]  # no repeats
        repeats += sum(map(len, each)) > len(made)
        lazy = guard.Fillers(lang, Chars(), None, rare=True)(before, after, n)
        k = rnd.randrange(0, 6)
        assert list(itertools.islice(lazy, k)) == made[:k], (before[-40:], after[:40])
        assert list(lazy) == made
        assert list(lazy) == made  # read again, from the start
        longer += len(made) > k
    assert longer > len(pairs) // 2  # most lists are read past where the first reading stopped
    assert repeats > 0  # some fillers come out as the same ids


def test_the_first_filler_is_made_without_the_bridges_after_it(monkeypatch):
    asked = []
    bridges = pyshape.bridges
    monkeypatch.setattr(fillers.pyshape, "bridges", lambda *a: asked.append(a) or bridges(*a))
    found = guard.Fillers("python", Chars(), None)('def f():\n    x = "ab', 'cd"\n    return x\n', 5)
    assert found[0] == Chars().encode('xxxx"')  # the string the hole starts inside of, closed
    assert asked == []
    assert len(list(found)) > 3 and len(asked) == 1  # the whole list has them


class Judged:
    """A judge that passes one filling of the run [2, 2 + n) and records every filling it was asked about."""

    def __init__(self, target: list[int], n: int) -> None:
        self.target, self.n, self.seen = target, n, []

    def __call__(self, canvas: torch.Tensor) -> int:
        self.seen.append(canvas[2 : 2 + self.n].tolist())
        return 0 if self.seen[-1] == self.target else 1


def test_a_first_witness_from_fillers_made_as_read_judges_what_one_from_a_whole_list_does():
    rnd = random.Random(7)
    searched = 0
    for text in sources()[:2]:
        for before, after in cuts(rnd, text, 4)[::4]:
            n = rnd.randrange(2, 12)
            made = guard.fits(guard.fillers("python", before, after, False), n, Chars(), None)
            if len(made) < 3:
                continue
            target = made[rnd.randrange(1, len(made))]  # the judge passes this filler alone
            canvas, runs, around = torch.zeros(n + 4, dtype=torch.long), [range(2, 2 + n)], [(before, after)]
            whole, lazy = Judged(target, n), Judged(target, n)
            found = guard.first_witness(canvas, runs, around, lambda b, a, m, made=made: made, whole, budget=64)
            again = guard.first_witness(canvas, runs, around, guard.Fillers("python", Chars(), None), lazy, budget=64)
            assert found is not None and again is not None and torch.equal(found, again)
            assert lazy.seen == whole.seen
            searched += 1
    assert searched >= 4


def test_a_list_made_as_read_is_read_alike_by_two_readers_at_once():
    made = []

    def items():
        for i in range(5):
            made.append(i)
            yield i

    lazy = memo.Lazy(items())
    one, two = iter(lazy), iter(lazy)
    assert [next(one), next(one), next(two)] == [0, 1, 0] and made == [0, 1]
    assert list(two) == [1, 2, 3, 4] and list(one) == [2, 3, 4] and made == [0, 1, 2, 3, 4]
    assert lazy[4] == 4 and not lazy.has(5) and bool(memo.Lazy(iter(()))) is False


def test_each_tokenizer_remembers_its_own_texts():
    chars, shifted = Chars(), Shifted()
    assert memo.remembered(chars).encode("ab") == [97, 98]
    assert memo.remembered(shifted).encode("ab") == [98, 99]
    assert memo.remembered(chars) is memo.remembered(chars)
    assert memo.remembered(shifted).decode([98, 99]) == "ab"
