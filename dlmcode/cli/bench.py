"""`dlmcode compare` (decoders side by side on one input) and `dlmcode bench` (over task suites,
one process or torchrun's ranks)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer

from ..core import files, settings
from ..core.entry import Command, reported
from ..core.run import ModelChoice, RunSettings
from . import shared
from .app import app
from .flags import (
    MODEL,
    Decoders,
    HoleLength,
    Lang,
    Quiet,
    Seed,
    Source,
    finite,
    model_flags,
)
from .shared import checked_language, emit, parse_length, starting

Span = Annotated[
    str | None,
    typer.Option(
        help="lines A:B to rewrite, 1-based inclusive; omit to fill the file's ⟦fill⟧ markers (no exact match then)"
    ),
]
Option = Annotated[
    list[str] | None,
    typer.Option("--option", "-o", help="decoder setting key=value, for the decoders that have it (repeatable)"),
]
Sweep = Annotated[
    list[str] | None,
    typer.Option(
        help="key=v1,v2,...: run each value (e.g. guard=false,true); several --sweep run their cartesian product"
    ),
]
Temperature = Annotated[
    float | None,
    typer.Option(help="sampling temperature [default: the decoder's; 1.0 when --samples > 1]", callback=finite),
]


@app.command(cls=Command)
@model_flags
def compare(
    file: Source,
    span: Span = None,
    decoder: Decoders = None,
    samples: Annotated[int, typer.Option("--samples", "-n", help="runs per decoder, with seeds 0..N-1")] = 1,
    option: Option = None,
    sweep: Sweep = None,
    temperature: Temperature = None,
    length: HoleLength = None,
    choice: ModelChoice = MODEL,  # --model, --device, ... (flags.model_flags)
    lang: Lang = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the results as one JSON object on stdout")] = False,
    quiet: Quiet = False,
) -> None:
    """Run several decoders on the same span N times each: breakage rate, exact match, TPF and speed, live."""
    from ..text import spans

    with reported():
        source = files.read_source(file)
        where = spans.parse_span(span, source) if span is not None else None
        settings.parse_options(option)  # well formed; each decoder checks its own settings below
        run = RunSettings(
            model=choice,
            length=parse_length(length),
            lang=checked_language(file, lang, source),
        )  # decoder, temperature, cache: each config's
        with starting(quiet):
            from ..bench import live, runner
            from . import view
        temp, note = runner.compare_temperature(samples, temperature)
        configs = runner.configs(
            decoder or [], option or [], sweep or [], temp
        )  # each config: its decoder, settings and cache
        dlm = shared.load_model(run.model, quiet)
        configs, skipped = runner.attach_all(configs, dlm, strict=bool(decoder))
        out = view.console(quiet)
        for line in filter(None, [note, *skipped]):
            out.print(line, soft_wrap=True)
        where_label = (f"lines {span}" if ":" in span else f"line {span}") if span is not None else "⟦fill⟧ markers"
        board = live.Board(configs, samples, out, f"compare · {file} · {where_label} · {samples} run(s) each")
        found = board.follow(runner.compare(source, where, file, dlm, configs, samples, run))
        if not out.is_terminal:  # a log file has no width: never crop the last columns to Rich's default 80
            out.width = max(out.width, 132)
        out.print(board.table())
        if json_out:
            meta = {
                "input": file,
                "span": list(where) if where else None,
                "samples": samples,
                "temperature": temp,
                "model": dlm.name,
            }
            emit(json.dumps(runner.compare_summary(found, configs, meta), ensure_ascii=False))


# One Annotated type a flag, as in every cli module: the shape repeats, the names and help are each command's
# own (flags.py holds the flags several commands share).
Suite = Annotated[
    str,
    typer.Option(
        "--suite",
        "-s",
        help="heldout-single|-multi|-span, humaneval-infill-single|-multi|-span|-span-light, humaneval, or a "
        ".jsonl(.gz) file or a folder",
    ),
]
BenchLength = Annotated[
    int,
    typer.Option(
        help="tokens generated per prompt (humaneval); infill holes get the canonical middle's token count (oracle "
        "length)"
    ),
]
Out = Annotated[
    Path | None,
    typer.Option(help="folder for samples.jsonl, summary.json/.csv and pareto.png/.svg; an existing one is resumed"),
]
Memory = Annotated[
    int,
    typer.Option(
        help="MiB of memory per test run, all its processes together (where no cgroup can be made: per process, "
        "and none may start another)"
    ),
]
UnsafeNoSandbox = Annotated[
    bool,
    typer.Option(
        "--unsafe-no-sandbox",
        help="run generated code without OS isolation (only limits and an audit hook) where the sandbox cannot be "
        "built; only on a machine you can throw away",
    ),
]
BatchSize = Annotated[
    int, typer.Option("--batch-size", help="decodes sharing each model forward (padded, masked); results as at 1")
]
FillLength = Annotated[
    str,
    typer.Option(
        "--fill-length",
        help="infill holes: oracle (the hidden middle's token count), unknown (the length rule sizes them, as "
        "serve and ⟦fill⟧ do), or editor (unknown, then cut after the first line as serve does)",
    ),
]


# bench opens with compare's flags (decoders, -o, --sweep, seed): one Typer parameter each, as Typer reads them
@app.command(cls=Command)
@model_flags
def bench(
    suite: Suite,
    decoder: Decoders = None,
    option: Option = None,
    sweep: Sweep = None,
    limit: Annotated[int | None, typer.Option(help="only the first N tasks")] = None,
    seed: Seed = 0,
    length: BenchLength = 128,
    out: Out = None,
    timeout: Annotated[float, typer.Option(help="wall-clock seconds per test run", callback=finite)] = 10.0,
    cpu: Annotated[int, typer.Option(help="CPU seconds per test run")] = 5,
    memory: Memory = 1024,
    unsafe_no_sandbox: UnsafeNoSandbox = False,
    choice: ModelChoice = MODEL,  # --model, --device, ... (flags.model_flags)
    json_out: Annotated[bool, typer.Option("--json", help="print the summary as one JSON object on stdout")] = False,
    quiet: Quiet = False,
    batch_size: BatchSize = 1,
    fill_length: FillLength = "oracle",
) -> None:
    """Run decoders over a task suite: pass@1, exact match, syntax-valid rate, TPF and speed, live; shards under
    torchrun."""
    with reported("the samples written to --out are kept; run the same command again to resume"):
        if out is not None:
            files.output_folder(out)  # /proc/x, a path under a file: one line now, not after the first task
        with starting(quiet):
            from ..bench import live, runner
            from . import view
        limits = {"timeout": timeout, "cpu": cpu, "memory_mb": memory, "isolated": not unsafe_no_sandbox}
        run = runner.prepare_bench(
            suite, decoder or [], option or [], sweep or [], limit, seed, length, out, limits, batch_size, fill_length
        )
        quiet = quiet or not run.ranks.lead
        run.ranks.join(choice.device)  # under torchrun: join before loading, so a rank that fails tells the others
        with run.ranks.failing_fast():
            choice = dataclasses.replace(choice, device=run.ranks.device(choice.device))
            dlm = shared.load_model(choice, quiet)  # decoding: each config's
            run.load(dlm)
            con, title = view.console(quiet), f"bench · {suite} · {len(run.suite.tasks)} tasks"
            for note in run.notes:
                con.print(note, soft_wrap=True)
            board = live.Board(run.configs, len(run.tasks), con, title, run.suite.has_tests)
            summary = run.finish(board.follow(run.stream(dlm), run.done()), dlm.name)
        if summary is None:
            return
        con.print(live.summary_table(summary, title))
        if out is not None:
            con.print(runner.written_note(run.written), soft_wrap=True)
        if json_out:
            emit(json.dumps(summary))
