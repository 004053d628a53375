"""Fast-dLLM v2: loaded from a folder, its logits bit for bit those of a restated reference, its default decoder
giving exactly the tokens of its generate.

The references below are our own plain-torch restatements of its model code at inference (Qwen2 layers, q/k/v
with biases, SDPA under its `eval_block_diff_mask`; the checkpoint's remote modeling.py, read as public copies)
and of NVlabs/Fast-dLLM v2/generation_functions.py's batch_sample at temperature 0, batch 1, without its
sub-block cache (its default): the prompt's whole blocks prefilled (and, when the prompt ends on a block's end,
the next token read off the prefill's last logit), each block decoded sub-block by sub-block against the cache
with its logits shifted one place, each finished block stored by a forward whose last logit gives the next
block's first token. They call nothing in dlmcode or in transformers' Qwen2 code, which dlmcode runs.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from dlmcode import models
from dlmcode.core.run import RunSettings
from dlmcode.jobs import fill
from dlmcode.models.blocks import BlockPredict

import tiny

VOCAB, MASK, EOS, PAD = 96, 95, 1, 0
BLOCK, SMALL = 32, 8
HD, HEADS, KV = 16, 4, 2
SIZES = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10.0,  # positions far apart in angle: holes that look alike otherwise
    "tie_word_embeddings": False,
    "initializer_range": 0.3,  # peaked logits: confidences apart by more than rounding
    "eos_token_id": EOS,
    "pad_token_id": PAD,
}


def char_tokenizer():
    return tiny.char_tokenizer("|<MASK>|", MASK)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """(folder, state dict) of a tiny Fast-dLLM v2, saved as its checkpoints are: Qwen2's weights under its
    architecture name and bd_size."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**SIZES)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.3)  # q/k/v biases: part of what is checked
        model.lm_head.weight[MASK] = 0.0  # the mask's logit 0: never the argmax
        model.lm_head.weight[EOS] *= 0.8  # the end of text rarer: decodes that run past a block, and some that end
    path = tmp_path_factory.mktemp("fast_dllm")
    model.save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config.update(model_type="Fast_dLLM_Qwen", architectures=["Fast_dLLM_QwenForCausalLM"], bd_size=BLOCK)
    (path / "config.json").write_text(json.dumps(config))
    return path, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def dlm(folder):
    return models.load(str(folder[0]), device="cpu", dtype="float32")


# ---------------------------------------------------------------- the restated reference


def rms(x, w, eps=1e-6):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def rotary(pos, theta=SIZES["rope_theta"]):
    inv = 1.0 / (theta ** (torch.arange(0, HD, 2, dtype=torch.int64).float() / HD))
    freqs = (inv[None, :, None] @ pos[None, None, :].float()).transpose(1, 2)  # (1, L, hd/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[:, None], emb.sin()[:, None]


def rotate(x, cos, sin):
    return x * cos + torch.cat((-x[..., HD // 2 :], x[..., : HD // 2]), dim=-1) * sin


def forward(sd, ids, cache, store=False):
    """Logits (n, V) of tokens right after the cached ones (one (k, v) per layer), under its eval mask (a query
    sees its block and the blocks before it); `store` keeps their keys (update_past_key_values)."""
    n, start = len(ids), cache[0][0].shape[2] if cache else 0
    pos = torch.arange(start, start + n)
    keys = torch.arange(start + n)
    mask = ((pos[:, None] // BLOCK) >= (keys[None, :] // BLOCK))[None, None]  # (1, 1, n, K) bool
    cos, sin = rotary(pos)
    x = sd["model.embed_tokens.weight"][ids][None]
    for i in range(SIZES["num_hidden_layers"]):
        p = f"model.layers.{i}.self_attn."
        h = rms(x, sd[f"model.layers.{i}.input_layernorm.weight"])
        q, k, v = (
            F.linear(h, sd[p + f"{t}_proj.weight"], sd[p + f"{t}_proj.bias"]).view(1, n, -1, HD).transpose(1, 2)
            for t in "qkv"
        )
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache and len(cache) > i:
            k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
        if store:
            cache[i : i + 1] = [(k, v)]
        k, v = k.repeat_interleave(HEADS // KV, 1), v.repeat_interleave(HEADS // KV, 1)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=HD**-0.5, is_causal=False)
        x = x + F.linear(att.transpose(1, 2).reshape(1, n, -1), sd[p + "o_proj.weight"])
        h = rms(x, sd[f"model.layers.{i}.post_attention_layernorm.weight"])
        m = f"model.layers.{i}.mlp."
        gate, up = F.linear(h, sd[m + "gate_proj.weight"]), F.linear(h, sd[m + "up_proj.weight"])
        x = x + F.linear(F.silu(gate) * up, sd[m + "down_proj.weight"])
    return F.linear(rms(x, sd["model.norm.weight"]), sd["lm_head.weight"])[0]  # (n, V)


def shifted(logits):
    return torch.cat([logits[:1], logits[:-1]])


def reference_generate(sd, prompt, max_new_tokens, threshold=0.9):
    """batch_sample at temperature 0, batch 1, no sub-block cache; the tokens after the prompt."""
    x, cache = torch.tensor(prompt), []
    n = len(x)
    if n > BLOCK:
        logits = forward(sd, x[: n // BLOCK * BLOCK], cache, store=True)
        if n % BLOCK == 0:
            x = torch.cat([x, logits[-1:].argmax(-1)])
    finished = False
    for block in range(n // BLOCK, max_new_tokens // BLOCK + n // BLOCK):
        if finished:
            break
        if len(x) < (block + 1) * BLOCK:
            x = torch.cat([x, torch.full(((block + 1) * BLOCK - len(x),), MASK)])
        a = block * BLOCK
        for sub in range(BLOCK // SMALL):
            s, e = a + sub * SMALL, a + (sub + 1) * SMALL
            while bool((x[s:e] == MASK).any()):
                holes = x[a : a + BLOCK] == MASK
                probs = shifted(forward(sd, x[a : a + BLOCK], cache))[s - a : e - a].softmax(-1)
                x1 = probs.argmax(-1)
                p = probs.gather(-1, x1[:, None])[:, 0]
                p = torch.where(holes[s - a : e - a], p, -torch.inf)
                take = p > threshold
                take[p.argmax()] = True
                take &= holes[s - a : e - a]
                x[s:e] = torch.where(take, x1, x[s:e])
                finished |= bool(((x1 == EOS) & take).any())
        if not finished:
            logits = forward(sd, x[a : a + BLOCK], cache, store=True)
            x = torch.cat([x, logits[-1:].argmax(-1)])
    return x[len(prompt) :].tolist()


# ---------------------------------------------------------------- the tests


def test_the_folder_loads_as_fast_dllm_v2_with_its_rule(dlm):
    assert dlm.family == "fast-dllm-v2" and dlm.mask_id == MASK and dlm.eos_id == EOS
    assert dlm.blocks.size == BLOCK and dlm.blocks.aligned and not dlm.blocks.noise
    assert dlm.decoder == "subblocks" and dlm.decoder_options == {"small": 8, "threshold": 0.9}


def test_logits_are_the_reference_s_bit_for_bit_read_one_place_back(folder, dlm):
    """Each block scored against the cache of the blocks before it equals, bit for bit, the restated model run as
    its generate runs it, shifted one place: the block's first row the last logit of the forward that stored the
    block before it."""
    _, sd = folder
    ids = torch.randint(2, MASK, (3 * BLOCK + 5,), generator=torch.Generator().manual_seed(1))
    canvas = ids.clone()
    canvas[40:] = MASK  # the prompt's tail of 8 in the second block
    predict = BlockPredict(dlm.blocks, canvas, MASK)
    cache = []
    last = forward(sd, ids[:32], cache, store=True)[-1]
    for a in predict.starts:
        shown = torch.cat([ids, torch.full((BLOCK,), MASK)])
        shown[max(a, 40)] = MASK
        shown[a + BLOCK :] = MASK
        ours = predict(shown[: len(ids)])[a : a + BLOCK]
        theirs = forward(sd, shown[a : a + BLOCK], cache)
        theirs = torch.cat([last[None], theirs[:-1]])[: len(ours)]
        assert torch.equal(ours, theirs), f"block at {a}: {(ours - theirs).abs().max().item():.3g} apart"
        last = forward(sd, ids[a : a + BLOCK], cache, store=True)[-1]


@pytest.mark.parametrize(
    ("prompt", "threshold"),
    [
        ("def add(a, b):\n", 0.9),
        ("def add(a, b):\n", 0.2),
        ("for i in range(3):\n", 0.9),
        ("x" * 40 + "\n", 0.9),
        ("a, b" * 16, 0.2),
    ],
    ids=["short", "short-low-bar", "ends-in-the-second-block", "tail-in-a-block", "ends-on-a-block"],
)
def test_subblocks_gives_the_tokens_of_its_generate(folder, dlm, prompt, threshold):
    """A prompt inside the first block (its decode running over two blocks and the first token of a third, or
    ending in its second), one whose tail starts the second (ending there), one that ends on a block's end (the
    next token read off the prefill); its bar and a lower one that commits several a call."""
    _, sd = folder
    ids = dlm.tokenizer.encode(prompt)
    theirs = reference_generate(sd, ids, 64, threshold)
    run = RunSettings(decoder=None, options={"threshold": threshold}, length=64)
    result = fill.generate_job(prompt, dlm, run, chat=False).run()
    ours = result.canvas[len(ids) :]
    cut = min(theirs.index(EOS) + 1 if EOS in theirs else len(theirs), len(ours))
    assert cut >= 32 or EOS in theirs[:cut]
    assert ours[:cut] == theirs[:cut]
    if threshold < 0.5:
        assert result.calls < result.filled, "several tokens a call above the bar"


def test_concurrent_decodes_share_forwards_and_keep_their_tokens(dlm, monkeypatch):
    """Served together (jobs/batch.py), decodes of prompts of different lengths (caches of 0, 32 and 64 tokens) run
    their blocks in shared forwards, each against its own exact cache padded to the longest and read one place
    back from its own last stored logit, and each gets the tokens and calls it gets alone, at batch sizes 1, 2, 4."""
    from dlmcode.models import fast_dllm

    sizes = tiny.shared_block_runs(monkeypatch, fast_dllm.ShiftedSession)
    prompts = ["def add(a, b):\n", "x" * 40 + "\n", "a, b" * 16, "for i in range(3):\n"]

    def jobs(model):
        run = RunSettings(decoder=None, options={"threshold": 0.2}, length=40)
        return [fill.generate_job(p, model, run, chat=False) for p in prompts]

    tiny.check_batched_equals_alone(dlm, jobs, sizes)
