"""Training CoDiLA's assistant for a frozen dLLM: the loop and its checkpoints (the examples: assistant_data).

Data: the same corpus as `dlmcode train` (this Python's stdlib, same held-out split), encoded
with the dLLM's tokenizer into one stream; windows of `seq` tokens start at a line start, with
the dLLM's beginning-of-text first when it has one (as spans.py builds every canvas).

Noise (arXiv 2603.20216 sec. 3.3, block-level masking): each window gets `blocks_per_window`
blocks of B contiguous holes, B uniform in 1..`block` (so one assistant serves every block size
up to it; the paper trains one per B), plus other holes: with probability `p_suffix` everything
after the first block (a continuation canvas), else each position with a ratio r ~ U(0, 1).
For the built-in model some windows also get an over-allocated hole, content then [PAD]s
(`p_pads`), as its `⟦fill⟧` holes are, with the first block inside it.
The frozen dLLM gives the blocks' marginals in one call per window (no grad); the assistant
is trained by teacher-forced cross-entropy on the blocks' tokens, uniform weight per token
(the paper's NELBO weight (a_{t-1} - a_t) / (1 - a_t) is optional for toys, docs/research/seeds.md 5.4).
Several blocks per window (our choice) amortise the dLLM call, the cost that dominates.

Held-out: fixed windows of the held-out files (seed 1234); each checkpoint reports the
assistant's loss per block token beside the dLLM's own factorised loss -log pi(token) on
the same blocks (the gap is the within-block dependence the assistant captured, Thm 3.2).
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import typer

from ..bench import heldout as held_out
from ..core import assistant as A
from ..core.errors import UsageError
from ..models import assistant_lm as MA
from . import train as T
from .assistant_card import export
from .assistant_config import AssistantTrainConfig, check_config, command, parse_overrides
from .assistant_data import encode, examples, factorised, loss_on, mask, newline_table, pad_hole
from .checkpoints import load_checkpoint, save_checkpoint
from .progress import LogWindow, appended

# ---------------------------------------------------------------- models


def new_assistant(cfg: AssistantTrainConfig, dlm, table: list[str], device: torch.device):
    """A fresh tiny assistant, or the HF causal LM `cfg.assistant` after checking it shares the tokenizer."""
    if not cfg.assistant:
        acfg = MA.AssistantConfig(
            vocab_size=len(table),
            dim=cfg.dim,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            ffn_mult=cfg.ffn_mult,
            vocab_sha256=A.fingerprint(table, len(table)),
            dllm=dlm.name,
        )
        return MA.TinyAssistant(acfg).to(device)
    from transformers import AutoModelForCausalLM

    from ..models import hf, resolve

    path = resolve(cfg.assistant)
    tokenizer = hf.load_tokenizer(path, False)
    shared = A.shared_ids(table, A.token_table(tokenizer))
    model = AutoModelForCausalLM.from_pretrained(path, **hf.pretrained_kwargs(torch.float32, False)).to(device)
    open_id, close_id = MA.boundary_ids(model, tokenizer)
    return MA.HfAssistant(model, shared, open_id, close_id, A.fingerprint(table, shared), dlm.name)


def prepare(cfg: AssistantTrainConfig):
    """The frozen dLLM, its token table, the train/held-out streams and the data record."""
    from ..models import load

    dlm = load(cfg.model or None, device=cfg.device, dtype=cfg.dtype, trust_remote_code=cfg.trust_remote_code)
    table = A.token_table(dlm.tokenizer)
    train_files, heldout_files = held_out.split(held_out.corpus_files(held_out.stdlib_root(cfg.stdlib)))
    names = sorted(train_files)[: cfg.max_files or None]
    held = sorted(heldout_files)[: max(2, cfg.max_files // 10) if cfg.max_files else None]
    if not names or not held:
        raise UsageError(
            f"corpus {held_out.stdlib_root(cfg.stdlib)} needs train and held-out files (held out: sha1(path) % 20 == 0)"
        )
    ends_line = newline_table(dlm.tokenizer, len(table))
    train = encode(dlm, [train_files[k] for k in names], ends_line)
    heldout = encode(dlm, [heldout_files[k] for k in held], ends_line)
    meta = {
        "dllm": dlm.name,
        "files_train": len(names),
        "files_heldout": len(held),
        "tokens_train": int(len(train.ids)),
        "tokens_heldout": int(len(heldout.ids)),
        "python": sys.version.split()[0],
    }
    return dlm, table, train, heldout, meta


def make_optimizer(model, cfg: AssistantTrainConfig) -> torch.optim.AdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() == 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() != 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))


# ---------------------------------------------------------------- the loop


def train(cfg: AssistantTrainConfig) -> Iterator[dict]:
    """Train (or resume) and yield progress records: step, loss, tok_s, elapsed, budget, lr; checkpoints."""
    check_config(cfg)
    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    dlm, table, stream, heldout, meta = prepare(cfg)
    (out / "config.json").write_text(
        json.dumps({"train": asdict(cfg), "data": meta, "command": command(cfg)}, indent=2) + "\n"
    )
    yield {"event": "data", **meta}
    model = new_assistant(cfg, dlm, table, dlm.device)
    opt = make_optimizer(model, cfg)
    state = {"step": 0, "elapsed": 0.0, "tokens": 0, "best_eval": math.inf}
    if cfg.resume and (out / "ckpt.pt").exists():
        state = load_checkpoint(out / "ckpt.pt", model, opt, rng)
        yield {"event": "resumed", **state}
    held = examples(
        dlm, heldout, model.vocab, replace(cfg, batch=cfg.eval_windows), np.random.default_rng(1234), dlm.device
    )
    yield from loop(cfg, dlm, model, opt, state, rng, stream, held, out)


def loop(cfg, dlm, model, opt, state, rng, stream, held, out: Path) -> Iterator[dict]:
    budget = cfg.minutes * 60
    last_ckpt, window = state["elapsed"], LogWindow()
    model.train()
    while state["elapsed"] < budget and not (cfg.max_steps and state["step"] >= cfg.max_steps):
        t0 = time.perf_counter()
        lr = T.lr_at(cfg, state["step"], state["elapsed"])  # type: ignore[arg-type]  # same fields as TrainConfig
        for g in opt.param_groups:
            g["lr"] = lr
        blocks = examples(dlm, stream, model.vocab, cfg, rng, dlm.device)
        with autocast(cfg, dlm.device):
            total, n = loss_on(model, blocks)
        opt.zero_grad(set_to_none=True)
        (total / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        state["step"] += 1
        state["elapsed"] += time.perf_counter() - t0
        state["tokens"] += cfg.batch * cfg.seq
        window.add(cfg.batch * cfg.seq, total.item() / n)
        if state["step"] % cfg.log_every == 0:
            yield window.line(state, budget=budget, lr=lr, step_limit=cfg.max_steps)
        if state["elapsed"] - last_ckpt >= cfg.ckpt_minutes * 60:
            yield checkpoint(cfg, model, opt, state, rng, held, out, dlm.device)
            last_ckpt = state["elapsed"]
            window.restart()  # the checkpoint's time is not training throughput
    yield checkpoint(cfg, model, opt, state, rng, held, out, dlm.device)
    yield {"event": "done", **state}


def autocast(cfg: AssistantTrainConfig, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16)


@torch.no_grad()
def evaluate(cfg, model, held, device) -> float:
    model.eval()
    with autocast(cfg, device):
        total, n = loss_on(model, held)
    model.train()
    return float(total) / n


def checkpoint(cfg, model, opt, state, rng, held, out: Path, device) -> dict:
    loss = evaluate(cfg, model, held, device)
    record = {
        "event": "checkpoint",
        "step": state["step"],
        "heldout_loss": loss,
        "heldout_dllm_loss": factorised(held),
        "elapsed": state["elapsed"],
    }
    if loss < state["best_eval"]:
        state["best_eval"] = loss
        MA.save(model, out / "best")
        record["best"] = True
    MA.save(model, out / "last")
    save_checkpoint(out / "ckpt.pt", model, opt, state, rng)
    with open(out / "log.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    return record


def logged(cfg: AssistantTrainConfig) -> Iterator[dict]:
    """`train`, appending every record to out/progress.jsonl as it goes."""
    return appended(train(cfg), Path(cfg.out) / "progress.jsonl")


# ---------------------------------------------------------------- python -m


def module_command(
    settings: Annotated[
        list[str] | None,
        typer.Argument(help="training settings key=value (see AssistantTrainConfig in training/assistant_config.py)"),
    ] = None,
) -> None:
    """Train the CoDiLA assistant; one JSON progress record per line on stdout."""
    from ..core.entry import reported

    with reported("the run folder keeps the last checkpoint"):
        for rec in logged(parse_overrides(settings or [])):
            print(json.dumps(rec), flush=True)


def main(args: list[str] | None = None) -> None:
    """`python -m dlmcode.training.train_assistant [key=value ...]` (see `--help`)."""
    from ..core.entry import one_command

    one_command(module_command)(args)


# what the CLI and the tests read from here, kept where they always were
__all__ = ["AssistantTrainConfig", "export", "logged", "mask", "pad_hole", "parse_overrides"]

if __name__ == "__main__":
    main()
