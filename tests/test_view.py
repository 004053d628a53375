"""The live view: draws holes distinctly, animates only on a terminal, never touches stdout."""

from __future__ import annotations

import io

import torch
from rich.console import Console

from dlmcode.cli.view import HOLE, CanvasView, summary
from dlmcode.core.vocab import Vocab
from dlmcode.decoders import build
from dlmcode.jobs.fill import Job
from dlmcode.models.base import Dlm
from dlmcode.text import spans

MASK = 0


class Chars:
    """A character-level tokenizer: id = ord(c) + 1, 0 is the mask."""

    def encode(self, text):
        return [ord(c) + 1 for c in text]

    def decode(self, ids):
        return "".join(chr(i - 1) for i in ids if i > 0)


def fake_dlm() -> Dlm:
    def predict(tokens):
        logits = torch.zeros(len(tokens), 130)
        logits[:, ord("(") + 1] = 5.0  # every hole becomes "("
        return logits

    return Dlm("fake", "test", Chars(), MASK, None, None, 200, predict, torch.device("cpu"), torch.float32)


def job() -> Job:
    dlm = fake_dlm()
    plan = spans.plan_infill("a = 1\nb = 2\nc = 3\n", Vocab(dlm.tokenizer, MASK, dlm.context), (2, 2), None)
    return Job(plan, dlm, build("low-confidence"), seed=0, lang="python")


def test_render_draws_holes_then_commits():
    j = job()
    view = CanvasView(j, Console(file=io.StringIO()))
    start = view.render(None).plain
    assert start.count(HOLE) == 5 and "a = 1" in start
    steps = list(j.steps())
    end = view.render(steps[-1]).plain
    assert HOLE not in end and "(((((" in end
    assert "calls 5" in end and "filled 5/5" in end


def test_no_animation_when_not_a_terminal():
    j = job()
    out = io.StringIO()
    final = CanvasView(j, Console(file=out, force_terminal=False)).follow(j.steps())
    assert final is not None and final.canvas.n_holes == 0
    assert out.getvalue() == ""


def test_animates_on_a_terminal_and_returns_the_last_step():
    j = job()
    out = io.StringIO()
    final = CanvasView(j, Console(file=out, force_terminal=True, width=80)).follow(j.steps())
    assert final is not None and final.calls == 5
    assert "\x1b[" in out.getvalue()  # drew with terminal control codes


def test_summary_line_names_breakage():
    result = job().run()
    line = summary(result)
    assert line.startswith("low-confidence: filled 5 holes in 5 calls (TPF 1.00)")
    assert (
        "breakage: 1 new syntax error(s), first at line 2 (inside the filled line 2)" in line
    )  # "(((((" is not Python
    assert "\n" not in line


def test_a_reopened_hole_is_drawn_apart_from_a_fresh_one():
    from dlmcode.cli.view import REOPENED
    from dlmcode.core.canvas import Step

    j = job()
    view = CanvasView(j, Console(file=io.StringIO()))
    canvas = j.plan.canvas
    start = view.render(None).plain
    first = canvas.holes.nonzero().squeeze(-1)  # (5,) the holes, in order
    paren = torch.full((5,), ord("(") + 1)
    full = canvas.fill(first, paren)
    one = Step(0, full, first, torch.ones(5), 1)
    assert view.render(one).plain.count("(") == 5
    back = full.reopen(first[1:3])  # take two tokens back, commit nothing... then one of them again
    two = Step(1, back.fill(first[1:2], paren[:1]), first[1:2], torch.ones(1), 2, reopened=first[1:3])
    drawn = view.render(two).plain
    assert drawn.count(REOPENED) == 1 and HOLE not in drawn  # position 3 is a reopened hole, not a fresh one
    assert start.count(HOLE) == 5 and REOPENED not in start
    assert "reopened 2" in drawn and "filled 4/5" in drawn
    assert view.render(two).plain == drawn  # drawing the same Step again counts nothing twice
    three = Step(2, two.canvas.fill(first[2:3], paren[:1]), first[2:3], torch.ones(1), 3)
    assert REOPENED not in view.render(three).plain  # refilled: drawn as a token again


def test_summary_line_counts_reopened_tokens():
    import dataclasses

    result = dataclasses.replace(job().run(), reopened=3)
    assert "reopened 3" in summary(result)
    assert "reopened" not in summary(job().run())
