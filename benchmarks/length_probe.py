"""Calibrate the length rule (dlmcode/jobs/sizing.py): how often its probe reads a task's true length.

    python -m benchmarks.length_probe --suite humaneval-infill-single --tasks 300:500 --bias 0,1,2,3,4

One probe call per task (the canvas the server and `bench --fill-length unknown` open:
prefix, min(128, room) holes, suffix); for each bias, the share of tasks whose chosen length
is exactly the canonical middle's token count, the share within 20 % of it, and the median
chosen length; then the best constant length for comparison (a rule that reads nothing).
Choose constants on tasks no reported benchmark uses (docs/length.md).
"""

from __future__ import annotations

import json
import statistics
from typing import Annotated

import torch
import typer

from dlmcode.bench import suites
from dlmcode.core.entry import one_command
from dlmcode.jobs import sizing as rule
from dlmcode.models import load
from dlmcode.text import spans

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


def command(
    suite: Annotated[str, typer.Option()] = "humaneval-infill-single",
    tasks: Annotated[str, typer.Option(help="a slice of the suite, start:stop")] = "300:500",
    bias: Annotated[str, typer.Option(help="biases to score, comma-separated")] = "0,1,2,3,4",
    threads: Annotated[int, typer.Option()] = 1,
) -> None:
    """Calibrate the length rule: how often its probe reads a task's true length."""
    torch.set_num_threads(threads)
    dlm = load()
    start, stop = (int(x) if x else None for x in tasks.split(":"))
    chosen = suites.load(suite, None, dlm.tokenizer).tasks[start:stop]
    room = min(CEILING, rule.rule_for(dlm.family).room)
    reads = [ends_read(dlm, t, room) for t in chosen]
    for value in (float(b) for b in bias.split(",")):
        print(json.dumps({"suite": suite, "tasks": tasks, "room": room, **scores(reads, value)}))
    true = [n for n, _ in reads]
    best = max(range(1, room + 1), key=lambda c: sum(c == n for n in true))
    print(json.dumps({"constant": best, "exact_length": round(sum(best == n for n in true) / len(true), 4)}))


def main(args: list[str] | None = None) -> None:
    one_command(command)(args)


if __name__ == "__main__":
    main()
