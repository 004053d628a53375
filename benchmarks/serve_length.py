"""Measure the server's length rule: the length unknown (an editor's ceiling) against the oracle length.

    python -m benchmarks.serve_length --suite heldout-single --limit 100 [-m MODEL] [-d DECODER] [-o k=v]
        [--modes editor,oracle,marker]

Per task, decodes of the same decoder: "editor" goes through the server's Engine with
`n_predict` = CEILING, as llama.vim sends it (the length rule opens the holes and ends the
fill); "oracle" opens exactly as many holes as the canonical middle's tokens (never a pad),
as `dlmcode bench` does; "marker" is `dlmcode infill` on the task's text with a bare ⟦fill⟧
where the middle was (the CLI's settings: the decoder, guard=true unless -o says otherwise, no
cache, no line cut). Prints one JSON object per mode: exact match, syntax-valid, pass@1
(tasks with tests, through dlmcode/bench/sandbox), mean calls and seconds.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import torch
import typer

from dlmcode.bench import metrics, suites
from dlmcode.core import settings
from dlmcode.core.entry import one_command
from dlmcode.core.run import RunSettings
from dlmcode.jobs import fill as jobs
from dlmcode.jobs import wiring
from dlmcode.models import load
from dlmcode.serve import length
from dlmcode.serve.engine import Engine
from dlmcode.serve.request import Fill
from dlmcode.text import syntax

MARKER = "\u27e6fill\u27e7"  # a bare fill marker: its length is the model's to choose
GUARD = "guard"  # infill's default: guard=true unless told otherwise (cli/flags.py)
CEILING = 128  # llama.vim's and llama.vscode's default n_predict


def oracle(engine: Engine, task: suites.Task, decoder: str, options: dict[str, str]) -> tuple[str, int]:
    """The fill with exactly the canonical middle's token count; (text, calls)."""
    n = max(1, len(engine.dlm.tokenizer.encode(task.canonical or "")))
    job = jobs.prepare_middle(
        task.prompt, task.suffix, n, dlm=engine.dlm, decoder=decoder, options=options, cache=engine.cache
    )
    result = job.run()
    region = job.plan.positions[0]
    ids = [i for i in result.canvas[region.start : region.stop] if i not in engine.dlm.special_ids]
    return engine.dlm.tokenizer.decode(ids), result.calls


def editor(engine: Engine, task: suites.Task) -> tuple[str, int]:
    answer = engine.run(Fill(task.prompt, task.suffix, ceiling=CEILING, lang=task.lang))
    return answer.text, answer.calls


def marker(dlm: Any, task: suites.Task, decoder: str, options: dict[str, Any]) -> tuple[str, int]:
    """`dlmcode infill` on the task's text with a bare fill marker for the middle; (text, calls)."""
    source = f"{task.prompt}{MARKER}{task.suffix}"
    run = RunSettings(decoder=decoder, options={GUARD: "true", **options}, lang=task.lang)
    result = jobs.infill_job(source, None, dlm, wiring.settled(run)).run()
    end = len(result.text) - len(task.suffix)
    return result.text[len(task.prompt) : end], result.calls


def score(task: suites.Task, middle: str, tests: bool) -> dict[str, Any]:
    broken = syntax.breakage(task.original, task.prompt + middle + task.suffix, task.lang).broken
    row = {"exact": metrics.exact_match(middle, task.canonical or ""), "syntax_valid": not broken}
    if tests and task.test:
        from dlmcode.bench import sandbox

        row["passed"] = sandbox.run(task.code(middle), task.test, task.entry_point or "").passed
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    out = {"tasks": n}
    for key in ("exact", "syntax_valid", "passed", "calls", "seconds"):
        values = [r[key] for r in rows if key in r]
        if values:
            out[key] = round(sum(values) / len(values), 4)
    return out


def command(
    suite: Annotated[str, typer.Option()] = "heldout-single",
    limit: Annotated[int, typer.Option()] = 100,
    decoder: Annotated[str, typer.Option("--decoder", "-d")] = "low-confidence",
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", help="decoder setting key=value [default: block=8, as `dlmcode serve`]"),
    ] = None,
    cache: Annotated[str, typer.Option(help="KV cache, as `dlmcode serve`")] = "dual",
    no_tests: Annotated[bool, typer.Option("--no-tests", help="skip pass@1 (the sandbox)")] = False,
    out: Annotated[str | None, typer.Option(help="write every task's rows here as JSON lines")] = None,
    modes: Annotated[str, typer.Option(help="which decodes to run, comma-separated: editor, oracle, marker")] = (
        "editor,oracle"
    ),
    model: Annotated[str | None, typer.Option("--model", "-m", help="model folder [default: the built-in one]")] = None,
    marker_option: Annotated[
        list[str] | None, typer.Option("--marker-option", help="the marker mode's decoder settings (as infill's -o)")
    ] = None,
    lines: Annotated[int, typer.Option(help="the server's --lines (0: no line limit)")] = 1,
    threads: Annotated[
        int | None, typer.Option(help="torch CPU threads (1 on a busy shared CPU) [default: torch's]")
    ] = None,
) -> None:
    """Measure the server's length rule: the length unknown (an editor's ceiling) against the oracle length."""
    if threads:
        torch.set_num_threads(threads)
    options = settings.parse_options(option if option is not None else ["block=8"])
    dlm = load(model)
    engine = Engine(dlm, decoder=decoder, options=options, cache=cache, lang="python", lines=lines)
    tasks = suites.load(suite, limit, dlm.tokenizer).tasks
    rows: dict[str, list[dict[str, Any]]] = {"editor": [], "oracle": [], "marker": []}
    marked = settings.parse_options(marker_option or [])
    sink = open(out, "w") if out else None  # kept open for the whole run
    for i, task in enumerate(tasks):
        runs = {
            "editor": lambda t: editor(engine, t),
            "oracle": lambda t: oracle(engine, t, decoder, options),
            "marker": lambda t: marker(dlm, t, decoder, marked),
        }
        for mode in modes.split(","):
            run = runs[mode]
            start = time.perf_counter()
            middle, calls = run(task)
            row = {
                "task": task.task_id,
                "mode": mode,
                "middle": middle,
                "calls": calls,
                "seconds": time.perf_counter() - start,
            }
            row |= score(task, middle, not no_tests)
            rows[mode].append(row)
            if sink:
                sink.write(json.dumps(row) + "\n")
                sink.flush()
        print(f"{i + 1}/{len(tasks)}", file=sys.stderr, end="\r")
    meta = {
        "model": model or "built-in",
        "suite": suite,
        "decoder": decoder,
        "options": options,
        "cache": cache,
        "ceiling": CEILING,
        "cap": length.cap(dlm),
        "lines": lines,
    }
    print(json.dumps({**meta, **{mode: summary(r) for mode, r in rows.items() if r}}))


def main(args: list[str] | None = None) -> None:
    one_command(command)(args)


if __name__ == "__main__":
    main()
