"""The assistant's training examples (train_assistant.py's docstring says why they are so): windows of
the corpus in the dLLM's tokens, block masking, over-allocated holes, the frozen dLLM's marginals, and the
teacher-forced losses beside the dLLM's own factorised loss."""

from __future__ import annotations

import numpy as np
import torch

from ..core import assistant as A
from .assistant_config import AssistantTrainConfig
from .data import Stream


def newline_table(tokenizer, size: int) -> np.ndarray:
    """(V,) bool: the token's text ends with a newline (any tokenizer: decodes each id once)."""
    return np.array([tokenizer.decode([i]).endswith("\n") for i in range(size)], dtype=bool)


def encode(dlm, texts: list[str], ends_line: np.ndarray) -> Stream:
    """[bos] file [eos] [bos] file ... with the dLLM's tokenizer (bos/eos where it has them)."""
    head = [dlm.bos_id] if dlm.bos_id is not None else []
    tail = [dlm.eos_id] if dlm.eos_id is not None else []
    ids = np.concatenate([np.array(head + dlm.tokenizer.encode(t) + tail, dtype=np.int64) for t in texts])
    before_start = ends_line[ids] | np.isin(ids, head)  # a line starts after a newline or a bos
    starts = np.flatnonzero(before_start) + 1
    return Stream(ids, starts[starts < len(ids)])


def window(stream: Stream, seq: int, bos: int | None, rng: np.random.Generator) -> np.ndarray:
    """`seq` tokens from a random line start, the first one replaced by `bos` when there is one."""
    lo = 1 if bos is not None else 0
    starts = stream.line_starts[(stream.line_starts >= lo) & (stream.line_starts <= len(stream.ids) - seq)]
    s = int(starts[rng.integers(len(starts))]) - lo
    x = stream.ids[s : s + seq].copy()
    if bos is not None:
        x[0] = bos
    return x


def pad_hole(x: np.ndarray, first: int, pad: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """An over-allocated hole like a ⟦fill⟧ marker's: 1..32 tokens then 1..32 pads, all masked
    (how the built-in model is trained, train.with_pads). Returns the new window and the hole."""
    seq = len(x)
    cap = max(1, min(32, (seq - first) // 3))
    n, k = int(rng.integers(1, cap + 1)), int(rng.integers(1, cap + 1))
    a = int(rng.integers(first, seq - n - k + 1))  # the pads fit in the window
    x = np.concatenate([x[: a + n], np.full(k, pad, dtype=x.dtype), x[a + n :]])[:seq]
    hole = np.zeros(seq, dtype=bool)
    hole[a : a + n + k] = True
    return x, hole


def mask(
    seq: int, first: int, cfg: AssistantTrainConfig, rng: np.random.Generator, hole: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Holes (seq,) bool and the blocks (position arrays) cut from positions first..seq-1; the
    first block starts inside `hole` (a forced hole) when it has any position."""
    blocks, taken = [], np.zeros(seq, dtype=bool)
    inside = np.flatnonzero(hole)
    for i in range(cfg.blocks_per_window):
        n = int(rng.integers(1, cfg.block + 1))
        a = int(rng.choice(inside)) if i == 0 and len(inside) else int(rng.integers(first, seq - n + 1))
        n = min(n, seq - a)
        if not taken[max(0, a - 1) : a + n + 1].any():  # blocks never touch: each is its own run
            taken[a : a + n] = True
            blocks.append(np.arange(a, a + n))
    blocks.sort(key=lambda b: b[0])
    if rng.random() < cfg.p_suffix:
        holes = np.arange(seq) >= blocks[0][0]
    else:
        holes = rng.random(seq) < rng.random()
    holes[:first] = False
    return holes | taken | hole, blocks


@torch.no_grad()
def examples(
    dlm, stream: Stream, vocab: int, cfg: AssistantTrainConfig, rng: np.random.Generator, device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(marginals (n, vocab), targets (n,)) of every block of `batch` windows, one dLLM call each."""
    out = []
    first = 1 if dlm.bos_id is not None else 0
    for _ in range(cfg.batch):
        x = window(stream, cfg.seq, dlm.bos_id, rng)
        hole = np.zeros(cfg.seq, dtype=bool)
        if rng.random() < pad_share(cfg, dlm):
            x, hole = pad_hole(x, first, dlm.pad_id, rng)
        holes, blocks = mask(cfg.seq, first, cfg, rng, hole)
        probs = A.marginals(dlm.predict(torch.from_numpy(np.where(holes, dlm.mask_id, x))), vocab).to(
            device
        )  # (L, vocab)
        out += [(probs[torch.from_numpy(b)], torch.from_numpy(x[b]).to(device)) for b in blocks]
    return out


def pad_share(cfg: AssistantTrainConfig, dlm) -> float:
    """p_pads, where auto (< 0) means 0.3 for the built-in model (trained with pads) and 0 otherwise."""
    if dlm.pad_id is None:
        return 0.0
    return cfg.p_pads if cfg.p_pads >= 0 else (0.3 if dlm.family == "builtin" else 0.0)


def loss_on(assistant, blocks: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy over the blocks (batched by length) and the number of tokens."""
    total, n = 0.0, 0
    for length in sorted({len(t) for _, t in blocks}):
        group = [(p, t) for p, t in blocks if len(t) == length]
        total = total + A.block_loss(assistant, torch.stack([p for p, _ in group]), torch.stack([t for _, t in group]))
        n += length * len(group)
    return total, n


def factorised(blocks: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """The dLLM's own loss per token on the blocks: mean -log pi(target)."""
    nll = [-(p.gather(-1, t[:, None]).clamp_min(1e-12).log()).sum() for p, t in blocks]
    return float(sum(nll) / sum(len(t) for _, t in blocks))
