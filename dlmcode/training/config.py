"""The built-in model's training settings (TrainConfig: one field a setting, its default and why), and
key=value overrides parsed as the decoders' settings are (the assistant's training reads them the same way)."""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields, replace
from typing import Any

from ..core import settings
from ..core.errors import UsageError


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
    end_rows_only: bool = False  # with expand: train only the tied [EXPAND] and [PAD] rows; the rest stays init's
    side_layers: int = 0  # with expand: train only a side branch of this many blocks giving the [EXPAND] and [PAD]
    # logits (models/side.py) on top of init, frozen; every other logit stays init's
    side_rows: str = ""  # with side_layers: a checkpoint whose tied [EXPAND] and [PAD] rows start the branch
    init: str = (
        ""  # start from this model folder's weights (same width, depth, heads, vocab and tokenizer; any context)
    )


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


def expand_id(cfg: TrainConfig) -> int:
    """[EXPAND]'s id: the first one after the data's vocabulary."""
    return cfg.vocab_size
