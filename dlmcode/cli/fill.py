"""`dlmcode infill` and `dlmcode generate`: one fill or continuation, with its live view on stderr
and the code (or JSON) on stdout."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..core import files, output
from ..core.entry import Command, reported
from ..core.run import ModelChoice
from . import shared
from .app import app
from .flags import (
    DECODE,
    GUARD,
    MODEL,
    Decode,
    HoleLength,
    Json,
    Lang,
    Quiet,
    Source,
    decode_flags,
    finite,
    model_flags,
)
from .shared import emit, run_settings, run_with_view

# One Annotated type a flag, as in every cli module: the shape repeats, the names and help are each command's
# own (flags.py holds the flags several commands share).
Span = Annotated[
    str | None,
    typer.Option(
        help="lines A:B to rewrite, 1-based inclusive ('7' is one line); omit to fill the file's ⟦fill⟧ markers"
    ),
]
InPlace = Annotated[bool, typer.Option("--in-place", "-i", help="replace FILE atomically instead of printing")]
Diff = Annotated[
    bool,
    typer.Option(
        "--diff",
        help="print a unified diff instead of the whole file (with --in-place: as well as writing it; with --json: "
        "as its `diff` field)",
    ),
]
Force = Annotated[
    bool, typer.Option("--force", help="with --in-place, also replace a read-only file (its mode is kept)")
]


@app.command(cls=Command)
@model_flags
@decode_flags
def infill(
    file: Source,
    span: Span = None,
    length: HoleLength = None,
    choice: ModelChoice = MODEL,  # --model, --device, ... (flags.model_flags)
    decode: Decode = DECODE,  # --decoder, -o, --seed, --temperature, --cache, ... (flags.decode_flags)
    lang: Lang = None,
    in_place: InPlace = False,
    diff: Diff = False,
    force: Force = False,
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
        run = run_settings(choice, decode, length, file, lang, source, quiet)
        from ..jobs import fill

        job = fill.infill_job(source, where, shared.load_model(run.model, quiet), run)
        result = run_with_view(job, quiet, json_out=False)
        text = output.keep_line_endings(source, result.text)  # a CRLF file gets CRLF inside the fill too
        patch = output.unified_diff(source, text, file) if diff else None
        if original is not None:
            files.replace_if_unchanged(original, text)
        if json_out:
            extra = {"text": text} | ({"diff": patch} if diff else {})
            emit(json.dumps(result.to_dict() | extra, ensure_ascii=False))
        elif patch is not None:
            output.write_stdout(patch)
        elif not in_place:
            output.write_stdout(text)


GenerateLength = Annotated[
    str,
    typer.Option(help="tokens to generate, or auto (the length rule reads it from one probe call: docs/length.md)"),
]
Chat = Annotated[
    bool | None,
    typer.Option(
        "--chat/--no-chat", help="wrap the prompt in the model's chat template [default: when the model has one]"
    ),
]
EosPenalty = Annotated[
    float, typer.Option(help="Dream-Coder: subtract this from the end-of-text logit", callback=finite)
]


@app.command(cls=Command)
@model_flags
@decode_flags
def generate(
    prompt_file: Source,
    length: GenerateLength = "128",
    choice: ModelChoice = MODEL,  # --model, --device, ... (flags.model_flags)
    decode: Decode = DECODE,  # --decoder, -o, --seed, --temperature, --cache, ... (flags.decode_flags)
    lang: Lang = None,
    chat: Chat = None,
    raw: Annotated[bool, typer.Option(help="with --chat, print the whole reply, not just its code blocks")] = False,
    logits_eos_inf: Annotated[bool, typer.Option(help="LLaDA: never propose end-of-text")] = False,
    confidence_eos_eot_inf: Annotated[bool, typer.Option(help="LLaDA: commit end-of-text/turn proposals last")] = False,
    eos_penalty: EosPenalty = 0.0,
    json_out: Json = False,
    quiet: Quiet = False,
) -> None:
    """Continue a prompt (or answer a request, with a chat model) and print the code."""
    with reported():
        prompt = files.read_source(prompt_file)
        run = run_settings(choice, decode, length, prompt_file, lang, prompt, quiet)
        from ..jobs import fill, processors, wiring

        eos = processors.EndOfText(logits_eos_inf, confidence_eos_eot_inf, eos_penalty)
        dlm = shared.load_model(run.model, quiet)
        if GUARD not in decode.asked() and (chat if chat is not None else dlm.chat is not None):
            run = wiring.default_guard(run)  # a chat reply's code is cut out after decoding
        job = fill.generate_job(prompt, dlm, run, chat=chat, raw=raw, eos=eos)
        result = run_with_view(job, quiet, json_out)
        if not json_out:  # a text file's last line ends in a newline, so the shell prompt starts on its own
            output.write_stdout(result.text if result.text.endswith("\n") else result.text + "\n")
