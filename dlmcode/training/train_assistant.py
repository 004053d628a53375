"""Training CoDiLA's assistant for a frozen dLLM: data, block masking, the loop, checkpoints, export.

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
from dataclasses import asdict, dataclass, fields, replace
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


@dataclass(frozen=True)
class AssistantTrainConfig:
    out: str = "runs/assistant"  # run folder: checkpoints, log.jsonl, best/ and last/ assistants
    model: str = ""  # the dLLM: folder or cached hub id ("" = the built-in model)
    assistant: str = ""  # "" = a new tiny assistant (dim, n_layers, n_heads below); else a HF causal LM to fine-tune
    device: str = "auto"  # auto, cpu, cuda, cuda:N
    dtype: str = "auto"  # the dLLM's dtype; the assistant keeps float32 weights (bf16 autocast with `bf16`)
    trust_remote_code: bool = False  # allow the dLLM's own Python code (Dream, LLaDA)
    seed: int = 0  # seeds init, data order and masking
    minutes: float = 30.0  # training wall-time budget (the lr schedule is indexed by it)
    max_steps: int = 0  # stop after this many steps as well (0: no step limit)
    stdlib: str = ""  # corpus root ("" = this interpreter's stdlib), the rules of `dlmcode train`
    max_files: int = 0  # use only the first N train files (0 = all; for tests)
    dim: int = 128  # tiny assistant: width
    n_layers: int = 2  # tiny assistant: causal blocks
    n_heads: int = 4  # tiny assistant: attention heads
    ffn_mult: int = 4  # tiny assistant: MLP expansion
    seq: int = 128  # window fed to the dLLM
    batch: int = 8  # windows (dLLM calls) per step
    blocks_per_window: int = 8  # blocks cut from each window (our choice: the dLLM call dominates the cost)
    block: int = 8  # longest block B; each block's length is uniform in 1..block
    p_suffix: float = 0.25  # share of windows masked entirely after the first block (continuation canvases)
    p_pads: float = -1.0  # share of windows with an over-allocated hole (content then pads); -1 = auto (see pad_share)
    lr: float = 2e-3  # peak AdamW learning rate (use ~1e-5 to fine-tune a pretrained HF model)
    min_lr_frac: float = 0.1  # final lr as a fraction of peak
    warmup_steps: int = 50  # linear warm-up steps
    decay_frac: float = 0.5  # last fraction of the wall-time budget spent decaying lr linearly
    weight_decay: float = 0.1  # on matrices only
    grad_clip: float = 1.0  # max global grad norm
    bf16: bool = False  # bf16 autocast for the assistant (on for a HF model on CUDA)
    threads: int = 2  # torch CPU threads
    ckpt_minutes: float = 5.0  # checkpoint (and held-out eval) every N minutes of training
    log_every: int = 10  # steps between progress records
    eval_windows: int = 32  # held-out windows in each evaluation
    resume: bool = True  # continue from out/ckpt.pt when it exists


# ---------------------------------------------------------------- data


def newline_table(tokenizer, size: int) -> np.ndarray:
    """(V,) bool: the token's text ends with a newline (any tokenizer: decodes each id once)."""
    return np.array([tokenizer.decode([i]).endswith("\n") for i in range(size)], dtype=bool)


def encode(dlm, texts: list[str], ends_line: np.ndarray) -> T.Stream:
    """[bos] file [eos] [bos] file ... with the dLLM's tokenizer (bos/eos where it has them)."""
    head = [dlm.bos_id] if dlm.bos_id is not None else []
    tail = [dlm.eos_id] if dlm.eos_id is not None else []
    ids = np.concatenate([np.array(head + dlm.tokenizer.encode(t) + tail, dtype=np.int64) for t in texts])
    before_start = ends_line[ids] | np.isin(ids, head)  # a line starts after a newline or a bos
    starts = np.flatnonzero(before_start) + 1
    return T.Stream(ids, starts[starts < len(ids)])


def window(stream: T.Stream, seq: int, bos: int | None, rng: np.random.Generator) -> np.ndarray:
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
    dlm, stream: T.Stream, vocab: int, cfg: AssistantTrainConfig, rng: np.random.Generator, device
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
        state = T.load_checkpoint(out / "ckpt.pt", model, opt, rng)
        yield {"event": "resumed", **state}
    held = examples(
        dlm, heldout, model.vocab, replace(cfg, batch=cfg.eval_windows), np.random.default_rng(1234), dlm.device
    )
    yield from loop(cfg, dlm, model, opt, state, rng, stream, held, out)


def loop(cfg, dlm, model, opt, state, rng, stream, held, out: Path) -> Iterator[dict]:
    budget = cfg.minutes * 60
    last_ckpt, window = state["elapsed"], T.LogWindow()
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
    T.save_checkpoint(out / "ckpt.pt", model, opt, state, rng)
    with open(out / "log.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    return record


def logged(cfg: AssistantTrainConfig) -> Iterator[dict]:
    """`train`, appending every record to out/progress.jsonl as it goes."""
    return T.appended(train(cfg), Path(cfg.out) / "progress.jsonl")


# ---------------------------------------------------------------- settings, export


def check_config(cfg: AssistantTrainConfig) -> None:
    if cfg.block < 1 or cfg.blocks_per_window < 1 or cfg.batch < 1:
        raise UsageError("block, blocks_per_window and batch must be >= 1")
    if cfg.seq < cfg.block + 2:
        raise UsageError(f"seq={cfg.seq} must be at least block + 2 = {cfg.block + 2}")


def parse_overrides(args: list[str], **given: str | None) -> AssistantTrainConfig:
    """key=value pairs (and the CLI's own options in `given`, None = unset) -> config, rejecting unknown keys."""
    return T.overrides(AssistantTrainConfig(), args, {k: v for k, v in given.items() if v is not None})


def command(cfg: AssistantTrainConfig) -> str:
    """The `dlmcode train-assistant` command line that reproduces this config."""
    default = AssistantTrainConfig()
    opts = [
        f"-o {f.name}={getattr(cfg, f.name)}"
        for f in fields(cfg)
        if getattr(cfg, f.name) != getattr(default, f.name) and f.name not in ("model", "assistant", "device")
    ]
    named = [
        f"--{k} {getattr(cfg, k)}" for k in ("model", "assistant", "device") if getattr(cfg, k) != getattr(default, k)
    ]
    return " ".join(["dlmcode train-assistant", *named, *opts])


def export(run: str | Path, dest: str | Path) -> Path:
    """Copy run/best to `dest` (float32) with a MODEL_CARD.md drawn from the run's records."""
    run, dest = Path(run), Path(dest)
    MA.save(MA.load(run / "best"), dest)
    (dest / "MODEL_CARD.md").write_text(card(run, dest))
    return dest


def card(run: Path, dest: Path) -> str:
    info = json.loads((run / "config.json").read_text())
    checks = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    best = min(checks, key=lambda r: r["heldout_loss"])
    cfg, data = info["train"], info["data"]
    model = json.loads((dest / "config.json").read_text())
    params = sum(t.numel() for t in MA.load(dest).state_dict().values())
    return CARD.format(
        command=info["command"],
        dllm=data["dllm"],
        vocab=model.get("vocab_size"),
        dim=model.get("dim"),
        n_layers=model.get("n_layers"),
        n_heads=model.get("n_heads"),
        params=params,
        block=cfg["block"],
        files_train=data["files_train"],
        tokens_train=data["tokens_train"],
        files_heldout=data["files_heldout"],
        python=data["python"],
        steps=checks[-1]["step"],
        minutes=checks[-1]["elapsed"] / 60,
        best_step=best["step"],
        loss=best["heldout_loss"],
        dllm_loss=best["heldout_dllm_loss"],
        ppl=math.exp(best["heldout_loss"]),
        dllm_ppl=math.exp(best["heldout_dllm_loss"]),
        seq=cfg["seq"],
        batch=cfg["batch"],
        bpw=cfg["blocks_per_window"],
        p_suffix=cfg["p_suffix"],
        lr=cfg["lr"],
        eval_windows=cfg["eval_windows"],
    )


CARD = """# dlmcode assistant (CoDiLA) for `{dllm}`

The small causal transformer the `codila` decoder uses with this dLLM (arXiv 2603.20216);
the one in dlmcode/weights/assistant is used by default with the built-in model. It reads
the dLLM's marginals over a block of holes as soft embeddings between two boundary tokens
and decodes the block left to right.

- Architecture: {n_layers} causal blocks, width {dim}, {n_heads} heads, RoPE, tied head;
  {params:,} parameters. Vocabulary: the dLLM's {vocab} ids plus 2 boundary ids.
- Trained against: `{dllm}` (frozen), on blocks of 1..{block} holes.
- Data: this Python's ({python}) standard library, the rules of `dlmcode train`:
  {files_train} train files ({tokens_train:,} tokens), {files_heldout} held-out files.
  Windows of {seq} tokens, {batch} per step, {bpw} blocks per window; other holes i.i.d. at a
  ratio r ~ U(0, 1), or everything after the first block ({p_suffix:.0%} of windows); some
  windows hold an over-allocated hole (content then [PAD]s) as `⟦fill⟧` markers make.
- Training: AdamW, peak lr {lr}, {steps} steps in {minutes:.1f} minutes of training time.
- Held-out ({eval_windows} fixed windows, step {best_step}): assistant loss {loss:.4f} nats per
  block token (perplexity {ppl:.1f}), against {dllm_loss:.4f} (perplexity {dllm_ppl:.1f}) for
  the dLLM's own independent marginals on the same blocks.

Reproduce (`--export DIR` copies `out/best` to DIR with this card):

```
{command}
```
"""


def module_command(
    settings: Annotated[
        list[str] | None,
        typer.Argument(help="training settings key=value (see AssistantTrainConfig in this module)"),
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


if __name__ == "__main__":
    main()
