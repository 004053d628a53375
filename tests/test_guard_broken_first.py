"""The guard's sweep repairs the run of holes where the judge says the draft first breaks (text/witness.py's
`broken_first`, text/judge.py's `Judge.first_break`): the runs before it cost fillers for nothing."""

from __future__ import annotations

import pytest
import torch

from dlmcode import models
from dlmcode.text import guard, judge, spans

from tiny import unmatched

OPEN, CLOSE, NEUTRAL, MASK = 1, 2, 3, 9


def balanced(tokens: torch.Tensor) -> int:
    """A toy judge: unmatched OPEN/CLOSE tokens (the language of balanced brackets)."""
    return unmatched(tokens, OPEN, CLOSE)


def first_unmatched(tokens: torch.Tensor) -> int | None:
    """The toy language's first error: a CLOSE with nothing open, else the last OPEN left open."""
    opened: list[int] = []
    for p, t in enumerate(tokens.tolist()):
        if t == OPEN:
            opened.append(p)
        elif t == CLOSE:
            if not opened:
                return p
            opened.pop()
    return opened[-1] if opened else None


@pytest.mark.parametrize("told", [True, False])
def test_the_sweep_builds_fillers_for_the_broken_run_first(told):
    # runs of holes at 1-2 and 4-6; the draft closes the bracket early in the second run, so the CLOSE at 7 is
    # unmatched: the second run is the one to repair, and the first run's fillers are not needed
    asked = []

    def fit(before: str, after: str, n: int) -> list[list[int]]:
        asked.append(n)
        return [[NEUTRAL] * n]

    canvas = torch.tensor([OPEN, MASK, MASK, NEUTRAL, MASK, MASK, MASK, CLOSE])
    witness = torch.tensor([OPEN, NEUTRAL, NEUTRAL, NEUTRAL, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE])
    draft = torch.tensor([OPEN, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE, NEUTRAL, NEUTRAL, CLOSE])
    where = first_unmatched if told else None
    session = guard.Guard(balanced, witness, MASK, lambda *_: ("", ""), fit, where).begin(canvas)
    found = session.sweep(canvas, draft)
    assert found is not None and balanced(found) == 0 and found.tolist() == witness.tolist()
    assert asked == ([3] if told else [2, 3])


def test_runs_keep_their_order_when_the_canvas_has_no_new_error():
    session = guard.Guard(balanced, torch.tensor([OPEN, NEUTRAL, CLOSE]), MASK, where=first_unmatched).begin(
        torch.tensor([OPEN, MASK, CLOSE])
    )
    runs = [range(1, 2), range(3, 5), range(6, 7)]
    assert session.broken_first(torch.tensor([OPEN, NEUTRAL, CLOSE]), runs) == runs
    assert session.broken_first(torch.tensor([OPEN, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE, CLOSE, NEUTRAL]), runs) == [
        runs[1],
        runs[0],
        runs[2],
    ]  # the CLOSE at 5 has nothing open: the run starting at 3 is the last one before it


@pytest.fixture(scope="module")
def tokenizer():
    return models.load().tokenizer


TEXT = "def f(a):\n    x = a + 1\n    y = x * 2\n    z = y - 3\n    return z\n"


def two_holes(tokenizer, fills: list[str]) -> tuple[judge.Judge, torch.Tensor, tuple[range, range]]:
    """A judge of TEXT with its lines 2 and 4 as holes, and the canvas with `fills` in them."""
    first, second = TEXT.index("    x ="), TEXT.index("    z =")
    regions = [(first, TEXT.index("\n", first) + 1), (second, TEXT.index("\n", second) + 1)]
    ids = [tokenizer.encode(f) for f in fills]
    positions = (range(0, len(ids[0])), range(len(ids[0]), len(ids[0]) + len(ids[1])))
    holes = tuple(spans.Hole(a, b, len(i), True) for (a, b), i in zip(regions, ids, strict=True))
    plan = spans.Plan(TEXT, None, holes, positions, (0, len(TEXT)))
    return judge.Judge(plan, tokenizer, "python", (TEXT, regions)), torch.tensor(ids[0] + ids[1]), positions


def test_first_break_is_the_token_on_the_line_of_the_first_new_error(tokenizer):
    fine = two_holes(tokenizer, ["    x = a + 1\n", "    z = y - 3\n"])
    assert fine[0](fine[1]) == 0 and fine[0].first_break(fine[1]) is None

    checked, tokens, (one, two) = two_holes(tokenizer, ["    x = a + 1\n", "    z = y - 3\n    w = (z\n"])
    assert checked(tokens) > 0
    at = checked.first_break(tokens)
    assert at in two and at > two.start  # on the hole's second line, not its first token
    ids = tokens.tolist()
    assert "\n" in tokenizer.decode(ids[two.start : at + 1])  # the token reaches the line the error is on
    assert "w" not in tokenizer.decode(ids[two.start : at])

    checked, tokens, (one, two) = two_holes(tokenizer, ["    x = (a + 1\n", "    z = y - 3\n"])
    assert checked(tokens) > 0 and checked.first_break(tokens) in one
