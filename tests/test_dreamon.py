"""DreamOn as a family: a Dream folder whose tokenizer has the expand token loads with expand and delete declared,
and its decode through `serve`'s job gives the tokens of DreamOn's own decode, restated here from
`batch_generate_with_expand_as_token` (DreamLM/DreamOn eval/generator.py, Apache-2.0), on a tiny random model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from dlmcode import models
from dlmcode.jobs import fill
from dlmcode.models import native_dream

from tiny import TINY_DREAM, randomize

SURE = 4.0  # how much the tiny model's head favours expand and end-of-text
CODE = ["def add(a, b):\n    return a + b\n", "for i in range(3):\n    print(i)\n", "x = [1, 2, 3]\n"]


def dreamon_folder(path: Path, expand: bool = True, seed: int = 0) -> Path:
    """Dream's layout (a Qwen2 BPE in vocab.json and merges.txt, remote code that must never run) with DreamOn's
    expand token among the added ones."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers import models as tm

    path.mkdir(parents=True)
    tok = Tokenizer(tm.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CODE * 10, trainer)
    tok.model.save(str(path))
    n = tok.get_vocab_size()
    specials = ["<|endoftext|>", "<|mask|>", "<|im_end|>"] + (["<|expand|>"] if expand else [])
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
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "DreamTokenizer",
                "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
                "added_tokens_decoder": added,
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "mask_token": "<|mask|>",
            }
        )
    )
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
    torch.manual_seed(seed)
    model = randomize(native_dream.DreamLM(native_dream.DreamConfig.from_json(config)), seed)
    with torch.no_grad():  # a random head rarely proposes expand or end-of-text: make both likely somewhere
        model.lm_head.weight[n] *= SURE
        if expand:
            model.lm_head.weight[n + 3] *= SURE
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"))
    return path


def dreamon_decode(model, input_ids, mask_id, expand_id, eos_id, min_gen_len, max_gen_len, steps, alg):
    """DreamOn's `batch_generate_with_expand_as_token` for one sequence at temperature 0, restated: one token per
    step by `alg`'s confidence; a decoded expand becomes two holes, a decoded end-of-text pads the holes after it
    with end-of-text (pad_eos_to_right) and every end-of-text decoded into a hole is deleted (delete_eos_token);
    expand is blocked once the fill holds max_gen_len positions or max_gen_len expansions were made. The masks
    DreamOn keeps past its window are never attended (its attention mask), so the window runs alone here."""
    prompt_len = input_ids.shape[1]
    max_tokens = prompt_len + max_gen_len - min_gen_len
    x = F.pad(input_ids, (0, max_tokens - prompt_len), value=mask_id)
    generated, budget = min_gen_len, max_gen_len
    for _ in range(steps):
        window = prompt_len - min_gen_len + generated
        mask_index = torch.zeros_like(x, dtype=torch.bool)
        mask_index[:, :window] = x[:, :window] == mask_id
        if not mask_index.any():
            break
        with torch.no_grad():
            logits = model(x[:, :window]).float()  # (1, W, V), row i scores position i + 1
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        logits = F.pad(logits, (0, 0, 0, max_tokens - window))[mask_index]  # (M, V)
        if window == max_tokens or budget == 0:
            logits[:, expand_id] -= 1e9
        probs = torch.softmax(logits.double(), dim=-1)
        confidence, x0 = probs.max(dim=-1)
        if alg == "topk_margin":
            top = probs.sort(dim=-1, descending=True).values
            confidence = top[:, 0] - top[:, 1]
        elif alg == "entropy":
            confidence = (probs * torch.log(probs + 1e-10)).sum(-1)
        transfer = torch.topk(confidence, 1).indices
        x0_ = torch.full_like(x0, mask_id)
        x0_[transfer] = x0[transfer]
        x[mask_index] = x0_
        eos = (x[0] == eos_id).nonzero()
        if len(eos):
            after = torch.arange(x.shape[1]) >= int(eos[0])
            x[0, after & mask_index[0]] = eos_id
        for idx in sorted((x[0] == expand_id).nonzero().squeeze(1).tolist(), reverse=True):
            x = torch.cat([x[:, :idx], torch.tensor([[mask_id, mask_id]]), x[:, idx + 1 :]], dim=1)[:, :max_tokens]
            generated += 1
            budget -= 1
        for idx in sorted(((x[0] == eos_id) & mask_index[0]).nonzero().squeeze(1).tolist(), reverse=True):
            x = torch.cat([x[:, :idx], x[:, idx + 1 :], torch.tensor([[mask_id]])], dim=1)
            generated -= 1
    return x, generated


def test_a_dreamon_folder_declares_expand_and_delete(tmp_path):
    dlm = models.load(str(dreamon_folder(tmp_path / "DreamOn-tiny")), device="cpu")
    tok = dlm.tokenizer.hf
    assert dlm.family == "dream" and dlm.expand_id == tok.convert_tokens_to_ids("<|expand|>")
    assert dlm.delete_id == dlm.eos_id == tok.convert_tokens_to_ids("<|endoftext|>")
    assert dlm.expand_id in dlm.special_ids
    plain = models.load(str(dreamon_folder(tmp_path / "Dream-tiny", expand=False)), device="cpu")
    assert plain.expand_id is None and plain.delete_id is None  # Dream-Coder, DiffuCoder: today's length rule
    assert fill.prepare_middle("x = ", "\n", 16, dlm=plain, unknown=True).growth is None


@pytest.mark.parametrize(
    ("decoder", "alg"), [("low-confidence", "maskgit_plus"), ("margin", "topk_margin"), ("entropy", "entropy")]
)
@pytest.mark.parametrize("seed", [0, 5, 6])  # models that grow or shrink the fill under all three
def test_the_decode_gives_dreamons_tokens(tmp_path, decoder, alg, seed):
    path = dreamon_folder(tmp_path / "DreamOn-tiny", seed=seed)
    dlm = models.load(str(path), device="cpu", dtype="fp32")
    one = {"tokens_per_step": 1}  # DreamOn commits one token a step, whatever the order
    job = fill.prepare_middle("def add(a, b):\n", "\n", 24, dlm=dlm, decoder=decoder, options=one, unknown=True)
    start = job.plan.positions[0].start
    canvas = job.plan.canvas.tokens.clone()
    result = job.run()
    model = native_dream.load_model(
        path, json.loads((path / "config.json").read_text()), torch.device("cpu"), torch.float32
    )
    x, n = dreamon_decode(model, canvas[None], dlm.mask_id, dlm.expand_id, dlm.eos_id, 4, 24, 1000, alg)
    assert result.ids == x[0, start : start + n].tolist()
    assert result.sized == (n,)
    assert result.expanded + result.deleted > 0  # the random model did grow or shrink the fill


def test_a_sampled_decode_repeats_with_its_seed(tmp_path):
    """Above temperature 0 the tokens are drawn (Gumbel-max, not DreamOn's torch.multinomial): the same seed gives
    the same fill, edits included."""
    dlm = models.load(str(dreamon_folder(tmp_path / "DreamOn-tiny", seed=5)), device="cpu", dtype="fp32")

    def run(seed):
        job = fill.prepare_middle("def add(a, b):\n", "\n", 24, dlm=dlm, temperature=0.8, seed=seed, unknown=True)
        return job.run()

    first, again = run(3), run(3)
    assert first.ids == again.ids and (first.expanded, first.deleted) == (again.expanded, again.deleted)
