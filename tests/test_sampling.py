"""Exact tests of dlmcode.core.sampling: proposals, commit scores and step schedules, on hand-made numbers."""

from __future__ import annotations

import math

import pytest
import torch

from dlmcode.core import sampling

INF = float("inf")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def probs_to_logits(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64).log()  # (H, V)


# --- gumbel_argmax ---------------------------------------------------------------------------


def test_gumbel_argmax_at_temperature_zero_is_argmax():
    logits = torch.randn(50, 40, generator=gen(1))
    assert torch.equal(sampling.gumbel_argmax(logits, 0.0, gen(0)), logits.argmax(-1))


def test_gumbel_argmax_same_seed_same_draw_and_other_seed_differs():
    logits = torch.randn(200, 40, generator=gen(1))
    a = sampling.gumbel_argmax(logits, 1.0, gen(5))
    b = sampling.gumbel_argmax(logits, 1.0, gen(5))
    c = sampling.gumbel_argmax(logits, 1.0, gen(6))
    assert a.dtype == torch.long and a.shape == (200,)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_gumbel_argmax_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    sampling.gumbel_argmax(torch.randn(10, 5, generator=gen(1)), 1.0, gen(0))
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_gumbel_argmax_samples_softmax_of_logits_over_temperature(temperature):
    draws = 4000
    logits = torch.tensor([0.0, 1.0, 2.0]).expand(draws, 3)  # (N, 3)
    ids = sampling.gumbel_argmax(logits, temperature, gen(0))
    freq = torch.bincount(ids, minlength=3).double() / draws
    want = torch.softmax(torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64) / temperature, -1)
    assert torch.allclose(freq, want, atol=0.03), (freq, want)  # ~4 standard errors


def test_gumbel_argmax_never_picks_an_impossible_token():
    logits = torch.tensor([[0.0, -INF, 0.0, -INF]]).expand(500, 4)
    ids = sampling.gumbel_argmax(logits, 1.0, gen(0))
    assert set(ids.tolist()) == {0, 2}


def test_noise_is_uniform_float64_and_reproducible():
    a = sampling.noise((1000,), gen(3), torch.device("cpu"))
    assert a.dtype == torch.float64 and bool(((a >= 0) & (a < 1)).all())
    assert torch.equal(a, sampling.noise((1000,), gen(3), torch.device("cpu")))
    assert abs(float(a.mean()) - 0.5) < 0.05


# --- scores ----------------------------------------------------------------------------------


def test_log_probs_is_float64_log_softmax():
    logits = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.bfloat16)
    out = sampling.log_probs(logits)
    assert out.dtype == torch.float64
    assert torch.allclose(out.exp().sum(-1), torch.ones(1, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_proposals_score_with_the_references_softmax_bit_for_bit(dtype):
    """LLaDA's and Fast-dLLM's generate score x0_p from F.softmax(logits.to(float64)): propose's confidences
    and readings are those very numbers, not the same up to rounding (ties in confidence order commits)."""
    g = gen(7)
    logits = (torch.randn(33, 4099, generator=g) * 6).to(dtype)
    logits[3, :100] = -INF  # impossible tokens, as a family's schedule or a banned id leaves them
    logits[5, 17] = logits[5].max()  # a tie for the argmax: the first wins, as torch.argmax picks it
    want = torch.softmax(logits.to(torch.float64), dim=-1)  # (H, V)
    ids, conf, soft = sampling.propose(logits, 0.0, gen(0), mask_id=4098)
    assert torch.equal(ids, logits.argmax(-1))
    assert torch.equal(conf, want.gather(-1, ids[:, None]).squeeze(-1))
    other = torch.randint(0, 4099, (33,), generator=g)
    assert torch.equal(soft.probability(other), want.gather(-1, other[:, None]).squeeze(-1))


def test_proposals_in_float32_score_with_saber_s_softmax_and_still_sample_exactly():
    """Saber's code scores x0_p from F.softmax(logits) in the logits' own precision: propose(dtype=float32) gives
    those numbers bit for bit; at T = 1 its sample is drawn in float64 from the logits, not from that softmax."""
    logits = torch.randn(9, 300, generator=gen(3)) * 4
    ids, conf, soft = sampling.propose(logits, 0.0, gen(0), mask_id=299, dtype=torch.float32)
    assert conf.dtype == torch.float32 and soft.probs.dtype == torch.float32
    assert torch.equal(conf, torch.softmax(logits, -1).gather(-1, ids[:, None]).squeeze(-1))
    wide, _, _ = sampling.propose(logits, 0.0, gen(0), mask_id=299)
    assert not torch.equal(conf.double(), wide)  # another precision, not the float64 numbers cast
    sampled, _, _ = sampling.propose(logits, 1.0, gen(4), mask_id=299, dtype=torch.float32)
    wide = logits.double()
    u = torch.rand(9, generator=gen(4), dtype=torch.float64)
    assert torch.equal(sampled, sampling.inverse_cdf((wide - wide.amax(-1, keepdim=True)).exp(), u, 299))


def test_confidence_is_the_probability_of_the_proposed_token():
    logits = probs_to_logits([0.5, 0.3, 0.2], [0.1, 0.6, 0.3])
    conf = sampling.confidence(logits, torch.tensor([2, 1]))
    assert torch.allclose(conf, torch.tensor([0.2, 0.6], dtype=torch.float64), atol=1e-12)


def test_confidence_zeroes_late_ids_only():
    logits = probs_to_logits([0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.7, 0.2, 0.1])
    conf = sampling.confidence(logits, torch.tensor([0, 1, 2]), late_ids=(0, 2))
    assert torch.allclose(conf, torch.tensor([0.0, 0.6, 0.0], dtype=torch.float64), atol=1e-12)
    assert conf[0] == 0 and conf[2] == 0


def test_margin_is_top1_minus_top2_probability():
    logits = probs_to_logits([0.5, 0.3, 0.2], [0.25, 0.25, 0.5], [0.2, 0.2, 0.6])
    assert torch.allclose(sampling.margin(logits), torch.tensor([0.2, 0.25, 0.4], dtype=torch.float64), atol=1e-12)
    assert sampling.margin(torch.zeros(1, 7)).item() == pytest.approx(0.0, abs=1e-15)


def test_entropy_in_nats_on_hand_made_distributions():
    p = [0.5, 0.3, 0.2]
    want = -sum(x * math.log(x) for x in p)
    out = sampling.entropy(torch.cat([probs_to_logits(p), torch.tensor([[0.0] * 3])]))
    assert out.tolist() == pytest.approx([want, math.log(3)], abs=1e-12)
    assert sampling.entropy(torch.zeros(1, 40)).item() == pytest.approx(math.log(40), abs=1e-12)
    assert sampling.entropy(torch.tensor([[50.0, 0.0, 0.0]])).item() == pytest.approx(0.0, abs=1e-18)


def test_margin_and_confidence_with_an_impossible_token():
    logits = torch.tensor([[0.0, 0.0, -INF]])  # a banned token (LLaDA logits_eos_inf sets its logit to -inf)
    assert sampling.margin(logits).item() == pytest.approx(0.0, abs=1e-15)
    assert sampling.confidence(logits, torch.tensor([0])).item() == pytest.approx(0.5, abs=1e-15)


def test_entropy_with_an_impossible_token_is_finite():
    # BUG: 0 * log 0 is computed as 0 * -inf = nan. processors.EndOfText(logits_eos_inf=True) sets the
    # end-of-text logit to -inf, which turns every entropy into nan for the entropy and eb decoders.
    logits = torch.tensor([[0.0, 0.0, -INF], [0.0, -INF, -INF]])
    assert sampling.entropy(logits).tolist() == pytest.approx([math.log(2), 0.0], abs=1e-12)


# --- schedules -------------------------------------------------------------------------------


def llada_num_transfer_tokens(mask_num: int, steps: int) -> list[int]:
    """LLaDA generate.py get_num_transfer_tokens, restated for batch 1."""
    base, remainder = mask_num // steps, mask_num % steps
    counts = [base] * steps
    for i in range(remainder):
        counts[i] += 1
    return counts


def test_even_split_hand_cases():
    assert sampling.even_split(10, 4) == [3, 3, 2, 2]
    assert sampling.even_split(8, 4) == [2, 2, 2, 2]
    assert sampling.even_split(3, 5) == [1, 1, 1, 0, 0]
    assert sampling.even_split(7, 1) == [7]


def test_even_split_matches_llada_get_num_transfer_tokens():
    for n in range(0, 40):
        for steps in range(1, 20):
            assert sampling.even_split(n, steps) == llada_num_transfer_tokens(n, steps), (n, steps)


def dream_counts(n: int, steps: int, eps: float = 1e-3) -> list[int]:
    """Dream's _sample: per step int(num_mask_token * (1 - s/t)), everything left at the last step.

    timesteps = torch.linspace(1, eps, steps + 1) (float32, as in Dream), num_mask_token =
    mask_index.sum() / batch: a float32 tensor.
    """
    timesteps = torch.linspace(1, eps, steps + 1)
    counts, left = [], n
    for i in range(steps):
        t, s = timesteps[i], timesteps[i + 1]
        num_mask_token = torch.tensor(left) / 1
        k = int(num_mask_token * (1 - s / t)) if i < steps - 1 else int(num_mask_token)
        counts.append(k)
        left -= k
    return counts


def test_dream_count_hand_case():
    # timesteps (1, .75025, .5005, .25075, .001): int(10*.24975)=2, int(8*.33289)=2, int(6*.49900)=2, then 4
    got, left = [], 10
    for i in range(4):
        got.append(sampling.dream_count(left, i, 4))
        left -= got[-1]
    assert got == [2, 2, 2, 4]
    assert sampling.dream_count(4, 0, 2) == 1  # int(4 * (1 - .5005))
    assert sampling.dream_count(2, 0, 2) == 0  # Dream may spend a call committing nothing
    assert sampling.dream_count(9, 0, 1) == 9


def test_dream_count_matches_dreams_formula():
    for eps in (1e-3, 0.1):
        for n in range(1, 41):
            for steps in range(1, 13):
                got, left = [], n
                for i in range(steps):
                    got.append(sampling.dream_count(left, i, steps, eps))
                    left -= got[-1]
                assert got == dream_counts(n, steps, eps), (n, steps, eps)
                assert left == 0


def test_dream_count_commits_everything_left_at_the_last_step():
    assert sampling.dream_count(17, 4, 5) == 17
    assert sampling.dream_count(17, 9, 5) == 17  # past the end too


def test_top_picks_the_k_highest_and_clips_k():
    scores = torch.tensor([0.1, 0.9, 0.5, 0.7])
    assert torch.equal(sampling.top(scores, 2), torch.tensor([1, 3]))
    assert sorted(sampling.top(scores, 10).tolist()) == [0, 1, 2, 3]
    assert sampling.top(scores, 0).numel() == 0


# --- propose: the dLLM's proposals, one uniform number per sampling row ----------------------


def chi_square(ids: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic of the draws against `probs` over the categories expected 5+ times, and its dof."""
    n = len(ids)
    observed = torch.bincount(ids, minlength=len(probs)).double()
    expected = probs * n
    big = expected >= 5
    rest = (observed[~big].sum() - expected[~big].sum()) ** 2 / expected[~big].sum().clamp_min(1e-12)
    stat = float(((observed[big] - expected[big]) ** 2 / expected[big]).sum() + (rest if (~big).any() else 0.0))
    return stat, int(big.sum()) - 1 + int(bool((~big).any()))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("chunk", [8, sampling.CHUNK])
def test_proposals_follow_softmax_of_logits_over_temperature(temperature, chunk, monkeypatch):
    """A fixed-seed chi-square test: 20,000 rows of the same logits, spread over several chunks of
    the two-level inverse CDF (a partial last chunk too), the mask token holding a large share
    (never proposed: the rest renormalised) and some tokens impossible (-inf)."""
    monkeypatch.setattr(sampling, "CHUNK", chunk)
    vocab = 45 if chunk == 8 else 2 * sampling.CHUNK + 37
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(vocab, generator=g) * 2  # (V,)
    logits[torch.randperm(vocab, generator=g)[:5]] = -INF
    mask = 7
    logits[mask] = float(logits.max()) + 2.0  # the mask token would win most draws
    rows = 20_000 if chunk == 8 else 4_000
    ids, conf, _ = sampling.propose(logits.expand(rows, vocab), temperature, gen(0), mask)
    want = torch.softmax(logits.double() / temperature, -1)
    want[mask] = 0
    want /= want.sum()
    assert not bool((ids == mask).any()) and bool(torch.isfinite(logits[ids]).all())
    stat, dof = chi_square(ids, want)
    assert stat < dof + 5 * math.sqrt(2 * dof), (stat, dof)  # far past the 99.9th percentile only if wrong
    full = torch.softmax(logits.double(), -1)  # confidence: probability under softmax(logits), mask included
    assert torch.allclose(conf, full[ids], rtol=1e-12, atol=0)


def test_a_wrong_sampler_fails_the_chi_square_test():
    """The test above can fail: draws from softmax(logits) checked against T = 2's distribution."""
    logits = torch.randn(45, generator=gen(11)) * 2
    ids, _, _ = sampling.propose(logits.expand(20_000, 45), 1.0, gen(0), 99)
    stat, dof = chi_square(ids, torch.softmax(logits.double() / 2.0, -1))
    assert stat > dof + 5 * math.sqrt(2 * dof)


def test_proposals_draw_one_number_per_row_and_none_at_temperature_zero():
    logits = torch.randn(6, 5000, generator=gen(1))
    rng = gen(4)
    before = rng.get_state()
    ids, _, _ = sampling.propose(logits, 0.0, rng, 99)
    assert torch.equal(rng.get_state(), before) and torch.equal(ids, logits.argmax(-1))
    sampling.propose(logits, 1.0, rng, 99)
    twin = gen(4)
    torch.rand(6, generator=twin, dtype=torch.float64)  # exactly six uniform numbers, not 6 x 5000
    assert torch.equal(rng.get_state(), twin.get_state())


def test_proposals_are_reproducible_for_a_seed_and_differ_across_seeds():
    logits = torch.randn(300, 50, generator=gen(2))
    a, _, _ = sampling.propose(logits, 1.0, gen(5), 99)
    b, _, _ = sampling.propose(logits, 1.0, gen(5), 99)
    c, _, _ = sampling.propose(logits, 1.0, gen(6), 99)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_argmax_never_proposes_the_mask_token():
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 1.0, 2.0]])
    ids, conf, _ = sampling.propose(logits, 0.0, gen(0), 1)
    assert ids.tolist() == [2, 0]
    assert torch.allclose(conf, torch.softmax(logits.double(), -1)[[0, 1], [2, 0]])
    assert logits[0, 1] == 5.0  # the caller's logits are untouched


@pytest.mark.gpu
def test_proposals_on_a_gpu_are_drawn_there_and_reproducible():
    logits = torch.randn(64, 3000, generator=gen(1)).cuda()
    a, _, _ = sampling.propose(logits, 1.0, gen(5), 99)
    b, _, _ = sampling.propose(logits, 1.0, gen(5), 99)
    assert a.device.type == "cuda" and torch.equal(a, b)


def test_argmax_without_skips_the_mask_token_and_leaves_the_logits_as_they_were():
    """Rows whose argmax is the mask token take their best other token; the caller's logits are not edited (the
    rows redone are edited in the copy that indexing them made)."""
    logits = torch.tensor([[0.0, 5.0, 1.0, 2.0], [3.0, 0.0, 1.0, 2.0], [0.0, 9.0, 8.0, 1.0]])
    kept = logits.clone()
    assert sampling.argmax_without(logits, 1).tolist() == [3, 0, 2]
    assert torch.equal(logits, kept)
    rows = logits[torch.tensor([True, False, True])]  # a copy: copy=False edits it and nothing else
    assert sampling.without(rows, 1, copy=False) is rows and rows[:, 1].isinf().all() and torch.equal(logits, kept)
    assert sampling.without(logits, 1) is not logits and torch.equal(logits, kept)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("vocab", [4096, 4097, 126464, 151936])
def test_the_two_level_argmax_gives_torch_s_index_on_ties_nan_and_impossible_rows(dtype, vocab):
    """sampling.argmax takes each run's maximum first: the same index as torch's argmax wherever it lies, on a tie
    (the first), in a row with a NaN (the first NaN, as torch's), in a row of -inf (0), at the last, shorter run."""
    rows = (torch.randn(24, vocab, generator=torch.Generator().manual_seed(vocab)) * 4).to(dtype)
    assert rows.numel() >= sampling.SMALL  # the two-level path, not torch's own
    rows[:, 1] = float("-inf")
    rows[0, 5] = rows[0, 900] = 1e4  # a tie across runs: the first
    rows[1, 70] = rows[1, 71] = 1e4  # a tie inside a run
    rows[2] = float("-inf")
    rows[3, 9], rows[3, 3000] = float("nan"), 1e4  # torch's argmax takes the NaN
    rows[4, -1] = 1e4  # the last column, in the last run (shorter where vocab % RUN)
    rows[5, vocab - sampling.RUN - 1] = 1e4
    rows[6, 10], rows[6, 2000] = 1e4, float("nan")  # the NaN after the maximum: still the NaN
    assert torch.equal(sampling.argmax(rows), rows.argmax(-1))
    assert sampling.argmax(rows).tolist()[:7] == [5, 70, 0, 9, vocab - 1, vocab - sampling.RUN - 1, 2000]
    values, indices = sampling.max_of(rows)
    theirs = rows.max(-1)
    assert torch.equal(indices, theirs.indices) and torch.equal(values.isnan(), theirs.values.isnan())
    assert torch.equal(values.nan_to_num(), theirs.values.nan_to_num())
    assert torch.equal(sampling.argmax(rows.t().contiguous().t()), rows.argmax(-1))  # strided: torch's own


def test_likeliest_allowed_is_the_most_likely_token_refused_tokens_aside_among_those_read():
    probs = torch.tensor([0.05, 0.4, 0.3, 0.2, 0.05])
    assert sampling.likeliest_allowed(probs, lambda t: False) == (pytest.approx(0.4), 1)
    assert sampling.likeliest_allowed(probs, lambda t: t in (1, 2)) == (pytest.approx(0.2), 3)
    assert sampling.likeliest_allowed(probs, lambda t: t != 0, read=3) is None  # token 0 is not among the 3 read
    assert sampling.likeliest_allowed(probs, lambda t: t != 0, read=99) == (pytest.approx(0.05), 0)
