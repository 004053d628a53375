"""What the `dlmcode` commands share beyond their flags: loading the model under a spinner, the
language of a file, the checks that run before torch imports, the live view around a job, and
writing data to stdout."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from ..core import files, output, settings
from ..core.errors import UsageError
from ..core.run import ModelChoice, RunSettings
from .flags import Decode


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


def checked_language(path: str, lang: str | None, source: str) -> str | None:
    """language() for a command that checks its output's syntax: `source` too large to check is one
    line now (syntax.checkable), before the model loads, not gigabytes of parsing after the decode."""
    from ..text import syntax

    name = language(path, lang, required=False)
    if name is not None:
        syntax.checkable(source)
    return name


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


def decoder_checked(run: RunSettings, quiet: bool) -> RunSettings:
    """`run` with its decoder built (jobs/wiring.settled), so a bad name or setting is one line now and the
    decoder checked is the one that decodes: the registry imports torch, so this comes after every cheaper
    check and before the model loads (the family's own decoder is built once the model is known)."""
    with starting(quiet):
        from ..jobs import wiring
    return wiring.settled(run)


def run_settings(
    choice: ModelChoice, decode: Decode, length: str | None, path: str, lang: str | None, text: str, quiet: bool
) -> RunSettings:
    """infill's and generate's run from their flags: every setting checked before torch imports, then the decoder
    built (decoder_checked)."""
    run = RunSettings(
        model=choice,
        length=parse_length(length),
        lang=checked_language(path, lang, text),
        **decode.settings(),
    ).strict()
    return decoder_checked(run, quiet)


def emit(text: str) -> None:
    """A line of data on stdout; a full disk or closed pipe is one error line (output.write_stdout)."""
    output.write_stdout(text + "\n")


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
