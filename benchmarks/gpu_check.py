"""The GPU check (issue 30), ready for the next loan of a GPU: one run, under five minutes on one GPU.

    python -m benchmarks.gpu_check [--out gpu.json]              # on the GPU: LLaDA-8B and Dream-7B shapes, bf16
    python -m benchmarks.gpu_check --tiny --device cpu --dtype fp32   # the same steps at a toy size (its test)

For random models of LLaDA-8B's and Dream-7B's published shapes (bench/standins.py: the times are
real, the tokens mean nothing) it prints one JSON object (stdout) with, per shape:

- `calls`: median ms per model call of one-token-per-call low-confidence (block 32) without a
  cache and with the prefix and dual caches, and each cache's speedup;
- `compiled`: the dual-cache call with the model's layers under torch.compile (on CUDA:
  mode "reduce-overhead", CUDA graphs where torch can take them), its ms per call, and whether
  it is exact: the compiled decode commits the same tokens and its logits' largest difference
  from the eager ones (a compile that fails is reported, not fatal);
- `sampler`: ms of one proposal over the block's rows (sampling.propose, T = 0 and T = 1) and
  its share of an uncached call; and of DiffusionGemma's sampler's own work in a call over those
  rows (`renoise`: entropies, acceptance, the accepted rows' sample), at this shape's vocabulary;
- `guard`: the guard's ms per call in a guarded decode and its share of a call;
- `renoise`: a short decode with DiffusionGemma's sampler on the device, unguarded and guarded (its calls
  and ms per call): its rows and noise stay on the device, code only a device runs;
- `serve`: requests and model calls per second through the server's queue and engine
  (serve/queue.py) at 1, 4 and 16 concurrent requests, the queue batching as many;
- `decoders`: one short decode with every registered decoder on the device, its calls and ms per
  call or its error (last: the deadline skips it first);
- `peak_memory_mb`: the most GPU memory allocated while the shape ran (null on a CPU).

Progress goes to stderr. Steps that would start past --budget seconds are skipped and named in
`skipped`, and a step that fails is reported as its error, so a loan always ends with figures.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import torch
import typer

from dlmcode import decoders
from dlmcode.bench import speed, standins
from dlmcode.core import sampling
from dlmcode.core.canvas import last
from dlmcode.core.entry import one_command
from dlmcode.core.errors import ModelError
from dlmcode.models import cache as kvcache
from dlmcode.models.base import Dlm

SHAPES = ("llada-8b", "dream-7b")
TINY = {  # --tiny: the published configs cut to toy size (the mask id must fit the vocabulary)
    "llada-8b": {
        "d_model": 64,
        "n_heads": 4,
        "n_kv_heads": 4,
        "n_layers": 2,
        "mlp_hidden_size": 96,
        "embedding_size": 4200,
        "vocab_size": 4200,
        "mask_token_id": 4100,
        "eos_token_id": 4101,
    },
    "dream-7b": {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "intermediate_size": 96,
        "vocab_size": 4200,
        "mask_token_id": 4100,
        "eos_token_id": 4101,
    },
}
LEVELS = (1, 4, 16)  # concurrent requests through the server's queue
PREFIX = "import os\n\n\ndef walk(root):\n    for path, dirs, files in os.walk(root):\n        for name in files:\n"
SUFFIX = "\n    return None\n"


DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass(frozen=True)
class Settings:
    """The command's options (see `command`)."""

    device: str
    dtype: str = "bf16"
    tiny: bool = False
    shapes: tuple[str, ...] = SHAPES
    prompt: int = 512
    gen: int = 64
    block: int = 32
    repeats: int = 3
    backend: str = "inductor"
    no_compile: bool = False
    budget: float = 270.0


def note(text: str) -> None:
    print(f"gpu_check: {text}", file=sys.stderr, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decoder(block: int, guard: bool = False) -> decoders.Decoder:
    return decoders.build("low-confidence", {"block": block, "guard": guard})


def calls(dlm: Dlm, args: Settings) -> dict[str, Any]:
    """Median ms per call without a cache and with each cache, and each cache's speedup."""
    start = speed.canvas(dlm, args.prompt, args.gen)
    dec = decoder(args.block)
    speed.warm_decoder(dlm, dec, ["none", "prefix", "dual"])
    out: dict[str, Any] = {}
    for mode in ("none", "prefix", "dual"):
        row = speed.measure(dlm, "low-confidence", dec, start, args.prompt, mode, 0)
        out[mode] = {"ms_per_call": round(row.call_s * 1e3, 3), "calls": row.calls, "full_calls": row.full_calls}
    for mode in ("prefix", "dual"):
        out[mode]["speedup"] = round(out["none"]["ms_per_call"] / out[mode]["ms_per_call"], 3)
    return out


def compiled(dlm: Dlm, args: Settings) -> dict[str, Any]:
    """The dual-cache decode with the model's layers compiled for its fixed-shape cached calls, against eager."""
    start = speed.canvas(dlm, args.prompt, args.block)  # one block: its start is compiled in, so one compile
    settings = kvcache.CacheSettings("dual", args.block, 0)
    eager, fast = dlm.cached(settings), dlm.cached(settings)
    mode = "reduce-overhead" if dlm.device.type == "cuda" and args.backend == "inductor" else None
    try:
        hidden = torch.compile(fast.run, backend=args.backend, mode=mode, dynamic=False)
    except Exception as err:  # an unsupported backend or platform: reported, the check goes on
        return {"error": f"{type(err).__name__}: {err}"[:300]}
    full, seen = fast.run, []

    def run(ids: torch.Tensor, begin: int = 0, kv: Any = None) -> torch.Tensor:
        return full(ids, begin, kv) if kv is None or kv.span is None else hidden(ids, begin, kv)

    fast.run = run

    def both(tokens: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        want, got = eager(tokens, rows), fast(tokens, rows)
        seen.append(float((want - got).abs().max()))
        return want

    both.takes_rows = True  # type: ignore[attr-defined]
    try:
        plain = last(decoder(args.block)(start, eager, torch.Generator().manual_seed(0)))
        last(decoder(args.block)(start, fast, torch.Generator().manual_seed(0)))  # compiles, per block start
        twin = last(decoder(args.block)(start, both, torch.Generator().manual_seed(0)))
        took = last(decoder(args.block)(start, fast, torch.Generator().manual_seed(0)))
        timed = speed.Timed(fast, dlm.device)
        last(decoder(args.block)(start, timed, torch.Generator().manual_seed(0)))
    except Exception as err:  # a graph torch cannot compile: reported, the check goes on
        return {"error": f"{type(err).__name__}: {err}"[:300], "backend": args.backend, "mode": mode}
    cached_times = timed.times[1:] or timed.times  # the cached calls, after the block's full one
    return {
        "backend": args.backend,
        "mode": mode,
        "ms_per_call": round(statistics.median(cached_times) * 1e3, 3),
        "same_tokens": bool(torch.equal(took.canvas.tokens, plain.canvas.tokens))
        and bool(torch.equal(twin.canvas.tokens, plain.canvas.tokens)),
        "max_logit_difference": max(seen) if seen else None,
    }


def sampler(dlm: Dlm, args: Settings, call_ms: float) -> dict[str, Any]:
    """ms of one proposal over the block's rows at T = 0 and 1, and its share of an uncached call."""
    start = speed.canvas(dlm, args.prompt, args.gen)
    rows = start.holes.nonzero().squeeze(-1)[: args.block]
    logits = dlm.predict(start.tokens, rows)  # (block, V)
    out: dict[str, Any] = {"rows": len(rows), "vocab": logits.shape[-1]}
    for temperature in (0.0, 1.0):
        rng, times = torch.Generator().manual_seed(0), []
        for _ in range(args.repeats * 5):
            sync(dlm.device)
            began = time.perf_counter()
            sampling.propose(logits, temperature, rng, dlm.mask_id)
            sync(dlm.device)
            times.append(time.perf_counter() - began)
        ms = statistics.median(times) * 1e3
        out[f"t{temperature:g}"] = {"ms": round(ms, 4), "share_of_call": round(ms / call_ms, 4)}
    ms = statistics.median(renoise_call(logits, dlm, args.repeats * 5)) * 1e3
    out["renoise"] = {"ms": round(ms, 4), "share_of_call": round(ms / call_ms, 4)}
    return out


def renoise_call(logits: torch.Tensor, dlm: Dlm, repeats: int) -> list[float]:
    """Seconds of DiffusionGemma's sampler's own work in one call over these rows, where they are (entropies,
    argmax, acceptance, a sample of the accepted rows at T = 1), timed `repeats` times."""
    from dlmcode.decoders.renoise import Renoise, accept, categorical_entropy

    decoder, rng, times = Renoise(), sampling.generator_on(logits.device, torch.Generator().manual_seed(0)), []
    for _ in range(repeats):
        sync(dlm.device)
        began = time.perf_counter()
        rows = sampling.without(logits, dlm.mask_id)  # (n, V) a copy, as a call's fresh logits are
        take = accept(categorical_entropy(rows), decoder.bound)
        rows.argmax(-1)
        decoder.sample(rows, take, rng)
        sync(dlm.device)
        times.append(time.perf_counter() - began)
    return times


def guard(dlm: Dlm, args: Settings, call_ms: float) -> dict[str, Any]:
    """The guard's ms per call in a guarded low-confidence decode (a Python prompt), and its share of a call."""
    start = speed.canvas(dlm, args.prompt, args.gen)
    row = speed.measure(dlm, "low-confidence", decoder(args.block, guard=True), start, args.prompt, "none", 0)
    if row.guard_s is None:
        return {"error": "the guard gave up on this canvas (no filling parses)"}
    ms = row.guard_s * 1e3
    return {"ms_per_call": round(ms, 3), "share_of_call": round(ms / call_ms, 4)}


def renoise(dlm: Dlm, args: Settings) -> dict[str, Any]:
    """A short decode with DiffusionGemma's sampler where the model is (4 calls a block, temperature 1), unguarded and
    guarded: its calls and ms per call. Its rows stay on the device and its noise is drawn there, code that only a
    device runs (decoders/renoise.py)."""
    start = speed.canvas(dlm, args.prompt, args.gen)
    out: dict[str, Any] = {}
    for guarded in (False, True):
        dec = decoders.build("renoise", {"block": args.block, "steps": 4, "guard": guarded})
        row = speed.measure(dlm, "renoise", dec, start, args.prompt, "none", 0)
        out["guarded" if guarded else "plain"] = {"ms_per_call": round(row.call_s * 1e3, 3), "calls": row.calls}
    return out


def every_decoder(dlm: Dlm, args: Settings) -> dict[str, Any]:
    """One short decode with each registered decoder on the device (block-sized settings, as `dlmcode speed` gives
    them): its calls and ms per call, or its error. Code that picks devices is wrong until it has run on one."""
    from dlmcode.bench.speed.timed import make_decoder

    start = speed.canvas(dlm, args.prompt, args.gen)
    out: dict[str, Any] = {}
    for name in sorted(decoders.DECODERS):
        try:
            dec = make_decoder(name, args.block, dlm)
        except ModelError as err:  # codila without an assistant for these random weights: not a device question
            out[name] = {"skipped": str(err)[:300]}
            continue
        try:
            row = speed.measure(dlm, name, dec, start, args.prompt, "none", 0)
            out[name] = {"ms_per_call": round(row.call_s * 1e3, 3), "calls": row.calls}
        except Exception as err:  # one decoder's failure is its own line; the others still run
            out[name] = {"error": f"{type(err).__name__}: {err}"[:300]}
    return out


def serve(dlm: Dlm, args: Settings) -> dict[str, Any]:
    """Requests and model calls per second through the server's queue at each level of concurrency."""
    from dlmcode.serve.engine import Engine
    from dlmcode.serve.queue import Queue
    from dlmcode.serve.request import Fill

    out = {}
    for level in LEVELS:
        queue = Queue(Engine(dlm, options={"block": args.block}, batch=level, lines=0))
        reqs = [Fill(PREFIX, SUFFIX, ceiling=args.gen, seed=i) for i in range(level)]

        async def arrive(q: Queue = queue, rs: list[Fill] = reqs) -> list[Any]:
            return await asyncio.gather(*(q.answer(r) for r in rs))

        began = time.perf_counter()
        answers = asyncio.run(arrive())
        seconds = time.perf_counter() - began
        queue.close()
        out[str(level)] = {
            "requests_per_s": round(level / seconds, 3),
            "calls_per_s": round(sum(a.calls for a in answers) / seconds, 3),
            "holes_per_s": round(sum(a.holes for a in answers) / seconds, 3),
            "forwards": queue.counters.forwards,  # batched forwards (at 1 the decode calls the model itself)
            "mean_batch": round(queue.counters.rows / queue.counters.forwards, 2) if queue.counters.forwards else 1.0,
        }
    return out


def check(shape: str, args: Settings, deadline: float) -> dict[str, Any]:
    """Every step for one shape, in order; a step past the deadline is skipped and named."""
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    dtype = DTYPES[args.dtype]
    note(f"{shape}: building random weights on {device} in {args.dtype}")
    dlm = standins.published(shape, device, dtype, TINY[shape] if args.tiny else None)
    report: dict[str, Any] = {"shape": shape, "prompt": args.prompt, "gen": args.gen, "block": args.block}
    skipped: list[str] = []
    steps = {
        "calls": lambda d: calls(d, args),
        "sampler": lambda d: sampler(d, args, report["calls"]["none"]["ms_per_call"]),
        "guard": lambda d: guard(d, args, report["calls"]["none"]["ms_per_call"]),
        "renoise": lambda d: renoise(d, args),
        "serve": lambda d: serve(d, args),
        "compiled": lambda d: compiled(d, args),
        "decoders": lambda d: every_decoder(d, args),
    }
    for name, step in steps.items():
        if name == "compiled" and args.no_compile:
            continue
        if time.perf_counter() > deadline or (name != "calls" and "ms_per_call" not in str(report.get("calls"))):
            skipped.append(name)
            continue
        note(f"{shape}: {name}")
        try:
            report[name] = step(dlm)
        except Exception as err:  # one failed step is reported; the loan still gets the others' figures
            report[name] = {"error": f"{type(err).__name__}: {err}"[:300]}
    report["skipped"] = skipped
    report["peak_memory_mb"] = (
        round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else None
    )
    del dlm
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return report


def run(args: Settings) -> dict[str, Any]:
    """Every shape's report, as one JSON-ready dict."""
    deadline = time.perf_counter() + args.budget
    began = time.perf_counter()
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else args.device,
        "torch": torch.__version__,
        "dtype": args.dtype,
        "tiny": args.tiny,
        "shapes": [check(shape, args, deadline) for shape in args.shapes],
    }
    result["seconds"] = round(time.perf_counter() - began, 1)
    return result


def command(
    device: Annotated[str | None, typer.Option(help="cuda or cpu [default: cuda when there is one]")] = None,
    dtype: Annotated[str, typer.Option(help="bf16 or fp32")] = "bf16",
    tiny: Annotated[bool, typer.Option("--tiny", help="toy-size models (a CPU test of the whole run)")] = False,
    shapes: Annotated[str, typer.Option(help="comma-separated: llada-8b, dream-7b")] = ",".join(SHAPES),
    prompt: Annotated[int, typer.Option(help="prompt tokens")] = 512,
    gen: Annotated[int, typer.Option(help="holes after the prompt")] = 64,
    block: Annotated[int, typer.Option(help="holes per block")] = 32,
    repeats: Annotated[int, typer.Option(help="timing repeats of the sampler (x5)")] = 3,
    backend: Annotated[str, typer.Option(help="torch.compile backend (the test uses eager)")] = "inductor",
    no_compile: Annotated[bool, typer.Option("--no-compile", help="skip the torch.compile step")] = False,
    budget: Annotated[float, typer.Option(help="seconds; steps that would start past it are skipped")] = 270.0,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """Time LLaDA-8B and Dream-7B shapes on a GPU: calls with and without caches, compiled, sampler, guard, serve."""
    if dtype not in DTYPES:
        raise typer.BadParameter(f"{dtype!r}: give one of {', '.join(DTYPES)}", param_hint="--dtype")
    names = tuple(s.strip() for s in shapes.split(",") if s.strip())
    if not names or not set(names) <= set(SHAPES):
        raise typer.BadParameter(f"{shapes!r}: give some of {', '.join(SHAPES)}", param_hint="--shapes")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    settings = Settings(device, dtype, tiny, names, prompt, gen, block, repeats, backend, no_compile, budget)
    text = json.dumps(run(settings), indent=1)
    typer.echo(text)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")


def main(args: list[str] | None = None) -> None:
    one_command(command)(args)


if __name__ == "__main__":
    main()
