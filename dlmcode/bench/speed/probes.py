"""Rows on demand and sampling (issue 30), two probes beside the grid: the whole decode here against
an earlier checkout on the same random weights, and temperature 1 against 0 on a wide vocabulary."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ... import decoders
from ...core.canvas import last
from ...core.errors import DlmcodeError, UsageError
from ...models.base import Dlm
from .config import BASELINE
from .timed import canvas, warm_up

# The shape: random LLaDA weights, 8 layers of d512, a 32k vocabulary (the mask id inside it).
PROBE_SHAPE: dict[str, Any] = {
    "d_model": 512,
    "n_heads": 8,
    "n_kv_heads": 8,
    "n_layers": 8,
    "mlp_hidden_size": 1536,
    "embedding_size": 32768,
    "vocab_size": 32768,
    "mask_token_id": 32000,
}
WIDE_VOCAB = {"embedding_size": 126464, "vocab_size": 126464, "mask_token_id": 126336}  # LLaDA-8B's vocabulary
WHOLE_DECODE_TARGET = 0.7  # this tree's whole decode, as a share of the other tree's
SAMPLING_TARGET = 1.05  # time per call at temperature 1, as a multiple of temperature 0's

# Run in a subprocess with one tree's dlmcode first on the path, so that two checkouts (this one and
# an earlier commit) decode the same canvas on the same random weights side by side. It uses only
# what both have: standins.published, decoders.build, Canvas, last.
WHOLE_DECODE = """
import json, sys, time
import torch
torch.set_num_threads(1)
import dlmcode
from dlmcode import decoders
from dlmcode.bench import standins
from dlmcode.core.canvas import Canvas, last
cfg = json.loads(sys.argv[1])
dlm = standins.published("llada-8b", torch.device("cpu"), torch.float32, cfg["overrides"], seed=0)
prompt = torch.randint(0, 4000, (cfg["prompt"],), generator=torch.Generator().manual_seed(1))
canvas = Canvas(torch.cat([prompt, torch.full((cfg["gen"],), dlm.mask_id)]), dlm.mask_id)
decoder = decoders.build("low-confidence", {"block": cfg["block"]})
for _ in range(2):
    dlm.predict(canvas.tokens)  # warm-up: allocation and kernel choice
times = []
for _ in range(cfg["repeats"]):
    began = time.perf_counter()
    final = last(decoder(canvas, dlm.predict, torch.Generator().manual_seed(0)))
    times.append(time.perf_counter() - began)
out = {"seconds": times, "calls": final.calls, "ids": final.canvas.tokens.tolist(), "package": dlmcode.__file__}
print(json.dumps(out))
"""


@dataclass(frozen=True)
class ProbeConfig:
    prompt: int = 128
    gen: int = 64  # holes, one committed per call: 64 calls
    block: int = 32
    repeats: int = 1  # decodes per subprocess (or per temperature), the fastest counts
    rounds: int = 2  # the two sides alternate this many times, under the same noise


def whole_decode(tree: Path, cfg: ProbeConfig) -> dict[str, Any]:
    """One subprocess decoding the issue's canvas with `tree`'s dlmcode: seconds, calls, ids."""
    import json
    import os
    import subprocess
    import sys

    args = {"overrides": PROBE_SHAPE, "prompt": cfg.prompt, "gen": cfg.gen, "block": cfg.block, "repeats": cfg.repeats}
    env = os.environ | {"PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", WHOLE_DECODE, json.dumps(args)], cwd=tree, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DlmcodeError(f"speed --against: the decode in {tree} failed ({tail[:300]})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def against(other: Path, cfg: ProbeConfig = ProbeConfig()) -> dict[str, Any]:
    """The whole decode here against the dlmcode checkout `other` (an earlier commit's worktree), alternating."""
    if not (other / "dlmcode" / "__init__.py").is_file():
        raise UsageError(f"--against {other}: not a dlmcode checkout (no dlmcode/__init__.py there)")
    here = Path(__file__).resolve().parents[3]  # this checkout: dlmcode/bench/speed/probes.py
    runs: dict[str, list[dict[str, Any]]] = {"here": [], "other": []}
    for _ in range(cfg.rounds):
        runs["other"].append(whole_decode(other.resolve(), cfg))
        runs["here"].append(whole_decode(here, cfg))
    best = {side: min(s for r in found for s in r["seconds"]) for side, found in runs.items()}
    ratio = best["here"] / best["other"]
    return {
        "shape": "random LLaDA, 8 layers, d512, 32k vocabulary; low-confidence, no cache, one token a call",
        "prompt": cfg.prompt,
        "holes": cfg.gen,
        "block": cfg.block,
        "calls": runs["here"][0]["calls"],
        "other": str(other),
        "seconds_here": round(best["here"], 3),
        "seconds_other": round(best["other"], 3),
        "ratio": round(ratio, 3),
        "identical_ids": all(r["ids"] == runs["other"][0]["ids"] for found in runs.values() for r in found),
        "ok": ratio <= WHOLE_DECODE_TARGET,
    }


def sampling_cost(dlm: Dlm, cfg: ProbeConfig = ProbeConfig()) -> dict[str, Any]:
    """Time per call (model and decoder) of low-confidence at temperature 1 against 0 on `dlm`, alternating."""
    start = canvas(dlm, cfg.prompt, cfg.gen)
    per_call: dict[float, list[float]] = {0.0: [], 1.0: []}
    warm_up(dlm, start)
    for _ in range(cfg.rounds):
        for temperature in per_call:
            decoder = decoders.build(BASELINE, {"block": cfg.block, "temperature": temperature})
            for _ in range(cfg.repeats):
                began = time.perf_counter()
                final = last(decoder(start, dlm.predict, torch.Generator().manual_seed(0)))
                per_call[temperature].append((time.perf_counter() - began) / final.calls)
    best = {t: min(v) for t, v in per_call.items()}
    ratio = best[1.0] / best[0.0]
    return {
        "vocab": int(dlm.predict(start.tokens[:2], torch.tensor([0])).shape[-1]),
        "ms_per_call_t0": round(best[0.0] * 1e3, 3),
        "ms_per_call_t1": round(best[1.0] * 1e3, 3),
        "ratio": round(ratio, 4),
        "ok": ratio <= SAMPLING_TARGET,
    }


def wide_vocab_model(device: torch.device) -> Dlm:
    """The probe's LLaDA shape with LLaDA-8B's 126k vocabulary (random weights, float32)."""
    from .. import standins

    return standins.published("llada-8b", device, torch.float32, PROBE_SHAPE | WIDE_VOCAB)


def probe_line(what: str, probe: dict[str, Any]) -> str:
    """One stderr line for a probe: its ratio, and whether it meets the target."""
    extra = "" if "identical_ids" not in probe else f", ids {'identical' if probe['identical_ids'] else 'DIFFER'}"
    return f"{what}: {probe['ratio']:.3f}x ({'meets' if probe['ok'] else 'misses'} the target{extra})"
