"""A trained assistant exported: run/best copied to a folder with a MODEL_CARD.md drawn from the run's records."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..models import assistant_lm as MA


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
