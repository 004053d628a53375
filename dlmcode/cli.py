"""The `dlmcode` command line: thin Typer commands over the library.

stdout carries only data (code, or one JSON document with --json); the live view, the
summary line, warnings and errors go to stderr. Exit codes: 0 ok, 1 error (or syntax
errors found by `check`), 2 usage error, 130 interrupted.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from . import files
from .errors import DlmcodeError, UsageError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="Generate and edit code with diffusion language models, and see which decoders break syntax.",
)

Source = Annotated[str, typer.Argument(help="a file, or - to read stdin")]
Model = Annotated[str | None, typer.Option("--model", "-m", help="model folder or cached hub id [default: the built-in model]")]
DecoderName = Annotated[str, typer.Option("--decoder", "-d", help="decoder name (see `dlmcode decoders`)")]
Options = Annotated[list[str] | None, typer.Option("--option", "-o", help="decoder setting key=value (repeatable)")]
Seed = Annotated[int, typer.Option(help="seed of the decoder's random generator")]
Temperature = Annotated[float | None, typer.Option(help="sampling temperature; 0 = greedy [default: the decoder's]")]
Device = Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps")]
Dtype = Annotated[str, typer.Option(help="auto (bf16 on CUDA, fp32 elsewhere), float32, bfloat16, float16")]
Family = Annotated[str | None, typer.Option(help="model family, when detection from config.json is wrong")]
TrustRemoteCode = Annotated[bool, typer.Option(help="allow a model's own Python code to run")]
Lang = Annotated[str | None, typer.Option(help="language for syntax checks [default: from the file extension; python for stdin]")]
Json = Annotated[bool, typer.Option("--json", help="print one JSON object on stdout instead of the code")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="no live view or summary on stderr")]


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """Turn user errors into one stderr line and an exit code; Ctrl-C into exit 130."""
    try:
        yield
    except DlmcodeError as err:
        typer.echo(f"dlmcode: error: {err}", err=True)
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt:
        typer.echo("dlmcode: interrupted; no file was changed", err=True)
        raise typer.Exit(130) from None


def load_model(model: str | None, device: str, dtype: str, family: str | None, trust_remote_code: bool, quiet: bool) -> Any:
    from . import view
    from .models import load

    with view.console(quiet).status("loading model…"):
        return load(model, device=device, dtype=dtype, family=family, trust_remote_code=trust_remote_code)


def language(path: str, lang: str | None, required: bool) -> str | None:
    """--lang, else the file extension, else python for stdin; None when unknown and not required."""
    from . import syntax

    if lang is not None or path == files.STDIN:
        return syntax.language_for(lang=lang or "python")
    try:
        return syntax.language_for(path=path)
    except UsageError:
        if required:
            raise
        return None


def parse_length(length: str | None) -> int | None:
    if length is None:
        return None
    if not length.isdigit() or int(length) <= 0:
        raise UsageError(f"--length {length!r}: give a positive number of tokens")
    return int(length)


def run_job(job: Any, quiet: bool, json_out: bool) -> Any:
    from . import view

    out = view.console(quiet)
    result = job.run(view.CanvasView(job, out).follow)
    out.print(view.summary(result), soft_wrap=True)
    if json_out:
        typer.echo(json.dumps(result.to_dict(), ensure_ascii=False))
    return result


@app.command()
def infill(
    file: Source,
    span: Annotated[str | None, typer.Option(help="lines A:B to rewrite, 1-based inclusive ('7' is one line); omit to fill the file's ⟦fill⟧ markers")] = None,
    length: Annotated[str | None, typer.Option(help="tokens for the span [default: the original span's token count]")] = None,
    model: Model = None,
    decoder: DecoderName = "low-confidence",
    option: Options = None,
    seed: Seed = 0,
    temperature: Temperature = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    family: Family = None,
    trust_remote_code: TrustRemoteCode = False,
    lang: Lang = None,
    in_place: Annotated[bool, typer.Option("--in-place", "-i", help="replace FILE atomically instead of printing")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="print a unified diff instead of the whole file")] = False,
    json_out: Json = False,
    quiet: Quiet = False,
) -> None:
    """Rewrite lines A..B of a file (or its ⟦fill⟧ markers) and print the whole file."""
    from . import decoders, fill, spans

    with reported():
        if in_place and file == files.STDIN:
            raise UsageError("--in-place needs a file, not stdin")
        source = files.read_source(file)
        where = spans.parse_span(span, source) if span is not None else None
        options = decoders.parse_options(option or [])
        n, lang_name = parse_length(length), language(file, lang, required=False)
        dlm = load_model(model, device, dtype, family, trust_remote_code, quiet)
        job = fill.prepare_infill(source, where, dlm=dlm, decoder=decoder, options=options, length=n,
                                  seed=seed, temperature=temperature, lang=lang_name)
        result = run_job(job, quiet, json_out)
        if in_place:
            files.write_atomic(file, result.text)
        elif not json_out:
            sys.stdout.write(files.unified_diff(source, result.text, file) if diff else result.text)


@app.command()
def generate(
    prompt_file: Source,
    length: Annotated[int, typer.Option(help="tokens to generate")] = 128,
    model: Model = None,
    decoder: DecoderName = "low-confidence",
    option: Options = None,
    seed: Seed = 0,
    temperature: Temperature = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    family: Family = None,
    trust_remote_code: TrustRemoteCode = False,
    lang: Lang = None,
    chat: Annotated[bool | None, typer.Option("--chat/--no-chat", help="wrap the prompt in the model's chat template [default: when the model has one]")] = None,
    raw: Annotated[bool, typer.Option(help="with --chat, print the whole reply, not just its code blocks")] = False,
    logits_eos_inf: Annotated[bool, typer.Option(help="LLaDA: never propose end-of-text")] = False,
    confidence_eos_eot_inf: Annotated[bool, typer.Option(help="LLaDA: commit end-of-text/turn proposals last")] = False,
    eos_penalty: Annotated[float, typer.Option(help="Dream-Coder: subtract this from the end-of-text logit")] = 0.0,
    json_out: Json = False,
    quiet: Quiet = False,
) -> None:
    """Continue a prompt (or answer a request, with a chat model) and print the code."""
    from . import decoders, fill

    with reported():
        prompt = files.read_source(prompt_file)
        options = decoders.parse_options(option or [])
        if length <= 0:
            raise UsageError(f"--length {length}: give a positive number of tokens")
        eos = fill.EndOfText(logits_eos_inf, confidence_eos_eot_inf, eos_penalty)
        lang_name = language(prompt_file, lang, required=False)
        dlm = load_model(model, device, dtype, family, trust_remote_code, quiet)
        job = fill.prepare_generate(prompt, dlm=dlm, decoder=decoder, options=options, length=length, seed=seed,
                                    temperature=temperature, lang=lang_name, chat=chat, raw=raw, eos=eos)
        result = run_job(job, quiet, json_out)
        if not json_out:
            sys.stdout.write(result.text)


@app.command()
def check(
    file: Source,
    lang: Lang = None,
    json_out: Json = False,
) -> None:
    """Report syntax errors, like a linter: exit 1 when there are any."""
    from . import syntax

    with reported():
        source = files.read_source(file)
        report = syntax.check(source, language(file, lang, required=True))
        if json_out:
            typer.echo(json.dumps(report.to_dict()))
        name = "stdin" if file == files.STDIN else file
        for problem in report.problems:
            typer.echo(f"{name}:{problem.line}:{problem.column + 1}: {problem.message}", err=json_out)
        if not report.ok:
            raise typer.Exit(1)


@app.command(name="decoders")
def list_decoders(json_out: Json = False) -> None:
    """List the decoders with their settings and defaults."""
    from . import decoders

    described = [decoders.describe(name) for name in decoders.DECODERS]
    if json_out:
        typer.echo(json.dumps(described, indent=2))
        return
    for entry in described:
        typer.echo(f"{entry['name']}: {entry['description']}")
        for s in entry["settings"]:
            typer.echo(f"    {s['name']} ({s['type']}, default {s['default']}): {s['help']}")


@app.command()
def train(
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="training setting key=value (repeatable; see dlmcode/train.py TrainConfig)")] = None,
    quiet: Quiet = False,
) -> None:
    """Train the built-in dLLM (tokenizer and model) on this Python's standard library; resumes a run folder."""
    from . import train as training
    from . import view

    with reported():
        cfg = training.parse_overrides(option or [])
        last = view.follow_training(training.logged(cfg), view.console(quiet))
        typer.echo(json.dumps(last))


def main() -> None:
    app()
