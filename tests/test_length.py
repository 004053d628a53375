"""The length rule (dlmcode/jobs/sizing.py): exact lengths from hand-made end marginals, on every path, its call
counted."""

from __future__ import annotations

import math

import pytest
import torch

from dlmcode.bench import runner
from dlmcode.bench.suites import Task
from dlmcode.jobs import fill
from dlmcode.jobs import sizing as length
from dlmcode.serve.engine import Engine
from dlmcode.serve.request import Fill

from serve_tiny import BOS, EOS, MASK, PAD, VOCAB, char_dlm


def logits_with_end(p_end: list[float], end: int = PAD) -> torch.Tensor:
    """(H, VOCAB) logits whose softmax gives `end` probability p at each row, the rest on token 'x'."""
    rows = torch.full((len(p_end), VOCAB), -1e4)
    for i, p in enumerate(p_end):
        rows[i, end] = math.log(p)
        rows[i, 4 + ord("x")] = math.log(1 - p)
    return rows


def test_change_point_is_the_most_likely_split_from_content_to_ends():
    p = torch.tensor([0.01, 0.02, 0.1, 0.9, 0.95, 0.99])
    assert length.change_point(p) == 3  # content at 0..2, ends from 3 on
    assert length.change_point(torch.tensor([0.01] * 5)) == 5  # no end in sight: every hole
    assert length.change_point(torch.tensor([0.99] * 5)) == 1  # ends everywhere: a hole holds at least one token
    # the calibration: +3 on the ends' log-odds turns a 0.2 (odds 1/4) into 0.83 (odds 5.0), so the split moves left
    p = torch.tensor([0.01, 0.01, 0.2, 0.2, 0.9])
    assert length.change_point(p, 0.0) == 4 and length.change_point(p, 3.0) == 2


def test_end_probability_sums_the_families_end_tokens():
    rows = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]))
    assert torch.allclose(length.end_probability(rows, [0, 1]), torch.tensor([0.75, 0.2]))


class Ends:
    """A stand-in model: in the run of holes after `start`, content ('x') for `n` positions, then `end`
    with probability 0.9 (the rule must read exactly `n`); elsewhere the canvas's own token. Counts calls."""

    def __init__(self, start: int, n: int, end: int = PAD) -> None:
        self.start, self.n, self.end, self.calls = start, n, end, 0

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        holes = int((tokens[self.start :] == MASK).sum()) if (tokens == MASK).any() else 0
        rows = torch.full((len(tokens), VOCAB), -1e4)
        rows[torch.arange(len(tokens)), tokens.clamp(max=VOCAB - 1)] = 0.0
        k = torch.arange(max(holes, len(tokens) - self.start))
        p = [0.02 if i < self.n else 0.9 for i in k.tolist()]
        stop = min(len(tokens), self.start + len(p))
        rows[self.start : stop] = logits_with_end(p[: stop - self.start], self.end)
        return rows


def test_the_probe_reads_each_regions_length():
    predict = Ends(start=3, n=5)
    tokens = torch.tensor([BOS, 10, 11] + [MASK] * 12 + [12, EOS])
    assert length.probe(predict, tokens, [range(3, 15)], (PAD,), 0.0) == [5] and predict.calls == 1


def test_serve_sizes_the_fill_by_the_rule_and_counts_the_probe():
    prefix = "def f():\n    "
    predict = Ends(start=1 + len(prefix.rstrip(" \t")), n=6)
    answer = Engine(char_dlm(predict), lang=None, lines=0).run(Fill(prefix, "\n", ceiling=40))
    assert answer.holes == 6 and answer.text == "xxxxxx".lstrip(" ") and answer.calls == 1 + 6 == predict.calls
    assert answer.stop == "end"  # fewer holes than the ceiling: the model ended the fill


def test_a_bare_marker_is_sized_by_the_rule_and_a_given_length_is_kept():
    source = "ab⟦fill⟧cd"
    predict = Ends(start=3, n=4)
    result = fill.prepare_infill(source, dlm=char_dlm(predict)).run()
    assert result.text == "abxxxxcd" and result.sized == (4,) and result.calls == 1 + 4 == predict.calls
    predict = Ends(start=3, n=4)
    result = fill.prepare_infill(source, dlm=char_dlm(predict), length=7).run()
    assert result.sized == () and result.filled == 7 and result.calls == 7 == predict.calls  # --length 7: no probe
    predict = Ends(start=3, n=4)
    result = fill.prepare_infill("ab⟦fill:2⟧cd", dlm=char_dlm(predict)).run()
    assert result.sized == () and result.filled == 2  # ⟦fill:N⟧ has its length


def test_length_auto_sizes_a_span_within_room_to_spare():
    source = "ab\ncdefgh\nij\n"  # line 2 holds 7 tokens with its break; the probe opens 7 + 8
    predict = Ends(start=4, n=3)
    result = fill.prepare_infill(source, (2, 2), dlm=char_dlm(predict), length="auto").run()
    assert result.sized == (3,) and result.filled == 3 and result.calls == 1 + 3


def test_generate_auto_ends_at_the_end_of_text_marginal():
    predict = Ends(start=3, n=5, end=EOS)
    result = fill.prepare_generate("ab", dlm=char_dlm(predict), length="auto", lang=None, chat=False).run()
    assert result.sized == (5,) and result.text == "abxxxxx" and result.calls == 1 + 5


def test_bench_unknown_length_uses_the_rule_and_its_call_counts():
    task = Task(task_id="t/0", prompt="ab", suffix="cd", canonical="yyyy", lang="python", mode="infill")
    config = runner.configs(["low-confidence"], [], [], fill_length=runner.UNKNOWN)[0]
    predict = Ends(start=3, n=4)
    sample = runner.scored(
        task, config, char_dlm(predict), 0, None, runner.decode(task, config, char_dlm(predict), 0, 128)
    )
    assert sample.output == "xxxx" and sample.calls == 1 + 4 and sample.settings["length"] == "unknown"
    assert config.label == "low-confidence length=unknown"


def test_bench_rejects_an_unknown_fill_length():
    from dlmcode.core.errors import UsageError

    with pytest.raises(UsageError, match="--fill-length 'guess'"):
        runner.prepare_bench("heldout-single", ["low-confidence"], [], [], None, 0, 128, None, {}, 1, "guess")


def test_length_probe_scores_the_share_of_lengths_read_exactly():
    from benchmarks import length_probe

    reads = [(3, torch.tensor([0.01, 0.01, 0.01, 0.9, 0.9])), (2, torch.tensor([0.01, 0.01, 0.01, 0.9, 0.9]))]
    got = length_probe.scores(reads, 0.0)  # both read 3: the first right, the second 50 % off
    assert got["exact_length"] == 0.5 and got["within_20pct"] == 0.5 and got["median_chosen"] == 3
