"""LLaDA2 (MoE): loaded from a folder of safetensors, its logits bit for bit those of a restated reference, its default
decoder giving exactly the tokens of its reference generate.

The reference below is our own plain-torch restatement of inclusionAI's modeling_llada2_moe.py (public
copies on GitHub: the fused query-key-value projection, head-wise RMSNorm of queries and keys, partial
RoPE, the sigmoid router with its expert bias and group-limited top-k, shared experts, first dense
layers) and of its `generate` at temperature 0 (recomputing every position up to the active block under
the block-diffusion mask each step, as it does; dlmcode keeps them in an exact cache instead).
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
from dlmcode.models.blocks import BlockPredict

import tiny

VOCAB, MASK, EOS, PAD = 96, 95, 1, 0
BLOCK = 32
PROMPT = "def add(a, b):\n"
CONFIG = {
    "model_type": "llada2_moe",
    "architectures": ["LLaDA2MoeModelLM"],
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "partial_rotary_factor": 0.5,
    "rope_theta": 10.0,  # positions far apart in angle: holes that look alike otherwise
    "rms_norm_eps": 1e-6,
    "use_qk_norm": True,
    "use_qkv_bias": False,
    "use_bias": False,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "n_group": 4,
    "topk_group": 2,
    "routed_scaling_factor": 2.5,
    "moe_intermediate_size": 16,
    "num_shared_experts": 1,
    "first_k_dense_replace": 1,
    "tie_word_embeddings": False,
    "max_position_embeddings": 1024,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
}


def char_tokenizer():
    return tiny.char_tokenizer("<|mask|>", MASK)


def random_weights(c: dict = CONFIG) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors by their published names, random; layers strong against the embedding, so that
    holes (one embedding) differ by position and no two candidates tie to rounding."""
    g = torch.Generator().manual_seed(0)
    d, hd, heads, kv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]

    def w(*shape, scale=0.3):
        return torch.randn(shape, generator=g) * scale

    def mlp(prefix, width):
        return {
            f"{prefix}gate_proj.weight": w(width, d),
            f"{prefix}up_proj.weight": w(width, d),
            f"{prefix}down_proj.weight": w(d, width),
        }

    sd = {"model.word_embeddings.weight": w(VOCAB, d, scale=0.5), "model.norm.weight": 1 + w(d, scale=0.1)}
    sd["lm_head.weight"] = w(VOCAB, d, scale=1.0)  # peaked logits: confidences apart by more than rounding
    sd["lm_head.weight"][MASK] = 0.0  # the mask's logit 0: never the argmax (its generate would commit it)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = 1 + w(d, scale=0.1)
        sd[p + "post_attention_layernorm.weight"] = 1 + w(d, scale=0.1)
        sd[p + "attention.query_key_value.weight"] = w((heads + 2 * kv) * hd, d)
        sd[p + "attention.query_layernorm.weight"] = 3 + w(hd, scale=0.3)  # sharp attention: distinct holes
        sd[p + "attention.key_layernorm.weight"] = 3 + w(hd, scale=0.3)
        sd[p + "attention.dense.weight"] = w(d, heads * hd)
        if i < c["first_k_dense_replace"]:
            sd.update(mlp(p + "mlp.", c["intermediate_size"]))
            continue
        sd[p + "mlp.gate.weight"] = w(c["num_experts"], d, scale=0.5)
        sd[p + "mlp.gate.expert_bias"] = w(c["num_experts"], scale=0.1)
        for e in range(c["num_experts"]):
            sd.update(mlp(f"{p}mlp.experts.{e}.", c["moe_intermediate_size"]))
        sd.update(mlp(p + "mlp.shared_experts.", c["moe_intermediate_size"] * c["num_shared_experts"]))
    return sd


@pytest.fixture(scope="module")
def weights():
    return random_weights()


@pytest.fixture(scope="module")
def folder(weights, tmp_path_factory):
    from safetensors.torch import save_file

    path = tmp_path_factory.mktemp("llada2")
    save_file({k: v.contiguous() for k, v in weights.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(CONFIG))
    char_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def dlm(folder):
    return models.load(str(folder), device="cpu", dtype="float32")


# ---------------------------------------------------------------- the restated reference
# Op for op as modeling_llada2_moe.py runs at inference (float32 here): its RMSNorm, its rotary tables (inverse
# frequencies times positions as a matmul) on the first partial_rotary_factor of a head, F.linear, attention through
# transformers' sdpa path (keys and values repeated per query head, the additive block mask, its scale), and its
# moe_infer: the (token, slot) pairs sorted by expert with torch's argsort, each expert's tokens in one batch,
# the slots weighted and summed per token.


def rms(x, w, eps=1e-6):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def rope(x, pos, rot, theta):
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.int64).float() / rot))
    freqs = (inv[None, :, None] @ pos[None, None, :].float()).transpose(1, 2)  # (1, L, rot/2)
    cos, sin = torch.cat((freqs, freqs), -1).cos()[:, None], torch.cat((freqs, freqs), -1).sin()[:, None]
    r, rest = x[..., :rot], x[..., rot:]
    half = torch.cat((-r[..., rot // 2 :], r[..., : rot // 2]), -1)
    return torch.cat([r * cos + half * sin, rest], -1)


def expert(sd, p, x):
    up = F.linear(x, sd[p + "up_proj.weight"])
    return F.linear(F.silu(F.linear(x, sd[p + "gate_proj.weight"])) * up, sd[p + "down_proj.weight"])


def route(sd, p, x):
    c = CONFIG
    scores = torch.sigmoid(F.linear(x.float(), sd[p + "gate.weight"].float()))  # (L, E)
    routing = scores + sd[p + "gate.expert_bias"]
    groups = routing.view(len(x), c["n_group"], -1).topk(2, dim=-1)[0].sum(-1)
    chosen = torch.topk(groups, k=c["topk_group"], dim=-1, sorted=False)[1]
    gmask = torch.zeros_like(groups).scatter_(1, chosen, 1)
    smask = gmask.unsqueeze(-1).expand(len(x), c["n_group"], c["num_experts"] // c["n_group"]).reshape(len(x), -1)
    idx = torch.topk(routing.masked_fill(~smask.bool(), float("-inf")), k=c["num_experts_per_tok"], dim=-1)[1]
    weight = torch.gather(scores, 1, idx)
    return idx, weight / (weight.sum(-1, keepdim=True) + 1e-20) * c["routed_scaling_factor"]


def sparse(sd, p, x):
    idx, weight = route(sd, p, x)  # (L, k)
    counts = idx.new_zeros((len(x), CONFIG["num_experts"])).scatter_(1, idx, 1).sum(0).tolist()
    order = idx.view(-1).argsort()
    tokens, outs, start = x[order // idx.shape[1]], [], 0
    for e, n in enumerate(counts):
        if n:
            outs.append(expert(sd, f"{p}experts.{e}.", tokens[start : start + n]))
            start += n
    done = torch.empty_like(tokens)
    done[order] = torch.cat(outs)
    y = done.view(*idx.shape, -1).float().mul_(weight.unsqueeze(-1)).sum(dim=1)
    return y + expert(sd, p + "shared_experts.", x)


def reference_logits(sd, ids, c=CONFIG):
    """The whole sequence under the block-diffusion mask, as its generate runs its window each step."""
    n = len(ids)
    hd, heads, kv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    pos = torch.arange(n)
    mask = ((pos[None, :] // BLOCK) <= (pos[:, None] // BLOCK)).float().log()[None, None]  # 0 / -inf
    x = sd["model.word_embeddings.weight"][ids][None]  # (1, n, d)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, sd[p + "input_layernorm.weight"])
        qkv = F.linear(h, sd[p + "attention.query_key_value.weight"]).view(1, n, heads + 2 * kv, hd)
        q, k, v = (t.transpose(1, 2) for t in qkv.split([heads, kv, kv], dim=2))
        q, k = rms(q, sd[p + "attention.query_layernorm.weight"]), rms(k, sd[p + "attention.key_layernorm.weight"])
        rot = int(hd * c["partial_rotary_factor"])
        q, k = rope(q, pos, rot, c["rope_theta"]), rope(k, pos, rot, c["rope_theta"])
        k, v = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=hd**-0.5)
        x = x + F.linear(att.transpose(1, 2).reshape(1, n, heads * hd), sd[p + "attention.dense.weight"])
        h = rms(x, sd[p + "post_attention_layernorm.weight"])
        dense = i < c["first_k_dense_replace"]
        x = x + (expert(sd, p + "mlp.", h) if dense else sparse(sd, p + "mlp.", h[0])[None])
    return F.linear(rms(x, sd["model.norm.weight"]), sd["lm_head.weight"])[0]  # (n, V)


def reference_generate(sd, prompt, gen_length, steps=32, threshold=0.95):
    """Its generate at temperature 0: blocks of 32 from position 0, k_i of the even split, the bar, top-k."""
    steps = min(steps, gen_length)
    n_blocks = (len(prompt) + gen_length + BLOCK - 1) // BLOCK
    x = torch.full((n_blocks * BLOCK,), MASK)
    x[: len(prompt)] = torch.tensor(prompt)
    schedule = [BLOCK // steps + (i < BLOCK % steps) for i in range(steps)]
    for b in range(len(prompt) // BLOCK, n_blocks):
        end = (b + 1) * BLOCK
        for step in range(steps):
            active = x[end - BLOCK : end] == MASK
            if not active.any():
                break
            probs = reference_logits(sd, x[:end])[-BLOCK:].softmax(-1)
            p, x0 = probs.max(-1)
            conf = torch.where(active, p, torch.tensor(-math.inf))
            high = conf > threshold
            if int(high.sum()) >= schedule[step]:
                take = high
            else:
                take = torch.zeros_like(high).index_fill(
                    0, conf.topk(min(schedule[step], int(active.sum()))).indices, True
                )
            x[end - BLOCK : end] = torch.where(take, x0, x[end - BLOCK : end])
        if bool((x[len(prompt) : end] == EOS).any()):
            break
    return x[len(prompt) : len(prompt) + gen_length].tolist()


# ---------------------------------------------------------------- the tests


def test_the_folder_loads_as_llada2_without_remote_code(dlm):
    assert dlm.family == "llada2" and dlm.mask_id == MASK and dlm.eos_id == EOS
    assert dlm.blocks.size == BLOCK and dlm.blocks.aligned
    assert dlm.decoder == "dynamic" and dlm.decoder_options == {"steps": 32, "threshold": 0.95}


def block_logits(dlm, weights, recompute, config=CONFIG):
    """(ours, theirs) of each block of a canvas, scored as a decode scores it, against the reference's window."""
    ids = torch.randint(2, MASK, (3 * BLOCK + 5,), generator=torch.Generator().manual_seed(1))
    canvas = ids.clone()
    canvas[40:] = MASK  # the prompt's tail of 8 in the second block
    predict = BlockPredict(dlm.blocks, canvas, MASK, recompute=recompute)
    assert predict.starts == (32, 64, 96)
    pairs = []
    for a in predict.starts:
        shown = torch.cat([ids, torch.full((BLOCK,), MASK)])  # a last block cut short is seen whole, padded
        shown[max(a, 40)] = MASK
        shown[a + BLOCK :] = MASK
        ours = predict(shown[: len(ids)])[a : a + BLOCK]
        pairs.append((ours, reference_logits(weights, shown[: a + BLOCK], config)[a : a + len(ours)]))
        assert predict.session.length == a
    return pairs


def test_logits_recomputed_as_its_generate_does_are_the_reference_s_bit_for_bit(weights, dlm):
    """Run as its generate runs (the window up to the block in one forward each call), every block's logits equal
    the reference's bit for bit (float32, torch.equal)."""
    for ours, theirs in block_logits(dlm, weights, recompute=True):
        assert torch.equal(ours, theirs), f"{(ours - theirs).abs().max().item():.3g} apart"


def test_logits_with_the_exact_cache(weights, dlm):
    """With the exact cache, the first block (the prompt in the same forward) is bit for bit the reference's;
    a later one differs in the last bits, and no cache can do better: its generate keeps no cache, and the
    finished blocks it recomputes each step do not keep their own bits from one step to the next
    (test_its_generate_moves_the_bits_of_finished_blocks), where a cache holds one version of them."""
    (first, theirs), *later = block_logits(dlm, weights, recompute=False)
    assert torch.equal(first, theirs)
    for ours, theirs in later:
        torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-5)  # logits of size ~10


def test_its_generate_moves_the_bits_of_finished_blocks(weights):
    """Why the cached logits cannot be its generate's bit for bit. Under the block-causal mask a position's
    logits do not depend on later blocks, yet its generate, recomputing the window each step, gives the same
    finished positions different last bits as the window grows by a block: each expert multiplies every window
    token routed to it in one batch, and this CPU's float32 matmul (and ATen's vectorized elementwise loops)
    round a row by the batch's row count and the row's place in it. The keys and values of a finished block
    thus change from one of its steps to the next; an exact cache keeps one version, so only recomputing every
    step (`recompute`, bit for bit above) reproduces them all. With dense layers only the bits stay put."""
    ids = torch.randint(2, MASK, (3 * BLOCK,), generator=torch.Generator().manual_seed(1))
    dense = dict(CONFIG, first_k_dense_replace=CONFIG["num_hidden_layers"])
    flat = random_weights(dense)
    for n in (2 * BLOCK, 3 * BLOCK):
        shorter, longer = reference_logits(weights, ids[: n - BLOCK]), reference_logits(weights, ids[:n])
        if torch.equal(shorter, longer[: n - BLOCK]):  # rounding by batch is this CPU's math library's, not a law
            pytest.skip("this CPU's float32 matmul rounds an expert's rows alike at both window sizes")
        torch.testing.assert_close(shorter, longer[: n - BLOCK], rtol=0, atol=2e-5)
        shorter, longer = reference_logits(flat, ids[: n - BLOCK], dense), reference_logits(flat, ids[:n], dense)
        assert torch.equal(shorter, longer[: n - BLOCK])


def test_without_experts_the_cache_is_bit_exact(tmp_path):
    """The same model with dense layers only: every block's logits with the exact cache equal the reference's
    recomputed window bit for bit, so the experts' batches are the one op the cache rounds differently."""
    from safetensors.torch import save_file

    dense = dict(CONFIG, first_k_dense_replace=CONFIG["num_hidden_layers"])
    weights = random_weights(dense)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(dense))
    char_tokenizer().save_pretrained(tmp_path)
    dlm = models.load(str(tmp_path), device="cpu", dtype="float32")
    for ours, theirs in block_logits(dlm, weights, recompute=False, config=dense):
        assert torch.equal(ours, theirs), f"{(ours - theirs).abs().max().item():.3g} apart"


@pytest.mark.parametrize(("length", "options"), [(49, {}), (40, {"threshold": 0.012}), (40, {"steps": 8})])
def test_dynamic_gives_the_tokens_of_its_generate(weights, dlm, length, options):
    """Its defaults (32 steps, bar 0.95: one token a call on a random model), a bar the surest tokens clear,
    and 8 steps (4 owed a call)."""
    prompt = dlm.tokenizer.encode(PROMPT)
    theirs = reference_generate(weights, prompt, length, **options)
    result = fill.generate_job(PROMPT, dlm, RunSettings(decoder=None, options=options, length=length), chat=False).run()
    cut = theirs.index(EOS) + 1 if EOS in theirs else length
    assert result.canvas[len(prompt) :][:cut] == theirs[:cut]
    if options:
        assert result.calls < result.filled


def test_a_folder_the_native_code_cannot_run_is_one_clear_error(folder, tmp_path):
    import shutil

    from dlmcode.core.errors import ModelError

    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    config = dict(CONFIG, hidden_act="gelu")
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="hidden_act"):
        models.load(str(bad), device="cpu", dtype="float32")


def test_concurrent_decodes_share_forwards_and_keep_their_tokens(dlm, monkeypatch):
    """Served together (jobs/batch.py), decodes of prompts of different lengths (caches of 0 and 32 tokens) run
    their blocks in shared forwards, each against its own exact cache padded to the longest, and each gets the
    tokens and calls it gets alone, at batch sizes 1, 2 and 4."""
    from dlmcode.models import llada2

    sizes = tiny.shared_block_runs(monkeypatch, llada2.NativeSession)
    prompts = [PROMPT, "x = 1\n", "class A:\n    def f(self):\n        return 1\n", PROMPT * 3]

    def jobs(model):
        run = RunSettings(decoder=None, options={"threshold": 0.012}, length=40)
        return [fill.generate_job(p, model, run, chat=False) for p in prompts]

    tiny.check_batched_equals_alone(dlm, jobs, sizes)
