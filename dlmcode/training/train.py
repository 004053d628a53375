"""Training the built-in dLLM: corpus, tokenizer, the loss, the schedule and the loop. What a step sees
(batches.py: the masking below), the settings (config.py) and checkpoints and export (checkpoints.py) are
modules of their own; this docstring is the recipe they follow.

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
import random
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import torch.nn.functional as F
import typer

from ..bench.heldout import corpus_files, file_list_hash, split, stdlib_root
from ..core.errors import UsageError
from ..models.builtin import (
    EXPAND_TOKEN,
    BuiltinConfig,
    BuiltinTokenizer,
    DlmcodeDiffusionLM,
    save,
    train_tokenizer,
)
from .batches import batch, batches, noise, step_batch
from .checkpoints import export, initialise, load_checkpoint, model_card, portable, save_checkpoint
from .config import TrainConfig, expand_id, parse_overrides
from .data import (
    Stream,
    encode_stream,
    line_end_table,
    stream_of,
)
from .progress import LogWindow, appended
from .rows import end_rows, expand_report, faster_expand_row, only_end_rows, start_side

# ---------------------------------------------------------------- loss, schedule


def loss_fn(model: DlmcodeDiffusionLM, inp, tgt, msk, bucket: int = 256, frozen_body: bool = False):
    """Mean CE over each sequence's masked tokens, averaged over sequences. The head runs only
    on masked rows, padded to a multiple of `bucket` so matmul shapes come from a small set
    (the trial saw RSS grow 1.5 -> 5.2 GB with free shapes). With `frozen_body` the layers run
    without a graph: only the tied head's rows get a gradient (end_rows_only), or only the side branch
    (side_layers)."""
    if frozen_body and model.side is not None:  # only the side branch learns: the trunk runs without a graph
        with torch.no_grad():
            x, rope, mask = model.trunk(inp)
        h = model.with_side(x, inp, rope, None, mask)  # (B, L, D + 2)
    else:
        with torch.no_grad() if frozen_body else contextlib.nullcontext():
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
    if model.side is not None and end_rows(cfg):  # the side branch alone: the trunk has no optimizer state
        params = list(model.side.named_parameters())
        decay = [p for n, p in params if p.dim() == 2 and not n.startswith("feat")]
        rest = [p for n, p in params if not (p.dim() == 2 and not n.startswith("feat"))]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith("embed")]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and not n.startswith("embed"))]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)


def model_config(cfg: TrainConfig) -> BuiltinConfig:
    return BuiltinConfig(
        vocab_size=cfg.vocab_size + int(cfg.expand),
        expand_id=expand_id(cfg) if cfg.expand else -1,
        side_layers=cfg.side_layers if cfg.expand else 0,
        dim=cfg.dim,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        ffn_mult=cfg.ffn_mult,
        context=cfg.seq,
    )


# ---------------------------------------------------------------- held-out loss


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
        if model.side is not None and cfg.init:  # a side-only checkpoint holds no trunk: it is init's
            initialise(model, Path(cfg.init), tokenizer)
        state = load_checkpoint(ckpt, model, opt, rng)
        yield {"event": "resumed", **state}
    elif cfg.init:
        initialise(model, Path(cfg.init), tokenizer)
        report = {}
        if model.side is not None:
            start_side(model, cfg)
            report = expand_report(model, heldout, line_end, cfg, lambda: autocast_for(cfg, device))
        yield {"event": "initialised", "from": cfg.init, **report}
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
                loss = loss_fn(model, inp, tgt, msk, frozen_body=end_rows(cfg))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            with only_end_rows(model, cfg):
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


def running(cfg: TrainConfig, state: dict, budget: float) -> bool:
    """Within the wall-time budget, max_steps and (with a step schedule) its last step."""
    stop_at = min(n for n in (cfg.max_steps, cfg.steps, math.inf) if n)
    return state["elapsed"] < budget and state["step"] < stop_at


def checkpoint(cfg, model, opt, state, rng, tokenizer, line_end, heldout, out, autocast, decaying) -> dict:
    held = evaluate(model, heldout, line_end, cfg, autocast)
    record = {"event": "checkpoint", "step": state["step"], "heldout_loss": held, "elapsed": state["elapsed"]}
    if model.side is not None:
        record.update(expand_report(model, heldout, line_end, cfg, autocast))
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


def run(cfg: TrainConfig) -> dict:
    """Drain `logged`, printing one line per record; return the last record."""
    record = {}
    for record in logged(cfg):
        print(json.dumps(record), flush=True)
    return record


# ---------------------------------------------------------------- python -m


# Each python -m training module starts alike (evaluate, train_assistant): a Typer command over key=value settings,
# run under entry.reported; they differ in the settings they parse and what they print.
def command(
    settings: Annotated[
        list[str] | None,
        typer.Argument(help="training settings key=value (see TrainConfig in dlmcode/training/config.py)"),
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


# what the CLI and the tests read from here, kept where they always were
__all__ = ["TrainConfig", "batches", "export", "model_card", "noise", "parse_overrides", "portable", "step_batch"]

if __name__ == "__main__":
    main()
