"""Calibrate the length rule (dlmcode/jobs/sizing.py): how often its probe reads a task's true length.

    python -m dlmcode.bench.length_probe --suite humaneval-infill-single --tasks 300:500 --bias 0,1,2,3,4

One probe call per task (the canvas the server and `bench --fill-length unknown` open:
prefix, min(128, room) holes, suffix); for each bias, the share of tasks whose chosen length
is exactly the canonical middle's token count, the share within 20 % of it, and the median
chosen length; then the best constant length for comparison (a rule that reads nothing).
Choose constants on tasks no reported benchmark uses (docs/length.md).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from ..jobs import sizing as rule
from ..models import load
from ..text import spans
from . import suites

CEILING = 128  # as bench --fill-length unknown and llama.vim


def ends_read(dlm, task: suites.Task, room: int) -> tuple[int, torch.Tensor]:
    """(the canonical middle's token count, the probe's end probabilities over its holes)."""
    plan = spans.plan_middle(task.prompt, task.suffix, dlm.vocab, room)
    region = plan.positions[0]
    with torch.no_grad():
        logits = dlm.predict(plan.canvas.tokens)[region.start : region.stop]  # (H, V)
    return len(dlm.tokenizer.encode(task.canonical or "")), rule.end_probability(logits, rule.end_ids(dlm))


def scores(reads: list[tuple[int, torch.Tensor]], bias: float) -> dict[str, float]:
    chosen = [(rule.change_point(p, bias), n) for n, p in reads]
    return {
        "bias": bias,
        "exact_length": round(sum(c == n for c, n in chosen) / len(chosen), 4),
        "within_20pct": round(sum(abs(c - n) <= 0.2 * n for c, n in chosen) / len(chosen), 4),
        "median_chosen": statistics.median(c for c, _ in chosen),
        "median_true": statistics.median(n for _, n in chosen),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="humaneval-infill-single")
    ap.add_argument("--tasks", default="300:500", help="a slice of the suite, start:stop")
    ap.add_argument("--bias", default="0,1,2,3,4", help="biases to score, comma-separated")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    dlm = load()
    start, stop = (int(x) if x else None for x in args.tasks.split(":"))
    tasks = suites.load(args.suite, None, dlm.tokenizer).tasks[start:stop]
    room = min(CEILING, rule.rule_for(dlm.family).room)
    reads = [ends_read(dlm, t, room) for t in tasks]
    for bias in (float(b) for b in args.bias.split(",")):
        print(json.dumps({"suite": args.suite, "tasks": args.tasks, "room": room, **scores(reads, bias)}))
    true = [n for n, _ in reads]
    best = max(range(1, room + 1), key=lambda c: sum(c == n for n in true))
    print(json.dumps({"constant": best, "exact_length": round(sum(best == n for n in true) / len(true), 4)}))


if __name__ == "__main__":
    main()
