"""The `codila` decoder: its kernels on hand-made numbers, call counts per mode, the missing
assistant error, and the toy joint of issue 4 (an oracle dLLM over "New York" / "Los Angeles"
phrases: `threshold` commits mixed phrases, `codila` with a trained assistant none, same TPF)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch

from dlmcode.core.assistant import block_loss
from dlmcode.core.canvas import At, Canvas
from dlmcode.core.errors import ModelError
from dlmcode.decoders.codila import Codila, block_rows, candidates, penalize, prefix_length
from dlmcode.decoders.threshold import Threshold
from dlmcode.models.assistant_lm import AssistantConfig, TinyAssistant


def tiny_assistant(vocab: int, seed: int = 0, dim: int = 16) -> TinyAssistant:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return TinyAssistant(AssistantConfig(vocab_size=vocab, dim=dim, n_layers=1, n_heads=2)).eval()


def codila(vocab: int = 40, **settings) -> Codila:
    return dataclasses.replace(Codila(**settings), assistant=tiny_assistant(vocab))


def run(decoder, canvas, predict, seed=0):
    steps = list(itertools.islice(decoder(canvas, predict, torch.Generator().manual_seed(seed)), canvas.n_holes + 1))
    assert len(steps) <= decoder.max_calls(canvas.n_holes)
    return steps


# --- kernels ------------------------------------------------------------------------------------


def test_candidates_are_runs_of_holes_cut_into_blocks(make_canvas):
    canvas = make_canvas([2, 5, 1, 3, 2, 1], mask_id=99, vocab=40)  # holes 2-6, 8-10, 13
    assert [b.tolist() for b in candidates(canvas, 2, 10)] == [[2, 3], [4, 5], [6], [8, 9], [10], [13]]
    assert [b.tolist() for b in candidates(canvas, 4, 2)] == [[2, 3, 4, 5], [6]]


def test_prefix_length_is_the_longest_prefix_with_mean_entropy_under_tau():
    h = torch.tensor([0.1, 0.9, 0.2, 2.0])  # prefix means .1 .5 .4 .8
    assert prefix_length(h, 0.45) == 3  # not monotone: k = 2 fails, k = 3 passes
    assert prefix_length(h, 0.05) == 0
    assert prefix_length(h, 1.0) == 4
    assert prefix_length(h.masked_fill(torch.tensor([False, False, True, False]), math.inf), 1.0) == 2


def test_penalize_lowers_only_where_the_top1s_disagree():
    conf = torch.tensor([0.95, 0.95, 0.5], dtype=torch.float64)
    out = penalize(conf, torch.tensor([3, 4, 5]), torch.tensor([3, 7, 6]), 0.5)
    assert out.tolist() == [0.95, 0.475, 0.25]


class SaysAlways(torch.nn.Module):
    """A hand-made assistant whose every next-token distribution puts all mass on `token`."""

    def __init__(self, vocab: int, token: int):
        super().__init__()
        self.vocab, self.open_id, self.close_id, self.vocab_sha256 = vocab, vocab, vocab + 1, ""
        self.embed = torch.nn.Embedding(vocab + 2, 4)
        self.token = token

    @property
    def table(self):
        return self.embed.weight[: self.vocab]

    def embed_ids(self, ids):
        return self.embed(ids)

    def forward(self, x, last=False):
        logits = torch.full((x.shape[0], 1 if last else x.shape[1], self.vocab), -20.0)
        logits[..., self.token] = 20.0
        return logits

    def extend(self, x, past=None):
        return self(x, last=True)[:, -1], None


def test_verify_holds_back_holes_where_the_assistant_disagrees():
    # four holes, dLLM top-1 0.95 each: tokens 2, 5, 2, 5; the assistant always says 2
    vocab, mask_id = 8, 8
    rows = torch.full((5, vocab), 0.0)
    for hole, token in zip(range(1, 5), [2, 5, 2, 5], strict=True):
        rows[hole, token] = math.log(0.95 * (vocab - 1) / 0.05)
    canvas = Canvas(torch.tensor([0, mask_id, mask_id, mask_id, mask_id]), mask_id)
    decoder = dataclasses.replace(
        Codila(mode="verify", block=4, threshold=0.9, penalty=0.5), assistant=SaysAlways(vocab, 2)
    )
    first = next(decoder(canvas, lambda tokens: rows.clone(), torch.Generator().manual_seed(0)))
    assert first.filled.tolist() == [1, 3]  # the agreeing holes pass 0.9; 0.95 * 0.5 does not
    plain = dataclasses.replace(decoder, penalty=0.0)
    assert next(plain(canvas, lambda tokens: rows.clone(), torch.Generator().manual_seed(0))).filled.tolist() == [
        1,
        2,
        3,
        4,
    ]


# --- calls per mode -----------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "block"), [(12, 4), (10, 4), (9, 2), (7, 8)])
def test_static_calls_equal_the_number_of_blocks(n, block, tiny_model, make_canvas):
    canvas = make_canvas([6, n], tiny_model.mask_id, tiny_model.vocab)
    steps = run(codila(block=block), canvas, tiny_model)
    assert steps[-1].calls == tiny_model.calls == math.ceil(n / block)
    assert all(step.info["assistant"] == len(step.filled) for step in steps)


@pytest.mark.parametrize("tau", [0.0, 2.0, 3.0, 100.0])
def test_dynamic_calls_lie_between_n_over_b_and_n(tau, tiny_model, make_canvas):
    n, block = 12, 4
    canvas = make_canvas([6, n], tiny_model.mask_id, tiny_model.vocab)
    calls = run(codila(mode="dynamic", block=block, tau=tau), canvas, tiny_model)[-1].calls
    assert n / block <= calls <= n
    if tau == 0.0:
        assert calls == n  # nothing passes: one dLLM-confidence token a call
    if tau == 100.0:
        assert calls == n / block  # everything passes: whole blocks


def test_codila_without_an_assistant_is_a_clear_error(tiny_model, make_canvas):
    canvas = make_canvas([3, 4], tiny_model.mask_id, tiny_model.vocab)
    with pytest.raises(ModelError, match="codila needs an assistant.*train-assistant"):
        next(Codila()(canvas, tiny_model, torch.Generator()))
    assert tiny_model.calls == 0


def test_a_narrower_dllm_vocabulary_is_a_clear_error(tiny_model, make_canvas):
    canvas = make_canvas([3, 4], tiny_model.mask_id, tiny_model.vocab)
    with pytest.raises(ModelError, match="do not share a vocabulary"):
        next(codila(vocab=64)(canvas, tiny_model, torch.Generator()))


def test_bad_settings_are_rejected():
    for bad in ({"block": 0}, {"mode": "greedy"}, {"window": 0}, {"tau": -1}, {"penalty": 2}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Codila(**bad)


# --- the toy joint: New York / Los Angeles -------------------------------------------------------

SEP, NEW, YORK, LOS, ANGELES, GATOS, MASK = range(7)
VOCAB = 6  # MASK is outside the logits, as in conftest.TinyModel
JOINT = {(NEW, YORK): 0.4, (LOS, ANGELES): 0.3, (LOS, GATOS): 0.3}  # marginal argmaxes: Los, York (mixed)
PHRASES = 4


def oracle(tokens: torch.Tensor) -> torch.Tensor:
    """Exact conditional marginals of each phrase's holes given what is committed; phrases independent."""
    logits = torch.full((len(tokens), VOCAB), -30.0)
    for pos, token in enumerate(tokens.tolist()):
        if token != MASK:
            logits[pos, token] = 0.0
    for start in range(1, len(tokens), 3):
        for i in (0, 1):
            if tokens[start + i] == MASK:
                other = int(tokens[start + 1 - i])
                dist = torch.zeros(VOCAB)
                for pair, p in JOINT.items():
                    if other == MASK or pair[1 - i] == other:
                        dist[pair[i]] += p
                logits[start + i] = torch.log(dist / dist.sum()).clamp_min(-30.0)
    return logits


def phrase_canvas() -> Canvas:
    return Canvas(torch.tensor([SEP, MASK, MASK] * PHRASES), MASK)


def mixed(tokens: torch.Tensor) -> int:
    pairs = tokens.view(PHRASES, 3)[:, 1:].tolist()
    return sum(tuple(p) not in JOINT for p in pairs)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: a second intra-op thread only spins on a busy machine (30x the CPU time)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def joint_assistant() -> TinyAssistant:
    """A tiny assistant trained on the joint from the oracle's marginals of a fully masked phrase."""
    model = tiny_assistant(VOCAB, dim=32).train()
    probs = torch.softmax(oracle(torch.tensor([SEP, MASK, MASK])), -1)[1:]  # (2, V)
    pairs, weights = torch.tensor(list(JOINT)), torch.tensor(list(JOINT.values()))
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)  # 1e-2 spikes late in training
    for _ in range(250):
        targets = pairs[torch.multinomial(weights, 64, replacement=True, generator=g)]  # (64, 2)
        loss = block_loss(model, probs.expand(64, 2, VOCAB), targets) / targets.numel()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def test_oracle_marginals_make_threshold_mix_phrases():
    probs = torch.softmax(oracle(phrase_canvas().tokens), -1)
    assert probs[1].argmax() == LOS and probs[2].argmax() == YORK


def test_codila_commits_no_mixed_phrase_where_threshold_does_at_the_same_tpf(joint_assistant):
    canvas = phrase_canvas()
    base = run(Threshold(tau=0.0, block=2), canvas, oracle)
    ours = run(dataclasses.replace(Codila(block=2), assistant=joint_assistant), canvas, oracle)
    assert base[-1].calls == ours[-1].calls == PHRASES  # TPF 2 for both
    assert mixed(base[-1].canvas.tokens) == PHRASES
    assert mixed(ours[-1].canvas.tokens) == 0


def test_sampled_codila_stays_coherent_where_sampled_threshold_does_not(joint_assistant):
    canvas, seeds = phrase_canvas(), range(12)
    theirs = Threshold(tau=0.0, block=2, temperature=1.0)
    ours = dataclasses.replace(Codila(block=2, temperature=1.0), assistant=joint_assistant)
    base = sum(mixed(run(theirs, canvas, oracle, s)[-1].canvas.tokens) for s in seeds)
    got = sum(mixed(run(ours, canvas, oracle, s)[-1].canvas.tokens) for s in seeds)
    # independent sampling mixes 1 - (.4*.4 + .6*.6) = 48% of phrases in expectation
    assert base >= 0.25 * PHRASES * len(seeds)
    assert got == 0


def test_dynamic_commits_whole_phrases_when_tau_allows(joint_assistant):
    canvas = phrase_canvas()
    steps = run(
        dataclasses.replace(Codila(block=2, mode="dynamic", tau=0.75), assistant=joint_assistant), canvas, oracle
    )
    assert steps[-1].calls == PHRASES and mixed(steps[-1].canvas.tokens) == 0


def test_block_rows_are_the_rows_read_by_position():
    """Every block of one length over logits of the blocks' rows only: those rows, uncopied; otherwise a gather."""
    logits = torch.randn(20, 7)
    blocks = [torch.tensor([3, 4, 5]), torch.tensor([8, 9, 10]), torch.tensor([14, 15, 16])]
    at = At(logits[:9].clone(), torch.cat(blocks), 20)
    whole = block_rows(at, blocks, [0, 1, 2], 3)
    assert torch.equal(whole, torch.stack([logits[:3], logits[3:6], logits[6:9]]))
    assert whole.data_ptr() == at.logits.data_ptr()
    assert torch.equal(block_rows(at, blocks, [0, 2], 3), torch.stack([logits[:3], logits[6:9]]))
    assert torch.equal(block_rows(logits, blocks, [0, 1, 2], 3), logits[torch.stack(blocks)])
