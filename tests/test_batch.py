"""Batching behind predict (dlmcode/jobs/batch.py over models/forward.py): padded forwards equal unpadded
ones, and decodes give the same tokens and calls at every batch size (no Fast-dLLM batch-size drift)."""

from __future__ import annotations

import threading

import pytest
import torch

from dlmcode.bench import runner
from dlmcode.bench.suites import Task
from dlmcode.core.errors import UsageError
from dlmcode.jobs import batch, fill

from tiny import SNIPPETS, tiny_builtin

# (decoder, settings): a one-token baseline (sampled, so each job's own generator matters),
# Fast-dLLM's threshold in blocks, and two seed decoders.
DECODERS = [
    ("low-confidence", {"temperature": "1.0"}),
    ("threshold", {"tau": "0.2", "block": "8"}),
    ("mean-field", {"tau": "0.5", "block": "8"}),
    ("dico", {"expand": "0.1", "final_tau": "0.1", "factor": "3"}),
]  # on the model below each commits several holes a call, except low-confidence
# (snippet, lines to rewrite): canvases of different lengths
SPANS = [(0, (2, 2)), (1, (2, 4)), (2, (1, 3)), (3, (3, 4)), (4, (2, 2)), (5, (1, 2))]


@pytest.fixture(scope="module")
def dlm(tmp_path_factory):
    """tiny_builtin with sharper logits: larger embeddings (tied head) and a small [MASK] embedding,
    so that holes get confident proposals and parallel decoders commit several at once. Its holes'
    confidences still differ by only ~1e-4, so any batch-dependent noise would change which it picks."""
    from dlmcode.models import load
    from dlmcode.models.builtin import BuiltinTokenizer, load_model, save

    path = tiny_builtin(tmp_path_factory.mktemp("tiny") / "model")
    model = load_model(path, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        model.embed.weight.mul_(20.0)
        model.embed.weight[model.cfg.mask_id].mul_(0.1)
    save(model, BuiltinTokenizer.from_file(path / "tokenizer.json"), path, dtype=torch.float32)
    return load(str(path), device="cpu", dtype="fp32")


def jobs(dlm, name: str, options: dict) -> list[fill.Job]:
    return [fill.prepare_infill(SNIPPETS[i], span, dlm=dlm, decoder=name, options=options, seed=i) for i, span in SPANS]


def outcome(results: list[fill.Result]) -> list[tuple[list[int], int]]:
    return [(r.canvas, r.calls) for r in results]


def test_padded_rows_equal_unpadded_logits(dlm):
    seqs = [torch.randint(4, 200, (n,)) for n in (7, 40, 23, 64)]
    rows = dlm.forward_batch(seqs)
    for s, row in zip(seqs, rows, strict=True):
        assert row.shape[0] == len(s) and row.dtype == torch.float32
        torch.testing.assert_close(row, dlm.predict(s), atol=1e-5, rtol=0)
    alone = dlm.forward_batch([seqs[0]])[0]  # a batch of one: masked, unpadded
    torch.testing.assert_close(alone, dlm.predict(seqs[0]), atol=1e-6, rtol=0)


def test_the_mask_hides_padding_whatever_it_holds(dlm):
    from dlmcode.models.builtin import load_model

    model = load_model(dlm.name, torch.device("cpu"), torch.float32)
    ids = torch.randint(4, 200, (2, 30))
    keep = torch.ones(2, 30, dtype=torch.bool)
    keep[:, 20:] = False
    other = ids.clone()
    other[:, 20:] = torch.randint(4, 200, (2, 10))  # different tokens in the padding
    with torch.inference_mode():
        a, b = model(ids, mask=keep), model(other, mask=keep)
        alone = model(ids[:1, :20])
    torch.testing.assert_close(a[:, :20], b[:, :20], atol=1e-6, rtol=0)
    torch.testing.assert_close(a[:1, :20], alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name,options", DECODERS, ids=[d for d, _ in DECODERS])
def test_tokens_and_calls_do_not_depend_on_the_batch_size(dlm, name, options):
    shared = batch.batched(dlm)
    plain = outcome([job.run() for job in jobs(dlm, name, options)])  # the unbatched predict
    assert len({len(c) for c, _ in plain}) > 3  # canvases of different lengths share the forwards
    for size in (1, 2, 4):
        assert outcome(batch.run_batched(jobs(shared, name, options), size)) == plain, size


@pytest.mark.parametrize("cache", ["dual", "prefix"])
def test_kv_cached_decodes_share_forwards_and_keep_their_tokens(dlm, cache):
    """models/cache.run_rows: each decode's cached runs (full, or its block from its own start
    against its own cached keys) join one forward, and every decode gets the tokens it gets alone."""
    import dataclasses
    import functools

    def cached_jobs(model):
        return [
            fill.prepare_infill(
                SNIPPETS[i],
                span,
                dlm=model,
                decoder="threshold",
                options={"tau": "0.2", "block": "4"},
                seed=i,
                cache=cache,
            )
            for i, span in SPANS
        ]

    plain = outcome([job.run() for job in cached_jobs(dlm)])
    sizes = []
    rows = dlm.run_rows
    shared = batch.batched(dataclasses.replace(dlm, run_rows=lambda runs: sizes.append(len(runs)) or rows(runs)))
    together = list(batch.Batcher(4).map([functools.partial(job.run) for job in cached_jobs(shared)]))
    assert outcome(together) == plain
    assert max(sizes) > 1 and sum(sizes) == sum(r.calls for r in together)


def test_a_batch_holds_every_running_decode(dlm):
    sizes = []
    forward = dlm.forward_batch
    shared = batch.batched(dlm)
    shared.predict.forward = lambda seqs: sizes.append(len(seqs)) or forward(seqs)
    results = batch.run_batched(jobs(shared, "low-confidence", {}), 4)
    assert max(sizes) == 4 and sum(sizes) == sum(r.calls for r in results)
    assert len(sizes) < sum(r.calls for r in results) / 2  # most forwards are shared
    assert all(r.seconds > 0 for r in results)


def test_a_family_without_a_batched_forward_is_called_per_request(dlm):
    import dataclasses

    calls = []
    plain = dataclasses.replace(dlm, forward_batch=None, predict=lambda t: calls.append(len(t)) or dlm.predict(t))
    want = outcome([job.run() for job in jobs(dlm, "threshold", {"tau": "0.02"})])
    got = outcome(batch.run_batched(jobs(batch.batched(plain), "threshold", {"tau": "0.02"}), 3))
    assert got == want and len(calls) == sum(c for _, c in got)


def test_an_error_in_one_decode_stops_the_others_and_reaches_the_caller(dlm):
    shared = batch.batched(dlm)

    def work(n: int, fail: bool) -> int:
        for _ in range(n):
            shared.predict(torch.arange(4, 14))
        if fail:
            raise RuntimeError("decoder broke")
        return n

    works = [lambda n=n: work(n, n == 3) for n in (5, 3, 50, 50)]
    with pytest.raises(RuntimeError, match="decoder broke"):
        list(batch.Batcher(4).map(works))
    assert not [t for t in threading.enumerate() if t.name.startswith("dlmcode-batch")]


def test_ctrl_c_stops_every_decode(dlm):
    shared = batch.batched(dlm)
    forward, seen = shared.predict.forward, []

    def interrupted(seqs):
        seen.append(len(seqs))
        if len(seen) == 3:
            raise KeyboardInterrupt  # arrives in the calling thread, which runs the forwards
        return forward(seqs)

    shared.predict.forward = interrupted
    with pytest.raises(KeyboardInterrupt):
        batch.run_batched(jobs(shared, "low-confidence", {}), 4)
    assert not [t for t in threading.enumerate() if t.name.startswith("dlmcode-batch")]


def test_results_keep_the_order_of_the_jobs(dlm):
    shared = batch.batched(dlm)
    out = list(batch.Batcher(2).map([lambda i=i: shared.predict(torch.arange(4, 4 + i)).shape[0] for i in range(1, 8)]))
    assert out == list(range(1, 8))
    assert list(batch.Batcher(3).map([])) == []


def test_jobs_on_an_unbatched_model_and_bad_sizes_are_refused(dlm):
    with pytest.raises(ValueError, match="batched"):
        batch.run_batched(jobs(dlm, "threshold", {}), 2)
    with pytest.raises(UsageError, match="--batch-size 0"):
        batch.Batcher(0)
    with pytest.raises(UsageError, match="--batch-size"):
        runner.prepare_bench("heldout-single", [], [], [], 2, 0, 128, None, {}, batch_size=0)


def test_bench_samples_are_the_same_at_every_batch_size(dlm):
    cuts = enumerate((3, 10, 20, 5))  # a 9-character middle cut out of four snippets
    tasks = [Task(f"t/{i}", SNIPPETS[i][:n], SNIPPETS[i][n + 9 :], SNIPPETS[i][n : n + 9]) for i, n in cuts]
    configs = runner.configs(["threshold", "dico"], ["tau=0.2", "factor=3"], [])

    def run(size: int) -> list[tuple]:
        found = runner.samples(tasks, configs, dlm, 0, 16, runner.sandbox.Limits(), batch_size=size)
        return [(s.task, s.decoder, s.output, s.calls, s.exact, s.breakage) for s in found]

    one = run(1)
    assert len(one) == 8 and run(3) == one


def test_a_masked_lm_batch_equals_its_predict_with_framing():
    transformers = pytest.importorskip("transformers")
    from dlmcode.models import hf

    config = transformers.BertConfig(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(config).eval()
    frame = ([1], [2])  # [CLS] ... [SEP], added where a canvas lacks them
    predict, forward = hf.make_predict(model, frame=frame), hf.make_forward_batch(model, 0, frame=frame)
    seqs = [torch.tensor([1, *range(5, 5 + n), 2]) for n in (3, 20)] + [torch.arange(5, 17), torch.tensor([1, 7, 8])]
    for s, row in zip(seqs, forward(seqs), strict=True):
        torch.testing.assert_close(row, predict(s), atol=1e-5, rtol=0)
