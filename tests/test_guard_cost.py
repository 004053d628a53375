"""`dlmcode speed --guard`'s second part (dlmcode/bench/guard_cost.py): where its spans and typos go, and what a
row of it reports."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from dlmcode import models
from dlmcode.bench import guard_cost
from dlmcode.core.canvas import rowwise
from dlmcode.text import judge


def test_spans_start_on_code_and_spread_over_the_file():
    text = "\n".join(["# head", "", *[f"x{i} = {i}" for i in range(40)], "", "# tail"])
    found = guard_cost.places(text, 4)
    lines = text.split("\n")
    assert len(found) == 4 and all(b - a == 2 for a, b in found)
    assert all(lines[a - 1].startswith("x") for a, _ in found)
    assert [a for a, _ in found] == sorted({a for a, _ in found})


def test_a_typo_goes_15_lines_away_from_the_span_and_outside_its_function():
    text = guard_cost.stdlib("queue.py")
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    rnd = random.Random(0)
    for above in (True, False) * 5:
        (first, last), at = guard_cost.typo_case(text, rnd, above)
        assert (at <= first - 1 - guard_cost.AWAY) if above else (at >= last + guard_cost.AWAY)
        window = next(judge.python_windows(text, [(starts[first - 1], starts[last])]))
        assert not window[0] <= starts[at] < window[1], "the typo is outside the span's function"


def test_the_target_is_2_percent_up_to_50_kb_and_5_above():
    small = guard_cost.CostRow("a.py", 49_000, 1, calls=10, guard_s=0.01, forward_s=0.1)
    large = guard_cost.CostRow("b.py", 229_000, 4, calls=10, guard_s=0.01, forward_s=0.1)
    assert small.share == pytest.approx(0.01) and small.target == 0.02 and large.target == 0.05
    assert small.to_dict()["met"] and not dataclasses.replace(small, guard_s=0.03).to_dict()["met"]
    assert large.to_dict()["share_of_forward"] == 0.01 and large.to_dict()["per_call_s"] == 0.001


def test_the_cpu_share_reads_the_guard_and_the_forward_in_cpu_time():
    row = guard_cost.CostRow(
        "a.py", 49_000, 1, calls=10, guard_s=0.5, forward_s=1.0, guard_cpu_s=0.01, forward_cpu_s=0.1
    )
    assert row.share == pytest.approx(0.05) and row.share_cpu == pytest.approx(0.01)
    assert row.to_dict()["share_of_forward_cpu"] == 0.01


@pytest.mark.slow
def test_a_cost_row_counts_the_guard_s_seconds_per_call_against_a_forward():
    dlm = models.load()
    (one, four) = list(guard_cost.cost(dlm, files=("queue.py",), n=1))
    for row in (one, four):
        assert row.decodes == 1 and row.calls > 0 and row.broken <= row.unguarded <= 1  # a guarded fill never breaks
        assert 0 < row.first_s < row.guard_s and row.forward_s > 0
        assert row.share == pytest.approx(row.guard_s / row.calls / row.forward_s)
        assert 0 < row.guard_cpu_s and 0 < row.forward_cpu_s  # both in the decoding thread's CPU time too
    assert (one.tokens_per_step, four.tokens_per_step) == (1, 4) and four.calls <= one.calls


def test_a_typo_fill_whose_guard_gave_up_counts_against_the_target():
    row = guard_cost.TypoRow("value = = 1", "above", fills=48, guarded=47, compiles=47)
    assert row.share == pytest.approx(47 / 48) and row.share < guard_cost.TYPO_TARGET
    assert guard_cost.TypoRow("value = = 1", "below", fills=4, guarded=4, compiles=4).share == 1.0


def test_speed_guard_typos_heldout_reads_the_held_out_files(monkeypatch):
    import io

    from rich.console import Console

    from dlmcode.bench import heldout
    from dlmcode.cli import speed

    asked = []
    monkeypatch.setattr(guard_cost, "typos", lambda dlm, n, files=guard_cost.TYPO_FILES: asked.append(files) or [])
    speed.guard_costs(None, 0, 2, Console(file=io.StringIO()), heldout=True)
    speed.guard_costs(None, 0, 2, Console(file=io.StringIO()))
    assert asked == [guard_cost.HELDOUT_TYPO_FILES, guard_cost.TYPO_FILES]
    assert all(heldout.is_heldout(name) for name in guard_cost.HELDOUT_TYPO_FILES)  # code no built-in model saw


def test_speed_guard_prints_both_tables_and_returns_their_rows(monkeypatch):
    import io

    from rich.console import Console

    from dlmcode.cli import speed

    asked = {}

    def cost(dlm, n, right=None):
        asked["places"] = n
        asked.setdefault("right", []).append(right)
        yield guard_cost.CostRow("queue.py", 11_000, 4, right, decodes=2, calls=10, guard_s=0.05, forward_s=0.1)

    def typos(dlm, n):
        asked["typos"] = n
        return [guard_cost.TypoRow("value = = 1", "above", fills=3, guarded=2, compiles=2)]

    monkeypatch.setattr(guard_cost, "cost", cost)
    monkeypatch.setattr(guard_cost, "typos", typos)
    out = io.StringIO()
    found = speed.guard_costs(None, 2, 3, Console(file=out, width=200), right=(1.0, 0.9))
    assert asked == {"places": 2, "typos": 3, "right": [None, 1.0, 0.9]}  # the model, then each stand-in
    assert found["guard_files"][0]["share_of_forward"] == 0.05 and not found["guard_files"][0]["met"]
    assert [row["right"] for row in found["guard_files"]] == [None, 1.0, 0.9]
    assert found["guard_typos"][0]["compiles_share"] == 0.6667  # 2 of 3 fills: the one that gave up counts
    text = out.getvalue()
    assert "share of one uncached forward" in text and "compile once it is fixed" in text and "5.0%" in text
    assert "right 90%" in text and "a stand-in right at 90% of the holes" in text
    assert speed.guard_costs(None, 0, 0, Console(file=io.StringIO())) == {"guard_files": []}


def test_guard_right_takes_shares_from_0_to_1():
    from dlmcode.cli import speed
    from dlmcode.core.errors import UsageError

    assert speed.shares("1,0.9") == (1.0, 0.9) and speed.shares("") == ()
    for bad in ("1.5", "x", "0.9,-1"):
        with pytest.raises(UsageError, match="--guard-right"):
            speed.shares(bad)


@pytest.fixture(scope="module")
def builtin():
    return models.load()


def test_the_stand_in_is_right_at_its_share_of_the_holes_with_the_file_s_own_token_second(builtin):
    truth = [91, 278, 457, 40, 41, 58, 300, 12, 13, 14] * 4  # 40 holes
    prompt = [91, 278]
    tokens = torch.tensor(prompt + [builtin.mask_id] * len(truth) + [457])
    for right, misses in ((1.0, 0), (0.75, 10)):
        model = guard_cost.knowing(builtin, truth, right, seed=3)
        logits = model.predict(tokens)  # (L, V)
        holes = logits[len(prompt) : len(prompt) + len(truth)]
        top2 = holes.topk(2, dim=-1).indices  # (n, 2)
        own = torch.tensor(truth)
        hit = top2[:, 0] == own
        assert abs(int((~hit).sum()) - misses) <= 4  # drawn per hole: about the share asked for
        assert bool((top2[~hit, 1] == own[~hit]).all()) and not bool((top2[:, 0] == builtin.mask_id).any())
        rows = torch.tensor([0, 5, len(prompt) + len(truth)])
        assert torch.equal(model.predict(tokens, rows), logits[rows])  # a row's logits do not depend on the others
        assert logits[0].argmax() == prompt[0] and logits[-1].argmax() == 457  # committed rows favour their token
    hit_one = guard_cost.knowing(builtin, truth, 1.0, seed=3).predict(tokens)
    assert torch.equal(hit_one[len(prompt) : len(prompt) + len(truth)].argmax(-1), torch.tensor(truth))


def test_beside_a_model_right_everywhere_the_guard_admits_a_comment_line_in_any_order(builtin):
    """queue.py's lines 42-44 end in a comment line; a stand-in right at every hole commits in an order of its own,
    the comment's words before its `#`. The guard admits each as the model proposes it (the `#` is the model's own,
    in its draft) with at most a check a call, and the fill is the file's own text."""
    text = guard_cost.stdlib("queue.py")
    span = (42, 44)
    assert text.split("\n")[43].lstrip().startswith("#")
    model = guard_cost.knowing(builtin, guard_cost.own_tokens(builtin, text, span), 1.0, seed=0)
    job, result = guard_cost.guarded(model, text, span, 1)
    stats = job.decoder.completer.last
    assert result.text == text and result.guard is not None
    assert stats.checks <= result.calls and stats.fallback == 0 and stats.rejected == 0


def test_beside_a_model_right_at_nine_holes_in_ten_a_draft_broken_where_it_is_unsure_is_read_again(builtin):
    """pathlib.py's lines 176-178 beside a stand-in right at 90 % of the holes: where it is wrong its random token
    breaks the draft, and the file's own token is its close second there. Read with those (Session.second), the draft
    parses and holds the right proposals: fewer checks than calls (334 checks in 36 calls before), and a fill that
    parses."""
    text = guard_cost.stdlib("pathlib.py")
    span = guard_cost.places(text, 4)[0]
    assert span == (176, 178)
    model = guard_cost.knowing(builtin, guard_cost.own_tokens(builtin, text, span), 0.9, seed=0)
    job, result = guard_cost.guarded(model, text, span, 1)
    stats = job.decoder.completer.last
    assert result.guard is not None and not (result.breakage and result.breakage.broken)
    assert stats.checks < result.calls, (stats.checks, result.calls)


def test_a_stand_in_that_pays_the_forward_runs_the_model_s_for_the_same_rows_and_keeps_its_own_logits(builtin):
    asked = []

    def predict(tokens, rows=None):
        asked.append(None if rows is None else rows.tolist())
        return builtin.predict(tokens) if rows is None else builtin.predict(tokens, rows)

    counting = dataclasses.replace(builtin, predict=rowwise(predict))
    truth = [91, 278, 457, 40]
    tokens = torch.tensor([91] + [builtin.mask_id] * len(truth) + [457])
    free = guard_cost.knowing(counting, truth, 0.5, seed=1)
    paid = guard_cost.knowing(counting, truth, 0.5, seed=1, forward=True)
    rows = torch.tensor([1, 2, 3])
    assert torch.equal(free.predict(tokens, rows), paid.predict(tokens, rows))
    assert asked == [None, None, [1, 2, 3]]  # each read the vocabulary once when built; then the one call's rows
    paid.predict(tokens)
    assert asked[-1] is None


def test_guard_ratios_time_each_decoder_guarded_and_not_beside_the_model_and_a_stand_in(builtin):
    """The first humaneval-infill-multi task, low-confidence: beside a stand-in right at every hole the guard turns
    nothing away (the same calls, the same fill's validity), and the ratio is the two CPU times'."""
    from dlmcode.bench import guard_ratio

    assert list(guard_ratio.ratios(builtin, ["syntax-guard"], 1)) == []  # always guarded: nothing to hold it to
    rows = list(guard_ratio.ratios(builtin, ["low-confidence"], 1, (None, 1.0)))
    assert [(r.decoder, r.right, r.tasks, r.errors) for r in rows] == [("low-confidence", None, 1, 0)] + [
        ("low-confidence", 1.0, 1, 0)
    ]
    model, right = rows
    assert model.guarded_valid == right.guarded_valid == right.plain_valid == 1  # guarded fills parse
    assert right.plain_calls == right.guarded_calls > 0
    for r in rows:
        assert 0 < r.guard_s < r.guarded_s and r.plain_s > 0
        d = r.to_dict()
        assert d["ratio"] == round(r.guarded_s / r.plain_s, 6) and d["met"] == (r.ratio <= 1.2) and d["target"] == 1.2


def test_speed_guard_tasks_prints_the_ratio_table_and_returns_its_rows(monkeypatch):
    import io

    from rich.console import Console

    from dlmcode.bench import guard_ratio
    from dlmcode.cli import speed

    asked = {}

    def ratios(dlm, names, tasks, rights):
        asked.update(names=names, tasks=tasks, rights=rights)
        for right in rights:
            yield guard_ratio.RatioRow("eb", right, tasks=2, plain_s=1.0, guarded_s=1.3, guard_s=0.2)

    monkeypatch.setattr(guard_ratio, "ratios", ratios)
    out = io.StringIO()
    found = speed.guard_ratios(None, ("eb",), 2, Console(file=out, width=200), right=(0.9,))
    assert asked == {"names": ["eb"], "tasks": 2, "rights": (None, 0.9)}
    assert [(r["right"], r["ratio"], r["met"]) for r in found["guard_ratios"]] == [
        (None, 1.3, False),
        (0.9, 1.3, False),
    ]
    text = out.getvalue()
    assert "guarded against unguarded" in text and "1.30x" in text and "right 90%" in text and "built-in" in text
    assert speed.guard_ratios(None, (), 0, Console(file=io.StringIO())) == {}
