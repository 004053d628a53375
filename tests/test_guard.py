"""The completability guard (dlmcode/text/guard.py): every decoder under it, the check on hand-made
partial fills, and the guarantee on random spans of real files in every language.

The property tests use the built-in model's tokenizer (what users decode with) and stand-in
models that propose random tokens, or the most harmful ones they can (closers, quotes, line
breaks, comment starts), so that nearly every proposal must be caught.
"""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import pytest
import torch

from dlmcode import models
from dlmcode.core.canvas import last
from dlmcode.core.run import RunSettings
from dlmcode.decoders import DECODERS, build
from dlmcode.jobs import fill, wiring
from dlmcode.text import guard, spans, syntax

from tiny import unmatched

pytestmark = pytest.mark.usefixtures("tiny_assistant_decoders")  # codila runs among DECODERS (conftest.py)

DATA = Path(__file__).parent / "data" / "guard"
FILES = {
    "python": "sample.py",
    "c": "sample.c",
    "cpp": "sample.cpp",
    "java": "Sample.java",
    "javascript": "sample.js",
    "typescript": "sample.ts",
    "go": "sample.go",
    "rust": "sample.rs",
}
SPANS = 200  # random spans per language
NASTY = [
    ")",
    "]",
    "}",
    "(",
    "[",
    "{",
    '"',
    "'",
    "\n",
    ":",
    "#",
    "/*",
    "*/",
    "`",
    "\\",
    "    ",
    "\t",
    "else",
    "return",
    ";",
    ",",
]


@pytest.fixture(scope="module")
def shipped():
    return models.load()


# ---------------------------------------------------------------- every decoder, on a toy language


OPEN, CLOSE, NEUTRAL = 1, 2, 3


def balanced(tokens: torch.Tensor) -> int:
    """A toy judge: errors = unmatched OPEN/CLOSE tokens (the language of balanced brackets)."""
    return unmatched(tokens, OPEN, CLOSE)


def recording(asked: list[int], token: int):
    """A toy filler: `token` in every hole of a run, each run's length recorded in `asked` (what was built)."""

    def fit(before: str, after: str, n: int) -> list[list[int]]:
        asked.append(n)
        return [[token] * n]

    return fit


def bracket_loving(model):
    """The tiny model, but OPEN and CLOSE are the likeliest tokens everywhere: unguarded, the fill breaks."""

    def predict(tokens):
        logits = model(tokens).clone()
        logits[:, OPEN] += 6.0
        logits[:, CLOSE] += 5.0 + torch.arange(len(tokens)) % 3  # ties broken by position
        return logits

    return predict


@pytest.mark.parametrize("name", DECODERS)
def test_every_decoder_guarded_ends_balanced_within_its_calls(name, make_tiny_model, make_canvas):
    model = make_tiny_model()
    canvas = make_canvas([3, 9, 2, 5, 1], model.mask_id, model.vocab)
    witness = canvas.tokens.masked_fill(canvas.holes, NEUTRAL)
    decoder = dataclasses.replace(build(name), guard=True, completer=guard.Guard(balanced, witness, canvas.mask_id))
    plain = build("factor") if name == "syntax-guard" else dataclasses.replace(decoder, guard=False)  # its rule
    unguarded = last(plain(canvas, bracket_loving(model), torch.Generator().manual_seed(0)))
    if name != "codila":  # codila's tokens are its assistant's, which knows nothing of the brackets
        assert balanced(unguarded.canvas.tokens) > 0, "the stand-in model must break the toy language unguarded"

    steps = list(decoder(canvas, bracket_loving(model), torch.Generator().manual_seed(0)))
    out = steps[-1].canvas.tokens
    assert not bool(steps[-1].canvas.holes.any())
    assert balanced(out) == 0
    assert torch.equal(out[~canvas.holes], canvas.tokens[~canvas.holes])
    assert steps[-1].calls <= decoder.max_calls(canvas.n_holes)
    stats = decoder.completer.last
    assert stats.checks > 0 and (stats.rejected > 0 or name == "codila")


def test_guard_off_changes_nothing(make_tiny_model, make_canvas):
    model = make_tiny_model()
    canvas = make_canvas([3, 9, 2], model.mask_id, model.vocab)
    plain = build("low-confidence")
    off = dataclasses.replace(
        plain, completer=guard.Guard(balanced, canvas.tokens.masked_fill(canvas.holes, NEUTRAL), canvas.mask_id)
    )
    a = last(plain(canvas, model, torch.Generator().manual_seed(0)))
    b = last(off(canvas, model, torch.Generator().manual_seed(0)))
    assert torch.equal(a.canvas.tokens, b.canvas.tokens) and a.calls == b.calls
    assert off.completer.last is None, "guard=false never opens the gate"


def test_a_rejected_proposal_falls_to_the_next_token_that_passes():
    # canvas: OPEN, hole, hole; the model wants OPEN at both holes (OPEN OPEN OPEN cannot close in 0 holes)
    mask = 9
    canvas = torch.tensor([OPEN, mask, mask])
    g = guard.Guard(balanced, torch.tensor([OPEN, NEUTRAL, CLOSE]), mask)
    session = g.begin(canvas)
    logits = torch.full((3, 10), -5.0)
    logits[:, OPEN], logits[:, CLOSE], logits[:, NEUTRAL] = 3.0, 2.0, 1.0
    pos, ids, _ = session.admit(
        canvas, logits, torch.tensor([1, 2]), torch.tensor([OPEN, OPEN]), torch.tensor([0.6, 0.5])
    )
    # position 1 keeps OPEN (then CLOSE CLOSE would be needed: 1 hole left -> no), so it falls to CLOSE at 1 ...
    done = canvas.clone()
    done[pos] = ids
    assert balanced(torch.where(done == mask, session.witness, done)) == 0
    assert session.stats.rejected >= 1 and session.stats.replaced >= 1


def test_nothing_passes_commits_the_witness_token():
    mask = 9
    canvas = torch.tensor([OPEN, mask])
    g = guard.Guard(balanced, torch.tensor([OPEN, CLOSE]), mask, candidates=1)
    session = g.begin(canvas)
    logits = torch.zeros(2, 10)
    pos, ids, _ = session.admit(canvas, logits, torch.tensor([1]), torch.tensor([OPEN]), torch.tensor([0.9]))
    assert pos.tolist() == [1] and ids.tolist() == [CLOSE]
    assert session.stats.fallback == 1


def test_a_hopeless_proposal_does_not_spend_the_checks_an_easy_one_needs():
    # the most confident proposal (OPEN at 1) has no witness; the next (another neutral token at 2) needs one check
    mask, other = 9, 4
    canvas = torch.tensor([OPEN, mask, mask, mask])
    g = guard.Guard(balanced, torch.tensor([OPEN, NEUTRAL, NEUTRAL, CLOSE]), mask, candidates=1, checks_per_call=2)
    session = g.begin(canvas)
    logits = torch.full((4, 10), -5.0)
    logits[:, OPEN] = 3.0  # the draft is OPEN everywhere: no help
    pos, ids, _ = session.admit(
        canvas, logits, torch.tensor([1, 2]), torch.tensor([OPEN, other]), torch.tensor([0.9, 0.5])
    )
    assert pos.tolist() == [2] and ids.tolist() == [other] and session.stats.fallback == 0


def test_when_nothing_passes_the_fallback_prefers_the_model_s_own_token_to_a_filler_s():
    # the witness holds NEUTRAL (a filler's) at 1 and CLOSE at 2; the model's top token at 2 is CLOSE, at 1 OPEN
    mask = 9
    canvas = torch.tensor([OPEN, mask, mask])
    session = guard.Guard(balanced, torch.tensor([OPEN, NEUTRAL, CLOSE]), mask, candidates=1).begin(canvas)
    probs = torch.full((3, 10), 1e-6)
    probs[1, OPEN], probs[1, NEUTRAL] = 0.5, 0.45  # the filler's NEUTRAL is likelier at 1 than CLOSE at 2 ...
    probs[2, CLOSE], probs[2, OPEN], probs[2, NEUTRAL] = 0.4, 0.35, 0.25  # ... but CLOSE is the model's own at 2
    proposals = torch.tensor([OPEN, OPEN])  # sampled: neither has a witness
    pos, ids, _ = session.admit(canvas, probs.log(), torch.tensor([1, 2]), proposals, torch.tensor([0.5, 0.35]))
    assert pos.tolist() == [2] and ids.tolist() == [CLOSE] and session.stats.fallback == 1


def test_a_lone_proposal_whose_draft_beside_it_passes_is_admitted_before_any_filler_is_built():
    # witness OPEN N N N CLOSE; the model proposes OPEN at 2 (the witness with it breaks, so does its whole draft
    # OPEN OPEN OPEN CLOSE); its draft just right of it (CLOSE at 3) closes it: admitted, no filler asked for
    mask, asked = 9, []
    fit = recording(asked, NEUTRAL)
    canvas = torch.tensor([OPEN, mask, mask, mask, CLOSE])
    g = guard.Guard(balanced, torch.tensor([OPEN, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE]), mask, lambda *_: ("", ""), fit)
    session = g.begin(canvas)
    logits = torch.full((5, 10), -5.0)
    logits[1, OPEN] = logits[2, OPEN] = logits[3, CLOSE] = 3.0
    pos, ids, _ = session.admit(canvas, logits, torch.tensor([2]), torch.tensor([OPEN]), torch.tensor([0.9]))
    assert pos.tolist() == [2] and ids.tolist() == [OPEN]
    assert session.witness.tolist() == [OPEN, NEUTRAL, OPEN, CLOSE, CLOSE] and balanced(session.witness) == 0
    assert asked == [] and session.stats.checks == 4  # the witness, the draft, the draft left of it, right of it


def test_a_lone_proposal_no_cheap_trial_holds_gives_way_to_a_next_candidate_the_witness_holds_before_any_filler():
    # witness OPEN N N N CLOSE; the model proposes OPEN at 2 (NEUTRAL its second choice) and drafts OPEN everywhere:
    # neither the witness, the draft nor the draft beside it holds OPEN; a filler (CLOSE at 3) would, but its next
    # candidate, NEUTRAL, is the witness's own token: admitted in its place, no filler built (the fillers and sweeps
    # are the search's costly part); a decoder of its own tokens only (`own`) still gets the filler's witness
    mask, asked = 9, []
    fit = recording(asked, CLOSE)
    canvas = torch.tensor([OPEN, mask, mask, mask, CLOSE])
    witness = torch.tensor([OPEN, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE])
    logits = torch.full((5, 10), -5.0)
    logits[:, OPEN], logits[2, NEUTRAL] = 3.0, 2.0
    session = guard.Guard(balanced, witness, mask, lambda *_: ("", ""), fit).begin(canvas)
    pos, ids, scores = session.admit(canvas, logits, torch.tensor([2]), torch.tensor([OPEN]), torch.tensor([0.9]))
    assert pos.tolist() == [2] and ids.tolist() == [NEUTRAL] and asked == []
    assert scores.item() == pytest.approx(torch.softmax(logits[2], 0)[NEUTRAL].item())
    assert session.stats.rejected == session.stats.replaced == 1 and torch.equal(session.witness, witness)
    session = guard.Guard(balanced, witness, mask, lambda *_: ("", ""), fit).begin(canvas)
    pos, ids, _ = session.admit(canvas, logits, torch.tensor([2]), torch.tensor([OPEN]), torch.tensor([0.9]), own=True)
    assert ids.tolist() == [OPEN] and asked == [1] and session.witness.tolist() == [OPEN, CLOSE, OPEN, NEUTRAL, CLOSE]


def test_a_lone_proposal_tries_fillers_beside_it_before_sweeping_the_whole_draft():
    # witness OPEN N N N CLOSE N N N N, holes at 1-4 and 6-7; the model proposes OPEN at 2 and its draft is OPEN at
    # every hole, so neither the witness nor the draft holds it; a filler just left of it (CLOSE at 1) does, and the
    # holes at 6-7, which it does not touch, are never asked for fillers
    mask, asked = 9, []
    fit = recording(asked, CLOSE)
    canvas = torch.tensor([OPEN, mask, mask, mask, mask, NEUTRAL, mask, mask, NEUTRAL])
    witness = torch.tensor([OPEN, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE, NEUTRAL, NEUTRAL, NEUTRAL, NEUTRAL])
    session = guard.Guard(balanced, witness, mask, lambda *_: ("", ""), fit).begin(canvas)
    logits = torch.full((9, 10), -5.0)
    logits[:, OPEN] = 3.0
    pos, ids, _ = session.admit(canvas, logits, torch.tensor([2]), torch.tensor([OPEN]), torch.tensor([0.9]))
    assert pos.tolist() == [2] and ids.tolist() == [OPEN]
    assert session.witness.tolist() == [OPEN, CLOSE, OPEN, NEUTRAL, CLOSE, NEUTRAL, NEUTRAL, NEUTRAL, NEUTRAL]
    assert asked == [1] and session.stats.checks == 6  # the witness, the draft, the draft beside it (3), the filler


def test_a_draft_broken_at_an_unsure_hole_is_read_again_with_the_model_s_close_second_there():
    # the model proposes OPEN at 1 (right); the witness cannot hold it, and its draft breaks at 5, the one hole of
    # five where it is unsure (OPEN, CLOSE half as likely); read with CLOSE there, the draft parses and admits OPEN
    # in three checks, where before OPEN fell to another token; the sure holes keep the model's first choice
    mask, other = 9, 4
    canvas = torch.tensor([OPEN, mask, mask, mask, mask, mask, CLOSE])
    witness = torch.tensor([OPEN, NEUTRAL, NEUTRAL, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE])
    logits = torch.full((7, 10), -5.0)
    logits[1, OPEN], logits[2:5, NEUTRAL] = 4.0, 4.0
    logits[5, OPEN], logits[5, CLOSE] = 2.0, 2.0 + math.log(0.5)
    session = guard.Guard(balanced, witness, mask).begin(canvas)
    pos, ids, _ = session.admit(canvas, logits, torch.tensor([1]), torch.tensor([OPEN]), torch.tensor([0.9]))
    assert pos.tolist() == [1] and ids.tolist() == [OPEN] and session.stats.rejected == 0
    assert session.witness.tolist() == [OPEN, OPEN, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE, CLOSE]
    assert session.stats.checks == 3
    for unsure in ("far", "many"):  # a second half as likely at 5 only, or also at 3 and 4: three holes of five
        logits[5, CLOSE] = 2.0 + math.log(0.2 if unsure == "far" else 0.5)
        logits[3:5, other] = 4.0 + math.log(0.5) if unsure == "many" else -5.0
        session = guard.Guard(balanced, witness, mask).begin(canvas)
        pos, ids, _ = session.admit(canvas, logits, torch.tensor([1]), torch.tensor([OPEN]), torch.tensor([0.9]))
        assert ids.tolist() != [OPEN] and session.stats.rejected == 1, unsure  # no second reading: turned away


def test_a_proposal_whose_first_choice_breaks_the_draft_where_the_model_is_unsure_is_replaced_by_its_second():
    # holes at 1-3; the model proposes OPEN at 1 (sure) and OPEN at 3, where it is unsure (CLOSE half as likely):
    # no witness holds both, and its draft with them breaks; read with its second choice at 3, over the proposal
    # itself, the draft parses: OPEN at 1 is admitted, CLOSE replaces OPEN at 3, in two checks, no filler asked for
    mask, asked = 9, []
    canvas = torch.tensor([OPEN, mask, mask, mask, CLOSE])
    witness = torch.tensor([OPEN, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE])
    fit = recording(asked, NEUTRAL)
    logits = torch.full((5, 10), -5.0)
    logits[1, OPEN], logits[2, NEUTRAL] = 4.0, 4.0
    logits[3, OPEN], logits[3, CLOSE] = 2.0, 2.0 + math.log(0.5)
    session = guard.Guard(balanced, witness, mask, lambda *_: ("", ""), fit).begin(canvas)
    pos, ids, scores = session.admit(canvas, logits, torch.tensor([1, 3]), torch.tensor([OPEN, OPEN]), torch.ones(2))
    assert sorted(zip(pos.tolist(), ids.tolist(), strict=True)) == [(1, OPEN), (3, CLOSE)]
    assert session.witness.tolist() == [OPEN, OPEN, NEUTRAL, CLOSE, CLOSE] and balanced(session.witness) == 0
    assert scores[ids == CLOSE].item() == pytest.approx(torch.softmax(logits[3], 0)[CLOSE].item())  # its own odds
    assert session.stats.rejected == session.stats.replaced == 1 and session.stats.checks == 2 and asked == []
    # a proposal that is not the model's first choice (sampled: OPEN at 2, where NEUTRAL is sure) stays as it is
    session = guard.Guard(balanced, witness, mask, lambda *_: ("", ""), fit).begin(canvas)
    logits[1, OPEN], logits[1, NEUTRAL] = -5.0, 4.0
    pos, ids, _ = session.admit(canvas, logits, torch.tensor([2, 3]), torch.tensor([OPEN, OPEN]), torch.ones(2))
    assert sorted(zip(pos.tolist(), ids.tolist(), strict=True)) == [(2, OPEN), (3, CLOSE)]
    assert session.witness.tolist() == [OPEN, NEUTRAL, OPEN, CLOSE, CLOSE]
    # a decoder that commits the model's own tokens only (`own`) gets no replacement
    session = guard.Guard(balanced, witness, mask, lambda *_: ("", ""), fit).begin(canvas)
    pos, ids, _ = session.admit(
        canvas, logits, torch.tensor([2, 3]), torch.tensor([OPEN, OPEN]), torch.ones(2), own=True
    )
    assert CLOSE not in ids.tolist() and session.stats.replaced == 0


def test_a_first_draft_broken_where_the_model_is_unsure_is_read_again_before_the_fillers_are_searched():
    # no first witness yet: the draft (OPEN at 3, where CLOSE is half as likely) breaks the file, its second reading
    # parses and holds the proposal: it is the witness, and the fillers' search never runs
    mask, searched = 9, []
    canvas = torch.tensor([OPEN, mask, mask, mask, CLOSE])

    def search() -> tuple[torch.Tensor, guard.Stats]:
        searched.append(1)
        return torch.tensor([OPEN, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE]), guard.Stats()

    g = guard.Guard(balanced, None, mask, search=search)
    logits = torch.full((5, 10), -5.0)
    logits[1, OPEN], logits[2, NEUTRAL] = 4.0, 4.0
    logits[3, OPEN], logits[3, CLOSE] = 2.0, 2.0 + math.log(0.5)
    session = g.begin(canvas)
    pos, ids, _ = session.admit(canvas, logits, torch.tensor([1]), torch.tensor([OPEN]), torch.tensor([0.9]))
    assert pos.tolist() == [1] and ids.tolist() == [OPEN] and searched == []
    assert session.witness.tolist() == [OPEN, OPEN, NEUTRAL, CLOSE, CLOSE] and session.stats.checks == 2


def test_the_last_holes_of_a_fill_get_a_second_reading_though_the_model_is_unsure_at_most_of_them():
    # three holes, unsure at two (more than a quarter): the last holes of a fill are where its wrong guesses were
    # left, and a second reading there costs one check
    mask = 9
    canvas = torch.tensor([OPEN, mask, mask, mask, CLOSE])
    session = guard.Guard(balanced, torch.tensor([OPEN, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE]), mask).begin(canvas)
    logits = torch.full((5, 10), -5.0)
    logits[1, NEUTRAL] = 4.0
    logits[2, OPEN], logits[2, NEUTRAL] = 2.0, 2.0 + math.log(0.5)
    logits[3, OPEN], logits[3, CLOSE] = 2.0, 2.0 + math.log(0.5)
    session.drafted, session.read = session.draft(canvas, logits), (canvas, logits)
    assert session.second().tolist() == [OPEN, NEUTRAL, NEUTRAL, CLOSE, CLOSE]


def test_the_second_reading_stops_reading_once_the_model_is_unsure_at_too_many_holes(monkeypatch):
    # eight holes, a quarter of them is 2: unsure at the first three read, it is unsure at too many, and the other
    # five rows are not read (the built-in model is unsure nearly everywhere: most calls stop there)
    mask = 9
    canvas = torch.tensor([OPEN, *[mask] * 8, CLOSE])
    session = guard.Guard(balanced, torch.tensor([OPEN, *[NEUTRAL] * 8, CLOSE]), mask).begin(canvas)
    read = []
    choices = guard.Session.choices
    monkeypatch.setattr(
        guard.Session, "choices", lambda self, lg, holes: read.append(len(holes)) or choices(self, lg, holes)
    )
    logits = torch.zeros(10, 10)  # every token as likely: unsure everywhere
    session.drafted, session.read = session.draft(canvas, logits), (canvas, logits)
    assert session.second() is None and read == [3]
    logits[1:9, NEUTRAL] = 5.0  # sure everywhere: every row read, and nothing to read again
    read.clear()
    session.drafted, session.read, session.seconded = session.draft(canvas, logits), (canvas, logits), None
    assert session.second() is None and read == [3, 5]


def test_the_holes_a_mostly_right_model_leaves_to_the_end_get_a_second_reading_though_it_is_unsure_at_all_of_them():
    # a model right at most holes commits its sure ones first, and what is left is where it is wrong, with the right
    # token second: unsure at all 3 holes left, but at 3 of the 12 the decode began with (a quarter), its second
    # reading is made there (the share is of the decode's holes, not of those left); a decode that began with these
    # 3 holes and a model unsure at all of them gets none (the built-in model, unsure nearly everywhere)
    mask = 9
    start = torch.tensor([OPEN, *[mask] * 12, CLOSE])
    canvas = torch.tensor([OPEN, *[NEUTRAL] * 9, mask, mask, mask, CLOSE])
    logits = torch.full((14, 10), -5.0)
    for hole, (first, second) in zip((10, 11, 12), ((OPEN, NEUTRAL), (NEUTRAL, OPEN), (OPEN, CLOSE)), strict=True):
        logits[hole, first], logits[hole, second] = 2.0, 2.0 + math.log(0.5)
    witness = torch.tensor([OPEN, *[NEUTRAL] * 12, CLOSE])
    session = guard.Guard(balanced, witness, mask).begin(start)
    session.drafted, session.read = session.draft(canvas, logits), (canvas, logits)
    assert session.second().tolist() == [OPEN, *[NEUTRAL] * 9, NEUTRAL, OPEN, CLOSE, CLOSE]
    session = guard.Guard(balanced, torch.tensor([OPEN, NEUTRAL, NEUTRAL, NEUTRAL, CLOSE]), mask).begin(
        torch.tensor([OPEN, mask, mask, mask, CLOSE])
    )
    few = torch.tensor([OPEN, mask, mask, mask, CLOSE])
    session.drafted, session.read = session.draft(few, logits[9:]), (few, logits[9:])
    assert session.second() is None


def test_the_draft_is_the_model_s_top_token_at_every_hole_never_the_mask():
    mask = 9
    canvas = torch.tensor([OPEN, mask, mask, CLOSE])
    session = guard.Guard(balanced, torch.tensor([OPEN, NEUTRAL, NEUTRAL, CLOSE]), mask).begin(canvas)
    logits = torch.zeros(4, 10)
    logits[1, mask], logits[1, 4], logits[2, 5], logits[2, mask] = 9.0, 3.0, 7.0, 6.0  # the mask tops row 1 only
    logits[0, 6] = logits[3, 6] = 9.0  # rows of committed tokens are not read
    assert session.draft(canvas, logits).tolist() == [OPEN, 4, 5, CLOSE]


# ---------------------------------------------------------------- the check, on hand-made partial fills


def job_for(shipped, text: str, lang: str = "python") -> fill.Job:
    run = RunSettings(decoder="low-confidence", options={"guard": "true"}, lang=lang)
    job = fill.infill_job(text, None, shipped, run)
    assert not job.notes, job.notes
    return job


def partial(shipped, job: fill.Job, pieces: dict[int, str]) -> torch.Tensor:
    """The plan's canvas with single-token pieces committed at hole offsets."""
    tokens = job.plan.canvas.tokens.clone()
    start = job.plan.positions[0].start
    for offset, text in pieces.items():
        token = guard.single_token(shipped.tokenizer, text)
        assert token is not None, f"{text!r} is not one token"
        tokens[start + offset] = token
    return tokens


def completable(job: fill.Job, tokens: torch.Tensor) -> bool:
    assert job.decoder.completer.witness is not None  # the first search, run now (a decode runs it when it needs it)
    session = job.decoder.completer.begin(job.plan.canvas.tokens)
    changed = (tokens != job.plan.canvas.tokens).nonzero().squeeze(-1)
    draft = torch.where(
        tokens == job.plan.canvas.mask_id, session.witness, tokens
    )  # no model here: the draft adds nothing
    found = session.complete(tokens, draft, changed)
    if found is not None:
        assert job.guarding.judge(found) == 0
        assert torch.equal(found[tokens != job.plan.canvas.mask_id], tokens[tokens != job.plan.canvas.mask_id])
    return found is not None


def test_an_unclosed_string_before_holes_is_completed_by_closing_it(shipped):
    job = job_for(shipped, "x = ⟦fill:5⟧\ny = 2\n")
    assert completable(job, partial(shipped, job, {0: '"'}))


def test_an_unclosed_string_with_no_hole_after_it_cannot_be_completed(shipped):
    job = job_for(shipped, "x = ⟦fill:3⟧\ny = 2\n")
    assert not completable(job, partial(shipped, job, {0: "1", 1: "+", 2: '"'}))


def test_a_closer_with_no_opener_cannot_be_completed(shipped):
    job = job_for(shipped, "x = ⟦fill:4⟧\n")
    assert not completable(job, partial(shipped, job, {0: ")"}))


def test_a_closer_with_a_hole_before_it_can_be_completed(shipped):
    job = job_for(shipped, "x = ⟦fill:4⟧\n")
    assert completable(job, partial(shipped, job, {3: ")"}))


def test_a_dedent_that_matches_no_block_cannot_be_completed(shipped):
    job = job_for(shipped, "if a:\n    b = 1\n⟦fill:4⟧\n")
    assert not completable(job, partial(shipped, job, {0: "  ", 1: "c"}))
    assert completable(job, partial(shipped, job, {0: "    ", 1: "c"}))


def test_a_block_opener_needs_a_body_the_holes_can_give(shipped):
    job = job_for(shipped, "def f():\n⟦fill:6⟧\n")
    assert completable(job, partial(shipped, job, {0: "    ", 1: "if"}))


def test_holes_too_few_for_the_closers_they_need(shipped):
    job = job_for(shipped, "x = ⟦fill:5⟧\n")
    four = {0: "(", 1: "[", 2: "{", 3: "("}
    assert not completable(job, partial(shipped, job, four))  # one hole cannot close four brackets
    roomy = job_for(shipped, "x = ⟦fill:9⟧\n")
    assert completable(roomy, partial(shipped, roomy, four))


def test_the_first_witness_parses_and_fits_the_holes(shipped):
    for text in ("def f(x):\n    ⟦fill:7⟧\n", "x = [1, ⟦fill:3⟧]\n", "class A:\n⟦fill:12⟧\n\nprint(A)\n"):
        job = job_for(shipped, text)
        witness = job.decoder.completer.witness
        assert not bool((witness == shipped.mask_id).any())
        assert job.guarding.judge(witness) == 0


def test_code_that_cannot_parse_whatever_the_holes_hold_is_said_and_decoded_unguarded(shipped):
    run = RunSettings(decoder="low-confidence", options={"guard": "true"}, lang="python")
    job = fill.infill_job("x = ⟦fill:3⟧\ndef broken(:\n", None, shipped, run)
    assert job.decoder.completer.witness is None, "no filler fits: the first draft is the last chance"
    result = job.run()
    assert result.guard is None
    assert result.notes == (
        "guard: no filling of the holes parses (does the code around them parse?); decoding unguarded",
    )


def test_a_first_witness_can_come_from_the_model_s_first_draft(shipped):
    # `f(1⟦fill:1⟧ 2)` cannot be made valid by fillers, but the model's own `,` completes it
    run = RunSettings(decoder="low-confidence", options={"guard": "true"}, lang="python")
    job = fill.infill_job("x = f(1⟦fill:1⟧ 2)\n", None, shipped, run)
    assert job.decoder.completer.witness is None
    rn = guard.single_token(shipped.tokenizer, ",")
    assert rn is not None

    def predict(tokens):
        logits = torch.zeros(len(tokens), 4096)
        logits[:, rn] = 10.0
        return logits

    job.dlm = dataclasses.replace(job.dlm, predict=predict)
    result = job.run()
    assert result.guard is not None and not result.guard["guard_gave_up"]
    assert result.text == "x = f(1, 2)\n" and not result.breakage.broken


def test_no_language_no_guard_and_a_note(shipped):
    run = RunSettings(decoder="threshold", options={"guard": "true"})
    job = fill.infill_job("x = ⟦fill:3⟧\n", None, shipped, run)
    assert job.notes and "language is unknown" in job.notes[0]


# ---------------------------------------------------------------- the guarantee, on random spans of real files


def stand_in(dlm, seed: int, worst: bool):
    """`dlm` with a predict that proposes random tokens, or (worst) the most harmful ones it can."""
    if "vocab" not in VOCAB:
        VOCAB["vocab"] = dlm.predict(torch.tensor([dlm.bos_id or 0])).shape[-1]
    vocab = VOCAB["vocab"]
    nasty = torch.tensor(sorted({t for t in (guard.single_token(dlm.tokenizer, s) for s in NASTY) if t is not None}))
    g = torch.Generator().manual_seed(seed)

    def predict(tokens):
        holes = (tokens == dlm.mask_id).nonzero().squeeze(-1)  # only hole rows are ever read: the rest stay 0
        logits = torch.zeros(len(tokens), vocab)  # (L, V)
        rows = torch.randn(len(holes), vocab, generator=g) * 3  # (H, V)
        if worst:
            rows[:, nasty] += 12 + 4 * torch.rand(len(holes), len(nasty), generator=g)
        logits[holes] = rows
        return logits

    # a short context: the canvas is a window of the file (as for a long file), the judge still reads all of it
    return dataclasses.replace(dlm, predict=predict, cached=None, forward_batch=None, name="stand-in", context=160)


VOCAB: dict[str, int] = {}
DECODES = [("low-confidence", {"tokens_per_step": n}) for n in (1, 2, 4, 8)] + [
    ("threshold", {}),
    ("factor", {}),
    ("dus", {}),
    ("dico", {}),
    ("syntax-guard", {}),
    ("wino", {}),
]


def random_job(rnd: random.Random, source: str, lang: str, dlm) -> fill.Job:
    """A random span: 1-3 lines at their own length or at 1-12 tokens, or 0-8 characters inside a line
    replaced by a hole of 1-12 tokens (their text the hidden original, as a benchmark's middle)."""
    name, options = rnd.choice(DECODES)
    lines = source.split("\n")
    run = RunSettings(decoder=name, options={**options, "guard": "true"}, lang=lang, seed=rnd.randrange(1000))
    if rnd.random() < 0.5:
        first = rnd.randrange(1, len(lines) - 1)
        span = (first, min(first + rnd.randrange(3), len(lines) - 1))
        length = rnd.choice([None, rnd.randint(1, 12)])
        return fill.infill_job(source, span, dlm, dataclasses.replace(run, length=length))
    row = rnd.randrange(len(lines) - 1)
    at = sum(len(line) + 1 for line in lines[:row]) + rnd.randrange(len(lines[row]) + 1)
    cut = min(rnd.randrange(0, 9), len(lines[row]) - (at - sum(len(line) + 1 for line in lines[:row])))
    marked = source[:at] + f"⟦fill:{rnd.randint(1, 12)}⟧" + source[at + cut :]
    plan = spans.plan_infill(marked, dlm.vocab, None, None)
    decoder = wiring.make_decoder(name, run.options, None)
    return wiring.wired(
        fill.Job(
            plan, dlm, decoder, run.seed, lang, originals=(source[at : at + cut],), processors=fill.exact_length(dlm)
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize("lang", FILES)
def test_guarded_fills_of_random_spans_always_parse(lang, shipped):
    source = (DATA / FILES[lang]).read_text()
    assert syntax.check(source, lang).ok
    rnd = random.Random(lang)
    guarded = 0
    for i in range(SPANS):
        dlm = stand_in(shipped, i, worst=i % 2 == 1)
        job = random_job(rnd, source, lang, dlm)
        job.decoder.completer and setattr(
            job.decoder.completer, "checks_per_call", 6
        )  # fewer tries: the guarantee does not need them
        result = job.run()
        assert result.calls <= job.decoder.max_calls(job.plan.canvas.n_holes)
        if job.notes:  # no filler fits (a hole inside a word of a string, say): said, and decoded unguarded
            continue
        guarded += 1
        assert not result.breakage.broken, (i, result.text)
        assert syntax.check(result.text, lang).ok or not syntax.check(job.before, lang).ok, (i, result.text)
    assert guarded >= SPANS * 0.6, f"only {guarded} of {SPANS} spans were guarded"


# ---------------------------------------------------------------- what the guard picks for the model


def test_a_comment_start_is_never_a_replacement(shipped):
    # `x = 1 +` then one hole: `#` would make anything parse; the guard must not choose it for the model
    job = job_for(shipped, "x = 1 +⟦fill:1⟧\n")
    completer = job.decoder.completer
    hash_ = guard.single_token(shipped.tokenizer, " #")
    one = guard.single_token(shipped.tokenizer, " 1")
    session = completer.begin(job.plan.canvas.tokens)
    logits = torch.full((len(job.plan.canvas.tokens), 4096), -10.0)
    pos = job.plan.positions[0].start
    logits[pos, hash_], logits[pos, one] = 5.0, 4.0
    assert session.options(logits, pos, hash_, 0.7)[0][0] == hash_, "the model's own choice comes first"
    bad = guard.single_token(shipped.tokenizer, ")")
    picked = [t for t, _ in session.options(logits, pos, bad, 0.1)]
    assert hash_ not in picked and one in picked


def test_indentation_candidates_complete_the_line_to_a_level_near():
    before = "def f(x):\n    if x:\n        y = 1\n       "
    after = ":\n            z = 2\n"
    assert " " in guard.indents(before, after)  # 7 spaces typed: one more reaches the body's level
    assert guard.indents("x = 1\nprint(", ")\n") == []  # code on the line: no statement here
    assert "    " in guard.indents("def f():\n", "    return 1\n") and "" in guard.indents("def f():\n", "")


def test_the_judge_s_tree_sitter_first_look_agrees_with_the_full_rule(shipped):
    source = (DATA / "sample.py").read_text()
    run = RunSettings(decoder="low-confidence", options={"guard": "true"}, lang="python")
    job = fill.infill_job(source, (20, 22), shipped, run)
    rnd = random.Random(0)
    start = job.plan.positions[0]
    pieces = [
        guard.single_token(shipped.tokenizer, t)
        for t in ("x", " ", "(", ")", ":", "\n", "    ", "pass", "#", "return", "'")
    ]
    for _ in range(60):
        tokens = job.decoder.completer.witness.clone()
        for p in range(start.start, start.stop):
            if rnd.random() < 0.3:
                tokens[p] = rnd.choice([t for t in pieces if t is not None])
        canvas = dataclasses.replace(job.plan.canvas, tokens=tokens, span=None)
        filled = spans.splice(job.plan, canvas, shipped.tokenizer, drop_ids=shipped.special_ids)
        assert (job.guarding.judge(tokens) == 0) == (not job.breakage(filled, filled.text).broken)


# ---------------------------------------------------------------- first witnesses where the guard used to give up

ATTACKS = [  # (language, file with a hole): each cut once left the guard without a first witness
    ("python", 'def f(x):\n    """Doc⟦fill:12⟧\n        return x\n'),  # close the docstring, then open a block
    ("python", "def f():\n⟦fill:8⟧\n        g()\n    except ValueError:\n        pass\n"),  # the `try:` line
    ("python", "try:\n    a = 1\nexcept E:\n    a = None\n⟦fill:8⟧\n    b = 2\nexcept E:\n    b = None\n"),
    ("python", "def f(x):\n    if x:\n        try:\n⟦fill:16⟧\n\ndef g():\n    pass\n"),  # a `try` whose `except` went
    ("python", "def f():\n  ⟦fill:6⟧  x = 1\n    return x\n"),  # a cut inside leading indentation
    ("python", "def f(x):\n\tif x:\n⟦fill:6⟧\n\t\ty = 2\n\telse:\n\t\ty = 3\n\treturn y\n"),  # tabs
    ("python", "d = {'a': 1, 'b': ⟦fill:4⟧: 3, 'd': 4}\n"),  # a dict literal cut between items
    ("python", "d = {\n    'a': 1,\n    'b':⟦fill:4⟧\n    'c': 3,\n}\n"),
    ("python", 'def f():\n⟦fill:6⟧ docstring.\n    """\n    return 1\n'),  # the code after starts in a string
    ("python", "for i in range(3):\n    y = ⟦fill:6⟧ x > 1:\n        print(x)\n"),  # the hole ends in a head
    ("python", "def f(self):\n    self.pos = j⟦fill:8⟧i:j]\n    return data\n"),
    ("python", "def f(s):\n    if s:\n⟦fill:3⟧\n            return s.encode()\n        except E:\n            pass\n"),
    ("python", 'class A:\n    r"⟦fill:3⟧\n    Doc.\n    """\n    x = 1\n'),  # `r"` typed, `""` cut
    ("python", "def f(a):\n    a = 1\n  ⟦fill:6⟧\n          b=2)\n    return a\n"),  # closers with no opener
    ("python", "def f(a):\n    if a:\n     ⟦fill:1⟧ b = 1\n    return a\n"),  # indentation typed on both sides
    ("python", "def f(a):\n⟦fill:8⟧\n        if a:\n            break\n    return a\n"),  # a loop's head
    ("c", "#define X 1\n#if X\nint a = ⟦fill:4⟧\n#endif\nint b;\n"),  # preprocessor lines
    ("rust", 'fn main() { let s = ⟦fill:3⟧b"#; }\n'),  # a raw string the hole must open
]


@pytest.mark.parametrize("lang, text", ATTACKS, ids=[f"{lang}-{i}" for i, (lang, _) in enumerate(ATTACKS)])
def test_the_attack_classes_have_a_first_witness(shipped, lang, text):
    job = job_for(shipped, text, lang)
    witness = job.decoder.completer.witness
    assert witness is not None, "no first witness: the decode would run unguarded"
    held = job.plan.canvas.tokens != shipped.mask_id
    assert torch.equal(witness[held], job.plan.canvas.tokens[held]) and job.guarding.judge(witness) == 0


def test_a_window_that_begins_inside_a_docstring_reads_the_literal_state_of_the_whole_text():
    doc = 'def f():\n    """' + "text line\n" * 800 + '    """\n    x = '
    assert guard.open_literal(doc, "python") == ""
    assert guard.open_literal(doc + '"abc', "python") == '"'
    assert guard.open_literal("x = 1  # it's", "python") == "\n"
    assert guard.open_literal("int x; /* a", "c") == "*/" and guard.open_literal("let s = `a ${b", "javascript") == "`"


# ---------------------------------------------------------------- no comment escape


def test_a_comment_that_would_swallow_the_user_s_code_after_the_hole_is_never_admitted(shipped):
    # `x = 1 #  + 2` parses: the judge alone would take the model's `#`, and `+ 2` would be lost in a comment
    job = job_for(shipped, "x = 1⟦fill:2⟧ + 2\ny = 3\n")
    hash_ = guard.single_token(shipped.tokenizer, " #")
    assert not completable(job, partial(shipped, job, {1: " #"}))
    assert completable(job, partial(shipped, job, {0: " +", 1: " 1"}))
    one = guard.single_token(shipped.tokenizer, " 1")

    def predict(tokens):
        logits = torch.zeros(len(tokens), 4096)
        logits[:, hash_], logits[:, one] = 9.0, 6.0
        return logits

    job.dlm = dataclasses.replace(job.dlm, predict=predict)
    result = job.run()
    assert "+ 2" in result.text and "#" not in result.text.split("\n")[0], result.text


def test_a_comment_the_user_s_own_line_ends_in_may_stay_one(shipped):
    # the hole replaces code and a comment that run to the end of the line: a comment may end the fill there
    job = job_for(shipped, "x = 1⟦fill:3⟧\ny = 3\n")
    assert completable(job, partial(shipped, job, {1: " #"}))


def test_a_witness_never_hides_a_held_token_in_a_comment_it_opened(shipped):
    # `x =  X # =` parses, but the model's ` =` at the hole's end would say nothing there: only a comment holds it
    job = job_for(shipped, "x = ⟦fill:4⟧\ny = 2\n")
    assert not completable(job, partial(shipped, job, {3: " ="}))
    assert completable(job, partial(shipped, job, {1: " #", 3: " ="})), "the model's own comment may hold its tokens"


def test_a_comment_start_the_model_itself_puts_there_holds_its_tokens_after_it(shipped):
    # a comment line decoded in any order: ` =` proposed at the hole's end, its ` #` not yet committed; the model's
    # draft has ` #` there (its most likely token), so it is the model's comment, not one the search put in, and
    # ` =` is admitted; with a draft that has no comment start there, ` =` has no witness, as before
    job = job_for(shipped, "x = ⟦fill:4⟧\ny = 2\n")
    start = job.plan.positions[0].start
    equals = guard.single_token(shipped.tokenizer, " =")

    def admitted(draft: dict[int, str]) -> tuple[list[int], list[int], torch.Tensor]:
        session = job.decoder.completer.begin(job.plan.canvas.tokens)
        drafted = partial(shipped, job, draft)
        logits = torch.full((len(drafted), 4096), -10.0)
        logits[torch.arange(len(drafted)), drafted] = 5.0
        canvas = job.plan.canvas.tokens
        pos, ids, _ = session.admit(
            canvas, logits, torch.tensor([start + 3]), torch.tensor([equals]), torch.tensor([0.9])
        )
        return (pos - start).tolist(), ids.tolist(), session.witness

    pos, ids, witness = admitted({0: " 1", 1: " #", 2: " =", 3: " ="})
    assert pos == [3] and ids == [equals]
    assert job.guarding.judge(witness) == 0 and witness[start + 1] == guard.single_token(shipped.tokenizer, " #")
    pos, ids, witness = admitted({0: " 1", 1: " +", 2: " 2", 3: " ="})
    assert (3, equals) not in set(zip(pos, ids, strict=True)) and job.guarding.judge(witness) == 0


def test_proposals_the_witness_holds_are_admitted_with_no_check_and_no_draft(shipped, monkeypatch):
    # beside a model that is right, most calls propose the witness's own tokens: no check, and the draft (an argmax
    # over every hole's row) is not read; a proposal the witness does not hold goes through the search as before
    job = job_for(shipped, "x = ⟦fill:4⟧\ny = 2\n")
    witness = job.decoder.completer.witness.clone()  # the first search, run before the decode
    session = job.decoder.completer.begin(job.plan.canvas.tokens)
    canvas, start = job.plan.canvas.tokens, job.plan.positions[0].start
    drafts = []
    real = session.draft
    monkeypatch.setattr(session, "draft", lambda *a: drafts.append(1) or real(*a))
    logits = torch.zeros(len(canvas), 4096)
    checks = session.stats.checks
    at = torch.tensor([start + 2, start])
    pos, ids, scores = session.admit(canvas, logits, at, witness[at], torch.tensor([0.3, 0.9]))
    assert pos.tolist() == [start, start + 2] and ids.tolist() == witness[[start, start + 2]].tolist()  # surest first
    assert scores.tolist() == pytest.approx([0.9, 0.3]) and torch.equal(session.witness, witness)
    assert session.stats.checks == checks and drafts == []
    seven, eight = (guard.single_token(shipped.tokenizer, t) for t in (" 7", " 8"))
    other = seven if int(witness[start]) != seven else eight  # a token the witness does not hold there
    session.admit(canvas, logits, torch.tensor([start]), torch.tensor([other]), torch.tensor([0.5]))
    assert drafts == [1]


def test_a_first_draft_that_parses_is_the_witness_and_the_fillers_are_never_searched(shipped):
    # the first witness search (fillers for every hole of the plan) runs only when a call needs it: a model whose
    # first draft parses decodes guarded without it; one whose draft does not parse gets it at its first call
    one, close = (guard.single_token(shipped.tokenizer, t) for t in (" 1", ")"))

    def decode(token: int) -> tuple[fill.Job, dict]:
        job = job_for(shipped, "x = ⟦fill:1⟧\ny = 2\n")

        def predict(tokens):
            logits = torch.zeros(len(tokens), 4096)
            logits[:, token] = 9.0
            return logits

        job.dlm = dataclasses.replace(job.dlm, predict=predict)
        return job, job.run().guard

    job, stats = decode(one)  # `x =  1` parses: the first call's draft is a witness
    assert job.decoder.completer.search is not None and job.decoder.completer.found is None  # never run
    assert stats["guard_first_seconds"] == 0.0 and stats["guard_checks"] <= 3
    job, stats = decode(close)  # `x = )`: the draft does not parse, the fillers' search runs in the first call
    assert job.decoder.completer.search is None and job.decoder.completer.found is not None
    assert stats["guard_first_seconds"] > 0 and not stats["guard_gave_up"]


def test_an_early_end_before_any_call_runs_the_first_search_and_ends_on_its_witness(shipped):
    job = job_for(shipped, "x = ⟦fill:2⟧\ny = 2\n")
    canvas = job.plan.canvas.tokens
    job.decoder.completer.begin(canvas)
    close = guard.single_token(shipped.tokenizer, ")")
    ids = job.guarding.ending(canvas, torch.full((2,), close))  # the server's time ran out before the first call
    filled = canvas.clone()
    filled[canvas == job.plan.canvas.mask_id] = ids
    assert job.guarding.judge(filled) == 0 and job.guarding.rest == "witness"
    assert job.decoder.completer.search is None and job.decoder.completer.last.first > 0


def test_a_witness_comment_that_hides_a_proposal_is_searched_even_when_the_witness_holds_it(shipped, monkeypatch):
    # the witness holds a filler's ` #` and ` =` after it on its line: ` =` proposed there is its own token, but only
    # its comment holds it, so the call searches (reads its draft) and, with a draft that has no comment there,
    # turns it away
    job = job_for(shipped, "x = ⟦fill:4⟧\ny = 2\n")
    session = job.decoder.completer.begin(job.plan.canvas.tokens)
    session.witness = partial(shipped, job, {0: " 1", 1: " #", 2: " =", 3: " ="})
    start, equals = job.plan.positions[0].start, guard.single_token(shipped.tokenizer, " =")
    drafts = []
    real = session.draft
    monkeypatch.setattr(session, "draft", lambda *a: drafts.append(1) or real(*a))
    drafted = partial(shipped, job, {0: " 1", 1: " +", 2: " 2", 3: " ="})
    logits = torch.full((len(drafted), 4096), -10.0)
    logits[torch.arange(len(drafted)), drafted] = 5.0
    pos, ids, _ = session.admit(
        job.plan.canvas.tokens, logits, torch.tensor([start + 3]), torch.tensor([equals]), torch.tensor([0.9])
    )
    assert drafts == [1] and (start + 3, equals) not in set(zip(pos.tolist(), ids.tolist(), strict=True))


def test_the_witness_s_own_token_inside_its_comment_is_not_admitted_unsearched(shipped):
    # the witness holds a filler's ` #` and then ` =` on the same line; ` =` proposed there is the witness's own
    # token, which the guard used to admit without a check (the comment start was left for a later call to commit)
    job = job_for(shipped, "x = ⟦fill:4⟧\ny = 2\n")
    session = job.decoder.completer.begin(job.plan.canvas.tokens)
    session.witness = partial(shipped, job, {0: " 1", 1: " #", 2: " =", 3: " ="})
    assert job.guarding.judge(session.witness) == 0
    proposal = partial(shipped, job, {3: " ="})
    at = (proposal != job.plan.canvas.tokens).nonzero().squeeze(-1)
    assert session.complete(proposal, session.witness, at) is None
    code = partial(shipped, job, {0: " 1"})  # a token the comment does not hide keeps the witness as it is
    assert session.complete(code, session.witness, code.ne(job.plan.canvas.tokens).nonzero().squeeze(-1)) is not None


def test_an_unsure_comment_start_that_opens_its_line_gives_way_to_the_model_s_code_token(shipped):
    # beside a model whose line broke the witness, the fallback's blanks were followed by the model's own ` #`, and
    # the fill was a comment line where the unguarded model wrote code: a comment start that would open its line
    # and that the model is less than half sure of gives way to its most likely code token, when that has a witness
    job = job_for(shipped, "x = 1\n⟦fill:4⟧\ny = 2\n")
    start = job.plan.positions[0].start
    hash_, zed, why, one = (guard.single_token(shipped.tokenizer, t) for t in (" #", "z", "y", " 1"))

    def admitted(comment: float, pieces: dict[int, str], at: int) -> tuple[list[int], list[int]]:
        session = job.decoder.completer.begin(job.plan.canvas.tokens)
        canvas = partial(shipped, job, pieces)
        logits = torch.full((len(canvas), 4096), -10.0)
        logits[start + at, hash_], logits[start + at, zed], logits[start + at, why] = comment, 0.7, 0.5
        pos, ids, _ = session.admit(
            canvas, logits, torch.tensor([start + at]), torch.tensor([hash_]), torch.tensor([0.4])
        )
        assert job.guarding.judge(session.witness) == 0 and bool((session.witness[pos] == ids).all())
        return (pos - start).tolist(), ids.tolist()

    assert admitted(1.0, {}, 0) == ([0], [zed])  # ` #` at 0.41: the line is written as code, `z` first
    assert admitted(3.0, {}, 0) == ([0], [hash_])  # at 0.87: the model's comment line stays
    assert admitted(1.0, {0: "z"}, 1) == ([1], [hash_])  # after code on its line: a comment at its end stays
    assert one is not None  # (the tokens used are single tokens of the built-in vocabulary)
