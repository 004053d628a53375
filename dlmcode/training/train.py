"""Training the built-in dLLM: corpus, tokenizer, masking, the training loop, export.

Corpus: the running interpreter's stdlib (`sysconfig` "stdlib"), every *.py file that parses,
minus test folders (`test`, `tests`, `idle_test`), `idlelib`, `site-packages`, `__pycache__`
and `pydoc_data` (one 0.8 MB generated string of documentation, not code). Held-out split:
sha1(relative path) % 20 == 0, about 5 % of files (the same rule as the feasibility trial).

Objective: the MDLM/LLaDA masked-diffusion ELBO (Sahoo et al. 2024; Nie et al. 2025, eq. 3),
with the noise applied only inside chosen *holes*. Each sequence draws a mode:
  iid    - the whole window is the hole (plain MDLM);
  spans  - 1..max_holes holes, each a run of 1-5 whole lines or a random token span;
           some holes are over-allocated: the target is the span followed by [PAD]s,
           which teaches `--length auto` (fill, then strip the pads);
  suffix - everything after a random line start is the hole (prompt continuation);
  expand - (with expand=true) DreamOn's objective (Wu et al. 2026, arXiv 2602.01326), restated:
           one middle (whole lines, or a random token span) gets up to max_deletes extra
           [PAD] targets after it (a hole that decodes [PAD] is deleted), its tokens are masked
           with ratio t, and runs of adjacent masked middle tokens merge into one position whose
           target is [EXPAND] (a hole standing for two or more tokens), with a scheduled merge
           probability. The merged-away positions leave the canvas, as in DreamOn.
Inside the hole every token is masked with probability t ~ U(t_min, 1). The loss is the mean
cross-entropy over the masked tokens of each sequence, averaged over sequences. This is the
1/t-weighted ELBO sum_masked CE / (t n) with the realised count of masked tokens in place of
its expectation t n: the same weighting of noise levels, lower variance (our choice).

Schedule: linear warm-up, then warmup-stable-decay indexed by *training wall time*, so a run
ends on time however contended the machine is (or by step, with steps=N). A copy of the
checkpoint taken when the decay starts (stable.pt) lets a later session resume with a longer budget.

Data: this interpreter's stdlib (above), or with data=DIR a tokenized corpus from
`python -m dlmcode.training.corpus tokenize` (permissively licensed PyPI releases + the stdlib; its
tokenizer and validation split come with it). Batch k is drawn from an RNG seeded by (seed, k)
alone, so a resumed run sees exactly the batches an uninterrupted one would (with steps=N the
losses match to the bit), and workers=N processes can build batches ahead in any order.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import sys
import time
import typing
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
import torch.nn.functional as F
import typer

from ..bench.heldout import corpus_files, file_list_hash, split, stdlib_root
from ..core import settings
from ..core.errors import DlmcodeError, UsageError
from ..models.builtin import (
    EXPAND_TOKEN,
    BuiltinConfig,
    BuiltinTokenizer,
    DlmcodeDiffusionLM,
    load_model,
    save,
    train_tokenizer,
)
from . import expand
from .data import (
    BOS,
    IS_NEWLINE,
    MASK,
    PAD,
    Stream,
    encode_stream,
    line_end_table,
    stream_of,
)


@dataclass(frozen=True)
class TrainConfig:
    out: str = "runs/builtin"  # run folder: tokenizer, checkpoints, log.jsonl, best/
    seed: int = 0  # seeds init, data order and masking
    minutes: float = 120.0  # training wall-time budget (the schedule is indexed by it)
    max_steps: int = 0  # stop after this many steps as well (0: no step limit; the schedule ignores it)
    steps: int = 0  # index the lr schedule by steps, ending at this step (0: by wall time, `minutes`)
    stdlib: str = ""  # corpus root ("" = this interpreter's stdlib)
    data: str = ""  # tokenized corpus folder (python -m dlmcode.training.corpus tokenize); overrides stdlib
    max_files: int = 0  # use only the first N train files (0 = all; for tests)
    vocab_size: int = 4096  # BPE vocabulary incl. 4 special tokens
    dim: int = 320  # model width (v2: 11.1M params, 22.3 MB in bf16; v1 was dim=192 n_layers=6 n_heads=3 seq=256)
    n_layers: int = 8  # transformer blocks
    n_heads: int = 5  # attention heads (head dim 64)
    ffn_mult: int = 4  # MLP expansion
    seq: int = 512  # training window in tokens (= the model's context; 512 holds 30+ lines)
    batch: int = 16  # windows per step
    lr: float = 2e-3  # peak AdamW learning rate
    min_lr_frac: float = 0.05  # final lr as a fraction of peak
    warmup_steps: int = 200  # linear warm-up steps
    decay_frac: float = 0.25  # last fraction of the wall-time budget spent decaying lr linearly
    weight_decay: float = 0.1  # on matrices only (not embeddings or norms)
    grad_clip: float = 1.0  # max global grad norm
    t_min: float = 1e-3  # smallest mask ratio
    p_iid: float = 0.2  # share of sequences masked i.i.d. over the whole window
    p_suffix: float = 0.15  # share masked after a random line start (continuation)
    max_holes: int = 6  # most holes per sequence in "spans" mode
    p_line_hole: float = 0.7  # a hole is whole lines (else a random token span)
    max_span_tokens: int = 48  # longest random token span
    p_overalloc: float = 0.3  # a hole gets extra [PAD] targets after its content
    max_extra_pads: int = 32  # most [PAD]s added to one hole
    bf16: bool = True  # bf16 autocast (CPU with avx512_bf16, or CUDA)
    threads: int = 2  # torch CPU threads
    workers: int = 0  # processes building batches ahead (0: in the training process; use several on an accelerator)
    ckpt_minutes: float = 5.0  # checkpoint (and held-out eval) every N minutes of training
    log_every: int = 20  # steps between progress records
    eval_windows: int = 64  # held-out windows in each evaluation
    resume: bool = True  # continue from out/ckpt.pt when it exists
    expand: bool = False  # teach [EXPAND] (a new token, id vocab_size) and deletes: DreamOn's objective
    p_expand: float = 0.45  # with expand: share of sequences in "expand" mode (taken from "spans")
    merge_prob: float = 0.5  # with expand: peak probability that a masked middle position absorbs the next
    merge_static: float = 0.4  # with expand: share of middles merging at merge_prob (else scaled by 1 - masked share)
    max_deletes: int = 64  # with expand: most [PAD] (delete) targets after a middle (drawn from 0..max_deletes-1)
    max_middle_lines: int = 10  # with expand: most whole lines in a middle
    expand_lr_mult: float = 1.0  # with expand: [EXPAND]'s embedding row takes this many times the optimizer's step
    init: str = (
        ""  # start from this model folder's weights (same width, depth, heads, vocab and tokenizer; any context)
    )


def window(stream: Stream, seq: int, rng: np.random.Generator) -> np.ndarray:
    """[BOS] then `seq - 1` tokens from a random line start: spans.py starts every canvas,
    windowed or not, with [BOS] and cuts windows at line starts."""
    # line_starts is sorted: the usable ones are one slice of it (no per-window copy of millions of starts)
    lo = int(np.searchsorted(stream.line_starts, 1))
    hi = int(np.searchsorted(stream.line_starts, len(stream.ids) - seq, side="right"))
    s = int(stream.line_starts[lo + rng.integers(hi - lo)]) - 1
    x = stream.ids[s : s + seq].copy()
    x[0] = BOS  # at a file start x[0] already is [BOS]
    return x


def line_bounds(x: np.ndarray, line_end: np.ndarray) -> np.ndarray:
    """Start offsets of the lines in window x (always includes 0 and len(x))."""
    ends = np.flatnonzero(line_end[x] > 0) + 1
    return np.unique(np.concatenate([[0], ends, [len(x)]]))


def pick_holes(
    x: np.ndarray, line_end: np.ndarray, cfg: TrainConfig, rng: np.random.Generator
) -> list[tuple[int, int, int]]:
    """(start, end, extra_pads) holes for "spans" mode, non-overlapping."""
    bounds = line_bounds(x, line_end)
    holes, taken = [], np.zeros(len(x), dtype=bool)
    for _ in range(int(rng.integers(1, cfg.max_holes + 1))):
        if rng.random() < cfg.p_line_hole and len(bounds) > 2:
            i = int(rng.integers(len(bounds) - 1))
            n = int(rng.choice([1, 1, 1, 1, 2, 2, 3, 3, 4, 5]))
            a, b = int(bounds[i]), int(bounds[min(i + n, len(bounds) - 1)])
            b -= int(line_end[x[b - 1]] == IS_NEWLINE)  # spans.py keeps the last line break as context
        else:
            n = int(rng.integers(1, cfg.max_span_tokens + 1))
            a = int(rng.integers(0, max(1, len(x) - n)))
            b = a + n
        if b <= a or taken[max(0, a - 1) : b + 1].any():
            continue
        taken[a:b] = True
        extra = int(rng.integers(1, cfg.max_extra_pads + 1)) if rng.random() < cfg.p_overalloc else 0
        holes.append((a, b, extra))
    return sorted(holes)


def noise(x: np.ndarray, seq: int, line_end: np.ndarray, cfg: TrainConfig, rng: np.random.Generator):
    """One training example: (input ids, target ids, masked) of length `seq` each."""
    mode = rng.random()
    if cfg.expand and cfg.p_iid + cfg.p_suffix <= mode < cfg.p_iid + cfg.p_suffix + cfg.p_expand:
        return expand.example(x, seq, line_end, cfg, rng, expand_id(cfg))
    x = x[:seq]  # the other modes see the window they always saw
    if mode < cfg.p_iid:
        target, hole = x, np.ones(len(x), dtype=bool)
    elif mode < cfg.p_iid + cfg.p_suffix:
        bounds = line_bounds(x, line_end)
        cut = int(bounds[rng.integers(len(bounds) - 1)])
        target, hole = x, np.arange(len(x)) >= cut
    else:
        target, hole = with_pads(x, pick_holes(x, line_end, cfg, rng))
    if not hole[1:seq].any():  # no hole inside the window: fall back to plain MDLM
        target, hole = x, np.ones(len(x), dtype=bool)
    target, hole = target[:seq], hole[:seq].copy()
    hole[0] = False  # position 0 is always [BOS], as on every inference canvas
    t = rng.uniform(cfg.t_min, 1.0)
    masked = hole & (rng.random(seq) < t)
    if not masked.any():
        masked[rng.choice(np.flatnonzero(hole))] = True
    return np.where(masked, MASK, target), target, masked


def with_pads(x: np.ndarray, holes: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Insert each hole's extra [PAD] targets after its content; mark hole positions."""
    parts, flags, prev = [], [], 0
    for a, b, extra in holes:
        parts += [x[prev:a], x[a:b], np.full(extra, PAD, dtype=x.dtype)]
        flags += [np.zeros(a - prev, bool), np.ones(b - a + extra, bool)]
        prev = b
    parts.append(x[prev:])
    flags.append(np.zeros(len(x) - prev, bool))
    return np.concatenate(parts), np.concatenate(flags)


def batch(stream: Stream, line_end: np.ndarray, cfg: TrainConfig, rng: np.random.Generator):
    span = cfg.seq + (expand.EXTRA if cfg.expand else 0)  # merges shorten an expand example: draw more
    examples = [noise(window(stream, span, rng), cfg.seq, line_end, cfg, rng) for _ in range(cfg.batch)]
    inp, tgt, msk = (torch.from_numpy(np.stack(col)) for col in zip(*examples, strict=True))
    return inp, tgt, msk  # (B, L) long, (B, L) long, (B, L) bool


def step_batch(stream: Stream, line_end: np.ndarray, cfg: TrainConfig, step: int):
    """The batch of training step `step`: a function of (seed, step) alone, so resuming or
    building it in another process gives the same tensors."""
    return batch(stream, line_end, cfg, np.random.default_rng([cfg.seed, step]))


_SHARED: tuple = ()  # (stream, line_end, cfg) for batch workers, inherited through fork


def _worker_batch(step: int) -> tuple[np.ndarray, ...]:
    return tuple(
        t.numpy() for t in step_batch(*_SHARED, step)
    )  # plain arrays: no tensor sharing through file descriptors


def worker_died(step: int, workers: int) -> DlmcodeError:
    return DlmcodeError(
        f"a batch worker died before step {step}'s batch was built (out of memory? try fewer than {workers} workers)"
    )


def batches(stream: Stream, line_end: np.ndarray, cfg: TrainConfig, first: int) -> Iterator[tuple]:
    """Batches for steps first, first+1, ...; with cfg.workers, built ahead by forked
    processes (at most 4 per worker in flight).

    Closing the generator lets the batches in flight finish and the workers exit on their own:
    a worker is never killed, because one killed while it writes a result leaves the result
    queue's lock held for ever (multiprocessing.Pool.terminate hung that way, 4 times in 572
    closes). A worker that dies (the OOM killer) stops training with one line."""
    if not cfg.workers:
        step = first
        while True:
            yield step_batch(stream, line_end, cfg, step)
            step += 1
    import multiprocessing
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    global _SHARED
    _SHARED = (stream, line_end, cfg)  # fork shares the token stream copy-on-write
    pool = ProcessPoolExecutor(cfg.workers, mp_context=multiprocessing.get_context("fork"))
    try:
        window = 4 * cfg.workers  # steps being built or queued: always step .. step + window - 1
        ahead = deque((s, pool.submit(_worker_batch, s)) for s in range(first, first + window))
        while True:
            step, future = ahead.popleft()
            try:
                arrays = future.result()
            except BrokenProcessPool:
                raise worker_died(step, cfg.workers) from None
            yield tuple(torch.from_numpy(a) for a in arrays)
            try:
                ahead.append((step + window, pool.submit(_worker_batch, step + window)))
            except BrokenProcessPool:  # a worker died since: the pool takes no more work
                raise worker_died(step + 1, cfg.workers) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------- loss, schedule


def loss_fn(model: DlmcodeDiffusionLM, inp, tgt, msk, bucket: int = 256):
    """Mean CE over each sequence's masked tokens, averaged over sequences. The head runs only
    on masked rows, padded to a multiple of `bucket` so matmul shapes come from a small set
    (the trial saw RSS grow 1.5 -> 5.2 GB with free shapes)."""
    h = model.hidden(inp)  # (B, L, D)
    rows = msk.flatten().nonzero().squeeze(1)  # (M,)
    w = (1.0 / msk.sum(1, keepdim=True).clamp(min=1) / msk.shape[0]).expand_as(msk).flatten()[rows]
    pad = (-len(rows)) % bucket
    rows = torch.cat([rows, rows.new_zeros(pad)])
    w = torch.cat([w, w.new_zeros(pad)])
    logits = model.logits(h.flatten(0, 1)[rows])  # (M', V)
    ce = F.cross_entropy(logits.float(), tgt.flatten()[rows], reduction="none")  # (M',)
    return (ce * w).sum()


def done_frac(cfg: TrainConfig, step: int, elapsed: float) -> float:
    """How far through its schedule the run is: by steps when cfg.steps, else by wall time."""
    steps = getattr(cfg, "steps", 0)  # the assistant's config schedules by wall time only
    return step / steps if steps else elapsed / (cfg.minutes * 60)


def lr_at(cfg: TrainConfig, step: int, elapsed: float) -> float:
    """Warm-up by steps, then warmup-stable-decay by training wall time (or by step)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = done_frac(cfg, step, elapsed)
    start = 1.0 - cfg.decay_frac
    if frac <= start:
        return cfg.lr
    k = min(1.0, (frac - start) / max(cfg.decay_frac, 1e-9))
    return cfg.lr * (1.0 - k * (1.0 - cfg.min_lr_frac))


def make_optimizer(model: DlmcodeDiffusionLM, cfg: TrainConfig) -> torch.optim.AdamW:
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith("embed")]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and not n.startswith("embed"))]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)


def expand_id(cfg: TrainConfig) -> int:
    """[EXPAND]'s id: the first one after the data's vocabulary."""
    return cfg.vocab_size


def model_config(cfg: TrainConfig) -> BuiltinConfig:
    return BuiltinConfig(
        vocab_size=cfg.vocab_size + int(cfg.expand),
        expand_id=expand_id(cfg) if cfg.expand else -1,
        dim=cfg.dim,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        ffn_mult=cfg.ffn_mult,
        context=cfg.seq,
    )


# ---------------------------------------------------------------- checkpoints


def save_checkpoint(path: Path, model, opt, state: dict, rng: np.random.Generator) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "state": state,
            "np_rng": rng.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
        },
        tmp,
    )
    os.replace(tmp, path)  # atomic: a crash never leaves a half-written checkpoint


def initialise(model: DlmcodeDiffusionLM, folder: Path, tokenizer: BuiltinTokenizer) -> None:
    """Copy a saved model's weights into `model` (continued training; the context may grow, RoPE has no table)."""
    src = load_model(folder, torch.device("cpu"), torch.float32)
    grows = model.cfg.expand_id == src.cfg.vocab_size == model.cfg.vocab_size - 1  # [EXPAND] is new
    for key in ("vocab_size", "dim", "n_layers", "n_heads", "ffn_mult"):
        if getattr(src.cfg, key) != getattr(model.cfg, key) and not (key == "vocab_size" and grows):
            raise UsageError(
                f"init={folder}: its {key} is {getattr(src.cfg, key)}, this run's is {getattr(model.cfg, key)}"
            )
    theirs = BuiltinTokenizer.from_file(folder / "tokenizer.json").tok.get_vocab()
    ours = {k: v for k, v in tokenizer.tok.get_vocab().items() if not grows or v < src.cfg.vocab_size}
    if theirs != ours:
        raise UsageError(
            f"init={folder}: its tokenizer is not the training data's (tokenize the corpus with --tokenizer "
            f"{folder / 'tokenizer.json'})"
        )
    device = next(model.parameters()).device
    weights = src.state_dict()
    if grows:  # [EXPAND]'s row starts at the mean embedding: no token's logit is favoured or copied
        embed = weights["embed.weight"]
        weights["embed.weight"] = torch.cat([embed, embed.mean(0, keepdim=True)])
    model.load_state_dict({k: v.to(device) for k, v in weights.items()})


def portable(path: str | Path, dest: str | Path) -> Path:
    """A copy of checkpoint `path` with every float tensor (weights, AdamW moments) in bf16: half the size,
    small enough for a repository, and resumable anywhere by placing it as a run folder's ckpt.pt
    (load_checkpoint casts the state back to the parameters' fp32). The step, data RNG and schedule
    resume exactly; the weights and moments continue from their bf16 rounding (the shipped precision)."""

    def half(value):
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() > 0:
            return value.to(torch.bfloat16)
        if isinstance(value, dict):
            return {k: half(v) for k, v in value.items()}
        return value

    ck = torch.load(path, map_location="cpu", weights_only=False)
    ck["model"], ck["optimizer"] = half(ck["model"]), half(ck["optimizer"])
    dest = Path(dest)
    tmp = dest.with_suffix(".tmp")
    torch.save(ck, tmp)
    os.replace(tmp, dest)
    return dest


def load_checkpoint(path: Path, model, opt, rng: np.random.Generator) -> dict:
    ck = torch.load(path, map_location="cpu", weights_only=False)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    rng.bit_generator.state = ck["np_rng"]
    torch.set_rng_state(ck["torch_rng"])
    return ck["state"]


@torch.no_grad()
def evaluate(model, stream: Stream, line_end, cfg: TrainConfig, autocast) -> float:
    """Held-out loss of the training mixture on fixed windows and masks (seed 1234)."""
    model.eval()
    rng = np.random.default_rng(1234)
    total, n = 0.0, 0
    for _ in range(max(1, cfg.eval_windows // cfg.batch)):
        inp, tgt, msk = batch(stream, line_end, cfg, rng)
        with autocast():
            total += float(loss_fn(model, inp, tgt, msk))
        n += 1
    model.train()
    return total / n


# ---------------------------------------------------------------- the loop


class LogWindow:
    """Loss and throughput over the steps since the last log line (or checkpoint)."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.t, self.tokens, self.loss, self.steps = time.perf_counter(), 0, 0.0, 0

    def add(self, tokens: int, loss: float) -> None:
        self.tokens, self.loss, self.steps = self.tokens + tokens, self.loss + loss, self.steps + 1

    def line(self, state: dict, **extra) -> dict:
        """The log event of the window that ends now; the next one starts."""
        seconds = time.perf_counter() - self.t
        loss, tok_s = self.loss / self.steps, self.tokens / seconds
        self.restart()
        return {"step": state["step"], "loss": loss, "tok_s": tok_s, "elapsed": state["elapsed"], **extra}


def prepare(cfg: TrainConfig, out: Path):
    """Corpus, tokenizer (trained once per run folder, then reused) and token streams."""
    if cfg.data:
        return prepare_data(cfg, out)
    files = corpus_files(stdlib_root(cfg.stdlib))
    train_files, heldout_files = split(files)
    names = sorted(train_files)[: cfg.max_files or None]
    train_texts = [train_files[k] for k in names]
    tok_path = out / "tokenizer.json"
    if tok_path.exists():
        tokenizer = BuiltinTokenizer.from_file(tok_path)
    else:
        tokenizer = train_tokenizer(train_texts, cfg.vocab_size)
        tokenizer.save(tok_path)
    line_end = line_end_table(tokenizer, cfg.vocab_size)
    with_expand(tokenizer, cfg).save(tok_path)
    train = encode_stream(tokenizer, train_texts, line_end)
    held_names = sorted(heldout_files)[: max(2, cfg.max_files // 10) if cfg.max_files else None]
    held_texts = [heldout_files[k] for k in held_names] or train_texts[:1]  # tiny test corpora may have none
    heldout = encode_stream(tokenizer, held_texts, line_end)
    meta = {
        "files_train": len(names),
        "files_heldout": len(held_names),
        "tokens_train": int(len(train.ids)),
        "tokens_heldout": int(len(heldout.ids)),
        "file_list_sha256": file_list_hash(files),
        "python": sys.version.split()[0],
        "source": "stdlib",
    }
    return tokenizer, line_end, train, heldout, meta


def prepare_data(cfg: TrainConfig, out: Path):
    """prepare() for a tokenized corpus folder: its tokenizer, train and validation streams."""
    from .corpus import tokens

    folder = Path(cfg.data)
    info, train_ids, valid_ids = tokens.load(folder)
    tokenizer = BuiltinTokenizer.from_file(folder / tokens.TOKENIZER)
    if tokenizer.tok.get_vocab_size() != cfg.vocab_size:
        raise UsageError(
            f"{folder}'s tokenizer has {tokenizer.tok.get_vocab_size()} tokens but vocab_size={cfg.vocab_size}"
        )
    line_end = line_end_table(tokenizer, cfg.vocab_size)
    with_expand(tokenizer, cfg).save(out / "tokenizer.json")
    meta = {
        "files_train": info["files_train"],
        "files_heldout": info["files_valid"],
        "tokens_train": int(len(train_ids)),
        "tokens_heldout": int(len(valid_ids)),
        "file_list_sha256": info["corpus_sha256"],
        "python": sys.version.split()[0],
        "source": "corpus",
    }
    return tokenizer, line_end, stream_of(train_ids, line_end), stream_of(valid_ids, line_end), meta


def with_expand(tokenizer: BuiltinTokenizer, cfg: TrainConfig) -> BuiltinTokenizer:
    """The tokenizer the model ships with: with expand, [EXPAND] added as id vocab_size (the data never holds it)."""
    if cfg.expand and EXPAND_TOKEN not in tokenizer.tok.get_vocab():
        tokenizer.tok.add_special_tokens([EXPAND_TOKEN])
        if tokenizer.tok.token_to_id(EXPAND_TOKEN) != expand_id(cfg):
            raise UsageError(f"the tokenizer has {tokenizer.tok.get_vocab_size()} tokens, vocab_size={cfg.vocab_size}")
    return tokenizer


def autocast_for(cfg: TrainConfig, device: torch.device):
    if not cfg.bf16:
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16)


def train(cfg: TrainConfig) -> Iterator[dict]:
    """Train (or resume) and yield progress records: step, loss, tok_s, elapsed, lr, ..."""
    torch.set_num_threads(cfg.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    tokenizer, line_end, stream, heldout, meta = prepare(cfg, out)
    meta["device"] = torch.cuda.get_device_name(0) if device.type == "cuda" else f"CPU, {cfg.threads} threads"
    (out / "config.json").write_text(json.dumps({"train": asdict(cfg), "data": meta}, indent=2) + "\n")
    yield {"event": "data", **meta}
    model = DlmcodeDiffusionLM(model_config(cfg)).to(device)
    opt = make_optimizer(model, cfg)
    state = {"step": 0, "elapsed": 0.0, "tokens": 0, "best_eval": math.inf, "stable_saved": False}
    ckpt = out / "ckpt.pt"
    if cfg.resume and ckpt.exists():
        state = load_checkpoint(ckpt, model, opt, rng)
        yield {"event": "resumed", **state}
    elif cfg.init:
        initialise(model, Path(cfg.init), tokenizer)
        yield {"event": "initialised", "from": cfg.init}
    yield from loop(cfg, model, opt, state, rng, tokenizer, line_end, stream, heldout, out, device)


def loop(cfg, model, opt, state, rng, tokenizer, line_end, stream, heldout, out: Path, device) -> Iterator[dict]:
    model.train()

    def autocast():
        return autocast_for(cfg, device)

    budget = cfg.minutes * 60
    last_ckpt, window = state["elapsed"], LogWindow()
    with contextlib.closing(batches(stream, line_end, cfg, state["step"])) as data:  # closed: workers end
        while running(cfg, state, budget):
            t0 = time.perf_counter()
            lr = lr_at(cfg, state["step"], state["elapsed"])
            for g in opt.param_groups:
                g["lr"] = lr
            inp, tgt, msk = (x.to(device, non_blocking=True) for x in next(data))
            with autocast():
                loss = loss_fn(model, inp, tgt, msk)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            with faster_expand_row(model, cfg):
                opt.step()
            state["step"] += 1
            state["elapsed"] += time.perf_counter() - t0
            state["tokens"] += inp.numel()
            window.add(inp.numel(), loss.item())
            if state["step"] % cfg.log_every == 0:
                limit = min((n for n in (cfg.max_steps, cfg.steps) if n), default=0)
                yield window.line(state, lr=lr, tokens=state["tokens"], budget=budget, step_limit=limit)
            decaying = done_frac(cfg, state["step"], state["elapsed"]) > 1.0 - cfg.decay_frac
            due = state["elapsed"] - last_ckpt >= cfg.ckpt_minutes * 60
            if due or (decaying and not state["stable_saved"]):
                yield checkpoint(cfg, model, opt, state, rng, tokenizer, line_end, heldout, out, autocast, decaying)
                last_ckpt = state["elapsed"]
                window.restart()  # the checkpoint's time is not training throughput
    yield checkpoint(cfg, model, opt, state, rng, tokenizer, line_end, heldout, out, autocast, False)
    yield {"event": "done", **state}


@contextlib.contextmanager
def faster_expand_row(model: DlmcodeDiffusionLM, cfg: TrainConfig) -> Iterator[None]:
    """Scale the optimizer's step on [EXPAND]'s embedding row by `expand_lr_mult`. Continuing a trained
    model, the lr is kept low so its weights move little, but the new row starts from the mean
    embedding and must travel far: AdamW's step is about lr a coordinate whatever the gradient's size,
    so the row gets mult x that step (its moments stay the optimizer's own; embeddings have no decay)."""
    mult = cfg.expand_lr_mult if cfg.expand else 1.0
    if mult == 1.0:
        yield
        return
    row = model.embed.weight[expand_id(cfg)]
    before = row.detach().clone()
    yield
    with torch.no_grad():
        row.copy_(before + mult * (row - before))


def running(cfg: TrainConfig, state: dict, budget: float) -> bool:
    """Within the wall-time budget, max_steps and (with a step schedule) its last step."""
    stop_at = min(n for n in (cfg.max_steps, cfg.steps, math.inf) if n)
    return state["elapsed"] < budget and state["step"] < stop_at


def checkpoint(cfg, model, opt, state, rng, tokenizer, line_end, heldout, out, autocast, decaying) -> dict:
    held = evaluate(model, heldout, line_end, cfg, autocast)
    record = {"event": "checkpoint", "step": state["step"], "heldout_loss": held, "elapsed": state["elapsed"]}
    if held < state["best_eval"]:
        state["best_eval"] = held
        save(model, tokenizer, out / "best", dtype=torch.float32)
        record["best"] = True
    save(model, tokenizer, out / "last", dtype=torch.float32)
    save_checkpoint(out / "ckpt.pt", model, opt, state, rng)
    if decaying and not state["stable_saved"]:
        state["stable_saved"] = True
        shutil.copyfile(out / "ckpt.pt", out / "stable.pt")  # resume point for a longer budget
        save_checkpoint(out / "ckpt.pt", model, opt, state, rng)
    with open(out / "log.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    return record


def logged(cfg: TrainConfig) -> Iterator[dict]:
    """`train`, appending every record to out/progress.jsonl as it goes."""
    return appended(train(cfg), Path(cfg.out) / "progress.jsonl")


def appended(records: Iterator[dict], path: Path) -> Iterator[dict]:
    """Pass `records` through, appending each one to the JSONL file at `path` first."""
    for record in records:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
        yield record


def run(cfg: TrainConfig) -> dict:
    """Drain `logged`, printing one line per record; return the last record."""
    record = {}
    for record in logged(cfg):
        print(json.dumps(record), flush=True)
    return record


# ---------------------------------------------------------------- export


def export(src: str | Path, dest: str | Path, card: str = "", dtype: torch.dtype = torch.bfloat16) -> Path:
    """Copy a saved model folder (run/best or run/last) to `dest` in `dtype`, with a model card."""
    src, dest = Path(src), Path(dest)
    model = load_model(src, torch.device("cpu"), torch.float32)
    save(model, BuiltinTokenizer.from_file(src / "tokenizer.json"), dest, dtype=dtype)
    if card:
        (dest / "MODEL_CARD.md").write_text(card)
    return dest


def model_card(run_dir: str | Path, evaluation: str = "", notes: str = "") -> str:
    """MODEL_CARD.md from a run folder's config.json and log.jsonl, plus evaluation text."""
    run_dir = Path(run_dir)
    info = json.loads((run_dir / "config.json").read_text())
    cfg, data = info["train"], info["data"]
    checks = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    best = min(checks, key=lambda r: r["heldout_loss"])
    last = checks[-1]
    knobs = " ".join(f"{k}={v}" for k, v in cfg.items() if v != getattr(TrainConfig(), k))
    if data.get("source") == "corpus":
        corpus = (
            f"permissively licensed PyPI releases + CPython stdlib (`python -m dlmcode.training.corpus`, NOTICES.md): "
            f"{data['files_train']:,} train files ({data['tokens_train']:,} tokens), {data['files_heldout']:,} "
            "validation files"
        )
    else:
        corpus = (
            f"CPython {data['python']} stdlib: {data['files_train']} train files ({data['tokens_train']:,} tokens), "
            f"{data['files_heldout']} held-out files (sha1(path) % 20 == 0)"
        )
    origin = (
        f"continued from the weights in `{cfg['init']}` by `dlmcode.training.train`"
        if cfg.get("init")
        else "trained from scratch by `dlmcode.training.train`"
    )
    size = f"d={cfg['dim']}, {cfg['n_layers']} layers, {cfg['n_heads']} heads, vocab {cfg['vocab_size']}"
    size += f", context {cfg['seq']}"
    minutes = best["elapsed"] / 60
    shipped = f"step {best['step']}, best held-out loss {best['heldout_loss']:.4f} at {minutes:.1f} min of training"
    tokens = last["step"] * cfg["batch"] * cfg["seq"]
    run = f"{last['step']} steps, {tokens:,} tokens, {last['elapsed'] / 60:.1f} min of training time"
    return f"""# dlmcode built-in model

A small masked-diffusion code model (MDLM/LLaDA objective with line/span holes and
over-allocated [PAD] holes for `--length auto`), {origin}.

| | |
|---|---|
| architecture | bidirectional pre-norm transformer, RoPE, RMSNorm, GELU MLP, tied embeddings, no biases |
| size | {size} |
| tokenizer | byte-level BPE, line-aligned pre-tokenizer, [PAD]=0 [MASK]=1 [BOS]=2 [EOS]=3 |
| data | {corpus} |
| file-list sha256 | `{data["file_list_sha256"]}` |
| command | `python -m dlmcode.training.train {knobs}` |
| shipped checkpoint | {shipped} |
| run | {run} |
| hardware | {data.get("device", "2-core AMD EPYC (avx512_bf16), no GPU")}, bf16 autocast |

## Evaluation (held-out files, known span length)

{evaluation or "Not evaluated yet."}

{notes}
"""


def parse_overrides(args: list[str]) -> TrainConfig:
    """key=value pairs -> TrainConfig, rejecting unknown keys."""
    return overrides(TrainConfig(), args)


def overrides(config: Any, args: list[str], given: dict | None = None, what: str = "training setting") -> Any:
    """`config` (a dataclass) with key=value pairs (and `given` values) applied; unknown keys and bad values
    are UsageErrors.

    Values are parsed by dlmcode.core.settings, the decoders' parser: `bf16=ture` is an error, not False.
    """
    types = {f.name: typing.get_type_hints(type(config))[f.name] for f in fields(config)}
    values = dict(given or {})
    for arg in args:
        key, sep, raw = arg.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"bad -o {arg!r}: write -o key=value")
        key, raw = key.strip(), raw.strip()
        if key not in types:
            raise UsageError(f"unknown {what} {key!r}; known: {', '.join(types)}")
        try:
            values[key] = settings.convert(raw, types[key])
        except ValueError as err:
            raise UsageError(f"bad value {raw!r} for {what} {key} ({settings.expects(types[key], err)})") from None
    return replace(config, **values)


def command(
    settings: Annotated[
        list[str] | None,
        typer.Argument(help="training settings key=value (see TrainConfig in dlmcode/training/train.py)"),
    ] = None,
) -> None:
    """Train the built-in dLLM; one JSON progress record per line on stdout (`dlmcode train` draws a bar instead)."""
    from ..core.entry import reported

    with reported("the run folder keeps the last checkpoint; run the same command again to resume"):
        run(parse_overrides(settings or []))


def main(args: list[str] | None = None) -> None:
    """`python -m dlmcode.training.train [key=value ...]` (see `--help`)."""
    from ..core.entry import one_command

    one_command(command)(args)


if __name__ == "__main__":
    main()
