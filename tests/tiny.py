"""Tiny models built in the tests: a random built-in-architecture dLLM with a BPE tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch

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
