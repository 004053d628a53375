"""DreamOn's training example for holes that choose their own length, restated for the built-in model.

A hole on a variable-length canvas can decode to a token, to [EXPAND] (it becomes two holes)
or to the delete token (it leaves the canvas). One example teaches all three (Wu et al. 2026,
arXiv 2602.01326, `sft_expand_dataset.py`; the rules are theirs, this code is ours):

- a *middle* is chosen in the window: whole lines (line-aligned, like an editor's fill) or a
  random token span;
- k delete targets ([PAD], the built-in model's delete) follow it, k uniform in
  0..max_deletes-1 and bounded by the room left: a canvas longer than its fill;
- its tokens are masked with ratio t ~ U(t_min, 1); the delete positions always are;
- a masked middle position absorbs the next one when that one is masked too, with probability
  p (chains allowed, so one position may stand for many tokens); a position that absorbed any
  is one hole standing for two or more tokens, and its target is [EXPAND]; the absorbed
  positions leave the canvas. p is `merge_prob` for a `merge_static` share of examples, else
  merge_prob x (1 - the masked share): lightly masked middles merge more, as in DreamOn's
  "dynamic inverse" schedule;
- the prefix and suffix around the middle stay visible; the loss covers the masked positions.

The caller draws a window longer than the training context (`EXTRA` tokens) so that after the
merges remove positions the example still fills `seq`.
"""

from __future__ import annotations

import numpy as np

from .data import IS_NEWLINE, MASK, PAD

EXTRA = 256  # window tokens beyond `seq`: more than any middle can lose to merges
MAX_MIDDLE = 192  # longest middle in tokens (< EXTRA)
LINE_COUNTS = np.array([1, 1, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6, 8, 10])  # lines in a line-aligned middle


def choose_middle(x: np.ndarray, seq: int, line_end: np.ndarray, cfg, rng: np.random.Generator) -> tuple[int, int]:
    """(start, end) of the middle in x: whole lines with probability p_line_hole, else a token span;
    always starting after [BOS] and ending inside the first `seq` tokens."""
    if rng.random() < cfg.p_line_hole:
        ends = np.flatnonzero(line_end[x[:seq]] > 0) + 1
        bounds = np.unique(np.concatenate([[1], ends]))
        bounds = bounds[bounds < seq]
        if len(bounds) > 1:
            i = int(rng.integers(len(bounds) - 1))
            n = int(min(rng.choice(LINE_COUNTS), cfg.max_middle_lines))
            a, b = int(bounds[i]), int(bounds[min(i + n, len(bounds) - 1)])
            b -= int(line_end[x[b - 1]] == IS_NEWLINE and b - 1 > a)  # keep the last line break as context
            return a, min(b, a + MAX_MIDDLE)
    n = int(rng.integers(1, cfg.max_span_tokens + 1))
    a = int(rng.integers(1, seq - n))
    return a, a + n


def merge_runs(masked: np.ndarray, p: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(keep, expands) over the middle's positions: `keep` False where a position was absorbed by
    the one before it, `expands` True where a kept position absorbed one or more."""
    n = len(masked)
    keep, expands = np.ones(n, dtype=bool), np.zeros(n, dtype=bool)
    coins = rng.random(max(n - 1, 0))
    head = -1  # the kept masked position absorbing the current run
    for i in range(n):
        if head >= 0 and masked[i] and coins[i - 1] < p:
            keep[i], expands[head] = False, True
        else:
            head = i if masked[i] else -1
    return keep, expands


def example(x: np.ndarray, seq: int, line_end: np.ndarray, cfg, rng: np.random.Generator, expand_id: int):
    """(input ids, target ids, masked) of length `seq` for one window x (len(x) >= seq + EXTRA)."""
    a, b = choose_middle(x, seq, line_end, cfg, rng)
    bound = min(cfg.max_deletes, seq - b)  # DreamOn's bound: max_deletes, and the room the window leaves
    deletes = int(rng.integers(0, bound)) if bound > 0 else 0
    middle = np.concatenate([x[a:b], np.full(deletes, PAD, dtype=x.dtype)])
    t = rng.uniform(cfg.t_min, 1.0)
    masked = rng.random(len(middle)) < t
    content = b - a
    masked[content:] = True  # delete targets are always holes
    share = masked[:content].sum() / len(middle)
    p = cfg.merge_prob if rng.random() < cfg.merge_static else cfg.merge_prob * (1.0 - share)
    keep, expands = merge_runs(masked[:content], p, rng)
    keep = np.concatenate([keep, np.ones(deletes, dtype=bool)])
    expands = np.concatenate([expands, np.zeros(deletes, dtype=bool)])
    if not masked.any():
        masked[int(rng.integers(len(middle)))] = True
    target = np.where(expands, expand_id, middle)[keep]
    hole = masked[keep]
    inp = np.where(hole, MASK, target)
    tgt = np.concatenate([x[:a], target, x[b:]])[:seq]
    inp = np.concatenate([x[:a], inp, x[b:]])[:seq]
    msk = np.concatenate([np.zeros(a, bool), hole, np.zeros(len(x) - b, bool)])[:seq]
    return inp, tgt, msk
