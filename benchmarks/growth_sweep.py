"""Calibrate how a family's fills of unknown length start and lean (dlmcode/jobs/expanding.py, Rule).

    python -m benchmarks.growth_sweep -m MODEL --suite humaneval-infill-single --tasks 300:400 \
        --start 4,8 --expand-bias 0,2 --delete-bias 0

For each (start, expand bias, delete bias) the model's family gets that rule and every task is decoded as
`dlmcode bench --fill-length unknown` decodes it (bench/sample.py: the same job, scoring, sandbox) and
as the oracle length once: exact match, pass@1 (tasks with tests), syntax-valid, calls, and the final
length against the canonical middle's tokens. One JSON line per rule on stdout. Choose constants on
tasks no reported benchmark uses (docs/length.md).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from typing import Annotated

import torch
import typer

from dlmcode.bench import sandbox, suites
from dlmcode.bench.configs import ORACLE, UNKNOWN, configs
from dlmcode.bench.sample import decode, scored
from dlmcode.core.entry import one_command
from dlmcode.jobs import expanding
from dlmcode.models import load


def numbers(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def run(dlm, tasks, config, limits) -> dict:
    rows = []
    for task in tasks:
        result = decode(task, config, dlm, 0, 0)
        sample = scored(task, config, dlm, 0, limits, result)
        true = len(dlm.tokenizer.encode(task.canonical or ""))
        rows.append((sample, true, getattr(result, "sized", ()) or (true,)))
        print(f"{len(rows)}/{len(tasks)}", file=sys.stderr, end="\r")
    n = len(rows)
    out = {
        "exact": sum(s.exact for s, _, _ in rows) / n,
        "syntax_valid": sum(not (s.breakage and s.breakage.get("broken")) for s, _, _ in rows) / n,
        "calls": statistics.mean(s.calls for s, _, _ in rows),
        "median_length": statistics.median(z[0] for _, _, z in rows),
        "median_true": statistics.median(t for _, t, _ in rows),
        "shorter": sum(z[0] < t for _, t, z in rows) / n,
        "longer": sum(z[0] > t for _, t, z in rows) / n,
    }
    tested = [s.passed for s, _, _ in rows if s.passed is not None]
    if tested:
        out["pass@1"] = sum(tested) / len(tested)
    return {k: round(v, 4) for k, v in out.items()}


def command(
    model: Annotated[str, typer.Option("--model", "-m")],
    suite: Annotated[str, typer.Option()] = "humaneval-infill-single",
    tasks: Annotated[str, typer.Option(help="a slice of the suite, a:b")] = "300:400",
    start: Annotated[str, typer.Option(help="holes a fill starts from, comma-separated")] = "4",
    expand_bias: Annotated[str, typer.Option(help="added to the expand logit, comma-separated")] = "0",
    delete_bias: Annotated[str, typer.Option(help="added to the delete logit, comma-separated")] = "0",
    decoder: Annotated[str, typer.Option("--decoder", "-d")] = "low-confidence",
    oracle: Annotated[bool, typer.Option(help="also the oracle length, once")] = True,
    threads: Annotated[int, typer.Option()] = 1,
) -> None:
    """Calibrate expanding.Rule on a slice of a suite."""
    torch.set_num_threads(threads)
    dlm = load(model)
    a, _, b = tasks.partition(":")
    chosen = suites.load(suite, int(b) if b else None, dlm.tokenizer).tasks[int(a or 0) :]
    limits = sandbox.Limits()
    if oracle:
        config = configs([decoder], [], [], fill_length=ORACLE)[0]
        print(json.dumps({"suite": suite, "tasks": tasks, "rule": "oracle", **run(dlm, chosen, config, limits)}))
    config = configs([decoder], [], [], fill_length=UNKNOWN)[0]
    for s in numbers(start):
        for e in numbers(expand_bias):
            for d in numbers(delete_bias):
                rule = expanding.Rule(int(s), e, d)
                expanding.RULES[dlm.family] = rule
                row = run(dlm, chosen, config, limits)
                print(json.dumps({"suite": suite, "tasks": tasks, "rule": dataclasses.asdict(rule), **row}), flush=True)


def main(args: list[str] | None = None) -> None:
    one_command(command)(args)


if __name__ == "__main__":
    main()
