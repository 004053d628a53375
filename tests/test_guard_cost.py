"""`dlmcode speed --guard`'s second part (dlmcode/bench/guard_cost.py): where its spans and typos go, and what a
row of it reports."""

from __future__ import annotations

import dataclasses
import random

import pytest

from dlmcode import models
from dlmcode.bench import guard_cost
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
        window = judge.python_windows(text, [(starts[first - 1], starts[last])])[0]
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

    def cost(dlm, n):
        asked["places"] = n
        yield guard_cost.CostRow("queue.py", 11_000, 4, decodes=2, calls=10, guard_s=0.05, forward_s=0.1)

    def typos(dlm, n):
        asked["typos"] = n
        return [guard_cost.TypoRow("value = = 1", "above", fills=3, guarded=2, compiles=2)]

    monkeypatch.setattr(guard_cost, "cost", cost)
    monkeypatch.setattr(guard_cost, "typos", typos)
    out = io.StringIO()
    found = speed.guard_costs(None, 2, 3, Console(file=out, width=200))
    assert asked == {"places": 2, "typos": 3}
    assert found["guard_files"][0]["share_of_forward"] == 0.05 and not found["guard_files"][0]["met"]
    assert found["guard_typos"][0]["compiles_share"] == 0.6667  # 2 of 3 fills: the one that gave up counts
    text = out.getvalue()
    assert "share of one uncached forward" in text and "compile once it is fixed" in text and "5.0%" in text
    assert speed.guard_costs(None, 0, 0, Console(file=io.StringIO())) == {"guard_files": []}
