"""What isolation costs: median milliseconds per test run, jailed and not, side by side.

    python -m benchmarks.sandbox_cost [--tasks 164] [--json]

Runs the canonical solution of each HumanEval problem (one HumanEval-infilling task per
problem) twice, jailed and with --unsafe-no-sandbox's settings, alternating so that both
see the same load; prints the median wall-clock milliseconds per run of each, the added
cost, and the CPU milliseconds the runs' processes used. Every run must pass.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import time
from typing import Annotated

import typer

from dlmcode.bench import sandbox, suites
from dlmcode.core.entry import one_command
from dlmcode.core.errors import DlmcodeError


def problems(count: int) -> list[suites.Task]:
    """The first `count` HumanEval problems, one infilling task each (its canonical middle is the answer)."""
    found: dict[str, suites.Task] = {}
    for task in suites.load("humaneval-infill-single").tasks:
        found.setdefault("/".join(task.task_id.split("/")[1:3]), task)
    return list(found.values())[:count]


def timed(task: suites.Task, limits: sandbox.Limits) -> tuple[float, float]:
    """(wall ms, CPU ms of the run's processes) of one run, which must pass."""
    cpu = _children_cpu()
    start = time.perf_counter()
    outcome = sandbox.run(task.code(task.canonical or ""), task.test or "", task.entry_point or "", limits)
    wall = (time.perf_counter() - start) * 1000
    if not outcome.passed:
        raise DlmcodeError(f"{task.task_id}: {outcome.status}: {outcome.detail}")
    return wall, (_children_cpu() - cpu) * 1000


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(tasks: list[suites.Task]) -> dict:
    """Each task jailed then unjailed; medians per run and the machine's load when it ended."""
    runs: dict[str, list[tuple[float, float]]] = {"isolated": [], "unisolated": []}
    sandbox.require()
    for task in tasks:
        runs["isolated"].append(timed(task, sandbox.Limits()))
        runs["unisolated"].append(timed(task, sandbox.Limits(isolated=False)))
    rows = {
        name: {
            "median_ms": round(statistics.median(w for w, _ in found), 1),
            "median_cpu_ms": round(statistics.median(c for _, c in found), 1),
        }
        for name, found in runs.items()
    }
    added = round(rows["isolated"]["median_ms"] - rows["unisolated"]["median_ms"], 1)
    return {
        "tasks": len(tasks),
        "runs": rows,
        "isolation_adds_ms": added,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def command(
    tasks: Annotated[int, typer.Option(help="HumanEval problems to run (at most 164)")] = 164,
    json_out: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """What isolation costs: median milliseconds per test run, jailed and not, side by side."""
    result = measure(problems(tasks))
    if json_out:
        print(json.dumps(result))
        return
    print(
        f"{result['tasks']} canonical HumanEval solutions, each run jailed and unjailed "
        f"({result['cpus']} CPUs, load average {result['load_average']})"
    )
    for name, row in result["runs"].items():
        print(f"  {name:<11} median {row['median_ms']:7.1f} ms per run   ({row['median_cpu_ms']:.1f} ms CPU)")
    print(f"  isolation adds {result['isolation_adds_ms']:.1f} ms per run")


def main(args: list[str] | None = None) -> None:
    one_command(command)(args)


if __name__ == "__main__":
    main()
