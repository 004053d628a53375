"""syntax-guard on hand-made logits with a hand-made oracle: what it commits, reopens and repairs,
and that its budgets bound every decode; without an oracle it is its parallel rule alone."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch

from dlmcode.core.canvas import Canvas
from dlmcode.core.errors import UsageError
from dlmcode.core.vocab import Vocab
from dlmcode.decoders import build
from dlmcode.decoders.factor import Factor
from dlmcode.decoders.syntax_guard import SyntaxGuard
from dlmcode.jobs import fill, wiring
from dlmcode.text import guard, spans
from dlmcode.text.oracle import Verdict

from tiny import unmatched

V, MASK, GOOD, BAD = 10, 10, 1, 9  # vocabulary 0..9, mask id outside it


def canvas(holes: int) -> Canvas:
    """Two context tokens, `holes` holes, one context token."""
    return Canvas(torch.tensor([3, 4] + [MASK] * holes + [5]), MASK)


def logits_for(proposals: dict[int, tuple[int, float]], length: int) -> torch.Tensor:
    """(L, V): position p proposes token t with logit s over zeros (confidence e^s / (e^s + 9))."""
    out = torch.zeros(length, V)
    for p, (t, s) in proposals.items():
        out[p, t] = s
    return out


class Scripted:
    """predict: the proposals of call n are script[min(n, last)]; counts calls."""

    def __init__(self, *script: dict[int, tuple[int, float]]):
        self.script, self.calls = script, 0

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return logits_for(self.script[min(self.calls, len(self.script)) - 1], len(tokens))


class BadToken:
    """An oracle: a BAD token at position p puts `region(p)` in a new error; records each draft."""

    def __init__(self, region=lambda p: [p]):
        self.region, self.drafts = region, []

    def __call__(self, tokens: torch.Tensor) -> Verdict:
        self.drafts.append(tokens.tolist())
        assert MASK not in tokens.tolist(), "the oracle sees a whole draft"
        regions = [torch.tensor(self.region(p)) for p in (tokens == BAD).nonzero().squeeze(-1).tolist()]
        flagged = torch.zeros(len(tokens), dtype=torch.bool)
        for r in regions:
            flagged[r] = True
        return Verdict(flagged, tuple(regions), bool(regions))


def decode(decoder, start: Canvas, predict):
    budget = decoder.max_calls(start.n_holes)
    steps = list(itertools.islice(decoder(start, predict, torch.Generator().manual_seed(0)), budget + 1))
    assert len(steps) <= budget
    for i, step in enumerate(steps):
        assert step.index == i and step.calls == i + 1, "one model call per step"
    return steps


def trace(steps):
    return [(sorted(s.filled.tolist()), sorted(s.reopened.tolist())) for s in steps]


def test_a_proposal_inside_an_error_region_is_not_committed():
    # holes 2..7; position 4 proposes a BAD token whose error covers 4 and 5; the rest are sure.
    sure = {p: (GOOD, 12.0) for p in range(2, 8)}
    predict = Scripted(sure | {4: (BAD, 11.0), 5: (GOOD, 11.5)})
    guard = SyntaxGuard(flags=True, factor=1.0, floor=1, spread=False, repairs=0, oracle=BadToken(lambda p: [p, p + 1]))
    steps = decode(guard, canvas(6), predict)
    assert trace(steps) == [
        ([2, 3, 6, 7], []),
        ([5], []),
        ([4], []),
    ]  # then only the most confident flagged one per call
    assert steps[0].info["flagged"] == 2.0
    assert steps[-1].canvas.tokens[2:8].tolist() == [GOOD, GOOD, BAD, GOOD, GOOD, GOOD]


def test_a_persisting_error_reopens_committed_tokens_within_budget_then_the_broken_span_is_repaired():
    # holes 2, 3, 4. Call 1: position 2 is sure, 3 and 4 are not (factor 0.1 commits only 2).
    # From call 2 on position 3 proposes BAD, whose error covers committed position 2.
    first = {2: (GOOD, 12.0), 3: (GOOD, 1.0), 4: (GOOD, 0.5)}
    later = {2: (GOOD, 12.0), 3: (BAD, 1.0), 4: (GOOD, 0.5)}
    guard = SyntaxGuard(
        flags=True,
        factor=0.1,
        floor=1,
        topup=False,
        spread=False,
        patience=2,
        reopen=0.5,
        reopen_per_call=1,
        repairs=1,
        oracle=BadToken(lambda p: [p - 1, p]),
    )
    steps = decode(guard, canvas(3), Scripted(first, later))
    assert trace(steps) == [
        ([2], []),  # only the sure one
        ([4], []),  # 3 is in an error (with committed 2): commit the safe 4; 2 has been flagged once
        ([3], [2]),  # 2 flagged twice in a row: reopened (budget floor(0.5 * 3) = 1); nothing safe: the best, 3
        ([2], []),  # reopen budget spent: 2 comes back
        ([2], [2, 3]),  # complete but broken: the repair reopens the error region {2, 3} and decodes it again
        ([3], []),
    ]
    assert [s.info.get("repair") for s in steps] == [None, None, None, None, 1, 1]
    assert len(steps) == 6 <= guard.max_calls(3) == 3 + 1 + 1 * 3


def two_regions(tokens: torch.Tensor) -> Verdict:
    """An oracle that flags no proposal but finds errors in {2, 3, 4} and {7} while position 7 holds BAD."""
    regions = (torch.tensor([2, 3, 4]), torch.tensor([7])) if int(tokens[7]) == BAD else ()
    return Verdict(torch.zeros(len(tokens), dtype=torch.bool), regions, bool(regions))


def test_a_repair_reopens_the_smallest_new_error_region_cut_to_repair_size():
    sure = {p: (GOOD, 12.0) for p in range(2, 9)}
    predict = Scripted(sure | {7: (BAD, 12.0)}, sure)  # call 1 drafts BAD at 7, later calls GOOD
    guard = SyntaxGuard(flags=True, factor=1.0, floor=1, spread=False, repairs=2, oracle=two_regions)
    steps = decode(guard, canvas(7), predict)
    assert trace(steps) == [([2, 3, 4, 5, 6, 7, 8], []), ([7], [7])], (
        "the one-token region is repaired, then it is valid"
    )
    assert steps[-1].canvas.tokens[7] == GOOD
    cut = SyntaxGuard(
        repair_size=2, oracle=lambda t: Verdict(torch.zeros(10, dtype=torch.bool), (torch.tensor([2, 3, 4]),), True)
    )
    assert cut.broken_region(canvas(7)).tolist() == [2, 3]
    assert SyntaxGuard(oracle=two_regions).broken_region(Canvas(torch.tensor([3, 4] + [GOOD] * 7 + [5]), MASK)) is None


@pytest.mark.parametrize("seed", range(4))
def test_budgets_bound_every_decode_against_an_oracle_that_flags_everything(seed, make_tiny_model, make_canvas):
    model = make_tiny_model(seed=seed)
    start = make_canvas([3, 5, 2, 6, 3], model.mask_id, model.vocab)

    def hostile(tokens):
        span = torch.zeros(len(tokens), dtype=torch.bool)
        span[start.holes] = True
        return Verdict(span, (start.holes.nonzero().squeeze(-1),), True)

    guard = SyntaxGuard(flags=True, reopen=0.5, reopen_per_call=3, patience=1, repairs=3, repair_size=4, oracle=hostile)
    steps = decode(guard, start, model)
    reopened = sum(len(s.reopened) for s in steps)
    assert reopened == guard.reopen_budget(11) + 3 * 4, "both budgets are spent, and no more"
    assert sum(len(s.filled) for s in steps) == 11 + reopened
    assert len(steps) <= guard.max_calls(11) == 11 + 5 + 3 * 4
    assert not bool(steps[-1].canvas.holes.any())
    assert model.calls == steps[-1].calls


def test_without_an_oracle_it_is_its_parallel_rule(make_tiny_model, make_canvas):
    model = make_tiny_model()
    start = make_canvas([4, 9, 3, 6, 2], model.mask_id, model.vocab)
    for f in (0.5, 2.0, 8.0):
        ours = decode(SyntaxGuard(factor=f, floor=1, spread=False), start, model)
        theirs = list(Factor(factor=f)(start, model, torch.Generator().manual_seed(0)))
        assert [s.filled.tolist() for s in ours] == [s.filled.tolist() for s in theirs]
        assert torch.equal(ours[-1].canvas.tokens, theirs[-1].canvas.tokens)
    floored = decode(SyntaxGuard(factor=0.01, floor=4, spread=False), start, model)
    assert [len(s.filled) for s in floored] == [4, 4, 4, 3]


def test_settings_are_checked_and_max_calls_counts_every_reopen():
    assert SyntaxGuard(reopen=0.25, repairs=2, repair_size=16).max_calls(40) == 40 + 10 + 32
    assert SyntaxGuard().max_calls(40) == 40  # defaults: no reopening, no repairs (the guard makes them pointless)
    assert SyntaxGuard(reopen=0.0, repairs=0).max_calls(7) == 7
    for bad in ({"floor": "0"}, {"reopen": "1.5"}, {"patience": "0"}, {"factor": "0"}, {"repairs": "-1"}):
        with pytest.raises(UsageError, match="syntax-guard"):
            build("syntax-guard", bad)


def test_a_job_without_a_language_says_so_in_one_line():
    class Tok:
        def encode(self, text):
            return [ord(c) for c in text]

        def decode(self, ids):
            return "".join(map(chr, ids))

    plan = spans.plan_infill("x = ⟦fill:2⟧\n", Vocab(Tok(), 0, 100), None, None)
    dlm = SimpleNamespace(tokenizer=Tok(), special_ids=frozenset(), predict=None)
    with pytest.raises(UsageError, match=r"^decoder 'syntax-guard' needs the code's language: name it with --lang"):
        wiring.wired(fill.Job(plan, dlm, build("syntax-guard"), 0, None))
    job = wiring.wired(fill.Job(plan, dlm, build("syntax-guard"), 0, "python"))
    assert job.decoder.oracle is not None and job.decoder.oracle.lang == "python"
    plain = wiring.wired(fill.Job(plan, dlm, build("factor"), 0, None))
    assert plain.decoder == build("factor")


def test_topup_fills_the_floor_with_the_most_confident_flagged_proposals():
    # holes 2..5: only 2 is safe; 3, 4, 5 propose BAD with confidences ranked 4 > 5 > 3.
    predict = Scripted({2: (GOOD, 1.0), 3: (BAD, 1.0), 4: (BAD, 3.0), 5: (BAD, 2.0)})
    topped = SyntaxGuard(
        flags=True, factor=0.01, floor=3, topup=True, spread=False, repairs=0, reopen=0.0, oracle=BadToken()
    )
    assert trace(decode(topped, canvas(4), predict))[0] == ([2, 4, 5], [])
    plain = SyntaxGuard(
        flags=True, factor=0.01, floor=3, topup=False, spread=False, repairs=0, reopen=0.0, oracle=BadToken()
    )
    assert trace(decode(plain, canvas(4), Scripted(predict.script[0])))[:2] == [([2], []), ([4], [])]


def test_spread_never_commits_two_adjacent_holes_in_one_call():
    # holes 2..7 all sure, confidences ranked 4 > 3 > 6 > 5 > 2 > 7: one call takes 4, then 6, then 2
    # (3 and 5 touch 4, 7 touches 6); every proposal is safe.
    sure = {4: (GOOD, 12.0), 3: (GOOD, 11.5), 6: (GOOD, 11.0), 5: (GOOD, 10.5), 2: (GOOD, 10.0), 7: (GOOD, 9.5)}
    spread = SyntaxGuard(flags=True, factor=1.0, floor=6, spread=True, repairs=0, oracle=BadToken())
    steps = decode(spread, canvas(6), Scripted(sure))
    assert trace(steps) == [([2, 4, 6], []), ([3, 5, 7], [])]
    together = SyntaxGuard(flags=True, factor=1.0, floor=6, spread=False, repairs=0, oracle=BadToken())
    assert trace(decode(together, canvas(6), Scripted(sure))) == [([2, 3, 4, 5, 6, 7], [])]


OPEN, CLOSE, NEUTRAL, OTHER = 6, 7, 2, 8


def brackets(tokens: torch.Tensor) -> int:
    """A toy judge: errors = unmatched OPEN/CLOSE tokens."""
    return unmatched(tokens, OPEN, CLOSE)


def rows_for(proposals: dict[int, dict[int, float]], length: int) -> torch.Tensor:
    """(L, V): at position p, logit s for each token t of proposals[p] (zeros elsewhere)."""
    out = torch.zeros(length, V)
    for p, tokens in proposals.items():
        for t, s in tokens.items():
            out[p, t] = s
    return out


def test_a_turned_away_proposal_waits_while_another_hole_takes_its_place():
    # holes 2..5, the witness all NEUTRAL. Call 1 the rule picks 2 and 4 (spread); 4 proposes CLOSE, which no
    # witness holds while the draft has no OPEN before it. The guard alone would put its next token (OTHER) there;
    # syntax-guard commits the model's own tokens only: 2, and in 4's place the most confident hole not beside 2 (5).
    # Call 2 the model proposes OPEN at 3, and then CLOSE at 4 fits: the fill is the model's own choice throughout.
    first = {2: {NEUTRAL: 12.0}, 3: {NEUTRAL: 1.0}, 4: {CLOSE: 3.0, OTHER: 2.5}, 5: {NEUTRAL: 2.0}}
    later = {3: {OPEN: 4.0}, 4: {CLOSE: 3.0, OTHER: 2.5}}
    script = [first, later]
    calls = []

    def predict(tokens):
        calls.append(1)
        return rows_for(script[min(len(calls), 2) - 1], len(tokens))

    start = canvas(4)
    witness = start.tokens.masked_fill(start.holes, NEUTRAL)
    sg = SyntaxGuard(spread=True, completer=guard.Guard(brackets, witness, MASK))
    steps = decode(sg, start, predict)
    assert trace(steps) == [([2, 5], []), ([3], []), ([4], [])]
    assert steps[-1].canvas.tokens[2:6].tolist() == [NEUTRAL, OPEN, CLOSE, NEUTRAL]
    alone = guard.Guard(brackets, witness, MASK).begin(start.tokens)
    logits = rows_for(first, 7)
    pos, ids, _ = alone.admit(start.tokens, logits, torch.tensor([2, 4]), torch.tensor([NEUTRAL, CLOSE]), torch.ones(2))
    alone_commits = sorted(zip(pos.tolist(), ids.tolist(), strict=True))
    assert alone_commits == [(2, NEUTRAL), (4, OTHER)], "what the guard alone would commit"


def test_when_no_hole_takes_its_own_token_the_guards_replacement_is_committed():
    # one hole: CLOSE has no witness; no other hole can take its place, so the guard's next token commits (every
    # call commits).
    start = canvas(1)
    witness = start.tokens.masked_fill(start.holes, NEUTRAL)
    sg = SyntaxGuard(completer=guard.Guard(brackets, witness, MASK))
    steps = decode(sg, start, lambda tokens: rows_for({2: {CLOSE: 3.0, OTHER: 2.5}}, len(tokens)))
    assert trace(steps) == [([2], [])]
    assert steps[-1].canvas.tokens[2] == OTHER


def test_a_comment_start_is_never_offered_in_place_of_a_turned_away_proposal():
    # as above, but hole 5 proposes a comment start (HASH): one fits anywhere, so it is not offered for 4;
    # hole 3 sits beside 2: call 1 commits 2 alone.
    hash_ = 9
    first = {2: {NEUTRAL: 12.0}, 3: {NEUTRAL: 1.0}, 4: {CLOSE: 3.0, OTHER: 2.5}, 5: {hash_: 2.0}}
    start = canvas(4)
    witness = start.tokens.masked_fill(start.holes, NEUTRAL)
    fit = SimpleNamespace(escape=lambda t: t == hash_)
    sg = SyntaxGuard(spread=True, completer=guard.Guard(brackets, witness, MASK, fit=fit))
    step = next(sg(start, lambda tokens: rows_for(first, len(tokens)), torch.Generator().manual_seed(0)))
    assert sorted(step.filled.tolist()) == [2]
    plain = SyntaxGuard(spread=True, completer=guard.Guard(brackets, witness, MASK))  # no comment starts: 5 is offered
    step = next(plain(start, lambda tokens: rows_for(first, len(tokens)), torch.Generator().manual_seed(0)))
    assert sorted(step.filled.tolist()) == [2, 5]


def test_own_admission_turns_away_without_searching_a_stand_in():
    # the guard alone puts OTHER where CLOSE has no witness; asked for the proposals' own tokens only it commits 2
    # alone and judges no stand-in (syntax-guard drops stand-ins, so searching them was wasted checks)
    first = {2: {NEUTRAL: 12.0}, 3: {NEUTRAL: 1.0}, 4: {CLOSE: 3.0, OTHER: 2.5}, 5: {NEUTRAL: 2.0}}
    start = canvas(4)
    witness = start.tokens.masked_fill(start.holes, NEUTRAL)
    judged = []
    counted = lambda tokens: judged.append(tokens.tolist()) or brackets(tokens)  # noqa: E731
    session = guard.Guard(counted, witness, MASK).begin(start.tokens)
    pos, ids, _ = session.admit(
        start.tokens, rows_for(first, 7), torch.tensor([2, 4]), torch.tensor([NEUTRAL, CLOSE]), torch.ones(2), own=True
    )
    assert sorted(zip(pos.tolist(), ids.tolist(), strict=True)) == [(2, NEUTRAL)]
    assert not any(t[4] == OTHER for t in judged), "no canvas with the stand-in was judged"


def test_a_comment_start_pick_waits_while_the_other_picks_go():
    # holes 2..5, all picks sure and side by side (spread off); 3 proposes a comment start (HASH). Committed with
    # the others it would hold whatever follows it on its line, so it waits: call 1 commits 2, 4, 5; call 2 offers
    # it alone (the model still wants it: then it is the model's own comment, as a one-token decoder would write).
    hash_ = 9
    picks = {2: {NEUTRAL: 12.0}, 3: {hash_: 11.0}, 4: {NEUTRAL: 10.0}, 5: {NEUTRAL: 9.0}}
    start = canvas(4)
    witness = start.tokens.masked_fill(start.holes, NEUTRAL)
    fit = SimpleNamespace(escape=lambda t: t == hash_)
    sg = SyntaxGuard(spread=False, completer=guard.Guard(brackets, witness, MASK, fit=fit))
    steps = decode(sg, start, lambda tokens: rows_for(picks, len(tokens)))
    assert trace(steps) == [([2, 4, 5], []), ([3], [])]
    plain = SyntaxGuard(spread=False, completer=guard.Guard(brackets, witness, MASK))  # no comment starts known
    assert trace(decode(plain, start, lambda tokens: rows_for(picks, len(tokens)))) == [([2, 3, 4, 5], [])]


def test_the_picks_a_waiting_comment_start_would_hold_wait_with_it():
    # holes 2..6; 3 proposes a comment start (HASH), 5 a newline (NL). Committed now, 4 would be judged as the
    # comment's text (the draft holds HASH before it on its line) and would tie 3 to a comment for good: it waits with
    # 3 while 2, 5 and 6 go. Call 2 the model proposes code at 3: 3 and 4 are committed as code, the fill holds no
    # comment. Without token texts (no line to read) 4 goes in call 1, as before.
    hash_, nl = 9, 1
    first = {2: {NEUTRAL: 12.0}, 3: {hash_: 11.0}, 4: {NEUTRAL: 10.0}, 5: {nl: 9.5}, 6: {NEUTRAL: 9.0}}
    later = {3: {NEUTRAL: 11.0}, 4: {NEUTRAL: 10.0}}
    texts = {hash_: " #", nl: "\n"}
    tokenizer = SimpleNamespace(decode=lambda ids: "".join(texts.get(t, " x") for t in ids))
    start = canvas(5)
    witness = start.tokens.masked_fill(start.holes, NEUTRAL)

    def run(fit):
        calls = []

        def predict(tokens):
            calls.append(1)
            return rows_for([first, later][min(len(calls), 2) - 1], len(tokens))

        sg = SyntaxGuard(spread=False, completer=guard.Guard(brackets, witness, MASK, fit=fit))
        return decode(sg, start, predict)

    steps = run(SimpleNamespace(escape=lambda t: t == hash_, tokenizer=tokenizer))
    assert trace(steps) == [([2, 5, 6], []), ([3, 4], [])]
    assert steps[-1].canvas.tokens[2:7].tolist() == [NEUTRAL, NEUTRAL, NEUTRAL, nl, NEUTRAL]
    assert trace(run(SimpleNamespace(escape=lambda t: t == hash_))) == [([2, 4, 5, 6], []), ([3], [])]


@pytest.mark.parametrize(
    "hash_logit, second, expected, filled",
    [
        (2.0, NEUTRAL, [([2], []), ([3, 4], [])], [NEUTRAL, NEUTRAL, NEUTRAL]),  # unsure (0.37): code instead
        (5.0, NEUTRAL, [([2, 3, 4], [])], [9, NEUTRAL, NEUTRAL]),  # sure (0.92): the comment and its line
        (2.0, CLOSE, [([2, 3, 4], [])], [9, NEUTRAL, NEUTRAL]),  # its code token has no witness: as before
    ],
)
def test_an_unsure_comment_start_left_alone_with_its_line_gives_way_to_code(hash_logit, second, expected, filled):
    # holes 2..4 on one line; 2 proposes a comment start (HASH), 3 and 4 code it would hold, so every pick left is the
    # comment start or what it holds. Where the model is unsure of it, its best token that starts no comment is
    # committed alone (the guard admits it), and the line is written as code; a fill that is only a comment is no
    # fill. Where it is sure, or where the guard turns that token away, the comment and its line go together.
    hash_ = 9
    rows = {2: {hash_: hash_logit, second: 1.5}, 3: {NEUTRAL: 10.0}, 4: {NEUTRAL: 9.0}}
    tokenizer = SimpleNamespace(decode=lambda ids: "".join({hash_: " #"}.get(t, " x") for t in ids))
    start = canvas(3)
    witness = start.tokens.masked_fill(start.holes, NEUTRAL)
    fit = SimpleNamespace(escape=lambda t: t == hash_, tokenizer=tokenizer)
    sg = SyntaxGuard(spread=False, completer=guard.Guard(brackets, witness, MASK, fit=fit))
    steps = decode(sg, start, lambda tokens: rows_for(rows, len(tokens)))
    assert trace(steps) == expected
    assert steps[-1].canvas.tokens[2:5].tolist() == filled
