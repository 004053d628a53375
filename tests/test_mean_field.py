"""Mean-Field kernels on hand-made distributions: the pairwise D, the fixed point, the commit rule.

The shared contract (terminates, fills every hole, same seed same output, call budget) is
tests/test_decoders.py's, which runs over every registered decoder.
"""

from __future__ import annotations

import math

import pytest
import torch

from dlmcode.core.errors import UsageError
from dlmcode.decoders import build, mean_field, threshold
from dlmcode.decoders.base import BlockState
from dlmcode.decoders.mean_field import BUFFER, MeanField, pairwise, select

INF = float("inf")
LN2 = math.log(2)


def naive_d(p: list[float], r: list[float]) -> float:
    """1 - JSD(p, r) / ln 2 by the textbook formula, in plain Python."""

    def h(x: list[float]) -> float:
        return -sum(v * math.log(v) for v in x if v > 0)

    mix = [(a + b) / 2 for a, b in zip(p, r, strict=True)]
    return 1 - (h(mix) - (h(p) + h(r)) / 2) / LN2


def textbook_d(p: torch.Tensor, r: torch.Tensor) -> float:
    """naive_d over whole tensors: 1 - (H((p + r)/2) - (H(p) + H(r))/2) / ln 2."""

    def h(x: torch.Tensor) -> float:
        return -float(torch.special.xlogy(x, x).sum())

    return 1 - (h((p + r) / 2) - (h(p) + h(r)) / 2) / LN2


def disjoint_logits(margins: list[float], width: int = 4) -> torch.Tensor:
    """Row i puts finite logits only on tokens [width*i, width*(i+1)): D = 0 between rows; c_i = margins[i]."""
    h = len(margins)
    logits = torch.full((h, width * h), -INF, dtype=torch.float64)
    for i, c in enumerate(margins):
        logits[i, width * i : width * (i + 1)] = torch.tensor([c, 0.0] + [-1.0] * (width - 2), dtype=torch.float64)
    return logits


def peaked(margin: float, token: int, vocab: int = 8) -> torch.Tensor:
    """One row of logits: `margin` on `token`, 0 elsewhere (top-1 minus top-2 log-probability = margin)."""
    row = torch.zeros(vocab, dtype=torch.float64)
    row[token] = margin
    return row


# --- the pairwise interaction D ---------------------------------------------------------------


def test_pairwise_is_symmetric_zero_diagonal_in_unit_interval_and_matches_the_formula():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(7, 11, generator=g, dtype=torch.float64) * 2, -1)  # (7, 11)
    d = pairwise(probs)
    assert torch.equal(d, d.T)
    assert torch.equal(d.diagonal(), torch.zeros(7, dtype=torch.float64))
    assert bool(((d >= 0) & (d <= 1)).all())
    for i in range(7):
        for j in range(7):
            if i != j:
                assert d[i, j].item() == pytest.approx(naive_d(probs[i].tolist(), probs[j].tolist()), abs=1e-12)


def test_identical_rows_give_one_and_disjoint_one_hots_give_zero():
    probs = torch.tensor(
        [[0.7, 0.2, 0.1, 0.0], [0.7, 0.2, 0.1, 0.0], [0, 0, 0, 1.0], [0, 0, 1.0, 0]], dtype=torch.float64
    )
    d = pairwise(probs)
    assert d[0, 1].item() == pytest.approx(1.0, abs=1e-12)
    assert d[2, 3].item() == pytest.approx(0.0, abs=1e-12)
    assert not bool(d.isnan().any()), "0 log 0 must be 0"
    assert pairwise(probs[:1]).tolist() == [[0.0]] and pairwise(probs[:0]).shape == (0, 0)


def test_pairwise_is_the_same_whatever_the_chunking():
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(9, 50, generator=g, dtype=torch.float64), -1)  # (9, 50): 36 pairs
    whole = pairwise(probs, buffer=10**6)
    for buffer in (1, 50, 149, 500):  # one pair a chunk, ..., ten pairs a chunk
        assert torch.allclose(pairwise(probs, buffer=buffer), whole, atol=1e-14, rtol=0)


def test_pairwise_on_a_dream_sized_vocabulary_keeps_its_buffer_bounded(monkeypatch):
    vocab, holes = 152_064, 32  # Dream / Qwen2 vocabulary; a 32-hole block (496 pairs)
    g = torch.Generator().manual_seed(2)
    # float32 halves the time; the chunking counts elements, whatever their dtype
    probs = torch.softmax(torch.randn(holes, vocab, generator=g) * 4, -1)  # (32, 152064)
    widths = []
    inner = mean_field.overlaps

    def spy(p, a, b):
        widths.append(len(a))
        return inner(p, a, b)

    monkeypatch.setattr(mean_field, "overlaps", spy)
    d = pairwise(probs)
    assert max(widths) * vocab <= BUFFER, "the (pairs, V) working buffer outgrew its budget"
    assert sum(widths) == holes * (holes - 1) // 2
    exact = probs.double() / probs.double().sum(-1, keepdim=True)  # float32 rows sum to 1 only within ~1e-5
    for i, j in [(0, 1), (3, 17), (30, 31), (5, 29)]:
        assert d[i, j].item() == pytest.approx(textbook_d(exact[i], exact[j]), abs=1e-6)
        assert d[j, i].item() == d[i, j].item()


def test_pairs_per_chunk():
    assert mean_field.pairs_per_chunk(152_064, BUFFER) * 152_064 <= BUFFER
    assert mean_field.pairs_per_chunk(10, 100) == 10
    assert mean_field.pairs_per_chunk(10**7, 100) == 1  # a row wider than the budget: one pair at a time


# --- the fixed point and the commit rule --------------------------------------------------------


@pytest.mark.parametrize("tau", [0.5, 0.8, 0.9, 0.97])
@pytest.mark.parametrize("iterations", [0, 1, 2, 5])
def test_with_d_zero_it_is_a_margin_threshold(tau, iterations):
    g = torch.Generator().manual_seed(int(tau * 100) + iterations)
    for _ in range(20):
        margins = (torch.rand(6, generator=g, dtype=torch.float64) * 5).tolist()
        logits = disjoint_logits(margins)  # (6, 24)
        rows, q = select(logits, tau, iterations)
        c = torch.tensor(margins, dtype=torch.float64)
        assert torch.allclose(q, torch.sigmoid(c), atol=1e-12, rtol=0)
        assert rows.tolist() == threshold.select(torch.sigmoid(c), tau).tolist()  # sigmoid(c) >= T, at least one


@pytest.mark.parametrize("margin", [1.0, 2.0, 3.0, 4.0])
def test_two_holes_with_identical_marginals_are_never_both_committed_at_high_tau(margin):
    # tau just under sigmoid(margin): a lone hole with this margin is committed, of two identical
    # holes (D = 1) at most one is.
    tau = 1 / (1 + math.exp(-(margin - 0.5)))
    logits = torch.stack([peaked(margin, 2), peaked(margin, 2), peaked(margin, 5)])  # (3, 8)
    for normalize in ("max", "none"):
        for init in ("sigmoid", "zero", "half"):
            rows, _ = select(logits, tau, 2, normalize, init)
            assert not {0, 1} <= set(rows.tolist()), (normalize, init)
    alone, _ = select(logits[[0, 2]], tau, 2, "none")
    assert 0 in alone.tolist()


def test_inhibition_is_at_most_one_nat_per_alike_neighbour():
    # The paper's D is in [0, 1]: two identical holes whose margin clears logit(T) + 1 are both
    # committed (a limit of the method, documented here so nobody mistakes it for a bug).
    tau = 0.9
    margin = math.log(tau / (1 - tau)) + 1.5
    rows, q = select(torch.stack([peaked(margin, 2), peaked(margin, 2)]), tau, 2)
    assert rows.tolist() == [0, 1]
    assert bool((q >= 1 / (1 + math.exp(-(margin - 1)))).all())


def test_at_least_one_commit_the_argmax_of_q():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 9, generator=g, dtype=torch.float64)
    rows, q = select(logits, 1.0, 2)
    assert rows.tolist() == [int(q.argmax())]
    assert select(logits[:1], 1.0, 2)[0].tolist() == [0]


def test_more_alike_neighbours_inhibit_more():
    # Three holes on the same token versus one alone, equal margins: the crowd's q is lower.
    logits = torch.stack([peaked(2.0, 1)] * 3 + [peaked(2.0, 6)])  # (4, 8)
    _, q = select(logits, 0.9, 2, "none")
    assert bool((q[:3] < q[3]).all())
    assert q[0].item() == pytest.approx(q[1].item()) == pytest.approx(q[2].item())


def test_init_and_iterations():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(6, 10, generator=g, dtype=torch.float64) * 2
    top = torch.log_softmax(logits, -1).topk(2).values
    c = top[:, 0] - top[:, 1]
    assert torch.allclose(select(logits, 0.5, 0, init="sigmoid")[1], torch.sigmoid(c))  # R = 0: q is its start
    assert torch.equal(select(logits, 0.5, 0, init="half")[1], torch.full((6,), 0.5, dtype=torch.float64))
    # one update from q = 0 is sigmoid(c), the sigmoid start
    assert torch.allclose(select(logits, 0.5, 1, init="zero")[1], select(logits, 0.5, 0, init="sigmoid")[1])
    # with a small D the Jacobi updates settle: a fixed point q = sigmoid(c - D q)
    small = torch.softmax(disjoint_logits([1.0, 2.0, 0.5]), -1) * 0.9 + 0.1 / 12  # (3, 12): 0 < D << 1
    q50, q51 = (select(small.log(), 0.5, r, "none")[1] for r in (50, 51))
    assert torch.allclose(q50, q51, atol=1e-12)


def test_max_normalisation():
    logits = torch.stack([peaked(1.0, 1), peaked(1.0, 2), peaked(1.0, 3)])  # partly alike: 0 < D < 1
    raw = pairwise(torch.softmax(logits, -1))
    assert 0 < raw.max().item() < 1
    q_max, q_none = select(logits, 0.5, 1, "max")[1], select(logits, 0.5, 1, "none")[1]
    assert bool((q_max < q_none).all()), "scaling D up to max 1 inhibits more"


def test_late_proposals_get_no_commit_score():
    logits = disjoint_logits([5.0, 5.0, 5.0])
    rows, q = select(logits, 0.01, 2, late=torch.tensor([False, True, False]))
    assert rows.tolist() == [0, 2] and q[1].item() == 0.0  # not even at a tiny tau
    rows, q = select(logits, 0.9, 2, late=torch.tensor([True, True, True]))
    assert rows.tolist() == [0]  # only late ones left: one still goes


# --- the decoder ------------------------------------------------------------------------------


def test_choose_commits_the_selected_rows_with_q_as_score():
    logits = disjoint_logits([3.5, 3.5, 0.5, 4.0]).float()  # (4, 16)
    logits[1] = logits[0]  # rows 0 and 1 alike
    ids = logits.argmax(-1)
    conf = torch.softmax(logits.double(), -1).max(-1).values
    choice = MeanField(tau=0.95).choose(logits, ids, conf, BlockState(0, 1, 4, 0), torch.Generator())
    rows, q = select(logits, 0.95, 2)
    assert choice.rows.tolist() == rows.tolist() == [3]
    assert torch.equal(choice.scores, q[rows])


def test_settings_are_validated():
    assert MeanField().block == 32 and MeanField().tau == 0.9 and MeanField().iterations == 2
    assert build("mean-field", {"normalize": "none", "init": "zero", "iterations": "3"}) == MeanField(
        normalize="none", init="zero", iterations=3
    )
    for bad in ({"normalize": "sum"}, {"init": "ones"}, {"tau": "1.5"}, {"iterations": "-1"}):
        with pytest.raises(UsageError):
            build("mean-field", bad)
    with pytest.raises(ValueError, match="normalize"):
        MeanField(normalize="rows")


def test_pairwise_top_is_exact_on_small_supports_and_conservative_otherwise():
    from dlmcode.decoders.mean_field import pairwise_top

    g = torch.Generator().manual_seed(0)
    sparse = torch.zeros(6, 500, dtype=torch.float64)
    for row in range(6):  # each row's mass on 5 tokens: inside any top-8
        cols = torch.randperm(500, generator=g)[:5]
        sparse[row, cols] = torch.rand(5, generator=g, dtype=torch.float64) + 0.1
    sparse /= sparse.sum(-1, keepdim=True)
    assert torch.allclose(pairwise_top(sparse.log(), sparse.topk(8).indices), pairwise(sparse), atol=1e-12)
    dense = torch.softmax(torch.randn(6, 500, generator=g, dtype=torch.float64) * 3, -1)
    exact, pooled = pairwise(dense), pairwise_top(dense.log(), dense.topk(8).indices)
    assert bool((pooled >= exact - 1e-12).all())  # pooling can only raise D
    assert torch.equal(pooled, pooled.T) and bool((pooled.diagonal() == 0).all())


def test_a_support_of_one_keeps_the_top_two_margin():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(5, 50, generator=g, dtype=torch.float64) * 2
    _, q = select(logits, 0.9, 0, support=1)  # no updates: q = sigmoid(c)
    top = torch.log_softmax(logits, -1).topk(2).values
    assert torch.allclose(q, torch.sigmoid(top[:, 0] - top[:, 1]))


@pytest.mark.parametrize(("h", "vocab", "k"), [(32, 4096, 32), (7, 100, 5), (2, 50, 3), (17, 3000, 13)])
def test_pairwise_top_reads_each_pair_as_the_direct_gather_does(h, vocab, k):
    """pairwise_top reads the pairs' columns from a small (H, H, k) table: the same values, bit for bit, as gathering
    each pair's union of tops from the (H, V) log-probabilities (the form it had before, restated here)."""
    from dlmcode.core import sampling

    logp = sampling.log_probs(torch.randn(h, vocab, generator=torch.Generator().manual_seed(h)) * 3)
    top = logp.topk(k, dim=-1).indices  # (H, k)
    i, j = torch.triu_indices(h, h, offset=1)
    member = torch.zeros(logp.shape, dtype=torch.bool).scatter_(1, top, True)
    cols = torch.cat([top[i], top[j]], dim=-1)  # (P, 2k)
    keep = torch.cat([torch.ones_like(top[j], dtype=torch.bool), ~member[i[:, None], top[j]]], dim=-1)
    pi, pj = logp[i[:, None], cols].exp() * keep, logp[j[:, None], cols].exp() * keep
    pi = torch.cat([pi, (1 - pi.sum(-1, keepdim=True)).clamp_min(0)], dim=-1)
    pj = torch.cat([pj, (1 - pj.sum(-1, keepdim=True)).clamp_min(0)], dim=-1)
    direct = torch.zeros(h, h, dtype=logp.dtype)
    direct[i, j] = direct[j, i] = mean_field.overlap(pi, pj)
    assert torch.equal(mean_field.pairwise_top(logp, top), direct)
