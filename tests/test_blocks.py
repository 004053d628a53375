"""Block decoding with the exact cache, across families: what it costs against recomputing (counted FLOPs,
and `dlmcode speed`'s rows side by side), that it changes no token, and the decoder contract inside a block.

A tiny SDAR (transformers' Qwen3 saved as SDAR's checkpoints are) stands in for every block family here;
each family's own equivalence with its reference is in its own test file.
"""

from __future__ import annotations

import json

import pytest
import torch

from dlmcode import models
from dlmcode.bench import speed
from dlmcode.core.canvas import Canvas
from dlmcode.decoders import DECODERS, build
from dlmcode.models.blocks import BlockPredict, full_canvas_flops

import tiny

VOCAB, MASK, EOS = 96, 95, 1


def char_tokenizer():
    return tiny.char_tokenizer("<|MASK|>", MASK)


@pytest.fixture(scope="module")
def dlm(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    sizes = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    config = Qwen3Config(vocab_size=VOCAB, num_key_value_heads=2, head_dim=8, max_position_embeddings=4096, **sizes)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("sdar")
    Qwen3ForCausalLM(config).save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    saved = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(saved | {"model_type": "sdar", "architectures": ["SDARForCausalLM"]}))
    return models.load(str(path), device="cpu", dtype="float32")


def canvas(dlm, prompt: int, holes: int) -> Canvas:
    ids = [2 + (7 * i) % 90 for i in range(prompt)] + [MASK] * holes
    return Canvas(torch.tensor(ids), MASK)


def decode(dlm, start: Canvas, recompute: bool, decoder="dynamic"):
    rng = torch.Generator().manual_seed(0)
    predict = BlockPredict(dlm.blocks, start.tokens, MASK, rng, recompute=recompute)
    steps = list(
        build(decoder, dict(dlm.decoder_options) if decoder == "dynamic" else {})(
            Canvas(start.tokens, MASK, blocks=predict.starts), predict, rng
        )
    )
    return steps, predict


def test_the_exact_cache_changes_no_token_and_runs_fewer_flops(dlm):
    start = canvas(dlm, 37, 27)
    cached, exact = decode(dlm, start, recompute=False)
    again, recomputed = decode(dlm, start, recompute=True)
    assert torch.equal(cached[-1].canvas.tokens, again[-1].canvas.tokens)
    assert cached[-1].calls == again[-1].calls
    assert exact.flops < recomputed.flops < full_canvas_flops(dlm.blocks.cost, len(start.tokens), again[-1].calls)
    # recomputing: each call runs every position up to its block's end; cached: the block, and once each finished one
    assert sum(q for q, _ in recomputed.session.forwards) > 5 * sum(q for q, _ in exact.session.forwards)


def test_at_2048_tokens_the_exact_cache_costs_20x_fewer_flops_than_the_whole_canvas(dlm):
    """A 2,048-token canvas (1,984 prompt tokens, 64 holes in blocks of 4), counted from the forwards the decode
    made, against recomputing all 2,048 positions at each of its calls."""
    start = canvas(dlm, 1984, 64)
    steps, exact = decode(dlm, start, recompute=False)
    ratio = full_canvas_flops(dlm.blocks.cost, 2048, steps[-1].calls) / exact.flops
    assert ratio >= 20, ratio
    # the prompt in one forward of its own, each finished block in one, as SDAR's generate.py runs them
    assert len(exact.session.forwards) == steps[-1].calls + len(exact.starts)
    assert exact.session.forwards[0] == (1984, 1984)


@pytest.mark.parametrize("name", sorted(set(DECODERS) - {"codila", "syntax-guard"}))
def test_every_decoder_runs_inside_the_family_s_blocks(dlm, name):
    """The decoder contract on a block family: every hole filled, only holes written, each Step's commits inside the
    block being decoded (the first hole's), the cache holding exactly the blocks before it."""
    start = canvas(dlm, 10, 14)
    options = {"steps": 3} if name == "renoise" else {}
    steps, predict = decode(dlm, start, recompute=False, decoder=name)
    before = start
    for step in steps:
        holes = before.holes.nonzero().squeeze(-1)
        first = int(holes[0])
        block = max(s for s in predict.starts if s <= first)
        width = dlm.blocks.size
        inside = (step.filled >= block) & (step.filled < block + width)
        assert bool(inside.all()) or name == "renoise" and options, (name, step.filled.tolist(), block)
        before = step.canvas
    out = steps[-1].canvas.tokens
    assert not bool((out == MASK).any()) and torch.equal(out[:10], start.tokens[:10])


def test_speed_times_a_block_family_with_and_without_its_exact_cache(dlm):
    cfg = speed.SpeedConfig(lengths=(96,), gen=16, caches=("none",), names=("dynamic",))
    rows = speed.run(dlm, cfg)
    by = {(r.decoder, r.cache): r for r in rows}
    cached, none = by[("dynamic", "exact")], by[("dynamic", "none")]
    assert cached.calls == none.calls and cached.flops < none.flops
    assert none.canvas_flops == full_canvas_flops(dlm.blocks.cost, 112, none.calls)
    summary = speed.summary(rows, dlm, cfg)["targets"]
    assert summary["exact_flops_fewer_at_longest_prompt"] == round(cached.canvas_flops / cached.flops, 1)
    assert summary["exact_time_ratio_at_longest_prompt"] > 0


def test_the_family_table_lists_every_family_as_a_loaded_one_is(dlm):
    from dlmcode.models import FAMILIES, families

    rows = {f.name: f for f in families.ROWS}
    assert list(rows) == list(FAMILIES)
    row = rows[dlm.family]
    assert (row.decoder, row.infill, row.canvas) == (dlm.decoder, dlm.infill, "noise" if dlm.blocks.noise else "mask")
    assert row.attention == f"blocks of {dlm.blocks.size}"
    from dlmcode.jobs import batch

    assert row.serve == "batched" and isinstance(batch.batched(dlm).blocks.open(), batch.RoutedSession)


def test_dlmcode_models_lists_them_on_stdout():
    from typer.testing import CliRunner

    from dlmcode.cli import commands

    result = CliRunner().invoke(commands.app, ["models", "--json"])
    assert result.exit_code == 0
    listed = json.loads(result.stdout)
    assert [f["name"] for f in listed] == list(models.FAMILIES)
    assert {f["name"]: f["infill"] for f in listed}["sdar"] == "prompt"


def test_the_server_fills_a_cursor_with_a_block_family(dlm):
    """An editor's request (prefix, suffix) on SDAR: its own decoder, its exact cache, the suffix read first."""
    from dlmcode.serve.engine import Engine
    from dlmcode.serve.request import Fill

    engine = Engine(dlm, dlm.decoder, dict(dlm.decoder_options), "none", 0, "python", "sdar", 0, 1)
    answer = engine.run(Fill("def f(x):\n    y = ", "\n    return y\n", ceiling=8))
    assert answer.calls >= 1 and answer.decoder == "dynamic"
    assert "\n    return y" not in answer.text  # the fill is the middle only


def test_a_generate_ends_after_the_block_that_holds_the_end_of_text(dlm):
    """End-of-text made the surest token everywhere: the decode stops before the second block (no call past the
    first, the holes after it not counted as filled), the text cut there."""
    from dlmcode.core.run import RunSettings
    from dlmcode.jobs import fill
    from dlmcode.jobs.processors import Penalty

    job = fill.generate_job("ab", dlm, RunSettings(decoder=None, length=10), chat=False)
    job.processors = (*job.processors, Penalty(EOS, -50.0, "end-of-text"))  # a penalty of -50: a bonus
    result = job.run()
    assert result.calls == 1  # the first block (the prompt's 2 tokens, 2 holes above the bar): not the other two
    assert result.filled == 2 and result.text == "ab"
    assert len(job.block_predict.session.forwards) == 1
