"""Tiny models built in the tests: a random built-in-architecture dLLM with a BPE tokenizer, the
LLaDA and Dream configs cut to toy size, whose weights `randomize` fills, and the one-character
tokenizer the block families' tiny models use."""

from __future__ import annotations

from pathlib import Path

import torch

from dlmcode.bench.standins import DREAM_7B, LLADA_8B  # the published config.json files

SNIPPETS = [
    "def add(a, b):\n    return a + b\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n",
    "import os\nimport sys\n\nprint(os.path.join('a', 'b'), sys.argv)\n",
    "while True:\n    break\n",
    "x = [1, 2, 3]\ny = {'a': 1}\nz = (x, y)\n",
]


def tiny_builtin(path: Path, seed: int = 0, context: int = 96) -> Path:
    """A random 1-layer model of the built-in architecture saved in its folder format."""
    from dlmcode.models.builtin import (
        BuiltinConfig,
        DlmcodeDiffusionLM,
        save,
        train_tokenizer,
    )

    tokenizer = train_tokenizer(SNIPPETS * 4, 300)
    config = BuiltinConfig(vocab_size=tokenizer.tok.get_vocab_size(), dim=32, n_layers=1, n_heads=2, context=context)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = DlmcodeDiffusionLM(config)
    save(model, tokenizer, path, dtype=torch.float32)
    return path


# ---------------------------------------------------------------- LLaDA and Dream at toy size


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            base = 1.0 if "norm" in name else 0.0
            p.copy_(base + torch.randn(p.shape, generator=g, dtype=p.dtype) * (0.3 if p.dim() == 1 else 0.2))
    return model.eval()


TINY_LLADA = {
    **LLADA_8B,
    "d_model": 32,
    "n_heads": 4,
    "n_kv_heads": 2,
    "n_layers": 2,
    "mlp_hidden_size": 48,
    "embedding_size": 64,
    "vocab_size": 60,
    "mask_token_id": 63,
    "eos_token_id": 0,
}
TINY_DREAM = {
    **DREAM_7B,
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 48,
    "vocab_size": 64,
    "mask_token_id": 63,
}


def char_tokenizer(mask_token: str, mask_id: int = 95):
    """A tokenizer of one token a character (printable ASCII and newline) with <pad> 0, <eos> 1 and `mask_token` at
    `mask_id`, as a block family's tiny checkpoint folder holds it."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import decoders as td
    from tokenizers import models as tm
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1}
    for c in [chr(i) for i in range(32, 127)] + ["\n"]:
        if len(vocab) < mask_id:
            vocab[c] = len(vocab)
    vocab[mask_token] = mask_id
    tok = Tokenizer(tm.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = td.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", mask_token=mask_token)


def shared_block_runs(monkeypatch, session_class) -> list[int]:
    """The sizes of the shared block forwards a block family's sessions run (PendingSession.run_many), recorded."""
    sizes: list[int] = []
    run_many = session_class.run_many.__func__
    monkeypatch.setattr(
        session_class, "run_many", classmethod(lambda cls, s, i: sizes.append(len(s)) or run_many(cls, s, i))
    )
    return sizes


def check_batched_equals_alone(dlm, jobs, sizes: list[int]) -> list:
    """Jobs (made by `jobs(model)`) run alone, then batched at sizes 1, 2 and 4: the same canvases and calls at every
    size, every batch as full as the size allows, one shared run per call; the canvases and calls alone."""
    from dlmcode.jobs import batch

    alone = [(r.canvas, r.calls) for r in (job.run() for job in jobs(dlm))]
    assert not sizes
    for size in (1, 2, 4):
        sizes.clear()
        together = batch.run_batched(jobs(batch.batched(dlm)), size)
        assert [(r.canvas, r.calls) for r in together] == alone, size
        assert max(sizes) == size and sum(sizes) == sum(r.calls for r in together)
    return alone


def unmatched(tokens: torch.Tensor, open_id: int, close_id: int) -> int:
    """A toy judge: errors = unmatched open_id/close_id tokens (the language of balanced brackets)."""
    depth = errors = 0
    for t in tokens.tolist():
        depth += (t == open_id) - (t == close_id)
        if depth < 0:
            errors, depth = errors + 1, 0
    return errors + depth
