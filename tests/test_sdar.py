"""SDAR (dense and MoE): loaded from a folder, its logits those of a restated reference, its default decoder
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

VOCAB = 96
MASK, EOS, PAD = 95, 1, 0
BLOCK = 4
PROMPT = "def add(a, b):\n"


def char_tokenizer():
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import decoders as td
    from tokenizers import models as tm
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<eos>": EOS}
    for c in [chr(i) for i in range(32, 127)] + ["\n"]:
        if len(vocab) < MASK:
            vocab[c] = len(vocab)
    vocab["<|MASK|>"] = MASK
    tok = Tokenizer(tm.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = td.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", mask_token="<|MASK|>")


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


def rms(x, w, eps=1e-6):
    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate(x, pos, hd, theta=10000.0):
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    ang = pos[:, None].float() * inv[None]  # (L, hd/2)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    half = torch.cat([-x[..., hd // 2 :], x[..., : hd // 2]], -1)
    return x * cos + half * sin


def moe(sd, p, x):
    probs = F.softmax(x @ sd[p + "gate.weight"].T, dim=-1, dtype=torch.float)  # (L, E)
    w, idx = probs.topk(MOE["num_experts_per_tok"], dim=-1)
    w = (w / w.sum(-1, keepdim=True)).to(x.dtype)
    out = torch.zeros_like(x)
    for e in range(MOE["num_experts"]):
        gate, up = (x @ sd[p + "experts.gate_up_proj"][e].T).chunk(2, dim=-1)
        y = (F.silu(gate) * up) @ sd[p + "experts.down_proj"][e].T  # (L, d)
        out += y * (w * (idx == e)).sum(-1, keepdim=True)
    return out


def reference_logits(sd, ids, moe_layers: bool):
    """Logits of the whole sequence under the block-diffusion mask (a query sees keys of its block and before)."""
    n, hd, heads, kv = len(ids), 16, 4, 2
    pos = torch.arange(n)
    allowed = (pos[None, :] // BLOCK) <= (pos[:, None] // BLOCK)  # (L, L)
    x = sd["model.embed_tokens.weight"][ids]
    for i in range(SIZES["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, sd[p + "input_layernorm.weight"])
        q = rms((h @ sd[p + "self_attn.q_proj.weight"].T).view(n, heads, hd), sd[p + "self_attn.q_norm.weight"])
        k = rms((h @ sd[p + "self_attn.k_proj.weight"].T).view(n, kv, hd), sd[p + "self_attn.k_norm.weight"])
        v = (h @ sd[p + "self_attn.v_proj.weight"].T).view(n, kv, hd)
        q, k = rotate(q.transpose(0, 1), pos, hd), rotate(k.transpose(0, 1), pos, hd)
        k, v = k.repeat_interleave(heads // kv, 0), v.transpose(0, 1).repeat_interleave(heads // kv, 0)
        att = (q @ k.transpose(1, 2) / math.sqrt(hd)).masked_fill(~allowed, float("-inf")).softmax(-1)
        x = x + (att @ v).transpose(0, 1).reshape(n, heads * hd) @ sd[p + "self_attn.o_proj.weight"].T
        h = rms(x, sd[p + "post_attention_layernorm.weight"])
        if moe_layers:
            x = x + moe(sd, p + "mlp.", h)
        else:
            g, u = h @ sd[p + "mlp.gate_proj.weight"].T, h @ sd[p + "mlp.up_proj.weight"].T
            x = x + (F.silu(g) * u) @ sd[p + "mlp.down_proj.weight"].T
    return rms(x, sd["model.norm.weight"]) @ sd["lm_head.weight"].T  # (L, V)


def reference_generate(sd, prompt, gen_length, moe_layers, steps=4, threshold=0.85):
    """generate.py's block_diffusion_generate at temperature 0 ('low_confidence_dynamic'), batch 1."""
    n_blocks = (len(prompt) + gen_length + BLOCK - 1) // BLOCK
    x = torch.full((n_blocks * BLOCK,), MASK)
    x[: len(prompt)] = torch.tensor(prompt)
    schedule = [BLOCK // steps + (i < BLOCK % steps) for i in range(steps)]
    for b in range(len(prompt) // BLOCK, n_blocks):
        a, e = b * BLOCK, (b + 1) * BLOCK
        for step in range(steps):
            holes = x[a:e] == MASK
            if not holes.any():
                break
            probs = reference_logits(sd, x[:e], moe_layers)[a:e].softmax(-1)
            p, x0 = probs.max(-1)
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


def test_logits_are_the_reference_s_block_by_block(family, dlm):
    """Each block scored against the cache of the blocks before it equals the reference over the whole
    sequence under the block-diffusion mask (float32; the cached path runs other matmul shapes)."""
    _, sd, moe_layers = family
    ids = torch.randint(2, MASK, (6 * BLOCK + 2,), generator=torch.Generator().manual_seed(1))
    theirs = reference_logits(sd, ids, moe_layers)
    canvas = ids.clone()
    canvas[9:] = MASK  # prompt of 9: its third block holds its tail
    predict = BlockPredict(dlm.blocks, canvas, MASK)
    assert predict.starts == tuple(range(8, len(ids), BLOCK))
    for a in predict.starts:
        shown = ids.clone()
        shown[max(a, 9)] = MASK  # a hole in block a: the active one
        shown[a + BLOCK :] = MASK
        ours = predict(shown)[a : a + BLOCK]
        shown = torch.cat(
            [shown, torch.full((BLOCK,), MASK)]
        )  # a last block cut short is seen whole, padded with holes
        expected = reference_logits(sd, shown[: a + BLOCK], moe_layers)[a : a + len(ours)]
        torch.testing.assert_close(ours, expected, rtol=0, atol=2e-5)
        assert predict.session.length == a, "the cache holds exactly the blocks before the active one"
    assert theirs.shape == (len(ids), VOCAB)


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
    """Counted forwards of a decode: the prompt's whole blocks once, each finished block once (with the next),
    each call the block's positions; FLOPs against recomputing the whole canvas at every call."""
    assert len(dlm.tokenizer.encode(PROMPT)) == 15  # 3 whole blocks, the tail in the 4th
    job = fill.generate_job(PROMPT, dlm, RunSettings(decoder=None, length=17), chat=False)
    result = job.run()
    forwards = job.block_predict.session.forwards
    assert len(forwards) == result.calls
    assert sum(q for q, _ in forwards) == 12 + 4 * result.calls + 4 * (len(job.block_predict.starts) - 1)
    ratio = full_canvas_flops(dlm.blocks.cost, len(result.canvas), result.calls) / job.block_predict.flops
    assert ratio > 2
