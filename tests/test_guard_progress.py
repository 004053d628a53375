"""A remasking decoder under the guard keeps its progress: when the guard admits fewer of a call's commits than
the decoder reopens, the least wanted reopens are given back where the witness holds their tokens
(decoders/base.py, `given_back`), so each call still gains a token as it would unguarded."""

from __future__ import annotations

import dataclasses

import torch

from dlmcode.core.canvas import Canvas
from dlmcode.decoders import build
from dlmcode.decoders.base import given_back
from dlmcode.text import guard

from tiny import unmatched

OPEN, CLOSE, NEUTRAL = 1, 2, 3


def balanced(tokens: torch.Tensor) -> int:
    return unmatched(tokens, OPEN, CLOSE)


class Holding:
    """A gate whose witness holds the tokens at the positions in `held` only."""

    def __init__(self, held: set[int]) -> None:
        self.held = held

    def holds(self, pos: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return torch.tensor([p in self.held for p in pos.tolist()], dtype=torch.bool)


def test_the_least_wanted_reopens_that_the_witness_holds_are_given_back_first():
    before = Canvas(torch.tensor([5, 6, 7, 8, 9, 0]), mask_id=0)
    span = torch.tensor([0, 1, 2, 3, 4, 5])
    reopen = torch.tensor([3, 1, 4, 2])  # rows, most wanted first
    # one commit admitted: no reopen may stay; 2, 4 and 3 go back (held), 1 stays (not held: giving it back could
    # leave no witness)
    assert given_back(Holding({2, 3, 4}), before, span, reopen, 1).tolist() == [1]
    # three commits admitted: two reopens may stay, the two most wanted
    assert given_back(Holding({0, 1, 2, 3, 4}), before, span, reopen, 3).tolist() == [3, 1]
    # the second least wanted (4) is not held: the least wanted (2) and the third (1) go back instead
    assert given_back(Holding({3, 1, 2}), before, span, reopen, 3).tolist() == [3, 4]


def test_a_guarded_saber_call_never_ends_with_no_gain_when_the_witness_holds_what_it_reopened(
    make_tiny_model, make_canvas
):
    # the model wants OPEN everywhere; no witness holds an OPEN and no other candidate is tried (candidates=1), so
    # the guard admits one token a call (the witness's own) of saber's two or more, while saber reopens one
    model = make_tiny_model()
    canvas = make_canvas([3, 9, 2, 5, 1, 7, 4], model.mask_id, model.vocab)
    witness = canvas.tokens.masked_fill(canvas.holes, NEUTRAL)

    def predict(tokens):
        logits = model(tokens) * 0.01
        logits[:, OPEN] += 9.0
        return logits

    completer = guard.Guard(balanced, witness, canvas.mask_id, candidates=1)
    decoder = dataclasses.replace(build("saber"), guard=True, completer=completer)
    steps = list(decoder(canvas, predict, torch.Generator().manual_seed(0)))
    holes = [canvas.n_holes] + [s.canvas.n_holes for s in steps]
    assert all(b < a for a, b in zip(holes, holes[1:], strict=False)), holes  # every call gains (12 did not before)
    assert steps[-1].calls == canvas.n_holes and balanced(steps[-1].canvas.tokens) == 0
    assert completer.last.fallback > 0, "the guard must have cut saber's commits to one"
