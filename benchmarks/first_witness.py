"""Where the guard would give up: `python -m benchmarks.first_witness -s SUITE --limit N`.

For each task of a suite (oracle length, as `dlmcode bench` plans it), whether the guard finds a
first witness from fillers before the first model call (guard.first_witness, the job's search, with
its budget), and what the search cost. A task without one is decoded unguarded until some call's
draft passes the judge, and wholly unguarded when none does (`unguarded` in a bench row): this
count bounds the guard's give-ups from above without running the model. Rows per task class (the
part of the task id before its first "/": the attack class of `guard-attacks`).
"""

from __future__ import annotations

import collections
import json
import time
from typing import Annotated

import typer

from dlmcode import models
from dlmcode.bench import suites
from dlmcode.core.entry import one_command
from dlmcode.jobs import fill, wiring
from dlmcode.text import spans


def probe(suite: str, limit: int | None) -> list[dict]:
    """One row per task: its class, language, whether a first witness was found, the search's seconds."""
    dlm = models.load()
    rows = []
    for task in suites.load(suite, limit, dlm.tokenizer).tasks:
        n = max(1, len(dlm.tokenizer.encode(task.canonical or "")))
        plan = spans.plan_infill(f"{task.prompt}⟦fill:{n}⟧{task.suffix}", dlm.vocab, None, None)
        decoder = wiring.make_decoder("low-confidence", {"guard": "true"}, None)
        start = time.perf_counter()
        job = wiring.wired(fill.Job(plan, dlm, decoder, 0, task.lang, originals=(task.canonical or "",)))
        seconds = time.perf_counter() - start
        completer = job.decoder.completer
        found = completer is not None and completer.witness is not None
        kind = task.task_id.split("/", 1)[0]
        rows.append({"task": task.task_id, "class": kind, "lang": task.lang, "found": found, "seconds": seconds})
    return rows


def command(
    suite: Annotated[str, typer.Option("--suite", "-s", help="a suite name, as `dlmcode bench -s`")],
    limit: Annotated[int | None, typer.Option(help="only the first N tasks")] = None,
) -> None:
    """Count the tasks without a first witness, per class; a table on stderr, JSON on stdout."""
    rows = probe(suite, limit)
    missing, total = collections.Counter(), collections.Counter()
    for row in rows:
        key = f"{row['lang']} {row['class']}"
        total[key] += 1
        missing[key] += not row["found"]
    for key in sorted(total):
        typer.echo(f"{key:<40} {missing[key]:4d} of {total[key]:4d} without a first witness", err=True)
    seconds = sum(r["seconds"] for r in rows)
    typer.echo(f"{'all':<40} {sum(missing.values()):4d} of {len(rows):4d}; search {seconds:.1f} s in all", err=True)
    summary = {k: {"missing": missing[k], "tasks": total[k]} for k in sorted(total)}
    typer.echo(json.dumps({"suite": suite, "limit": limit, "classes": summary, "rows": rows}))


def main(args: list[str] | None = None) -> None:
    one_command(command)(args)


if __name__ == "__main__":
    main()
