"""DiCo kernels on hand-made confidences: seeds, clusters, the factor rule inside them, Finalize.

The shared contract (terminates, fills every hole, same seed same output, call budget) is
tests/test_decoders.py's, which runs over every registered decoder.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from dlmcode.core.errors import UsageError
from dlmcode.decoders import build
from dlmcode.decoders.base import BlockState
from dlmcode.decoders.dico import DiCo, clusters, compound, conquer, margins, seeds


def f64(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def random_conf(g: torch.Generator, n: int) -> torch.Tensor:
    return torch.rand(n, generator=g, dtype=torch.float64)


# --- Divide: seeds --------------------------------------------------------------------------


def test_soft_nms_spreads_seeds():
    conf = f64(0.99, 0.98, 0.99, 0.97, 0.98, 0.2, 0.2, 0.2, 0.2, 0.2, 0.85, 0.86, 0.2)
    assert sorted(seeds(conf, 2, sigma=2.0, guidance=0.0).tolist()) == [0, 11]  # one per confident region
    assert sorted(seeds(conf, 2, sigma=0.1, guidance=0.0).tolist()) == [0, 2]  # no spreading: both in the first


def test_soft_nms_decays_rather_than_removes():
    # Soft-NMS: a neighbour of a seed can still be picked when nothing else is left worth more
    conf = f64(0.9, 0.9, 0.1)
    assert seeds(conf, 2, sigma=1.0, guidance=0.0).tolist() == [0, 1]  # 0.9 * (1 - e^-0.5) = 0.35 > 0.1


def test_trajectory_guidance_prefers_the_left():
    conf = torch.full((10,), 0.8, dtype=torch.float64)
    conf[7] = 0.85
    assert seeds(conf, 1, sigma=2.0, guidance=0.0).tolist() == [7]
    assert seeds(conf, 1, sigma=2.0, guidance=0.1).tolist() == [0]  # 0.8 > 0.85 * e^-0.7


def test_seeds_are_distinct_and_at_most_the_holes():
    g = torch.Generator().manual_seed(0)
    for n, h in [(4, 2), (4, 4), (3, 20), (10, 1)]:
        rows = seeds(random_conf(g, h), n, sigma=3.0, guidance=0.05)
        assert len(rows) == min(n, h) and len(set(rows.tolist())) == len(rows)
        assert bool(((rows >= 0) & (rows < h)).all())


# --- Divide: clusters -------------------------------------------------------------------------


def test_clusters_grow_both_ways_and_merge():
    conf = f64(0.9, 0.95, 0.5, 0.99, 0.8, 0.9, 0.3, 0.1, 0.9)
    runs = [g.tolist() for g in clusters(conf, torch.tensor([1, 4]), expand=0.75)]
    assert runs == [[0, 1], [3, 4, 5]]  # 0.5 and 0.3 stop the growth
    runs = [g.tolist() for g in clusters(conf, torch.tensor([4, 3, 7]), expand=0.75)]
    assert runs == [[3, 4, 5], [7, 8]]  # same run from two seeds: one cluster; a weak seed keeps its own hole
    runs = [g.tolist() for g in clusters(conf, torch.tensor([2, 0]), expand=0.75)]
    assert runs == [[0, 1, 2, 3, 4, 5]]  # touching runs merge


def test_clusters_are_disjoint_contiguous_and_cover_only_holes():
    g = torch.Generator().manual_seed(1)
    for _ in range(200):
        h = int(torch.randint(1, 25, (1,), generator=g))
        conf = random_conf(g, h)
        expand = float(torch.rand(1, generator=g))
        picked = seeds(conf, 4, 2.0, 0.05)
        groups = clusters(conf, picked, expand)
        rows = torch.cat(groups).tolist()
        assert len(rows) == len(set(rows)), "clusters overlap"
        assert all(0 <= r < h for r in rows), "a cluster left the active holes"
        assert rows == sorted(rows), "clusters are not in position order"
        for group in groups:
            assert group.tolist() == list(range(group[0], group[-1] + 1)), "a cluster has a gap"
        assert set(picked.tolist()) <= set(rows), "a seed is outside every cluster"
        for r in set(rows) - set(picked.tolist()):
            assert conf[r] >= expand, "a non-seed member is below the expansion threshold"
        for a, b in zip(groups, groups[1:], strict=False):
            assert b[0] > a[-1] + 1, "touching clusters were not merged"


# --- Conquer: the factor rule inside the clusters -------------------------------------------


def brute_factor(conf: list[float], f: float) -> set[int]:
    """The largest S with every c_i >= 1 - f/(|S| + 1) (empty allowed), by enumerating subsets;
    among equally large ones the most confident."""
    valid = [
        subset
        for n in range(len(conf) + 1)
        for subset in itertools.combinations(range(len(conf)), n)
        if all(conf[i] >= 1 - f / (n + 1) for i in subset)
    ]
    return set(max(valid, key=lambda s: (len(s), sum(conf[i] for i in s))))


@pytest.mark.parametrize("f", [0.5, 1.0, 2.0])
def test_conquer_matches_brute_force(f):
    g = torch.Generator().manual_seed(int(f * 10))
    for _ in range(60):
        h = int(torch.randint(1, 12, (1,), generator=g))
        conf = 0.3 + 0.7 * random_conf(g, h)  # (H,), mostly above the bars, no ties
        groups = clusters(conf, seeds(conf, 3, 1.5, 0.0), 0.6)
        per_cluster = set()
        for group in groups:
            per_cluster |= {int(group[i]) for i in brute_factor(conf[group].tolist(), f)}
        assert set(conquer(conf, groups, f, "cluster").tolist()) == per_cluster
        union = torch.cat(groups)
        expected = {int(union[i]) for i in brute_factor(conf[union].tolist(), f)}
        assert set(conquer(conf, groups, f, "union").tolist()) == expected


def test_conquer_per_cluster_commits_more_than_over_the_union():
    conf = f64(0.8, 0.8, 0.8, 0.1, 0.8, 0.8, 0.8)
    groups = [torch.arange(0, 3), torch.arange(4, 7)]
    assert conquer(conf, groups, 1.0, "cluster").tolist() == [0, 1, 2, 4, 5, 6]  # rank 3 bar .75 in each
    assert len(conquer(conf, groups, 1.0, "union")) == 4  # rank 5 bar .833 fails: 4 commit (.8 = rank 4 bar)


def test_conquer_forces_nothing():
    conf = f64(0.4, 0.3, 0.45)
    assert conquer(conf, [torch.arange(3)], 1.0, "cluster").tolist() == []  # best .45 < 1 - 1/2
    assert conquer(conf, [], 1.0, "union").tolist() == []


# --- Finalize: the compound score -----------------------------------------------------------


def test_margins_are_the_logit_margin_of_the_proposal():
    logits = f64(3.0, 1.0, -2.0, 0.5).repeat(3, 1)  # (3, 4)
    probs = torch.softmax(logits, -1)
    ids = torch.tensor([0, 1, 2])
    m = margins(logits, ids, probs[0, ids])
    assert m.tolist() == pytest.approx([2.0, -2.0, -5.0])  # top-1 minus top-2 logit for the argmax
    late = margins(logits, ids, f64(0.0, 0.5, 0.5))
    assert late[0].item() == float("-inf")


def test_compound_blends_probability_and_margin():
    p1, margin = f64(0.9, 0.4, 0.6), f64(2.0, 0.1, -1.0)
    assert torch.equal(compound(p1, margin, 1.0), p1)
    assert torch.allclose(compound(p1, margin, 0.0), torch.sigmoid(margin))
    mid = compound(p1, margin, 0.5)
    assert torch.allclose(mid, (p1 + torch.sigmoid(margin)) / 2)
    assert bool(((mid >= 0) & (mid <= 1)).all())
    assert compound(f64(0.0), f64(float("-inf")), 0.5).item() == 0.0  # a late proposal scores 0


def test_compound_is_the_share_of_the_top_two_at_blend_zero():
    logits = f64(2.0, 1.0, 0.0).view(1, 3)
    probs = torch.softmax(logits, -1)[0]
    ids, conf = torch.tensor([0]), probs[:1]
    score = compound(conf, margins(logits, ids, conf), 0.0)
    assert score.item() == pytest.approx((probs[0] / (probs[0] + probs[1])).item())


# --- the decoder's choice per call ----------------------------------------------------------


def choose(decoder: DiCo, logits: torch.Tensor):
    ids = logits.argmax(-1)
    conf = torch.softmax(logits.double(), -1).gather(-1, ids[:, None]).squeeze(-1)
    return decoder.choose(logits, ids, conf, BlockState(0, 1, len(logits), 0), torch.Generator()), conf


def peaked(confs: list[float], vocab: int = 6) -> torch.Tensor:
    """Logits whose row i has top-1 probability confs[i] on token 0, the rest spread evenly."""
    rows = []
    for c in confs:
        p = torch.full((vocab,), (1 - c) / (vocab - 1), dtype=torch.float64)
        p[0] = c
        rows.append(p.log())
    return torch.stack(rows)


def test_conquer_commits_inside_clusters():
    logits = peaked([0.95, 0.96, 0.97, 0.2, 0.3, 0.2, 0.2, 0.9, 0.92, 0.2])
    choice, conf = choose(DiCo(seeds=2, guidance=0.0), logits)
    assert choice.rows.tolist() == [0, 1, 2, 7, 8]
    assert torch.equal(choice.scores, conf[choice.rows])


def test_finalize_when_conquer_stalls_commits_at_least_one():
    logits = peaked([0.3, 0.35, 0.2, 0.25, 0.3, 0.2])  # nothing clears a factor bar: Conquer stalls
    choice, _ = choose(DiCo(), logits)
    assert choice.rows.tolist() == [1]  # the best compound score
    flat = torch.zeros(6, 5, dtype=torch.float64)  # every score equal and low
    assert len(choose(DiCo(), flat)[0].rows) == 1


def test_finalize_decides_the_last_few_holes():
    logits = peaked([0.99, 0.2, 0.97])
    choice, _ = choose(DiCo(final=4), logits)  # 3 holes <= final: compound >= final_tau
    assert choice.rows.tolist() == [0, 2]
    assert bool((choice.scores >= 0.9).all())


def test_settings_are_validated():
    assert build("dico", {"scope": "union", "seeds": "2", "sigma": "1.5"}) == DiCo(scope="union", seeds=2, sigma=1.5)
    for bad in (
        {"scope": "block"},
        {"seeds": "0"},
        {"sigma": "0"},
        {"blend": "2"},
        {"final_tau": "-1"},
        {"factor": "0"},
    ):
        with pytest.raises(UsageError):
            build("dico", bad)
