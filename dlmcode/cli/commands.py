"""The `dlmcode` command line: thin Typer commands over the library.

stdout carries only data (code, or one JSON document with --json); the live view, the
summary line, warnings and errors go to stderr. Exit codes: 0 ok, 1 error (or syntax
errors found by `check`), 2 usage error, 130 interrupted (Ctrl-C); `serve` stopped by
SIGTERM (a service manager's stop) exits 0 after one line: that is its normal end.

Each command checks what it was given (files, spans, numbers, settings, the --out folder)
before it imports torch (about 2 s) and before it loads a model, cheapest first: a typo
costs a tenth of a second, not a model load.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from .. import __version__
from ..core import files, settings
from ..core.entry import Command, OneLineErrors, reported
from ..core.errors import UsageError
from ..core.run import SEED_MAX, ModelChoice, RunSettings, check_batch


# Click's exception base as Typer raises it: the click package (typer < 0.22) or Typer's vendored copy
def finite(value: float | None) -> float | None:
    """Typer callback: inf and nan are never a setting."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def seed_range(value: int) -> int:
    if not 0 <= value <= SEED_MAX:
        raise typer.BadParameter(f"{value} is out of range; give 0 to 2**63 - 1")
    return value


HELP_NAMES = {"help_option_names": ["-h", "--help"]}  # commands inherit it from the group's context

app = typer.Typer(
    cls=OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    context_settings=HELP_NAMES,
    help="Generate and edit code with diffusion language models, and see which decoders break syntax.",
)


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"dlmcode {__version__}")
        raise typer.Exit()


@app.callback()
def options(
    version: Annotated[
        bool, typer.Option("--version", callback=show_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """Generate and edit code with diffusion language models, and see which decoders break syntax."""


Source = Annotated[str, typer.Argument(help="a file, or - to read stdin")]
Model = Annotated[
    str | None, typer.Option("--model", "-m", help="model folder or cached hub id [default: the built-in model]")
]
DecoderName = Annotated[
    str | None,
    typer.Option(
        "--decoder",
        "-d",
        help="decoder name (see `dlmcode decoders`) [default: the model family's own: renoise for DiffusionGemma, "
        "low-confidence for the others]",
    ),
]
Options = Annotated[list[str] | None, typer.Option("--option", "-o", help="decoder setting key=value (repeatable)")]
Seed = Annotated[int, typer.Option(help="seed of the decoder's random generator", callback=seed_range)]
Temperature = Annotated[
    float | None, typer.Option(help="sampling temperature; 0 = greedy [default: the decoder's]", callback=finite)
]
Device = Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps")]
Dtype = Annotated[str, typer.Option(help="auto (bf16 on CUDA, fp32 elsewhere), float32, bfloat16, float16")]
Family = Annotated[str | None, typer.Option(help="model family, when detection from config.json is wrong")]
TrustRemoteCode = Annotated[bool, typer.Option(help="allow a model's own Python code to run")]
Lang = Annotated[
    str | None, typer.Option(help="language for syntax checks [default: from the file extension; python for stdin]")
]
Json = Annotated[bool, typer.Option("--json", help="print one JSON object on stdout instead of the code")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="no live view or summary on stderr")]
Cache = Annotated[str, typer.Option(help="KV cache for block decoding: none, prefix or dual (Fast-dLLM; approximate)")]
CacheRefresh = Annotated[
    int, typer.Option(help="with --cache, also run every position every N calls; 0 = only when the block moves")
]
Offline = Annotated[
    bool, typer.Option("--offline", help="never download: a hub id must be in the local cache (also HF_HUB_OFFLINE=1)")
]


def load_model(choice: ModelChoice, quiet: bool) -> Any:
    """The model `choice` names (core/run.py), loaded under a spinner."""
    from ..models import BUILTIN, load, resolve
    from . import cpu, view

    cpu.configure_threads()  # the CLI owns its process: thread defaults that hold up on a busy machine
    offline = choice.offline or None
    if choice.name and choice.name != BUILTIN:
        resolve(choice.name, offline=offline)  # before the spinner: a hub download draws its own progress bars
    with view.console(quiet).status("loading model…"):
        return load(
            choice.name,
            device=choice.device,
            dtype=choice.dtype,
            family=choice.family,
            trust_remote_code=choice.trust_remote_code,
            offline=offline,
        )


@contextlib.contextmanager
def starting(quiet: bool) -> Iterator[None]:
    """One status line on a terminal's stderr while torch imports (about 1.5 s, before any view can draw).

    The last cheap check comes first: DLMCODE_THREADS, read when the model loads.
    """
    from . import cpu

    cpu.threads_asked()
    show = not quiet and "torch" not in sys.modules and sys.stderr.isatty()
    if show:
        sys.stderr.write("dlmcode: starting (importing torch)…")
        sys.stderr.flush()
    try:
        yield
    finally:
        if show:
            sys.stderr.write("\r\033[K")  # erase the line: the view or the output takes its place
            sys.stderr.flush()


def language(path: str, lang: str | None, required: bool) -> str | None:
    """--lang, else the file extension, else python for stdin; None when unknown and not required."""
    from ..text import syntax

    if lang is not None or path == files.STDIN:
        return syntax.language_for(lang=lang or "python")
    try:
        return syntax.language_for(path=path)
    except UsageError:
        if required:
            raise
        return None


def parse_length(length: str | None) -> int | str | None:
    if length is None or length == "auto":
        return length
    try:
        tokens = settings.to_int(length)
    except ValueError:
        tokens = 0
    if tokens <= 0:
        raise UsageError(f"--length {length!r}: give a positive number of tokens, or auto")
    return tokens


def parse_options(pairs: list[str] | None) -> dict[str, str]:
    """-o key=value pairs as a dict; their values are the decoder's to check (decoders_checked)."""
    try:
        return settings.pairs(pairs or [])
    except ValueError as err:
        raise UsageError(str(err)) from None


def decoder_checked(run: RunSettings, quiet: bool) -> RunSettings:
    """`run`, once its decoder and settings are known good: the registry imports torch, so this
    comes after every cheaper check and before the model loads."""
    with starting(quiet):
        from ..jobs import fill
    if run.decoder is not None:  # the family's own decoder is known once the model loads
        fill.make_decoder(run.decoder, run.options, run.temperature)
    return run


def emit(text: str) -> None:
    """A line of data on stdout; a full disk or closed pipe is one error line (files.write_stdout)."""
    files.write_stdout(text + "\n")


def run_with_view(job: Any, quiet: bool, json_out: bool) -> Any:
    from . import view

    out = view.console(quiet)
    said = list(job.notes)
    for note in said:  # a guard that cannot hold is never silent, --quiet or not
        sys.stderr.write(f"dlmcode: {note}\n")
    result = job.run(view.CanvasView(job, out).follow)
    for note in result.notes:  # found while decoding (no witness even from the model's first draft)
        if note not in said:
            sys.stderr.write(f"dlmcode: {note}\n")
    out.print(view.summary(result), soft_wrap=True)
    if json_out:
        emit(json.dumps(result.to_dict(), ensure_ascii=False))
    return result


@app.command(cls=Command)
def infill(
    file: Source,
    span: Annotated[
        str | None,
        typer.Option(
            help="lines A:B to rewrite, 1-based inclusive ('7' is one line); omit to fill the file's ⟦fill⟧ markers"
        ),
    ] = None,
    length: Annotated[
        str | None,
        typer.Option(
            help="tokens for the span or every bare ⟦fill⟧, or auto (the length rule sizes them from one probe call: "
            "docs/length.md) [default: the span's own token count; bare ⟦fill⟧ markers: the length rule]"
        ),
    ] = None,
    model: Model = None,
    decoder: DecoderName = None,
    option: Options = None,
    seed: Seed = 0,
    temperature: Temperature = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    family: Family = None,
    trust_remote_code: TrustRemoteCode = False,
    lang: Lang = None,
    cache: Cache = "none",
    cache_refresh: CacheRefresh = 0,
    in_place: Annotated[
        bool, typer.Option("--in-place", "-i", help="replace FILE atomically instead of printing")
    ] = False,
    diff: Annotated[
        bool,
        typer.Option(
            "--diff",
            help="print a unified diff instead of the whole file (with --in-place: as well as writing it; with --json: "
            "as its `diff` field)",
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="with --in-place, also replace a read-only file (its mode is kept)")
    ] = False,
    offline: Offline = False,
    json_out: Json = False,
    quiet: Quiet = False,
) -> None:
    """Rewrite lines A..B of a file (or its ⟦fill⟧ markers) and print the whole file."""
    from ..text import spans

    # --in-place: read through one open file, kept to compare before writing (files.open_for_edit);
    # a read-only file or folder, a FIFO or /dev/stdin fails now, not after the decode
    with reported(), files.editing(file, force, in_place) as original:
        source = original.text if original is not None else files.read_source(file)
        where = spans.parse_span(span, source) if span is not None else None
        run = RunSettings(
            model=ModelChoice(model, device, dtype, family, trust_remote_code, offline),
            decoder=decoder,
            options=parse_options(option),
            temperature=temperature,
            seed=seed,
            length=parse_length(length),
            lang=language(file, lang, required=False),
            cache=cache,
            cache_refresh=cache_refresh,
        ).strict()  # every setting checked before torch imports
        run = decoder_checked(run, quiet)
        from ..jobs import fill

        job = fill.infill_job(source, where, load_model(run.model, quiet), run)
        result = run_with_view(job, quiet, json_out=False)
        text = files.keep_line_endings(source, result.text)  # a CRLF file gets CRLF inside the fill too
        patch = files.unified_diff(source, text, file) if diff else None
        if original is not None:
            files.replace_if_unchanged(original, text)
        if json_out:
            extra = {"text": text} | ({"diff": patch} if diff else {})
            emit(json.dumps(result.to_dict() | extra, ensure_ascii=False))
        elif patch is not None:
            files.write_stdout(patch)
        elif not in_place:
            files.write_stdout(text)


@app.command(cls=Command)
def generate(
    prompt_file: Source,
    length: Annotated[
        str,
        typer.Option(help="tokens to generate, or auto (the length rule reads it from one probe call: docs/length.md)"),
    ] = "128",
    model: Model = None,
    decoder: DecoderName = None,
    option: Options = None,
    seed: Seed = 0,
    temperature: Temperature = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    family: Family = None,
    trust_remote_code: TrustRemoteCode = False,
    lang: Lang = None,
    chat: Annotated[
        bool | None,
        typer.Option(
            "--chat/--no-chat", help="wrap the prompt in the model's chat template [default: when the model has one]"
        ),
    ] = None,
    raw: Annotated[bool, typer.Option(help="with --chat, print the whole reply, not just its code blocks")] = False,
    logits_eos_inf: Annotated[bool, typer.Option(help="LLaDA: never propose end-of-text")] = False,
    confidence_eos_eot_inf: Annotated[bool, typer.Option(help="LLaDA: commit end-of-text/turn proposals last")] = False,
    eos_penalty: Annotated[
        float, typer.Option(help="Dream-Coder: subtract this from the end-of-text logit", callback=finite)
    ] = 0.0,
    cache: Cache = "none",
    cache_refresh: CacheRefresh = 0,
    offline: Offline = False,
    json_out: Json = False,
    quiet: Quiet = False,
) -> None:
    """Continue a prompt (or answer a request, with a chat model) and print the code."""
    with reported():
        prompt = files.read_source(prompt_file)
        run = RunSettings(
            model=ModelChoice(model, device, dtype, family, trust_remote_code, offline),
            decoder=decoder,
            options=parse_options(option),
            temperature=temperature,
            seed=seed,
            length=parse_length(length),
            lang=language(prompt_file, lang, required=False),
            cache=cache,
            cache_refresh=cache_refresh,
        ).strict()  # every setting checked before torch imports
        run = decoder_checked(run, quiet)
        from ..jobs import fill, processors

        eos = processors.EndOfText(logits_eos_inf, confidence_eos_eot_inf, eos_penalty)
        job = fill.generate_job(prompt, load_model(run.model, quiet), run, chat=chat, raw=raw, eos=eos)
        result = run_with_view(job, quiet, json_out)
        if not json_out:
            files.write_stdout(result.text)


@app.command(cls=Command)
def check(
    file: Annotated[list[str], typer.Argument(help="files, or - to read stdin; each in its own language")],
    lang: Lang = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="print the report as JSON on stdout: one object, or a list of them (with `file`) for several files; "
            "line and column 1-based as in the text, start_byte and end_byte 0-based offsets",
        ),
    ] = False,
) -> None:
    """Report syntax errors, like a linter: exit 1 when any file has them.

    Each error is FILE:LINE:COLUMN: MESSAGE on stdout; line and column are 1-based, the column
    counting UTF-8 bytes. An empty file is checked like any other (an empty Python file is valid).
    """
    with reported():
        if file.count(files.STDIN) > 1:
            raise UsageError("check: stdin (-) can be read only once")
        checked = [
            (name, files.read_source(name, allow_empty=True)) for name in file
        ]  # every file readable before any report
        languages = [language(name, lang, required=True) for name, _ in checked]
        reports = []
        for (name, source), lang_name in zip(checked, languages, strict=True):
            label = "stdin" if name == files.STDIN else name
            reports.append(check_one(label, source, lang_name, json_out))
        if json_out:
            one = {k: v for k, v in reports[0].items() if k != "file"}
            emit(json.dumps(one if len(reports) == 1 else reports))
        if not all(r["ok"] for r in reports):
            raise typer.Exit(1)


def check_one(label: str, source: str, lang_name: str, json_out: bool) -> dict:
    """`check`'s report of one file: its problems printed, its JSON returned. Code too deeply nested to
    check is one error line for this file, and the other files are still checked."""
    from ..text import spans, syntax

    try:
        report = syntax.check(source, lang_name)
    except syntax.TooDeep as err:
        typer.echo(f"dlmcode: error: {label}: {err}", err=True)
        return {"lang": lang_name, "ok": False, "errors": None, "problems": [], "error": str(err), "file": label}
    for problem in report.problems:
        line = f"{label}:{problem.line}:{problem.column + 1}: {problem.message}"  # Problem.column is 0-based
        if json_out:
            typer.echo(line, err=True)
        else:
            emit(line)
    if report.problems and spans.has_markers(source):
        typer.echo(
            f"dlmcode: note: {label} holds ⟦fill⟧ markers: dlmcode's own, for `dlmcode infill` to fill; "
            "they are not code, so they count as syntax errors here",
            err=True,
        )
    return report.to_dict() | {"file": label}


@app.command(name="decoders", cls=Command)
def list_decoders(json_out: Json = False) -> None:
    """List the decoders with their settings and defaults."""
    from .. import decoders

    described = [decoders.describe(name) for name in decoders.DECODERS]
    with reported():
        if json_out:
            emit(json.dumps(described, indent=2))
            return
        for entry in described:
            emit(f"{entry['name']}: {entry['description']}")
            for s in entry["settings"]:
                emit(f"    {s['name']} ({s['type']}, default {s['default']}): {s['help']}")


@app.command(cls=Command)
def train(
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option", "-o", help="training setting key=value (repeatable; see dlmcode/training/train.py TrainConfig)"
        ),
    ] = None,
    export: Annotated[
        str | None, typer.Option(help="after training, copy the best model here (bf16) with a model card")
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Train the built-in dLLM (tokenizer and model) on this Python's standard library; resumes a run folder."""
    from ..training import train as training
    from . import view

    with reported():
        cfg = training.parse_overrides(option or [])
        last = view.follow_training(training.logged(cfg), view.console(quiet))
        if export:
            training.export(Path(cfg.out) / "best", export, card=training.model_card(cfg.out))
        emit(json.dumps(last))


@app.command(name="train-assistant", cls=Command)
def train_assistant(
    model: Model = None,
    assistant: Annotated[
        str | None,
        typer.Option(help="Hugging Face causal LM to fine-tune (e.g. Qwen/Qwen3-0.6B) [default: a new tiny assistant]"),
    ] = None,
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            "-o",
            help="training setting key=value (repeatable; see AssistantTrainConfig in training/train_assistant.py)",
        ),
    ] = None,
    device: Device = "auto",
    export: Annotated[
        str | None, typer.Option(help="after training, copy the best assistant here with a model card")
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Train CoDiLA's assistant for a dLLM (kept frozen) on block-masked canvases; resumes a run folder."""
    from ..training import train_assistant as training
    from . import view

    with reported():
        cfg = training.parse_overrides(option or [], model=model, assistant=assistant, device=device)
        last = view.follow_training(training.logged(cfg), view.console(quiet))
        if export:
            training.export(cfg.out, export)
        emit(json.dumps(last))


Decoders = Annotated[
    list[str] | None, typer.Option("--decoder", "-d", help="decoder to run (repeatable) [default: every decoder]")
]


@app.command(cls=Command)
def compare(
    file: Source,
    span: Annotated[
        str | None,
        typer.Option(
            help="lines A:B to rewrite, 1-based inclusive; omit to fill the file's ⟦fill⟧ markers (no exact match then)"
        ),
    ] = None,
    decoder: Decoders = None,
    samples: Annotated[int, typer.Option("--samples", "-n", help="runs per decoder, with seeds 0..N-1")] = 1,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", help="decoder setting key=value, for the decoders that have it (repeatable)"),
    ] = None,
    sweep: Annotated[
        list[str] | None,
        typer.Option(
            help="key=v1,v2,...: run each value (e.g. guard=false,true); several --sweep run their cartesian product"
        ),
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(help="sampling temperature [default: the decoder's; 1.0 when --samples > 1]", callback=finite),
    ] = None,
    length: Annotated[
        str | None,
        typer.Option(
            help="tokens for the span or every bare ⟦fill⟧, or auto (the length rule sizes them from one probe call: "
            "docs/length.md) [default: the span's own token count; bare ⟦fill⟧ markers: the length rule]"
        ),
    ] = None,
    model: Model = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    family: Family = None,
    trust_remote_code: TrustRemoteCode = False,
    lang: Lang = None,
    offline: Offline = False,
    json_out: Annotated[bool, typer.Option("--json", help="print the results as one JSON object on stdout")] = False,
    quiet: Quiet = False,
) -> None:
    """Run several decoders on the same span N times each: breakage rate, exact match, TPF and speed, live."""
    from ..text import spans

    with reported():
        source = files.read_source(file)
        where = spans.parse_span(span, source) if span is not None else None
        parse_options(option)  # well formed; each decoder checks its own settings below
        run = RunSettings(
            model=ModelChoice(model, device, dtype, family, trust_remote_code, offline),
            length=parse_length(length),
            lang=language(file, lang, required=False),
        )  # decoder, temperature, cache: each config's
        with starting(quiet):
            from ..bench import live, runner
            from . import view
        temp, note = runner.compare_temperature(samples, temperature)
        configs = runner.configs(
            decoder or [], option or [], sweep or [], temp
        )  # each config: its decoder, settings and cache
        dlm = load_model(run.model, quiet)
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


@app.command(cls=Command)
def bench(
    suite: Annotated[
        str,
        typer.Option(
            "--suite",
            "-s",
            help="heldout-single|-multi|-span, humaneval-infill-single|-multi|-span|-span-light, humaneval, or a "
            ".jsonl(.gz) file or a folder",
        ),
    ],
    decoder: Decoders = None,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", help="decoder setting key=value, for the decoders that have it (repeatable)"),
    ] = None,
    sweep: Annotated[
        list[str] | None,
        typer.Option(help="key=v1,v2,...: run each value; several --sweep run their cartesian product"),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="only the first N tasks")] = None,
    seed: Seed = 0,
    length: Annotated[
        int,
        typer.Option(
            help="tokens generated per prompt (humaneval); infill holes get the canonical middle's token count (oracle "
            "length)"
        ),
    ] = 128,
    out: Annotated[
        Path | None,
        typer.Option(
            help="folder for samples.jsonl, summary.json/.csv and pareto.png/.svg; an existing one is resumed"
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="wall-clock seconds per test run", callback=finite)] = 10.0,
    cpu: Annotated[int, typer.Option(help="CPU seconds per test run")] = 5,
    memory: Annotated[
        int,
        typer.Option(
            help="MiB of memory per test run, all its processes together (where no cgroup can be made: per process, "
            "and none may start another)"
        ),
    ] = 1024,
    unsafe_no_sandbox: Annotated[
        bool,
        typer.Option(
            "--unsafe-no-sandbox",
            help="run generated code without OS isolation (only limits and an audit hook) where the sandbox cannot be "
            "built; only on a machine you can throw away",
        ),
    ] = False,
    model: Model = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    family: Family = None,
    trust_remote_code: TrustRemoteCode = False,
    json_out: Annotated[bool, typer.Option("--json", help="print the summary as one JSON object on stdout")] = False,
    quiet: Quiet = False,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="decodes sharing each model forward (padded, masked); results as at 1")
    ] = 1,
    fill_length: Annotated[
        str,
        typer.Option(
            "--fill-length",
            help="infill holes: oracle (the hidden middle's token count), unknown (the length rule sizes them, as "
            "serve and ⟦fill⟧ do), or editor (unknown, then cut after the first line as serve does)",
        ),
    ] = "oracle",
    offline: Offline = False,
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
        run.ranks.join(device)  # under torchrun: join before loading, so a rank that fails tells the others
        with run.ranks.failing_fast():
            choice = ModelChoice(model, run.ranks.device(device), dtype, family, trust_remote_code, offline)
            dlm = load_model(choice, quiet)  # decoding: each config's
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


@app.command(cls=Command)
def speed(
    lengths: Annotated[
        str | None, typer.Option(help="prompt lengths in tokens, comma-separated [default: 128,512,2048; --quick: 128]")
    ] = None,
    gen: Annotated[int | None, typer.Option(help="holes decoded after each prompt [default: 64; --quick: 32]")] = None,
    block: Annotated[
        int,
        typer.Option(
            help="holes a decoder chooses from per call: its `block`; codila keeps B = 4 and gets a window of block // "
            "4 blocks"
        ),
    ] = 32,
    cache: Annotated[
        str | None,
        typer.Option(help="cache modes timed besides none, comma-separated [default: prefix,dual; --quick: prefix]"),
    ] = None,
    repeats: Annotated[int, typer.Option(help="decodes per row; the fastest counts")] = 1,
    decoder: Annotated[
        list[str] | None,
        typer.Option(
            "--decoder",
            "-d",
            help="decoder to time (repeatable) [default: every decoder; --quick: threshold, factor, mean-field]",
        ),
    ] = None,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="a small grid for a first look (seconds, not minutes): a 128-token prompt, 32 holes, no cache and "
            "prefix, low-confidence and three decoders; flags you give win",
        ),
    ] = False,
    guard: Annotated[
        bool,
        typer.Option(
            "--guard",
            help="time every decoder guarded (-o guard=true); the guard's ms per call is a column; then the guard's "
            "time per call on standard-library files of 11, 49 and 229 KB, as a share of one forward",
        ),
    ] = False,
    typos: Annotated[
        int,
        typer.Option(help="with --guard: this many guarded fills beside a typo of the user's (compile once fixed?)"),
    ] = 0,
    against: Annotated[
        Path | None,
        typer.Option(
            help="also time the whole decode of a random 8-layer d512 LLaDA (32k vocabulary) here and with the dlmcode "
            "checkout in this folder (e.g. a worktree of an earlier commit), side by side",
        ),
    ] = None,
    sampling: Annotated[
        bool,
        typer.Option("--sampling", help="also time a call at temperature 1 against 0 with a 126k vocabulary"),
    ] = False,
    model: Model = None,
    shape: Annotated[
        str | None, typer.Option(help="time a random model of a published architecture instead: llada-8b or dream-7b")
    ] = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    family: Family = None,
    trust_remote_code: TrustRemoteCode = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="print the rows and targets as one JSON object on stdout")
    ] = False,
    quiet: Quiet = False,
) -> None:
    """Time each decoder with and without a KV cache: ms per call, decoder overhead, calls, TPF, tokens/s, vs
    low-confidence."""
    with reported():
        with starting(quiet):
            from ..bench import speed as timing
            from . import cpu, view
        cfg = dataclasses.replace(timing.grid(lengths, gen, block, cache, decoder or [], repeats, quick), guard=guard)
        con = view.console(quiet)
        # as for every command: torch's one-per-core default ran several times slower on a busy machine
        cpu.configure_threads()
        with con.status("loading model…"):
            dlm, note = timing.load(ModelChoice(model, device, dtype, family, trust_remote_code), shape)
        rows = view.follow_speed(timing.stream(dlm, cfg), con)
        for line in filter(None, [note]):
            con.print(line, soft_wrap=True)
        table = timing.table(rows, f"speed · {dlm.name} · {dlm.device} · x = ratio to {timing.BASELINE} without cache")
        con.width = max(con.width, 122)  # 12 columns: never cropped, also when stderr is a file
        con.print(table)
        probes = {}
        if against is not None:
            with con.status(f"whole decode, here and in {against}…"):
                probes["whole_decode"] = timing.against(against)
            con.print(timing.probe_line("whole decode", probes["whole_decode"]), soft_wrap=True)
        if sampling:
            with con.status("temperature 1 against 0, 126k vocabulary…"):
                probes["sampling"] = timing.sampling_cost(timing.wide_vocab_model(dlm.device))
            con.print(timing.probe_line("temperature 1 / 0", probes["sampling"]), soft_wrap=True)
        summary = timing.summary(rows, dlm, cfg, probes)
        if guard:
            summary |= guard_costs(dlm, typos, con)
        if json_out:
            emit(json.dumps(summary))


def guard_costs(dlm: Any, typos: int, con: Any) -> dict[str, Any]:
    """`speed --guard`'s second part (bench/guard_cost.py): the guard's cost on standard-library files, and
    fills beside a typo; the tables on stderr, the rows for --json."""
    from ..bench import guard_cost

    rows = []
    for row in guard_cost.cost(dlm):
        con.print(f"guard: {row.file} at {row.tokens_per_step} a call: {row.share:.1%} of a forward", soft_wrap=True)
        rows.append(row)
    con.print(guard_cost.cost_table(rows))
    out: dict[str, Any] = {"guard_files": [r.to_dict() for r in rows]}
    if typos:
        found = guard_cost.typos(dlm, typos)
        con.print(guard_cost.typo_table(found))
        out["guard_typos"] = [r.to_dict() for r in found]
    return out


@app.command(cls=Command)
def serve(
    model: Model = None,
    host: Annotated[str, typer.Option(help="address to listen on; beyond localhost, set --api-key")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port (8012: llama.vim's and llama.vscode's default)")] = 8012,
    decoder: DecoderName = None,
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            "-o",
            help="decoder setting key=value (repeatable); none given: block=8 (left to right, so a fill's end stops "
            "the decode)",
        ),
    ] = None,
    cache: Annotated[
        str,
        typer.Option(
            help="KV cache: none, prefix or dual (Fast-dLLM; approximate; dual measured as good as prefix for serving, "
            "twice as fast)"
        ),
    ] = "dual",
    cache_refresh: CacheRefresh = 0,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="DLMCODE_API_KEY", help="require Authorization: Bearer KEY on every request [env DLMCODE_API_KEY]"
        ),
    ] = None,
    lang: Annotated[
        str | None,
        typer.Option(
            help="language of the syntax rule and breakage [default: python for the built-in model, none otherwise]"
        ),
    ] = None,
    lines: Annotated[int, typer.Option(help="a fill ends after this many non-blank lines; 0 = no limit")] = 1,
    batch: Annotated[
        int,
        typer.Option(help="decodes sharing each model forward (requests waiting, and OpenAI's n); 1 = one at a time"),
    ] = 4,
    device: Device = "auto",
    dtype: Dtype = "auto",
    family: Family = None,
    trust_remote_code: TrustRemoteCode = False,
) -> None:
    """Serve completions to editors: llama.cpp /infill, OpenAI /v1/completions, Ollama /api/generate."""
    with reported("the server stopped"), terminated_stops():
        from .. import decoders
        from ..core.run import CacheSettings
        from ..text import syntax

        options = decoders.parse_options(option if option is not None else ["block=8"])
        decoders.build(decoder, options)  # a bad decoder or setting fails before the model loads
        CacheSettings(cache, refresh=cache_refresh)
        lang_name = syntax.language_for(lang=lang) if lang else None
        if not 0 < port < 65536:
            raise UsageError(f"--port {port}: give 1 to 65535")
        if lines < 0:
            raise UsageError(f"--lines {lines}: give a number of lines, or 0 for no limit")
        check_batch(batch)
        from .. import serve as server

        dlm = load_model(ModelChoice(model, device, dtype, family, trust_remote_code), quiet=False)
        engine = server.Engine(
            dlm,
            decoder,
            options,
            cache,
            cache_refresh,
            lang_name or server.default_lang(dlm),
            model or "dlmcode",
            lines,
            batch,
        )
        stopped_by = server.run(engine, host, port, api_key or None)
    if stopped_by is not None:
        stopped(stopped_by)


@contextlib.contextmanager
def terminated_stops() -> Iterator[None]:
    """SIGTERM while torch imports and the model loads stops as it does while serving (uvicorn's own
    handler takes over then); the handler before is back afterwards (tests run commands in-process)."""
    before = signal.signal(signal.SIGTERM, lambda sig, frame: stopped(sig))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def stopped(sig: int) -> NoReturn:
    """The server's last line, then exit at once: 130 for Ctrl-C, 0 for SIGTERM. Its work is done and
    answered; the interpreter's teardown would only add torch's half second (os._exit skips it)."""
    if sig == signal.SIGTERM:
        typer.echo("dlmcode: stopped by SIGTERM; the server stopped", err=True)
    else:
        typer.echo("dlmcode: interrupted; the server stopped", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if sig == signal.SIGTERM else 130)


def main() -> None:
    app()
