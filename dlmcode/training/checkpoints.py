"""A run's checkpoints (written atomically, resumed exactly, made portable in bf16), a model started from
another's weights, and the exported model folder with its model card."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from ..core.errors import UsageError
from ..models.builtin import (
    BuiltinTokenizer,
    DlmcodeDiffusionLM,
    load_model,
    save,
)
from .config import TrainConfig


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
    missing, unexpected = model.load_state_dict({k: v.to(device) for k, v in weights.items()}, strict=False)
    if unexpected or any(not k.startswith("side.") for k in missing):  # a new side branch starts on its own
        raise UsageError(f"init={folder}: its weights do not fit this run's model ({(unexpected + missing)[0]})")


def portable(path: str | Path, dest: str | Path, side_only: bool = False) -> Path:
    """A copy of checkpoint `path` with every float tensor (weights, AdamW moments) in bf16: half the size,
    small enough for a repository, and resumable anywhere by placing it as a run folder's ckpt.pt
    (load_checkpoint casts the state back to the parameters' fp32). The step, data RNG and schedule
    resume exactly; the weights and moments continue from their bf16 rounding (the shipped precision).
    With `side_only` (a side_layers run, whose trunk is init's and never moves) only the side branch's
    weights are kept: resuming starts the trunk from init= again."""

    def half(value):
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() > 0:
            return value.to(torch.bfloat16)
        if isinstance(value, dict):
            return {k: half(v) for k, v in value.items()}
        return value

    ck = torch.load(path, map_location="cpu", weights_only=False)
    ck["model"], ck["optimizer"] = half(ck["model"]), half(ck["optimizer"])
    if side_only:
        ck["model"] = {k: v for k, v in ck["model"].items() if k.startswith("side.")}
    dest = Path(dest)
    tmp = dest.with_suffix(".tmp")
    torch.save(ck, tmp)
    os.replace(tmp, dest)
    return dest


def load_checkpoint(path: Path, model, opt, rng: np.random.Generator) -> dict:
    ck = torch.load(path, map_location="cpu", weights_only=False)
    side = getattr(model, "side", None) is not None  # a side-only checkpoint: the trunk is init's, loaded before
    missing, unexpected = model.load_state_dict(ck["model"], strict=not side)
    if unexpected or any(k.startswith("side.") for k in missing):
        raise UsageError(f"{path}: its weights do not fit this run's model ({(unexpected + missing)[0]})")
    opt.load_state_dict(ck["optimizer"])
    rng.bit_generator.state = ck["np_rng"]
    torch.set_rng_state(ck["torch_rng"])
    return ck["state"]


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
