"""Rows on demand (core/canvas.Predict): a call computes the output head and the float conversion on
the rows a caller reads only, with the same logits those rows have in a full call, through every
family, the KV cache, the batch and the job's processors; and every decoder commits the same tokens
as when every row is computed."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dlmcode.core.canvas import Canvas, last, logits_at, takes_rows
from dlmcode.decoders import DECODERS, build
from dlmcode.jobs import batch
from dlmcode.jobs.processors import Ban, Remember, processed
from dlmcode.models import cache, dream, forward, native, native_dream, native_llada

from tiny import TINY_DREAM, TINY_LLADA, randomize

CPU = torch.device("cpu")
MASK = 63


def llada() -> native_llada.LladaLM:
    cfg = native_llada.LladaConfig.from_json(TINY_LLADA | {"weight_tying": False})
    return randomize(native_llada.LladaLM(cfg))


def dream_model() -> native_dream.DreamLM:
    return randomize(native_dream.DreamLM(native_dream.DreamConfig.from_json(TINY_DREAM)))


def tokens(n: int = 24, holes: range = range(8, 20)) -> torch.Tensor:
    ids = torch.randint(0, 50, (n,), generator=torch.Generator().manual_seed(3))
    ids[list(holes)] = MASK
    return ids


class HeadRows:
    """Counts the rows that reach a Linear head (a forward hook)."""

    def __init__(self, head: torch.nn.Module) -> None:
        self.seen: list[int] = []
        head.register_forward_hook(lambda _m, args, _out: self.seen.append(args[0].shape[-2]))


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_rows_are_the_full_calls_rows_and_only_they_reach_the_head(family):
    model = llada() if family == "llada" else dream_model()
    spy = HeadRows(model.model.transformer["ff_out"] if family == "llada" else model.lm_head)
    predict = native.predict_of(model, dream.SHIFT if family == "dream" else 0)
    ids, rows = tokens(), torch.tensor([0, 9, 10, 17, 23])
    full = predict(ids)  # (L, V)
    part = predict(ids, rows)  # (R, V)
    assert takes_rows(predict) and part.shape == (5, full.shape[1]) and part.dtype == torch.float32
    torch.testing.assert_close(part, full[rows], rtol=1e-5, atol=1e-6)
    assert spy.seen == [len(ids), 5]  # the head ran on 24 rows, then on 5
    if family == "dream":  # position i is scored from hidden state i - 1, as dream.align does
        with torch.inference_mode():
            want = dream.align(model(ids[None])[0]).float()
        torch.testing.assert_close(full, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_the_last_layer_runs_the_rows_it_is_asked_for_only(family):
    """Every layer but the last runs every position (all are attended); the last one's queries,
    attention and MLP run for the rows read (Dream: the hidden states before them) only."""
    model = llada() if family == "llada" else dream_model()
    if family == "llada":
        first, last = (
            HeadRows(b.ff_out) for b in (model.model.transformer.blocks[0], model.model.transformer.blocks[-1])
        )
    else:
        first, last = (HeadRows(layer.mlp.down_proj) for layer in (model.model.layers[0], model.model.layers[-1]))
    predict = native.predict_of(model, dream.SHIFT if family == "dream" else 0)
    predict(tokens(), torch.tensor([0, 1, 9, 10, 17]))
    assert first.seen == [24] and last.seen == ([5] if family == "llada" else [4])  # Dream: rows 0 and 1 share state 0


def test_a_predict_that_does_not_take_rows_is_cut():
    seen = []

    def plain(ids):
        seen.append(len(ids))
        return torch.arange(len(ids) * 3, dtype=torch.float32).view(len(ids), 3)

    got = logits_at(plain, torch.zeros(5, dtype=torch.long), torch.tensor([4, 1]))
    assert torch.equal(got, torch.tensor([[12.0, 13.0, 14.0], [3.0, 4.0, 5.0]])) and seen == [5]


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("mode", ["prefix", "dual"])
def test_cached_rows_are_the_cached_calls_rows(family, mode):
    model = llada() if family == "llada" else dream_model()
    shift = dream.SHIFT if family == "dream" else 0
    settings = cache.CacheSettings(mode, 4, 0)
    whole = cache.CachedPredict(model.hidden, model.head, settings, MASK, CPU, shift)
    some = cache.CachedPredict(model.hidden, model.head, settings, MASK, CPU, shift)
    ids, rows = tokens(), torch.arange(8, 12)
    for step in range(3):  # a full call, then cached calls of the block, committing one hole each
        torch.testing.assert_close(some(ids, rows), whole(ids)[rows], rtol=1e-5, atol=1e-6)
        ids = ids.clone()
        ids[8 + step] = 5
    assert some.cached_calls == whole.cached_calls == 2


def test_a_batch_gives_each_canvas_its_own_rows():
    model = dream_model()
    spy = HeadRows(model.lm_head)
    fields = native.wired(model, MASK, 0, dream.SHIFT)
    predict = native.predict_of(model, dream.SHIFT)
    seqs = [tokens(24), tokens(17, range(3, 9))]
    rows = [torch.tensor([8, 9, 19]), None]
    got = fields["forward_batch"](seqs, rows)
    assert got[0].shape[0] == 3 and got[1].shape[0] == 17 and spy.seen == [3, 17]
    torch.testing.assert_close(got[0], predict(seqs[0])[rows[0]], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], predict(seqs[1]), rtol=1e-5, atol=1e-5)
    routed = batch.Routed(fields["forward_batch"])  # outside a batched run: a batch of one
    torch.testing.assert_close(routed(seqs[0], rows[0]), got[0], rtol=1e-5, atol=1e-5)
    assert spy.seen[-1] == 3


def test_processors_see_the_rows_and_remember_reads_every_hole():
    model = llada()
    predict = native.predict_of(model)
    remember = Remember(mask_id=MASK)
    run = processed(predict, (Ban((2,), "pad"), remember))
    ids, rows = tokens(), torch.tensor([9, 10])
    got = run(ids, rows)
    full = predict(ids)
    full[:, 2] = float("-inf")
    torch.testing.assert_close(got, full[rows], rtol=1e-5, atol=1e-6)
    holes = (ids == MASK).nonzero().squeeze(-1)
    torch.testing.assert_close(remember.at(holes), full[holes], rtol=1e-5, atol=1e-6)  # every hole, not only 9, 10
    assert remember.rows is not None and len(remember.rows) == len(holes)  # no other row was computed


@pytest.mark.parametrize("name", DECODERS)
def test_every_decoder_commits_what_it_commits_when_every_row_is_computed(name, make_canvas):
    """The decoders ask for their rows; the same decode on a predict that computes every row (and is
    cut by logits_at) commits the same tokens in the same steps, at temperature 0 and 1."""
    model = llada()
    predict = native.predict_of(model)
    canvas = make_canvas([6, 9, 3, 7, 2], MASK, 50)
    for temperature in (0.0, 1.0):
        options = {"temperature": temperature} | ({} if name == "codila" else {"block": 4})
        decoder = build(name, options)
        if name == "codila":
            decoder = dataclasses.replace(decoder, assistant=tiny_assistant(model.cfg.vocab))
        fast = list(decoder(canvas, predict, torch.Generator().manual_seed(1)))
        slow = list(decoder(canvas, lambda ids: predict(ids), torch.Generator().manual_seed(1)))
        assert [s.filled.tolist() for s in fast] == [s.filled.tolist() for s in slow]
        assert torch.equal(fast[-1].canvas.tokens, slow[-1].canvas.tokens)


def tiny_assistant(vocab: int):
    from dlmcode.models.assistant_lm import AssistantConfig, TinyAssistant

    with torch.random.fork_rng():
        torch.manual_seed(0)
        return TinyAssistant(AssistantConfig(vocab_size=vocab, dim=16, n_layers=1, n_heads=2)).eval()


def test_a_decode_reads_only_the_active_blocks_holes():
    model = llada()
    spy = HeadRows(model.model.transformer["ff_out"])
    canvas = Canvas(tokens(24, range(8, 20)), MASK)
    final = last(build("low-confidence", {"block": 4})(canvas, native.predict_of(model), torch.Generator()))
    assert final.calls == 12
    assert spy.seen == [4, 3, 2, 1] * 3  # the block's holes left, never the 24 rows of the canvas


def test_head_rows_is_an_ordinary_tensor_a_caller_may_edit():
    model = llada()
    with torch.inference_mode():
        states = model.hidden(tokens()[None])[0]
    out = forward.head_rows(model.head, states, torch.tensor([1, 2]))
    assert not out.is_inference() and not out.requires_grad
    out[0, 0] = 1.0


def test_the_speed_bench_times_the_calls_a_decode_makes():
    """speed.Timed passes the decoder's rows on: a timed call computes what it computes in a decode."""
    from dlmcode.bench import speed

    model = llada()
    spy = HeadRows(model.model.transformer["ff_out"])
    timed = speed.Timed(native.predict_of(model), CPU)
    canvas = Canvas(tokens(24, range(8, 16)), MASK)
    last(build("low-confidence", {"block": 4})(canvas, timed, torch.Generator()))
    assert spy.seen == [4, 3, 2, 1] * 2 and len(timed.times) == 8
