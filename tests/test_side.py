"""The built-in model's side branch (models/side.py): hole-run features, its start, its weights' layout."""

from __future__ import annotations

import pytest
import torch

from dlmcode.core.errors import ModelError
from dlmcode.models import builtin
from dlmcode.models.side import hole_runs

CFG = builtin.BuiltinConfig(vocab_size=50, dim=16, n_layers=2, n_heads=2, context=32, expand_id=49)


def test_hole_runs_give_each_holes_run_length_and_offsets_plus_one():
    ids = torch.tensor([[5, 1, 1, 1, 6, 1, 7, 1, 1]])
    assert hole_runs(ids, 1)[0].tolist() == [
        [0, 0, 0], [4, 1, 3], [4, 2, 2], [4, 3, 1], [0, 0, 0], [2, 1, 1], [0, 0, 0], [3, 1, 2], [3, 2, 1]
    ]  # fmt: skip


def test_long_runs_share_the_capped_embedding():
    runs = hole_runs(torch.ones(1, 100, dtype=torch.long), 1)[0]
    assert runs[0].tolist() == [65, 1, 65] and runs[99].tolist() == [65, 65, 1] and runs.max() == 65


def pair(seed: int = 0):
    """A model with a side branch and the same model without one (every shared weight equal)."""
    torch.manual_seed(seed)
    with_side = builtin.DlmcodeDiffusionLM(builtin.BuiltinConfig(**{**CFG.__dict__, "side_layers": 1})).eval()
    plain = builtin.DlmcodeDiffusionLM(CFG).eval()
    plain.load_state_dict({k: v for k, v in with_side.state_dict().items() if not k.startswith("side.")})
    return with_side, plain


def test_the_side_branch_replaces_only_the_expand_and_pad_logits():
    with_side, plain = pair()
    ids = torch.tensor([[2, 7, 8, 1, 1, 1, 9, 3], [2, 1, 1, 10, 11, 12, 1, 3]])
    with torch.no_grad():
        a, b = with_side(ids), plain(ids)
    assert torch.equal(a[..., 1:49], b[..., 1:49])
    assert not torch.equal(a[..., 0], b[..., 0]) and not torch.equal(a[..., 49], b[..., 49])


def test_a_started_side_branch_gives_the_rows_own_logits():
    with_side, plain = pair(1)
    with torch.no_grad():
        with_side.side.start_from(with_side.norm, with_side.embed.weight[49], with_side.embed.weight[0])
        ids = torch.tensor([[2, 7, 1, 1, 9, 3]])
        assert torch.allclose(with_side(ids), plain(ids), atol=1e-5)


def test_weights_without_the_side_branch_are_refused_by_name(tmp_path):
    from safetensors.torch import save_file

    with_side, _ = pair()
    state = {k: v for k, v in with_side.state_dict().items() if k != "side.rows"}
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(ModelError, match="lacks 'side.rows'"):
        builtin.check_shapes("m", with_side.cfg, builtin.read_shapes(tmp_path / "model.safetensors"))


def test_side_layers_need_an_expand_token():
    with pytest.raises(ValueError, match="no expand_id"):
        builtin.BuiltinConfig.from_json({"dim": 16, "n_heads": 2, "side_layers": 1})
