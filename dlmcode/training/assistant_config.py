"""The assistant's training settings (AssistantTrainConfig), checked, set by key=value as the built-in
model's are, and written back as the command line that reproduces a run."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..core.errors import UsageError
from .config import overrides


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


def check_config(cfg: AssistantTrainConfig) -> None:
    if cfg.block < 1 or cfg.blocks_per_window < 1 or cfg.batch < 1:
        raise UsageError("block, blocks_per_window and batch must be >= 1")
    if cfg.seq < cfg.block + 2:
        raise UsageError(f"seq={cfg.seq} must be at least block + 2 = {cfg.block + 2}")


def parse_overrides(args: list[str], **given: str | None) -> AssistantTrainConfig:
    """key=value pairs (and the CLI's own options in `given`, None = unset) -> config, rejecting unknown keys."""
    return overrides(AssistantTrainConfig(), args, {k: v for k, v in given.items() if v is not None})


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
