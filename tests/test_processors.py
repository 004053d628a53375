"""Logits processors: exact results on hand-made logits, applied in order in one place, named in results."""

from __future__ import annotations

import math

import torch

from dlmcode.jobs import fill
from dlmcode.jobs.processors import Ban, EndOfText, Penalty, Remember, exact_length, growth_bans, names, processed


def logits() -> torch.Tensor:
    return torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.5, 0.0, -1.0, 2.0]])  # (L=2, V=4)


def test_ban_sets_its_tokens_to_minus_infinity_and_leaves_the_input_alone():
    given = logits()
    out = Ban((1, 3), "pad")(given)
    assert out.tolist() == [[1.0, -math.inf, 3.0, -math.inf], [0.5, -math.inf, -1.0, -math.inf]]
    assert given.tolist() == logits().tolist()  # the model's logits are not written to
    assert Ban((1,), "pad").name == "ban pad"


def test_penalty_subtracts_from_one_token_everywhere():
    out = Penalty(2, 1.5, "end-of-text")(logits())
    assert out[:, 2].tolist() == [1.5, -2.5] and out[:, [0, 1, 3]].tolist() == logits()[:, [0, 1, 3]].tolist()
    assert Penalty(2, 1.5, "end-of-text").name == "end-of-text -1.5"


def test_processed_applies_the_list_in_order_after_the_forward():
    calls = []

    def predict(tokens):
        calls.append(tokens.tolist())
        return logits()

    seen = Remember()
    run = processed(predict, (Penalty(0, 10.0, "x"), Ban((3,), "y"), seen))
    out = run(torch.tensor([7, 8]))
    assert calls == [[7, 8]]
    assert out.tolist() == [[-9.0, 2.0, 3.0, -math.inf], [-9.5, 0.0, -1.0, -math.inf]]
    assert seen.logits is out  # last in the list: it keeps what the decoder sees
    assert processed(predict, ()) is predict


def test_names_leave_out_observers():
    assert names((Ban((1,), "pad"), Remember(), Penalty(2, 3.0, "end-of-text"))) == ("ban pad", "end-of-text -3")


def test_a_fixed_length_job_bans_pad_and_its_result_says_so(model):
    from dlmcode.models import builtin

    dlm = builtin.load(model, torch.device("cpu"), torch.float32)
    job = fill.prepare_infill("x = 1\ny = 2\n", (2, 2), dlm=dlm, decoder="low-confidence")
    assert [p.name for p in job.processors] == ["ban pad"]
    result = job.run()
    assert result.processors == ("ban pad",) and result.to_dict()["processors"] == ["ban pad"]
    assert dlm.pad_id not in result.ids
    auto = fill.prepare_infill("x = 1\ny = 2\n", (2, 2), dlm=dlm, decoder="low-confidence", length="auto")
    assert auto.sized is not None and [p.name for p in auto.processors] == ["ban pad"]  # sized by the rule, then known


def test_end_of_text_policies_are_processors():
    class Model:
        eos_id = 3

    assert EndOfText().processors(Model()) == ()
    assert [p.name for p in EndOfText(logits_eos_inf=True).processors(Model())] == ["ban end-of-text"]
    assert [p.name for p in EndOfText(eos_penalty=2.0).processors(Model())] == ["end-of-text -2"]


def test_length_policies_ban_what_a_hole_of_that_kind_must_not_hold():
    class Plain:
        pad_id, expand_id, delete_id = 0, None, None

    class Growing:  # DreamOn's states: pad is its delete token, placed by expanding.Limits
        pad_id, expand_id, delete_id = 5, 6, 5

    assert [(p.name, p.ids) for p in exact_length(Plain())] == [("ban pad", (0,))]
    assert [(p.name, p.ids) for p in exact_length(Growing())] == [("ban pad", (5,)), ("ban expand", (6,))]
    assert growth_bans(Growing()) == () and [p.name for p in growth_bans(Plain())] == ["ban pad"]
