"""SDAR (dense and MoE): loaded from a folder, its logits bit for bit those of a restated reference, its default decoder
giving exactly the tokens of its generate.py rule, and the exact cache's FLOPs against recomputing the canvas.

The references below are our own restatements, in plain torch, of SDAR's modeling_sdar.py (Qwen3 layers
under the block-diffusion mask, JetAstra/SDAR training/model/SDAR-4B-Chat) and of generate.py's
block_diffusion_generate at temperature 0 (argmax, its probability as confidence); they call nothing in
dlmcode or in transformers' Qwen3 code, which dlmcode runs. The MoE layers restate Qwen3-MoE's (softmax
router, top-k, renormalised): the SDAR-MoE modeling file could not be read here (the repository holds
only the dense model's), so its layout is assumed to be Qwen3-MoE's, as SDAR's model card says.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from dlmcode import models
from dlmcode.core.run import RunSettings
from dlmcode.jobs import fill
from dlmcode.models.blocks import BlockPredict, full_canvas_flops

import tiny

VOCAB = 96
MASK, EOS, PAD = 95, 1, 0
BLOCK = 4
PROMPT = "def add(a, b):\n"


def char_tokenizer():
    return tiny.char_tokenizer("<|MASK|>", MASK)


SIZES = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
}
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "norm_topk_prob": True}


def build(moe: bool):
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**SIZES, **MOE)) if moe else Qwen3ForCausalLM(Qwen3Config(**SIZES))
    with torch.no_grad():
        model.lm_head.weight[MASK] = 0.0  # the mask's logit 0: never the argmax (generate.py would commit it)
    return model.eval()


@pytest.fixture(scope="module", params=[False, True], ids=["dense", "moe"])
def family(request, tmp_path_factory):
    """(folder, state dict) of a tiny SDAR (dense or MoE), saved as SDAR's checkpoints are: Qwen3's weights
    under model_type sdar / sdar_moe."""
    model = build(request.param)
    path = tmp_path_factory.mktemp("sdar")
    model.save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config["model_type"] = "sdar_moe" if request.param else "sdar"
    config["architectures"] = ["SDARMoeForCausalLM" if request.param else "SDARForCausalLM"]
    (path / "config.json").write_text(json.dumps(config))
    return path, {k: v.detach().clone() for k, v in model.state_dict().items()}, request.param


@pytest.fixture(scope="module")
def dlm(family):
    return models.load(str(family[0]), device="cpu", dtype="float32")


# ---------------------------------------------------------------- the restated reference (modeling_sdar.py)
# Op for op as modeling_sdar.py runs at inference, on the CPU: its RMSNorm's torch formula (flash_attn's triton
# rms_norm_fn on a GPU), its rotary tables (inverse frequencies times positions as a matmul), F.linear, and
# attention through F.scaled_dot_product_attention with its scale and enable_gqa: with the block mask where its
# prefill runs it, unmasked where a block sees every key (flash_attn_func there on a GPU, which a CPU lacks).


def rms(x, w, eps=1e-6):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def rotary(pos, hd, theta=10000.0):
    """cos, sin (1, 1, L, hd)."""
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    freqs = (inv[None, :, None] @ pos[None, None, :].float()).transpose(1, 2)  # (1, L, hd/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[:, None], emb.sin()[:, None]


def rotate(x, cos, sin):
    half = torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1)
    return x * cos + half * sin


def moe(sd, p, x):
    """Qwen3-MoE's block: softmax router, top-k renormalised, each routed expert on its tokens, summed in."""
    probs = F.softmax(F.linear(x, sd[p + "gate.weight"]), dim=-1, dtype=torch.float)  # (L, E)
    w, idx = probs.topk(MOE["num_experts_per_tok"], dim=-1)
    w = (w / w.sum(-1, keepdim=True)).to(x.dtype)
    out = torch.zeros_like(x)
    for e in range(MOE["num_experts"]):
        slot, tok = torch.where(idx.T == e)
        if len(tok):
            gate, up = F.linear(x[tok], sd[p + "experts.gate_up_proj"][e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, sd[p + "experts.down_proj"][e])  # (n_e, d)
            out.index_add_(0, tok, y * w[tok, slot, None])
    return out


def forward(sd, ids, start, cache, moe_layers, mask=None, store=False):
    """Logits (n, V) of tokens at positions start.. after the cached keys (one (k, v) per layer); `store` keeps
    theirs (its store_kv=True), `mask` (1, 1, n, K) bool is its prefill's block mask."""
    n, hd, heads, kv = len(ids), 16, 4, 2
    cos, sin = rotary(torch.arange(start, start + n), hd)
    x = sd["model.embed_tokens.weight"][ids][None]  # (1, n, d)
    for i in range(SIZES["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, sd[p + "input_layernorm.weight"])
        q = rms(F.linear(h, sd[p + "self_attn.q_proj.weight"]).view(1, n, heads, hd), sd[p + "self_attn.q_norm.weight"])
        k = rms(F.linear(h, sd[p + "self_attn.k_proj.weight"]).view(1, n, kv, hd), sd[p + "self_attn.k_norm.weight"])
        v = F.linear(h, sd[p + "self_attn.v_proj.weight"]).view(1, n, kv, hd).transpose(1, 2)
        q, k = rotate(q.transpose(1, 2), cos, sin), rotate(k.transpose(1, 2), cos, sin)
        if len(cache) > i:
            k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
        if store:
            cache[i : i + 1] = [(k, v)]
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=hd**-0.5, enable_gqa=True)
        x = x + F.linear(att.transpose(1, 2).reshape(1, n, heads * hd), sd[p + "self_attn.o_proj.weight"])
        h = rms(x, sd[p + "post_attention_layernorm.weight"])
        if moe_layers:
            x = x + moe(sd, p + "mlp.", h[0])[None]
        else:
            g, u = F.linear(h, sd[p + "mlp.gate_proj.weight"]), F.linear(h, sd[p + "mlp.up_proj.weight"])
            x = x + F.linear(F.silu(g) * u, sd[p + "mlp.down_proj.weight"])
    return F.linear(rms(x, sd["model.norm.weight"]), sd["lm_head.weight"])[0]  # (n, V)


def prefill(sd, ids, moe_layers):
    """generate.py's prefill: the prompt's whole blocks in one forward under the block mask, their keys kept."""
    cache, pos = [], torch.arange(len(ids))
    if len(ids):
        mask = ((pos[None, :] // BLOCK) <= (pos[:, None] // BLOCK))[None, None]
        forward(sd, ids, 0, cache, moe_layers, mask=mask, store=True)
    return cache


def reference_generate(sd, prompt, gen_length, moe_layers, steps=4, threshold=0.85):
    """generate.py's block_diffusion_generate at temperature 0 ('low_confidence_dynamic'), batch 1: the prefill,
    each block's calls against the cache (store_kv=False), then the finished block's store_kv forward."""
    n_blocks = (len(prompt) + gen_length + BLOCK - 1) // BLOCK
    x = torch.full((n_blocks * BLOCK,), MASK)
    x[: len(prompt)] = torch.tensor(prompt)
    schedule = [BLOCK // steps + (i < BLOCK % steps) for i in range(steps)]
    first = len(prompt) // BLOCK
    cache = prefill(sd, x[: first * BLOCK], moe_layers)
    for b in range(first, n_blocks):
        a, e = b * BLOCK, (b + 1) * BLOCK
        for step in range(steps + 1):
            holes = x[a:e] == MASK
            if not holes.any():
                forward(sd, x[a:e], a, cache, moe_layers, store=True)
                break
            p, x0 = forward(sd, x[a:e], a, cache, moe_layers).softmax(-1).max(-1)
            conf = torch.where(holes, p, torch.tensor(-math.inf))
            high = conf > threshold
            take = (
                high
                if int(high.sum()) >= schedule[step]
                else torch.zeros_like(high).index_fill(0, conf.topk(schedule[step]).indices, True)
            )
            x[a:e] = torch.where(take, x0, x[a:e])
        if bool((x[len(prompt) : e] == EOS).any()):
            break
    return x


# ---------------------------------------------------------------- the tests


def test_the_folder_loads_as_sdar_with_its_rule(dlm):
    assert dlm.family == "sdar" and dlm.mask_id == MASK and dlm.eos_id == EOS
    assert dlm.blocks.size == BLOCK and dlm.blocks.aligned and not dlm.blocks.noise
    assert dlm.decoder == "dynamic" and dlm.decoder_options == {"steps": 4, "threshold": 0.85}


def test_logits_are_the_reference_s_bit_for_bit_block_by_block(family, dlm):
    """Each block scored against the cache of the blocks before it equals, bit for bit (float32, torch.equal),
    the restated reference run as generate.py runs it: the prompt's whole blocks prefilled, each block's call
    against the cache, each finished block stored by a forward of its own."""
    _, sd, moe_layers = family
    ids = torch.randint(2, MASK, (6 * BLOCK + 2,), generator=torch.Generator().manual_seed(1))
    canvas = ids.clone()
    canvas[9:] = MASK  # prompt of 9: its third block holds its tail
    predict = BlockPredict(dlm.blocks, canvas, MASK)
    assert predict.starts == tuple(range(8, len(ids), BLOCK))
    cache = prefill(sd, ids[:8], moe_layers)
    for a in predict.starts:
        shown = torch.cat([ids, torch.full((BLOCK,), MASK)])  # a last block cut short is seen whole, padded
        shown[max(a, 9)] = MASK  # a hole in block a: the active one
        shown[a + BLOCK :] = MASK
        ours = predict(shown[: len(ids)])[a : a + BLOCK]
        theirs = forward(sd, shown[a : a + BLOCK], a, cache, moe_layers)[: len(ours)]
        assert torch.equal(ours, theirs), f"block at {a}: {(ours - theirs).abs().max().item():.3g} apart"
        assert predict.session.length == a, "the cache holds exactly the blocks before the active one"
        forward(sd, ids[a : a + BLOCK], a, cache, moe_layers, store=True)  # the block finished as the canvas has it


@pytest.mark.parametrize(("length", "threshold"), [(12, 0.85), (30, 0.85), (30, 0.012)])
def test_dynamic_gives_the_tokens_of_generate_py(family, dlm, length, threshold):
    """Its defaults (one token a call on a random model, none clears 0.85), and a bar a random model's
    surest tokens clear (0.012 over 96 tokens), where a call commits several."""
    _, sd, moe_layers = family
    prompt = dlm.tokenizer.encode(PROMPT)
    theirs = reference_generate(sd, prompt, length, moe_layers, threshold=threshold)
    theirs = theirs[len(prompt) : len(prompt) + length].tolist()
    run = RunSettings(decoder=None, options={"threshold": threshold}, length=length)
    result = fill.generate_job(PROMPT, dlm, run, chat=False).run()
    cut = theirs.index(EOS) + 1 if EOS in theirs else length
    assert result.canvas[len(prompt) :][:cut] == theirs[:cut]
    if threshold < 0.1:
        assert result.calls < result.filled, "several tokens a call above the bar"


def test_the_exact_cache_runs_each_block_once_after_the_prompt(family, dlm):
    """Counted forwards of a decode: the prompt's whole blocks once, each finished block once (in a forward of its
    own, as generate.py stores it), each call the block's positions; FLOPs against recomputing the whole canvas
    at every call."""
    assert len(dlm.tokenizer.encode(PROMPT)) == 15  # 3 whole blocks, the tail in the 4th
    job = fill.generate_job(PROMPT, dlm, RunSettings(decoder=None, length=17), chat=False)
    result = job.run()
    forwards = job.block_predict.session.forwards
    assert len(forwards) == result.calls + len(job.block_predict.starts)  # the prefill, each finished block
    assert sum(q for q, _ in forwards) == 12 + 4 * result.calls + 4 * (len(job.block_predict.starts) - 1)
    ratio = full_canvas_flops(dlm.blocks.cost, len(result.canvas), result.calls) / job.block_predict.flops
    assert ratio > 2


PROMPTS = ["def add(a, b):\n", "x = 1\n", "class A:\n    def f(self):\n", "import os\n\n\ndef main():\n    "]


def test_concurrent_decodes_share_forwards_and_keep_their_tokens(family, dlm, monkeypatch):
    """Served together (jobs/batch.py), decodes of prompts of different lengths run their blocks in shared
    forwards, each against its own exact cache padded to the longest, and each gets the tokens and calls it
    gets alone, at batch sizes 1, 2 and 4 (a bar the surest tokens clear: several commits a call)."""
    from dlmcode.models import sdar

    sizes = tiny.shared_block_runs(monkeypatch, sdar.CausalSession)

    def jobs(model):
        run = RunSettings(decoder=None, options={"threshold": 0.012}, length=14)
        return [fill.generate_job(p, model, run, chat=False) for p in PROMPTS]

    alone = tiny.check_batched_equals_alone(dlm, jobs, sizes)
    assert len({len(c) for c, _ in alone}) == len(PROMPTS)  # caches of different lengths


def test_the_server_batches_concurrent_requests_for_a_block_model(family, dlm, monkeypatch):
    """`dlmcode serve --batch 3`: five concurrent fills of a block model run their blocks in shared forwards (up to
    three at once) and each answer is the one it gets alone (sampled at temperature 1: each request's own seed)."""
    import asyncio

    from dlmcode.models import sdar
    from dlmcode.serve.engine import Engine
    from dlmcode.serve.queue import Queue
    from dlmcode.serve.request import Fill

    reqs = [
        Fill("def add(a, b):\n    ", "\n\nprint(add(1, 2))\n", ceiling=12, seed=s, temperature=1.0, lines=0)
        for s in range(5)
    ]
    alone = [Engine(dlm, lang="python").run(r) for r in reqs]
    queue = Queue(Engine(dlm, lang="python", batch=3))

    async def arrive():
        # the loop starts tasks in the order they are made, and each queues its request before its first wait
        return await asyncio.gather(*[asyncio.create_task(queue.answer(req, None)) for req in reqs])

    sizes = tiny.shared_block_runs(monkeypatch, sdar.CausalSession)
    together = asyncio.run(arrive())
    assert [(a.text, a.calls) for a in together] == [(a.text, a.calls) for a in alone]
    assert len({a.text for a in alone}) > 1  # the seeds differ, so do the fills
    assert queue.counters.answered == 5 and max(sizes) > 1
