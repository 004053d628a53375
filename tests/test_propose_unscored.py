"""sampling.propose_unscored (issue 30): at temperature 0 a decoder that reads of the confidences only which are 0
(mean-field) gets propose's ids and the same zeros without the (H, V) float64 softmax."""

from __future__ import annotations

import math

import pytest
import torch

from dlmcode.core import sampling
from dlmcode.decoders.mean_field import MeanField


def cases() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    out = []
    for h, v in [(1, 5), (7, 40), (32, 300)]:
        out.append(torch.randn(h, v, generator=g) * 4)
        out.append(torch.randint(-2, 3, (h, v), generator=g).float())  # many ties, the mask id among them
    masked = torch.randn(4, 30, generator=g)
    masked[:, 3] = 50.0  # the mask id holds the maximum: the next token is proposed
    out.append(masked)
    far = masked.clone()
    far[1, 3] = 900.0  # ... and every other token is e^-800 as likely: propose's probability rounds to 0
    out.append(far)
    odd = torch.randn(5, 30, generator=g)
    odd[0] = -math.inf
    odd[1, 7] = math.inf
    odd[2, 4] = math.nan
    odd[3, :] = -math.inf
    odd[3, 3] = 0.0  # only the mask id is possible
    out.append(odd)
    return out


@pytest.mark.parametrize("late_ids", [(), (0, 1), (3,)])
def test_the_ids_and_the_zeros_are_proposes(late_ids):
    for logits in cases():
        ids, conf, _ = sampling.propose(logits, 0.0, torch.Generator(), 3, late_ids)
        mine, zeros = sampling.propose_unscored(logits, 3, late_ids)
        assert torch.equal(mine, ids)
        assert torch.equal(zeros == 0, conf == 0)
        assert set(zeros.tolist()) <= {0.0, 1.0}


def test_the_far_case_does_have_a_zero_that_is_not_a_late_id():
    far = cases()[-2]
    _, conf, _ = sampling.propose(far, 0.0, torch.Generator(), 3, ())
    assert conf[1] == 0 and (conf[[0, 2, 3]] > 0).all()
    assert sampling.propose_unscored(far, 3, ())[1].tolist() == [1.0, 0.0, 1.0, 1.0]


class ScoredMeanField(MeanField):
    scores = True  # the softmax made and read, as before


@pytest.mark.parametrize("seed", range(3))
def test_mean_field_decodes_the_same_tokens_without_the_softmax(seed, make_tiny_model, make_canvas):
    model = make_tiny_model(vocab=40, seed=seed, mask_id=5)
    canvas = make_canvas([6, 20, 3, 9], 5, 40, late_ids=(0, 1))
    assert MeanField.scores is False
    runs = []
    for cls in (MeanField, ScoredMeanField):
        steps = list(cls(block=8, tau=0.6)(canvas, model, torch.Generator().manual_seed(seed)))
        runs.append([(s.filled.tolist(), s.canvas.tokens.tolist(), s.scores.tolist()) for s in steps])
    assert runs[0] == runs[1]
