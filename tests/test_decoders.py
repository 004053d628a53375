"""Decoder tests: the contract every registered decoder keeps, exact commit rules and schedules,
the settings registry, and token-for-token equivalence with restated reference implementations
(LLaDA generate, Fast-dLLM threshold and factor, Dream entropy/margin).

The references below are our own batch-1 restatements of the published code; they do not call
into dlmcode, so a shared mistake cannot hide.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from dlmcode.core.canvas import Canvas, Step
from dlmcode.core.errors import UsageError
from dlmcode.core.settings import parse_options
from dlmcode.decoders import (
    DECODERS,
    build,
    describe,
    eb,
    factor,
    threshold,
)
from dlmcode.decoders.base import Revising
from dlmcode.decoders.entropy import Entropy
from dlmcode.decoders.factor import Factor
from dlmcode.decoders.low_confidence import LowConfidence
from dlmcode.decoders.margin import Margin
from dlmcode.decoders.random import Random
from dlmcode.decoders.threshold import Threshold

pytestmark = pytest.mark.usefixtures("tiny_assistant_decoders")  # codila runs among DECODERS (conftest.py)

INF = float("inf")

CANVASES = {  # alternating context / hole run lengths, starting with context (conftest.make_canvas)
    "end": [6, 10],  # LLaDA generate: prompt then holes
    "middle": [5, 8, 5],  # infill
    "runs": [3, 3, 2, 4, 3, 2, 1],  # several separate hole runs
    "single": [4, 1, 4],
    "start": [0, 5, 3],  # holes from position 0
    "late": [6, 10],  # with late_ids covering half the vocabulary
    "mask-in-vocab": [5, 8, 5],  # a model whose favourite proposal is the mask id itself
}

SETTINGS = {
    "default": {},
    "block3": {"block": 3},
    "block4-T1": {"block": 4, "temperature": 1.0},
    "steps3": {"steps": 3},
    "tps2-block5": {"tokens_per_step": 2, "block": 5},
    "tau0.3-block4": {"tau": 0.3, "block": 4},
    "factor3": {"factor": 3.0},
    "gamma2-T1": {"gamma": 2.0, "temperature": 1.0},
}


def fields_of(name: str) -> set[str]:
    return {s["name"] for s in describe(name)["settings"]}


DECODER_SETTINGS = [
    pytest.param(name, options, id=f"{name}-{sid}")
    for name in DECODERS
    for sid, options in SETTINGS.items()
    if set(options) <= fields_of(name)
]


def canvas_for(kind: str, model, make_canvas) -> Canvas:
    late = tuple(range(0, model.vocab, 2)) if kind == "late" else ()
    return make_canvas(CANVASES[kind], model.mask_id, model.vocab, late)


def mask_loving(model):
    """predict of a model (mask id inside its vocabulary) that would propose the mask id everywhere."""

    def predict(tokens):
        logits = model(tokens).clone()  # (L, V)
        logits[:, model.mask_id] += 100.0
        return logits

    return predict


def run(decoder, canvas: Canvas, predict, seed: int = 0) -> list[Step]:
    """All Steps, failing (instead of hanging) if the decoder runs past its call budget."""
    budget = decoder.max_calls(canvas.n_holes)
    steps = list(itertools.islice(decoder(canvas, predict, torch.Generator().manual_seed(seed)), budget + 1))
    assert len(steps) <= budget, f"more than max_calls={budget} steps"
    return steps


def reopens_of(decoder, holes: int) -> int:
    """Tokens the decoder may reopen in a decode of `holes` holes (0: it never takes a token back)."""
    return decoder.reopens(holes) if isinstance(decoder, Revising) else 0


def final(canvas: Canvas, steps: list[Step]) -> torch.Tensor:
    return steps[-1].canvas.tokens if steps else canvas.tokens


def trace(steps: list[Step]) -> list[list[int]]:
    return [sorted(s.filled.tolist()) for s in steps]


# --- the contract, over every registered decoder -----------------------------------------------


@pytest.mark.parametrize("kind", CANVASES)
@pytest.mark.parametrize(("name", "options"), DECODER_SETTINGS)
def test_contract(name, options, kind, make_tiny_model, make_canvas):
    model = make_tiny_model(mask_id=39) if kind == "mask-in-vocab" else make_tiny_model()
    canvas = canvas_for(kind, model, make_canvas)
    decoder = build(name, options)
    steps = run(decoder, canvas, mask_loving(model) if kind == "mask-in-vocab" else model)

    holes = canvas.holes.nonzero().squeeze(-1).tolist()
    before, committed, reopened = canvas, set(), 0
    for i, step in enumerate(steps):
        pos, back = step.filled.tolist(), step.reopened.tolist()
        assert step.index == i
        assert step.calls == i + 1, "one model call per step"
        assert step.filled.dtype == step.reopened.dtype == torch.long and step.scores.shape == step.filled.shape
        assert len(set(pos)) == len(pos) and len(set(back)) == len(back)
        assert set(back) <= committed, "reopened a position this decode had not committed (the user's code, or a hole)"
        expected = before.tokens.clone()
        expected[back] = canvas.mask_id  # reopening comes before the step's commits
        assert bool((expected[step.filled] == canvas.mask_id).all()), "committed a position that was not a hole"
        expected[step.filled] = step.canvas.tokens[step.filled]
        assert torch.equal(step.canvas.tokens, expected), (
            "the step's canvas changed other positions than `reopened` and `filled`"
        )
        assert step.canvas.mask_id == canvas.mask_id and step.canvas.late_ids == canvas.late_ids
        committed = (committed - set(back)) | set(pos)
        reopened += len(back)
        before = step.canvas

    out = final(canvas, steps)
    assert not bool((out == canvas.mask_id).any()), "a hole is left"
    assert torch.equal(out[~canvas.holes], canvas.tokens[~canvas.holes]), "a non-hole changed"
    assert committed == set(holes), "committed positions are not exactly the holes"
    assert sum(len(s.filled) for s in steps) == len(holes) + reopened, "every reopened token is committed again"
    assert reopened <= reopens_of(decoder, len(holes))
    assert steps[-1].calls <= decoder.max_calls(canvas.n_holes)
    assert model.calls == steps[-1].calls, "calls must count real forward passes"


@pytest.mark.gpu
@pytest.mark.parametrize("name", DECODERS)
def test_logits_on_a_gpu_decode_as_on_the_cpu(name, make_tiny_model, make_canvas):
    """The model on a GPU, the canvas on the CPU (as dlmcode runs them): the same steps as all on the CPU."""
    model = make_tiny_model()
    canvas = canvas_for("runs", model, make_canvas)
    decoder = build(name, {})
    on_cpu = run(decoder, canvas, model)
    on_gpu = run(decoder, canvas, lambda tokens: model(tokens).cuda())
    assert trace(on_gpu) == trace(on_cpu) and torch.equal(final(canvas, on_gpu), final(canvas, on_cpu))
    assert all(s.filled.device.type == s.scores.device.type == "cpu" for s in on_gpu)


@pytest.mark.parametrize(("name", "options"), DECODER_SETTINGS)
def test_no_holes_no_steps(name, options, tiny_model, make_canvas):
    canvas = make_canvas([7], tiny_model.mask_id, tiny_model.vocab)
    assert list(build(name, options)(canvas, tiny_model, torch.Generator().manual_seed(0))) == []
    assert tiny_model.calls == 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("name", DECODERS)
def test_same_seed_same_output(name, temperature, tiny_model, make_canvas):
    canvas = canvas_for("runs", tiny_model, make_canvas)
    decoder = build(name, {"temperature": temperature, "block": 4})
    a, b = run(decoder, canvas, tiny_model, seed=3), run(decoder, canvas, tiny_model, seed=3)
    assert torch.equal(final(canvas, a), final(canvas, b))
    assert trace(a) == trace(b)
    assert all(torch.equal(x.scores, y.scores) for x, y in zip(a, b, strict=True))


# renoise's output is the argmax of its last call: on a masked canvas (no noise) the seed reaches it only through
# the few positions accepted at that call, so 4 seeds may all agree; its seed is tested on a noise canvas
# (tests/test_diffusion_gemma.py, where it must equal transformers' generate at each seed)
@pytest.mark.parametrize("name", sorted(set(DECODERS) - {"renoise"}))
def test_different_seeds_can_differ_at_temperature_1(name, tiny_model, make_canvas):
    canvas = canvas_for("end", tiny_model, make_canvas)
    decoder = build(name, {"temperature": 1.0})
    outs = {tuple(final(canvas, run(decoder, canvas, tiny_model, seed=s)).tolist()) for s in range(4)}
    assert len(outs) > 1


@pytest.mark.parametrize("name", DECODERS)
def test_global_rng_is_never_used(name, tiny_model, make_canvas):
    canvas = canvas_for("runs", tiny_model, make_canvas)
    decoder = build(name, {"temperature": 1.0, "block": 4})
    torch.manual_seed(1)
    state = torch.get_rng_state()
    a = run(decoder, canvas, tiny_model, seed=7)
    assert torch.equal(torch.get_rng_state(), state), "the decoder drew from the global RNG"
    torch.manual_seed(2)
    b = run(decoder, canvas, tiny_model, seed=7)
    assert torch.equal(final(canvas, a), final(canvas, b)) and trace(a) == trace(b)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("name", DECODERS)
def test_an_impossible_token_is_like_a_very_unlikely_one(name, temperature, tiny_model, make_canvas):
    # A -inf logit (LLaDA logits_eos_inf: processors.EndOfText sets the end-of-text logit to -inf) must
    # decode exactly like a finite logit too small to matter.
    def banned(value):
        def predict(tokens):
            logits = tiny_model(tokens).clone()  # (L, V)
            logits[:, 5] = value
            return logits

        return predict

    canvas = canvas_for("end", tiny_model, make_canvas)
    decoder = build(name, {"temperature": temperature})
    a, b = run(decoder, canvas, banned(-INF)), run(decoder, canvas, banned(-1e4))
    assert trace(a) == trace(b)
    assert torch.equal(final(canvas, a), final(canvas, b))


def test_random_order_depends_on_the_seed_even_at_temperature_0(tiny_model, make_canvas):
    canvas = canvas_for("end", tiny_model, make_canvas)
    orders = {tuple(map(tuple, trace(run(Random(steps=5), canvas, tiny_model, seed=s)))) for s in range(4)}
    assert len(orders) > 1


# --- commit rules on hand-made numbers ----------------------------------------------------------


def f64(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_threshold_select():
    conf = f64(0.2, 0.95, 0.9, 0.89, 0.5)
    assert threshold.select(conf, 0.9).tolist() == [1, 2]  # >= tau, inclusive
    assert threshold.select(conf, 0.99).tolist() == [1]  # nothing clears: the top-1 anyway
    assert threshold.select(conf, 0.0).tolist() == [0, 1, 2, 3, 4]
    assert threshold.select(f64(0.3), 0.9).tolist() == [0]


def test_factor_select():
    # f = 1: rank bars 1 - 1/(n+1) = (forced), .667, .75, .8, .833
    conf = f64(0.7, 0.99, 0.3, 0.8, 0.75)
    assert factor.select(conf, 1.0).tolist() == [1, 3, 4]  # .99 .8 .75(= bar) pass, .7 < .8 stops
    assert factor.select(f64(0.1, 0.2), 1.0).tolist() == [1]  # at least one
    assert factor.select(f64(0.5), 1.0).tolist() == [0]
    # f = 2: bars (forced), .333, .5, .6
    assert factor.select(f64(0.4, 0.45, 0.9, 0.2), 2.0).tolist() == [2, 1]  # .4 < .5 stops at rank 3
    assert factor.select(f64(0.7, 0.65, 0.9, 0.4), 2.0).tolist() == [2, 0, 1]  # .4 < .6 at rank 4
    assert factor.select(f64(0.7, 0.65, 0.9, 0.6), 2.0).tolist() == [2, 0, 1, 3]  # .6 >= 1 - 2/5


def fast_dllm_factor_count(conf: list[float], f: float) -> int:
    """get_transfer_index_dynamic's count, restated with its off-by-one (the `top_i == len - 1` branch)."""
    threshs = [1 - f / (n + 1) for n in range(1, len(conf) + 1)]
    threshs[0] = -1
    ranked = sorted(conf, reverse=True)
    for top_i in range(len(threshs)):
        if ranked[top_i] < threshs[top_i]:
            break
    if top_i == 0 or top_i == len(threshs) - 1:
        top_i += 1
    return top_i


def test_factor_select_matches_fast_dllm_except_when_only_the_last_rank_fails():
    agree = [[0.95, 0.9, 0.85, 0.81], [0.3], [0.99, 0.98, 0.2, 0.1], [0.7, 0.6, 0.1], [0.9, 0.9]]
    for conf in agree:
        assert len(factor.select(torch.tensor(conf, dtype=torch.float64), 1.0)) == fast_dllm_factor_count(conf, 1.0)
    # documented divergence: only the last rank fails its bar (.5 < .8); Fast-dLLM commits all 4
    conf = [0.95, 0.9, 0.85, 0.5]
    assert fast_dllm_factor_count(conf, 1.0) == 4
    assert factor.select(torch.tensor(conf, dtype=torch.float64), 1.0).tolist() == [0, 1, 2]


def eb_reference(entropies: list[float], gamma: float) -> list[int]:
    """EB-sampler: by ascending entropy, the largest k with sum(H_1..H_k) - max(H_1..H_k) <= gamma, k >= 1."""
    order = sorted(range(len(entropies)), key=lambda i: entropies[i])
    k = 1
    for n in range(2, len(order) + 1):
        chosen = [entropies[i] for i in order[:n]]
        if sum(chosen) - max(chosen) <= gamma:
            k = n
    return order[:k]


def test_eb_select():
    h = f64(0.3, 0.05, 0.2, 0.01, 0.5)
    # ascending .01 .05 .2 .3 .5: bounds 0, .01, .06, .26, .56
    assert eb.select(h, 0.1).tolist() == [3, 1, 2]
    assert eb.select(h, 0.0).tolist() == [3]  # at least one
    assert eb.select(h, 0.02).tolist() == [3, 1]
    assert eb.select(h, 10.0).tolist() == [3, 1, 2, 0, 4]
    assert eb.select(f64(2.0), 0.0).tolist() == [0]


def test_eb_select_matches_the_rule_on_random_entropies():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        h = torch.rand(int(torch.randint(1, 12, (1,), generator=g)), generator=g, dtype=torch.float64) * 0.5
        gamma = float(torch.rand(1, generator=g)) * 0.6
        assert eb.select(h, gamma).tolist() == eb_reference(h.tolist(), gamma)


# --- step schedules ---------------------------------------------------------------------------


def counts(decoder, tiny_model, make_canvas, runs=(2, 10)) -> list[int]:
    canvas = make_canvas(list(runs), tiny_model.mask_id, tiny_model.vocab)
    return [len(s.filled) for s in run(decoder, canvas, tiny_model)]


@pytest.mark.parametrize("cls", [LowConfidence, Random])
def test_llada_schedule_even_split_over_blocks(cls, tiny_model, make_canvas):
    assert counts(cls(steps=4), tiny_model, make_canvas) == [3, 3, 2, 2]  # remainder on the first steps
    assert counts(cls(steps=6, block=4), tiny_model, make_canvas) == [2, 2, 2, 2, 1, 1]  # 3 blocks, 2 steps each
    # 7 steps over 3 blocks: 3, 2, 2 (our extension where LLaDA asserts divisibility)
    assert counts(cls(steps=7, block=4), tiny_model, make_canvas) == [2, 1, 1, 2, 2, 1, 1]
    assert counts(cls(), tiny_model, make_canvas) == [1] * 10  # default: one per hole
    assert counts(cls(steps=50), tiny_model, make_canvas) == [1] * 10  # never a call that commits nothing
    assert counts(cls(tokens_per_step=3), tiny_model, make_canvas) == [3, 3, 2, 2]
    assert counts(cls(steps=2, block=4), tiny_model, make_canvas) == [4, 4, 2]  # a block needs a call


@pytest.mark.parametrize("cls", [Entropy, Margin])
def test_dream_schedule(cls, tiny_model, make_canvas):
    assert counts(cls(steps=4), tiny_model, make_canvas) == [2, 2, 2, 4]  # int(n (1 - s/t)), rest at the end
    assert counts(cls(steps=4, block=5), tiny_model, make_canvas) == [2, 3, 2, 3]  # 2 steps per block
    assert counts(cls(steps=1), tiny_model, make_canvas) == [10]
    assert counts(cls(steps=2), tiny_model, make_canvas, runs=(2, 2)) == [0, 2]  # Dream spends a call on nothing


def test_blocks_run_left_to_right(tiny_model, make_canvas):
    canvas = make_canvas([3, 3, 2, 4, 3, 2, 1], tiny_model.mask_id, tiny_model.vocab)  # holes 3-5, 8-11, 15-16
    steps = run(Threshold(tau=0.0, block=4), canvas, tiny_model)
    assert trace(steps) == [[3, 4, 5, 8], [9, 10, 11, 15], [16]]  # tau 0 commits a whole block per call
    assert [s.info["block"] for s in steps] == [0, 1, 2]


@pytest.mark.parametrize(
    ("decoder", "holes", "calls"),
    [
        (LowConfidence(steps=6, block=4), 10, 6),
        (LowConfidence(steps=2, block=4), 12, 3),
        (LowConfidence(), 10, 10),
        (Entropy(tokens_per_step=3), 10, 4),
        (Threshold(block=4), 10, 10),
        (Factor(), 7, 7),
    ],
)
def test_max_calls(decoder, holes, calls):
    assert decoder.max_calls(holes) == calls


# --- settings: build, parse_options, describe -------------------------------------------------


@pytest.mark.parametrize("name", DECODERS)
def test_describe_lists_every_setting_with_default_and_help(name):
    info = describe(name)
    cls = DECODERS[name]
    assert info["name"] == name and info["description"]
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.init and f.repr}  # repr=False: not a setting
    assert {s["name"]: s["default"] for s in info["settings"]} == defaults
    assert {"temperature", "block"} <= set(defaults)
    for s in info["settings"]:
        assert s["help"] and "\n" not in s["help"], s["name"]


@pytest.mark.parametrize("name", DECODERS)
def test_build_accepts_its_own_defaults_as_text(name):
    options = {s["name"]: str(s["default"]) for s in describe(name)["settings"]}
    assert build(name, options) == build(name) == DECODERS[name]()


def test_build_parses_text_values():
    assert build("threshold", parse_options(["tau=0.8", " block = 32 "])) == Threshold(tau=0.8, block=32)
    assert build("low-confidence", {"steps": "none", "tokens_per_step": "4"}) == LowConfidence(tokens_per_step=4)


def test_parse_options():
    assert parse_options(["tau=0.8", "block=32"]) == {"tau": "0.8", "block": "32"}
    assert parse_options([]) == {}
    for bad in ["tau", "=3"]:
        with pytest.raises(UsageError, match=f"'{bad}'"):
            parse_options([bad])


@pytest.mark.parametrize(
    ("name", "options", "named"),
    [
        ("nope", {}, ["'nope'"]),
        ("threshold", {"taux": "0.5"}, ["'taux'", "'threshold'"]),
        ("threshold", {"tau": "high"}, ["'high'", "tau"]),
        ("threshold", {"tau": "nan"}, ["'nan'", "tau"]),
        ("threshold", {"tau": "1.5"}, ["tau"]),
        ("threshold", {"block": "2.5"}, ["'2.5'", "block"]),
        ("eb", {"gamma": "-1"}, ["gamma"]),
        ("factor", {"factor": "0"}, ["factor"]),
        ("low-confidence", {"temperature": "-0.5"}, ["temperature"]),
        ("low-confidence", {"block": "-1"}, ["block"]),
        ("low-confidence", {"steps": "0"}, ["steps"]),
        ("entropy", {"eps": "1"}, ["eps"]),
        ("low-confidence", {"steps": "8", "tokens_per_step": "2"}, ["steps", "tokens_per_step"]),
    ],
)
def test_build_errors_are_usage_errors_naming_the_culprit(name, options, named):
    with pytest.raises(UsageError) as err:
        build(name, options)
    assert err.value.exit_code == 2
    for word in named:
        assert word in str(err.value)


# --- equivalence with the reference implementations ---------------------------------------------


def llada_num_transfer_tokens(mask_num: int, steps: int) -> list[int]:
    base, remainder = mask_num // steps, mask_num % steps
    return [base + 1] * remainder + [base] * (steps - remainder)


def llada_generate(model, prompt, steps, gen_length, block_length, mask_id):
    """ML-GSAI/LLaDA generate.py: batch 1, temperature 0, cfg 0, remasking='low_confidence'.

    Returns the output and the positions committed at each call.
    """
    x = torch.full((1, len(prompt) + gen_length), mask_id, dtype=torch.long)
    x[:, : len(prompt)] = prompt
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps = steps // num_blocks
    commits = []
    for num_block in range(num_blocks):
        start = len(prompt) + num_block * block_length
        block_mask_index = x[:, start : start + block_length] == mask_id
        num_transfer_tokens = llada_num_transfer_tokens(int(block_mask_index.sum()), steps)
        for i in range(steps):
            mask_index = x == mask_id
            logits = model(x[0])[None]  # (1, L, V)
            x0 = torch.argmax(logits, dim=-1)  # temperature 0: no Gumbel noise
            p = F.softmax(logits.to(torch.float64), dim=-1)
            x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
            x0_p[:, start + block_length :] = -INF
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, -INF)
            _, select_index = torch.topk(confidence[0], k=num_transfer_tokens[i])
            x[0, select_index] = x0[0, select_index]
            commits.append(sorted(select_index.tolist()))
    return x[0], commits


@pytest.mark.parametrize(
    ("gen_length", "steps", "block_length"),
    [(16, 16, 16), (16, 8, 4), (12, 4, 12), (14, 6, 7), (10, 10, 2), (12, 3, 4), (15, 9, 5)],
)
def test_low_confidence_equals_llada_generate(gen_length, steps, block_length, make_tiny_model):
    model = make_tiny_model(seed=1)
    prompt = torch.tensor([3, 17, 8, 30, 1], dtype=torch.long)
    want, commits = llada_generate(model, prompt, steps, gen_length, block_length, model.mask_id)
    canvas = Canvas(torch.cat([prompt, torch.full((gen_length,), model.mask_id)]), model.mask_id)
    got = run(LowConfidence(steps=steps, block=block_length), canvas, model)
    assert torch.equal(final(canvas, got), want)
    assert trace(got) == commits
    assert got[-1].calls == steps


def fast_dllm_generate(model, prompt, gen_length, block_length, mask_id, threshold=None, factor=None):
    """NVlabs/Fast-dLLM llada/generate.py generate() (no cache), batch 1, temperature 0.

    Returns the output, nfe, the positions committed at each call, and whether the factor
    rule's off-by-one branch changed a decision.
    """
    x = torch.full((1, len(prompt) + gen_length), mask_id, dtype=torch.long)
    x[:, : len(prompt)] = prompt
    assert gen_length % block_length == 0
    nfe, commits, quirk = 0, [], False
    for num_block in range(gen_length // block_length):
        start = len(prompt) + num_block * block_length
        end = start + block_length
        while True:
            nfe += 1
            mask_index = x == mask_id
            logits = model(x[0])[None]  # (1, L, V)
            mask_index[:, end:] = 0
            x0 = torch.argmax(logits, dim=-1)
            p = F.softmax(logits.to(torch.float64), dim=-1)
            x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, -INF)
            n = int(mask_index.sum())
            if factor is None:  # get_transfer_index with a threshold
                _, select_index = torch.topk(confidence[0], k=n)
                keep = [int(select_index[0])]
                keep += [int(select_index[k]) for k in range(1, n) if not confidence[0, select_index[k]] < threshold]
            else:  # get_transfer_index_dynamic
                threshs = [1 - factor / (m + 1) for m in range(1, n + 1)]
                threshs[0] = -1
                sorted_conf = torch.sort(confidence[0][mask_index[0]], dim=-1, descending=True)[0]
                broke = False
                for top_i in range(len(threshs)):
                    if sorted_conf[top_i] < threshs[top_i]:
                        broke = True
                        break
                if top_i == 0 or top_i == len(threshs) - 1:
                    quirk |= broke and top_i > 0
                    top_i += 1
                keep = torch.topk(confidence[0], k=top_i).indices.tolist()
            x[0, keep] = x0[0, keep]
            commits.append(sorted(keep))
            if (x[:, start:end] == mask_id).sum() == 0:
                break
    return x[0], nfe, commits, quirk


def generate_canvas(prompt, gen_length, mask_id) -> Canvas:
    return Canvas(torch.cat([prompt, torch.full((gen_length,), mask_id)]), mask_id)


PROMPT = torch.tensor([3, 17, 8, 30, 1], dtype=torch.long)


@pytest.mark.parametrize("tau", [0.9, 0.7, 0.5])
@pytest.mark.parametrize(("gen_length", "block_length"), [(16, 16), (16, 4), (15, 5), (12, 3)])
def test_threshold_equals_fast_dllm(tau, gen_length, block_length, make_tiny_model):
    model = make_tiny_model(seed=1)
    want, nfe, commits, _ = fast_dllm_generate(model, PROMPT, gen_length, block_length, model.mask_id, threshold=tau)
    canvas = generate_canvas(PROMPT, gen_length, model.mask_id)
    got = run(Threshold(tau=tau, block=block_length), canvas, model)
    assert torch.equal(final(canvas, got), want)
    assert trace(got) == commits
    assert got[-1].calls == nfe


def test_threshold_commits_several_per_call_on_the_tiny_model(make_tiny_model):
    model = make_tiny_model(seed=1)  # guards the equivalence test above from passing vacuously
    _, nfe, _, _ = fast_dllm_generate(model, PROMPT, 16, 16, model.mask_id, threshold=0.7)
    assert nfe < 16


# (gen_length, block_length, factor, model seed) where the quirk never decides a step
FACTOR_CASES = [(16, 8, 2.0, 0), (15, 5, 2.0, 2), (12, 6, 2.0, 5), (12, 12, 2.0, 2), (16, 16, 3.0, 1), (16, 4, 4.0, 1)]


@pytest.mark.parametrize(("gen_length", "block_length", "f", "seed"), FACTOR_CASES)
def test_factor_equals_fast_dllm_where_its_off_by_one_does_not_fire(gen_length, block_length, f, seed, make_tiny_model):
    model = make_tiny_model(seed=seed)
    want, nfe, commits, quirk = fast_dllm_generate(model, PROMPT, gen_length, block_length, model.mask_id, factor=f)
    assert not quirk, "test input must avoid the documented divergence"
    canvas = generate_canvas(PROMPT, gen_length, model.mask_id)
    got = run(Factor(factor=f, block=block_length), canvas, model)
    assert torch.equal(final(canvas, got), want)
    assert trace(got) == commits
    assert got[-1].calls == nfe
    assert nfe < gen_length  # several tokens per call happened


def fixed_logits_model(rows: list[list[float]], mask_id: int, context: int = 1):
    """predict that returns the same hand-made logits every call: row i scores hole i."""
    vocab = len(rows[0])
    table = torch.zeros(context + len(rows), vocab)
    table[context:] = torch.tensor(rows)

    def predict(tokens):
        return table.clone()

    return predict, Canvas(torch.tensor([0] * context + [mask_id] * len(rows)), mask_id)


def peaked(p: float, vocab: int = 8) -> list[float]:
    """Logits whose argmax has probability p and the rest share 1 - p."""
    return [math.log(p * (vocab - 1) / (1 - p))] + [0.0] * (vocab - 1)


def test_factor_documented_divergence_from_fast_dllm():
    rows = [peaked(0.95), peaked(0.9), peaked(0.85), peaked(0.5)]  # only rank 4 fails 1 - 1/5
    predict, canvas = fixed_logits_model(rows, mask_id=99)
    steps = run(Factor(factor=1.0), canvas, predict)
    assert trace(steps)[0] == [1, 2, 3]  # we stop at the failing rank
    conf = [0.95, 0.9, 0.85, 0.5]
    assert fast_dllm_factor_count(conf, 1.0) == 4  # Fast-dLLM would commit all four at once


def dream_generate(model, canvas: Canvas, steps: int, alg: str, eps: float = 1e-3):
    """Dream's _sample (alg 'entropy' or 'topk_margin'), batch 1, temperature 0, no top_p/top_k,
    alg_temp None, on logits already aligned to positions. Probabilities in float64 (dlmcode's
    precision; Dream uses the model dtype). Returns the output and the positions committed per call.
    """
    x = canvas.tokens.clone()[None]
    mask_token_id = canvas.mask_id
    timesteps = torch.linspace(1, eps, steps + 1)
    commits = []
    for i in range(steps):
        mask_index = x == mask_token_id
        logits = model(x[0])[None].double()  # (1, L, V)
        mask_logits = logits[mask_index]
        t, s = timesteps[i], timesteps[i + 1]
        probs = torch.softmax(mask_logits, dim=-1)
        confidence, x0 = probs.max(dim=-1)
        if alg == "topk_margin":
            sorted_probs, _ = torch.sort(probs, dim=-1, descending=True)
            confidence = sorted_probs[:, 0] - sorted_probs[:, 1]
        elif alg == "entropy":
            confidence = torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
        num_mask_token = mask_index.sum() / mask_index.shape[0]
        number_transfer_tokens = int(num_mask_token * (1 - s / t)) if i < steps - 1 else int(num_mask_token)
        full_confidence = torch.full_like(x, -INF, dtype=torch.float64)
        full_confidence[mask_index] = confidence
        picked = []
        if number_transfer_tokens > 0:
            _, transfer_index = torch.topk(full_confidence, number_transfer_tokens)
            x_ = torch.zeros_like(x) + mask_token_id
            x_[mask_index] = x0.clone()
            row_indices = torch.arange(x.size(0)).unsqueeze(1).expand_as(transfer_index)
            x[row_indices, transfer_index] = x_[row_indices, transfer_index]
            picked = transfer_index[0].tolist()
        commits.append(sorted(picked))
    return x[0], commits


@pytest.mark.parametrize(("cls", "alg"), [(Entropy, "entropy"), (Margin, "topk_margin")])
@pytest.mark.parametrize(("kind", "steps"), [("middle", 4), ("middle", 8), ("end", 3), ("runs", 5)])
def test_dream_orders_equal_dream_sample(cls, alg, kind, steps, tiny_model, make_canvas):
    canvas = canvas_for(kind, tiny_model, make_canvas)
    want, commits = dream_generate(tiny_model, canvas, steps, alg)
    got = run(cls(steps=steps), canvas, tiny_model)
    assert torch.equal(final(canvas, got), want)
    assert trace(got) == commits


def dream_first_pick(rows: list[list[float]], temperature: float, alg: str) -> int:
    """Which hole Dream's sample_tokens ranks first: its confidence uses softmax(logits / T)."""
    probs = torch.softmax(torch.tensor(rows, dtype=torch.float64) / temperature, dim=-1)
    if alg == "entropy":
        confidence = torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
    else:
        top2 = probs.sort(dim=-1, descending=True).values
        confidence = top2[:, 0] - top2[:, 1]
    return int(confidence.argmax())


@pytest.mark.parametrize(
    ("cls", "alg", "rows"),
    [
        # entropy: row 0 is a near coin flip at any T; row 1 is flat at T=1 but peaked at T=0.3
        (Entropy, "entropy", [[2.0, 2.0] + [-20.0] * 38, [3.0] + [0.0] * 39, [0.0] * 40, [0.0] * 40]),
        # margin: row 0 (3 vs 2.5) wins at T=1, row 1 (1.5 vs 0) wins at T=0.3
        (Margin, "topk_margin", [[3.0, 2.5] + [0.0] * 38, [1.5] + [0.0] * 39, [0.0] * 40, [0.0] * 40]),
    ],
)
def test_dream_orders_use_the_tempered_distribution(cls, alg, rows):
    # Dream's sample_tokens divides logits by the temperature before computing the confidence that
    # orders commits (so temperature changes DiffuCoder's generation order, docs/research/field.md B.3).
    temperature = 0.3
    assert dream_first_pick(rows, 1.0, alg) != dream_first_pick(rows, temperature, alg)  # the case is telling
    predict, canvas = fixed_logits_model(rows, mask_id=99)
    steps = run(cls(steps=2, temperature=temperature), canvas, predict)
    assert len(steps[0].filled) == 1  # int(4 * (1 - .5005)) = 1
    assert steps[0].filled.tolist() == [1 + dream_first_pick(rows, temperature, alg)]


# --- decoders that take tokens back, and the field's early-commit ones: exact rules -----------

V = 8  # vocabulary of the hand-made logits below; the mask id (99) lies outside it
MASK = 99


def peak(token: int, p: float) -> list[float]:
    """Logits of a distribution with probability p on `token`, the rest spread evenly."""
    rest = (1 - p) / (V - 1)
    return [math.log(p) if t == token else math.log(rest) for t in range(V)]


def scripted(calls: list[dict[int, list[float]]], length: int):
    """predict that returns, on call i, the rows calls[i] gives (position -> logits), flat elsewhere."""
    made = iter(calls)

    def predict(tokens):
        assert len(tokens) == length
        logits = torch.zeros(length, V)  # (L, V)
        for pos, row in next(made).items():
            logits[pos] = torch.tensor(row)
        return logits

    return predict


def holes_canvas(n: int) -> Canvas:
    """Context token 0, n holes (positions 1..n), context token 0."""
    return Canvas(torch.tensor([0] + [MASK] * n + [0]), MASK)


def moves(steps: list[Step]) -> list[tuple[list[int], list[int]]]:
    """(filled, reopened) of each step, both sorted."""
    return [(sorted(s.filled.tolist()), sorted(s.reopened.tolist())) for s in steps]


def tok(pos: int) -> int:
    return pos % V  # the token each script proposes at a position


def test_wino_wide_in_then_narrow_out():
    from dlmcode.decoders.wino import Wino

    script = [
        {
            1: peak(tok(1), 0.95),
            2: peak(tok(2), 0.8),
            3: peak(tok(3), 0.75),
            4: peak(tok(4), 0.5),
            5: peak(tok(5), 0.3),
            6: peak(tok(6), 0.2),
        },
        # 2 commits (> 1) -> narrow out: committed 2 (.5) and 3 (.85) fell below .9; 2 < last_accept 3: both go
        {
            1: peak(tok(1), 0.95),
            2: peak(tok(2), 0.5),
            3: peak(tok(3), 0.85),
            4: peak(tok(4), 0.8),
            5: peak(tok(5), 0.75),
            6: peak(tok(6), 0.2),
        },
        # one commit: no narrow out, however low the committed ones are
        {
            1: peak(tok(1), 0.1),
            2: peak(tok(2), 0.9),
            3: peak(tok(3), 0.3),
            4: peak(tok(4), 0.1),
            5: peak(tok(5), 0.1),
            6: peak(tok(6), 0.3),
        },
        {3: peak(tok(3), 0.4), 6: peak(tok(6), 0.35)},  # nothing above .7: the most confident alone
        {6: peak(tok(6), 0.5)},
    ]
    canvas = holes_canvas(6)
    steps = run(Wino(), canvas, scripted(script, 8))
    assert moves(steps) == [([1, 2, 3], []), ([4, 5], [2, 3]), ([2], []), ([3], []), ([6], [])]
    assert steps[1].reopened.tolist() == [2, 3]  # least confident first
    assert [s.info["reopened"] for s in steps] == [0, 2, 2, 2, 2]
    assert final(canvas, steps).tolist() == [0] + [tok(p) for p in range(1, 7)] + [0]


def test_wino_narrow_out_keeps_below_the_last_accept():
    from dlmcode.decoders.wino import narrow_out

    kept = torch.tensor([0.1, 0.5, 0.95, 0.3, 0.0], dtype=torch.float64)
    committed = torch.tensor([True, True, True, True, False])
    assert narrow_out(kept, committed, 0.9, last_accept=4).tolist() == [
        0,
        3,
        1,
    ]  # 3 fell, fewer than 4: all, lowest first
    assert narrow_out(kept, committed, 0.9, last_accept=3).tolist() == [0, 3]  # 3 fell, as many as 3: only 3 - 1
    assert narrow_out(kept, committed, 0.9, last_accept=1).tolist() == []


def test_wino_wide_in_caps_commits():
    from dlmcode.decoders.wino import Wino

    canvas = holes_canvas(10)
    script = [{p: peak(tok(p), 0.9 + p / 200) for p in range(1, 11)}] * 3
    steps = list(Wino()(canvas, scripted(script, 12), torch.Generator()))
    assert sorted(steps[0].filled.tolist()) == [
        4,
        5,
        6,
        7,
        8,
        9,
        10,
    ]  # cap min(max(int(10 x .7), 5), 20) = 7, the most confident
    assert (
        len(steps[1].filled) == 3 and steps[1].reopened.tolist() == []
    )  # cap max(int(3 x .7), 5) = 5 > 3 left; all kept >= .9


def test_saber_accelerates_and_backtracks():
    from dlmcode.decoders.saber import Saber

    script = [
        # bar 1 (nothing committed): the top 2 (1, 2); then reopen max(1, ceil(2/8)) = 1 with the
        # smallest rise since 0: 2 (.8), committed this call, so it simply stays a hole
        {1: peak(tok(1), 0.9), 2: peak(tok(2), 0.8), 3: peak(tok(3), 0.3), 4: peak(tok(4), 0.2)},
        # bar mean(.9, .8) = .85: only 3 (.9) beats it, so the top 2 (3, 2); then 1 fell most (.9 -> .5)
        {1: peak(tok(1), 0.5), 2: peak(tok(2), 0.85), 3: peak(tok(3), 0.9), 4: peak(tok(4), 0.2)},
        # bar mean(.9, .85, .9): 1 (.95) beats it; the top 2 (1, 4) fill the span: no backtracking
        {1: peak(tok(1), 0.95), 2: peak(tok(2), 0.85), 3: peak(tok(3), 0.9), 4: peak(tok(4), 0.6)},
    ]
    canvas = holes_canvas(4)
    steps = run(Saber(), canvas, scripted(script, 6))
    assert moves(steps) == [([1], []), ([2, 3], [1]), ([1, 4], [])]
    assert Saber().max_calls(4) == 4  # every call gains a token


def test_saber_scores_in_float32_as_its_code_does_and_wino_in_float64():
    from dlmcode.decoders.saber import Saber
    from dlmcode.decoders.wino import Wino

    script = [{p: peak(tok(p), 0.9 - p / 100) for p in range(1, 5)}] * 4
    steps = run(Saber(), holes_canvas(4), scripted(script, 6))
    assert steps[0].scores.dtype == torch.float32
    want = torch.softmax(torch.tensor(peak(tok(1), 0.89)), -1).max()  # F.softmax of the float32 logits
    assert steps[0].scores[steps[0].filled.tolist().index(1)] == want
    assert list(Wino()(holes_canvas(4), scripted(script, 6), torch.Generator()))[0].scores.dtype == torch.float64


def test_saber_backtracks_a_share_of_its_commits():
    from dlmcode.decoders.saber import Saber

    assert [Saber().backtracked(c, 100) for c in (1, 2, 8, 9, 17)] == [0, 1, 1, 2, 3]  # max(1, ceil(c/8)) < c
    assert Saber(at_least=4).backtracked(3, 100) == 2 and Saber(at_least=4).backtracked(9, 1) == 1


def gapped(token: int, gap: float) -> list[float]:
    """Logits whose top-2 gap is `gap`: `token` at gap, the next token at 0, the rest far below."""
    return [gap if t == token else 0.0 if t == (token + 1) % V else -30.0 for t in range(V)]


def test_prophet_commits_everything_once_the_gap_clears_the_phase_bar():
    from dlmcode.decoders.prophet import Prophet

    script = [
        {1: gapped(1, 9), 2: gapped(2, 5), 3: gapped(3, 5), 4: gapped(4, 5)},  # call 1/4 (early): mean 6 < 7.5
        {2: gapped(2, 5.5), 3: gapped(3, 5), 4: gapped(4, 4)},  # call 2/4 (mid): mean 4.83 < 5
        {3: gapped(3, 3), 4: gapped(4, 2.5)},  # call 3/4 (late): mean 2.75 >= 2.5: all at once
    ]
    steps = run(Prophet(), holes_canvas(4), scripted(script, 6))
    assert moves(steps) == [([1], []), ([2], []), ([3, 4], [])]


def test_prophet_early_commit_fills_every_block():
    from dlmcode.decoders.prophet import Prophet

    canvas = holes_canvas(4)
    steps = run(Prophet(block=2), canvas, scripted([{p: gapped(p, 8) for p in range(1, 5)}], 6))
    assert moves(steps) == [([1, 2, 3, 4], [])]
    assert final(canvas, steps).tolist() == [0, 1, 2, 3, 4, 0]


def test_dus_groups_are_dilated():
    from dlmcode.decoders.dus import calls_for, dilated_groups

    assert dilated_groups(8).tolist() == [1, 3, 2, 3, 1, 3, 2, 3]
    assert dilated_groups(5).tolist() == [1, 3, 2, 3, 1]
    assert dilated_groups(16).tolist() == [1, 4, 3, 4, 2, 4, 3, 4, 1, 4, 3, 4, 2, 4, 3, 4]
    assert dilated_groups(2).tolist() == [1, 1] and dilated_groups(1).tolist() == [1]
    assert [calls_for(n) for n in (1, 2, 3, 4, 5, 8, 9, 32)] == [1, 1, 2, 2, 3, 3, 4, 5]


def test_dus_commits_one_group_per_call_whatever_the_confidence(tiny_model, make_canvas):
    from dlmcode.decoders.dus import Dus

    canvas = make_canvas([3, 8, 2], tiny_model.mask_id, tiny_model.vocab)  # holes 3..10
    assert trace(run(Dus(), canvas, tiny_model)) == [[3, 7], [5, 9], [4, 6, 8, 10]]
    canvas = make_canvas([3, 6, 2], tiny_model.mask_id, tiny_model.vocab)  # holes 3..8, blocks of 4 then 2
    assert trace(run(Dus(block=4), canvas, tiny_model)) == [[3, 5], [4, 6], [7, 8]]
    assert Dus().max_calls(8) == 3 and Dus(block=4).max_calls(6) == 3 and Dus(block=0).max_calls(32) == 5


def flipping(length: int, vocab: int, mask_id: int):
    """An adversary: every hole is proposed at .99, but a committed token t is then read as
    t + 1 at .99, so its own probability collapses: a remasking decoder wants to reopen it forever."""

    def predict(tokens):
        target = torch.where(tokens == mask_id, torch.arange(length) % vocab, (tokens + 1) % vocab)  # (L,)
        logits = torch.full((length, vocab), math.log(0.01 / (vocab - 1)))  # (L, V)
        logits[torch.arange(length), target] = math.log(0.99)
        return logits

    return predict


@pytest.mark.parametrize("max_reopen", [0.0, 0.5, 3.0])
@pytest.mark.parametrize("name", DECODERS)
def test_the_reopen_budget_stops_an_adversary(name, max_reopen, make_canvas):
    canvas = make_canvas([2, 12, 1, 5, 2], MASK, 40)
    options = {"max_reopen": max_reopen} if "max_reopen" in fields_of(name) else {}
    decoder = build(name, options)
    steps = run(
        decoder, canvas, flipping(len(canvas.tokens), 40, MASK)
    )  # fails past max_calls (40: codila's tiny assistant)
    reopened = sum(len(s.reopened) for s in steps)
    assert not bool(final(canvas, steps).eq(MASK).any())
    assert reopened <= reopens_of(decoder, canvas.n_holes)
    if name == "wino":
        assert reopened == decoder.reopens(canvas.n_holes), "the budget, not WINO's own rule, ended the reopening"


@pytest.mark.parametrize(
    ("decoder", "holes", "calls"),
    [("wino", 10, 20), ("saber", 10, 10), ("prophet", 10, 10), ("dus", 10, 4)],
)
def test_max_calls_of_the_new_decoders(decoder, holes, calls):
    assert build(decoder).max_calls(holes) == calls
    assert build("wino", {"max_reopen": "0.25"}).max_calls(10) == 12


@pytest.mark.parametrize("late", [(), tuple(range(0, 50, 2))])  # late ids: half the vocabulary
@pytest.mark.parametrize("bars", [(7.5, 5.0, 2.5), (1.0, 1.0, 1.0), (99.0, 99.0, 99.0)])
def test_prophet_at_temperature_0_proposes_the_other_blocks_only_once_settled(late, bars):
    """At temperature 0 prophet proposes the active block's holes alone, and the other blocks' once it settles: call
    for call the same commits, tokens and scores as proposing every hole at every call (as it did before)."""
    from dlmcode.decoders.prophet import Prophet

    class EveryHole(Prophet):
        def reads(self, holes, current, upto):
            return holes

    table = torch.randn(64, 12, 50, generator=torch.Generator().manual_seed(7)) * 3  # (state, position, vocab)

    def predict(tokens):  # a model whose rows change with the canvas
        return table[int((tokens * torch.arange(1, len(tokens) + 1)).sum()) % 64]

    canvas = Canvas(torch.tensor([1] + [MASK] * 10 + [3]), MASK, late)
    options = {"block": 4, "gap_early": bars[0], "gap_mid": bars[1], "gap_late": bars[2]}
    ours, before = run(Prophet(**options), canvas, predict), run(EveryHole(**options), canvas, predict)
    settled = [len(s.filled) > 1 for s in ours]  # the rest committed at once
    assert len(ours) == len(before) and (settled == [True] if bars[0] == 1 else not any(settled) or bars[0] < 99)
    for a, b in zip(ours, before, strict=True):
        assert torch.equal(a.filled, b.filled) and torch.equal(a.scores, b.scores)
        assert torch.equal(a.canvas.tokens, b.canvas.tokens)


@pytest.mark.parametrize(
    "where", [[3, 4, 5, 6], [0], [], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 4], [0, 9], [2, 3, 5, 6]]
)
def test_a_revising_decoder_s_rows_read_are_a_view_when_they_are_one_run(where):
    """The rows a revising decoder reads (`Revising.reads`: the blocks so far, say) are cut out of the call's logits
    as a view when they are one run of rows, and copied as indexing copies them otherwise: the same values."""
    from dlmcode.decoders.base import rows_at

    logits = torch.randn(10, 7, generator=torch.Generator().manual_seed(2))
    index = torch.tensor(where, dtype=torch.long)
    got = rows_at(logits, index)
    assert torch.equal(got, logits[index])
    one_run = len(where) > 0 and where[-1] - where[0] + 1 == len(where)
    assert (got.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr()) == one_run
