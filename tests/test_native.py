"""dlmcode's own LLaDA and Dream: weight names and shapes of the published checkpoints, the maths against a
plain restatement, and the family adapters loading tiny native folders without remote code."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from dlmcode import models
from dlmcode.bench.standins import DREAM_7B, LLADA_8B  # the published config.json files
from dlmcode.core.errors import ModelError
from dlmcode.models import dream, native_dream, native_llada

from tiny import TINY_DREAM, TINY_LLADA, randomize


def shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def test_llada_8b_weight_names_and_shapes_are_the_checkpoints():
    with torch.device("meta"):
        model = native_llada.LladaLM(native_llada.LladaConfig.from_json(LLADA_8B))
    got = shapes(model)
    per_block = {
        "attn_norm.weight": (4096,),
        "q_proj.weight": (4096, 4096),
        "k_proj.weight": (4096, 4096),
        "v_proj.weight": (4096, 4096),
        "attn_out.weight": (4096, 4096),
        "ff_norm.weight": (4096,),
        "ff_proj.weight": (12288, 4096),
        "up_proj.weight": (12288, 4096),
        "ff_out.weight": (4096, 12288),
    }
    want = {
        "model.transformer.wte.weight": (126464, 4096),
        "model.transformer.ln_f.weight": (4096,),
        "model.transformer.ff_out.weight": (126464, 4096),
    }
    want |= {f"model.transformer.blocks.{i}.{k}": s for i in range(32) for k, s in per_block.items()}
    assert got == want
    assert 8.0e9 < sum(math.prod(s) for s in got.values()) < 8.1e9  # "LLaDA-8B"
    assert all(p.is_meta for p in model.parameters())  # nothing allocated


def test_dream_7b_weight_names_and_shapes_are_the_checkpoints():
    with torch.device("meta"):
        model = native_dream.DreamLM(native_dream.DreamConfig.from_json(DREAM_7B))
    got = shapes(model)
    per_layer = {
        "input_layernorm.weight": (3584,),
        "post_attention_layernorm.weight": (3584,),
        "self_attn.q_proj.weight": (3584, 3584),
        "self_attn.q_proj.bias": (3584,),
        "self_attn.k_proj.weight": (512, 3584),
        "self_attn.k_proj.bias": (512,),  # 4 kv heads of 128
        "self_attn.v_proj.weight": (512, 3584),
        "self_attn.v_proj.bias": (512,),
        "self_attn.o_proj.weight": (3584, 3584),
        "mlp.gate_proj.weight": (18944, 3584),
        "mlp.up_proj.weight": (18944, 3584),
        "mlp.down_proj.weight": (3584, 18944),
    }
    want = {"model.embed_tokens.weight": (152064, 3584), "model.norm.weight": (3584,), "lm_head.weight": (152064, 3584)}
    want |= {f"model.layers.{i}.{k}": s for i in range(28) for k, s in per_layer.items()}
    assert got == want
    assert 7.5e9 < sum(math.prod(s) for s in got.values()) < 7.7e9  # Qwen2.5-7B


def test_tied_dream_has_no_head_of_its_own():
    with torch.device("meta"):
        model = native_dream.DreamLM(native_dream.DreamConfig.from_json({**DREAM_7B, "tie_word_embeddings": True}))
    assert "lm_head.weight" not in model.state_dict()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"block_type": "sequential"}, "block_type"),
        ({"activation_type": "swiglu"}, "activation_type"),
        ({"alibi": True}, "alibi"),
        ({"d_model": None}, "no d_model"),
    ],
)
def test_llada_options_we_do_not_implement_are_named(change, why):
    with pytest.raises(native_llada.NotNative, match=why):
        native_llada.LladaConfig.from_json({**LLADA_8B, **change})


# the maths, restated plainly in float64


def rms(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    """x (H, L, hd): rotate the pair (j, j + hd/2) at position p by p * theta^(-2j/hd)."""
    hd = x.shape[-1]
    ang = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * theta ** (
        -torch.arange(0, hd, 2, dtype=torch.float64) / hd
    )
    a, b = x[..., : hd // 2], x[..., hd // 2 :]
    return torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], -1)


def attention(x, wq, wk, wv, wo, bq, bk, bv, n_heads, n_kv, theta):
    """x (L, D) -> (L, D): every position attends to every position."""
    hd = x.shape[-1] // n_heads
    q = rope((x @ wq.T + bq).view(len(x), n_heads, hd).transpose(0, 1), theta)
    k = rope((x @ wk.T + bk).view(len(x), n_kv, hd).transpose(0, 1), theta)
    v = (x @ wv.T + bv).view(len(x), n_kv, hd).transpose(0, 1)
    k, v = k.repeat_interleave(n_heads // n_kv, 0), v.repeat_interleave(n_heads // n_kv, 0)
    p = torch.softmax(torch.einsum("hqd,hkd->hqk", q, k) / math.sqrt(hd), -1)
    return torch.einsum("hqk,hkd->qhd", p, v).reshape(len(x), -1) @ wo.T


def mlp(x, gate, up, down):
    g = x @ gate.T
    return (g * torch.sigmoid(g) * (x @ up.T)) @ down.T


def test_llada_equals_a_plain_restatement():
    cfg = native_llada.LladaConfig.from_json(TINY_LLADA)
    model = randomize(native_llada.LladaLM(cfg).double())
    ids = torch.randint(0, 60, (1, 11))
    t = model.model.transformer
    x = t.wte.weight[ids[0]]
    zero = torch.zeros(32, dtype=torch.float64)
    for b in t.blocks:
        h = rms(x, b.attn_norm.weight, cfg.eps)
        x = x + attention(
            h,
            b.q_proj.weight,
            b.k_proj.weight,
            b.v_proj.weight,
            b.attn_out.weight,
            zero,
            zero[:16],
            zero[:16],
            4,
            2,
            cfg.rope_theta,
        )
        x = x + mlp(rms(x, b.ff_norm.weight, cfg.eps), b.ff_proj.weight, b.up_proj.weight, b.ff_out.weight)
    want = rms(x, t.ln_f.weight, cfg.eps) @ t.ff_out.weight.T
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[0], want, rtol=1e-5, atol=1e-5)  # RoPE tables are float32


def test_dream_equals_a_plain_restatement():
    cfg = native_dream.DreamConfig.from_json(TINY_DREAM)
    model = randomize(native_dream.DreamLM(cfg).double())
    ids = torch.randint(0, 64, (1, 13))
    body = model.model
    x = body.embed_tokens.weight[ids[0]]
    for layer in body.layers:
        a, m = layer.self_attn, layer.mlp
        h = rms(x, layer.input_layernorm.weight, cfg.eps)
        x = x + attention(
            h,
            a.q_proj.weight,
            a.k_proj.weight,
            a.v_proj.weight,
            a.o_proj.weight,
            a.q_proj.bias,
            a.k_proj.bias,
            a.v_proj.bias,
            4,
            2,
            cfg.rope_theta,
        )
        x = x + mlp(
            rms(x, layer.post_attention_layernorm.weight, cfg.eps),
            m.gate_proj.weight,
            m.up_proj.weight,
            m.down_proj.weight,
        )
    want = rms(x, body.norm.weight, cfg.eps) @ model.lm_head.weight.T
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[0], want, rtol=1e-5, atol=1e-5)  # RoPE tables are float32


# the adapters on tiny native folders: config.json + safetensors + a tokenizer, no modelling code run

CODE = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n\tprint(i, end='')\n", "x = {'k': [1, 2, 3]}\n"]


def bpe(vocab: int):
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers import models as tm

    tok = Tokenizer(tm.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CODE * 10, trainer)
    return tok


def save_weights(model: torch.nn.Module, path: Path, shards: int = 1) -> None:
    """model.safetensors, or `shards` files with the index json the hub uses."""
    from safetensors.torch import save_file

    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if shards == 1:
        save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
        return
    keys, weight_map = sorted(state), {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = keys[i::shards]
        save_file({k: state[k] for k in part}, str(path / name), metadata={"format": "pt"})
        weight_map |= {k: name for k in part}
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def llada_folder(path: Path, shards: int = 1) -> tuple[Path, torch.nn.Module]:
    """LLaDA's layout: config.json, safetensors under model.transformer.*, tokenizer.json (no remote code for it)."""
    from transformers import PreTrainedTokenizerFast

    path.mkdir(parents=True)
    tok = bpe(256)
    tok.add_special_tokens(["<|startoftext|>", "<|endoftext|>", "<|eot_id|>", "<|mdm_mask|>"])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|startoftext|>", eos_token="<|endoftext|>")
    hf.save_pretrained(path)
    mask = hf.convert_tokens_to_ids("<|mdm_mask|>")
    config = {
        **TINY_LLADA,
        "vocab_size": len(hf),
        "embedding_size": 320,
        "mask_token_id": mask,
        "eos_token_id": hf.eos_token_id,
        "auto_map": {"AutoModel": "modeling_llada.LLaDAModelLM"},
    }
    (path / "config.json").write_text(json.dumps(config))
    (path / "modeling_llada.py").write_text("raise RuntimeError('remote code ran')\n")
    torch.manual_seed(0)
    model = randomize(native_llada.LladaLM(native_llada.LladaConfig.from_json(config)))
    save_weights(model, path, shards)
    return path, model


def dream_folder(path: Path) -> tuple[Path, torch.nn.Module]:
    """Dream's layout: its tokenizer is remote code (tokenization_dream.py) over Qwen2's vocab.json and merges.txt."""
    path.mkdir(parents=True)
    tok = bpe(300)
    tok.model.save(str(path))  # vocab.json, merges.txt
    n = tok.get_vocab_size()
    specials = ["<|endoftext|>", "<|mask|>", "<|im_end|>", "<|dlm_pad|>"]
    added = {
        str(n + i): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, t in enumerate(specials)
    }
    tok_config = {
        "tokenizer_class": "DreamTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
        "added_tokens_decoder": added,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "mask_token": "<|mask|>",
    }
    (path / "tokenizer_config.json").write_text(json.dumps(tok_config))
    for code in ("tokenization_dream.py", "modeling_dream.py"):
        (path / code).write_text("raise RuntimeError('remote code ran')\n")
    config = {
        **TINY_DREAM,
        "vocab_size": n + 8,
        "mask_token_id": n + 1,
        "eos_token_id": n,
        "pad_token_id": n,
        "auto_map": {"AutoModel": "modeling_dream.DreamModel"},
    }
    (path / "config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    model = randomize(native_dream.DreamLM(native_dream.DreamConfig.from_json(config)))
    save_weights(model, path)
    return path, model


def test_llada_folder_loads_natively_without_trust_remote_code(tmp_path):
    path, model = llada_folder(tmp_path / "LLaDA-tiny")
    dlm = models.load(str(path), device="cpu")
    tok = dlm.tokenizer.hf
    assert dlm.family == "llada" and dlm.cached is not None and dlm.context == 4096
    assert (dlm.mask_id, dlm.eos_id, dlm.bos_id) == (tok.convert_tokens_to_ids("<|mdm_mask|>"), tok.eos_token_id, None)
    assert dlm.eot_id == tok.convert_tokens_to_ids("<|eot_id|>")
    ids = torch.tensor(dlm.tokenizer.encode(CODE[0]))
    ids[2:5] = dlm.mask_id
    logits = dlm.predict(ids)
    assert logits.shape == (len(ids), 320) and logits.dtype == torch.float32
    with torch.no_grad():
        torch.testing.assert_close(logits, model(ids[None])[0])  # LLaDA: logits in place, no shift


def test_sharded_checkpoint_loads_the_same(tmp_path):
    path, model = llada_folder(tmp_path / "LLaDA-sharded", shards=3)
    assert not (path / "model.safetensors").exists()
    ids = torch.tensor([5, 6, 7, 8])
    with torch.no_grad():
        torch.testing.assert_close(models.load(str(path), device="cpu").predict(ids), model(ids[None])[0])


def test_dream_folder_loads_natively_with_a_qwen2_tokenizer_and_aligned_logits(tmp_path):
    path, model = dream_folder(tmp_path / "Dream-tiny")
    dlm = models.load(str(path), device="cpu")  # no --trust-remote-code: tokenization_dream.py never runs
    tok = dlm.tokenizer.hf
    assert dlm.family == "dream" and type(tok).__name__ == "Qwen2Tokenizer" and dlm.cached is not None
    assert dlm.mask_id == tok.convert_tokens_to_ids("<|mask|>") and dlm.pad_id == tok.convert_tokens_to_ids(
        "<|dlm_pad|>"
    )
    assert dlm.context == dream.DREAM_CONTEXT
    for code in CODE:
        assert dlm.tokenizer.decode(dlm.tokenizer.encode(code)) == code
    ids = torch.tensor(dlm.tokenizer.encode(CODE[1]))
    ids[3:6] = dlm.mask_id
    with torch.no_grad():
        raw = model(ids[None])  # (1, L, V), row i scores position i + 1
    logits = dlm.predict(ids)
    torch.testing.assert_close(logits, torch.cat([raw[:, :1], raw[:, :-1]], dim=1)[0])
    logits[:, 0] = 0.0  # callers may edit it in place


def test_bf16_native_predict_is_float32(tmp_path):
    path, model = llada_folder(tmp_path / "LLaDA-bf16")
    dlm = models.load(str(path), device="cpu", dtype="bf16")
    ids = torch.tensor([5, 6, 7, 8])
    logits = dlm.predict(ids)
    assert dlm.dtype == torch.bfloat16 and logits.dtype == torch.float32
    with torch.no_grad():
        torch.testing.assert_close(logits, model(ids[None])[0], atol=0.1, rtol=0.05)


def test_unsupported_llada_is_one_clear_error_naming_the_option(tmp_path):
    path, _ = llada_folder(tmp_path / "LLaDA-seq")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "block_type": "sequential"}))
    with pytest.raises(ModelError) as err:
        models.load(str(path), device="cpu")
    msg = str(err.value)
    assert "is LLaDA" in msg and "block_type='sequential'" in msg and "--trust-remote-code" in msg and "\n" not in msg


def test_weights_that_do_not_match_the_config_are_named(tmp_path):
    path, _ = llada_folder(tmp_path / "LLaDA-wrong")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "mlp_hidden_size": 40}))
    with pytest.raises(ModelError, match=r"ff_proj.weight has shape \(48, 32\), config.json implies \(40, 32\)"):
        models.load(str(path), device="cpu")


@pytest.mark.parametrize("make", [llada_folder, dream_folder])
def test_a_padded_batch_gives_each_canvas_its_own_logits(tmp_path, make):
    path, _ = make(tmp_path / "tiny")
    dlm = models.load(str(path), device="cpu")
    seqs = [
        torch.tensor([5, 6, 7, 8, 9, 10, 11]),
        torch.tensor([12, 13, dlm.mask_id]),
        torch.tensor([14, dlm.mask_id, 15, 16]),
    ]
    for got, ids in zip(dlm.forward_batch(seqs), seqs, strict=True):
        torch.testing.assert_close(
            got, dlm.predict(ids), rtol=1e-5, atol=1e-5
        )  # padding is never attended; Dream stays aligned


@pytest.mark.parametrize(("folder", "key"), [(llada_folder, "n_layers"), (dream_folder, "num_hidden_layers")])
def test_a_layer_count_the_weights_do_not_have_fails_before_the_model_is_built(tmp_path, folder, key, monkeypatch):
    """Checked from the safetensors headers: a million layers on the meta device would
    cost gigabytes of modules first."""
    from dlmcode.core.errors import ModelError
    from dlmcode.models import native_dream, native_llada

    path, _ = folder(tmp_path / "m")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, key: 1_000_000}))
    built = []
    monkeypatch.setattr(native_llada, "LladaLM", lambda cfg: built.append(cfg))
    monkeypatch.setattr(native_dream, "DreamLM", lambda cfg: built.append(cfg))
    with pytest.raises(ModelError, match=f"config.json says {key} 1000000, the weights hold 2 layers"):
        models.load(str(path), device="cpu")
    assert built == []
