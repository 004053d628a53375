"""The guard admits a multi-token decoder's proposals together where one witness holds them (text/guard.py,
`Session.together`): when the model's draft breaks the file at one place, the proposals on either side of it are
admitted by one witness at once, not one parse and one call each (syntax-guard's tokens per call, issue 26)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from dlmcode import models
from dlmcode.core.run import RunSettings
from dlmcode.jobs import fill
from dlmcode.text import guard, syntax

TEXT = (Path(__file__).parent / "data" / "guard" / "sample.py").read_text()


@pytest.fixture(scope="module")
def shipped():
    return models.load()


def breaking(dlm, start: int, target: list[int], broken: int):
    """`dlm` sure of the user's own tokens at every hole from canvas position `start`, and surer still of a `)`
    at hole `broken`: its draft is the original fill with one closer that breaks the file."""
    vocab = dlm.predict(torch.tensor([dlm.bos_id or 0])).shape[-1]
    close = guard.single_token(dlm.tokenizer, ")")

    def predict(tokens):
        logits = torch.zeros(len(tokens), vocab)  # (L, V)
        for h in (tokens == dlm.mask_id).nonzero().squeeze(-1).tolist():
            k = h - start
            logits[h, close if k == broken else target[k] if 0 <= k < len(target) else 0] = 30.0 if k == broken else 20
        return logits

    return dataclasses.replace(dlm, predict=predict, cached=None, forward_batch=None, name="breaking")


@pytest.mark.parametrize("span", [(34, 36), (14, 16)])
def test_proposals_beside_a_broken_one_are_admitted_together(span, shipped):
    run = RunSettings(decoder="syntax-guard", options={}, lang="python")
    run_at = fill.infill_job(TEXT, span, shipped, run).plan.positions[0]
    original = "\n".join(TEXT.split("\n")[span[0] - 1 : span[1]]) + "\n"
    target = shipped.tokenizer.encode(original)
    job = fill.infill_job(TEXT, span, breaking(shipped, run_at.start, target, 2 * len(target) // 3), run)
    result = job.run()
    assert result.guard is not None and not syntax.breakage(TEXT, result.text, "python").broken
    # one by one, each proposal beside the closer needed a witness of its own: 9 and 13 calls (3.4 and 2.4 a call)
    assert len(run_at) / result.calls >= 4, f"{result.calls} calls for {len(run_at)} tokens"
