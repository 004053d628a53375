"""`dlmcode check` (syntax errors, like a linter) and `dlmcode decoders` (the registry): the
commands that need no model."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..core import files
from ..core.entry import Command, reported
from ..core.errors import UsageError
from .app import app
from .flags import Json, Lang
from .shared import emit, language


@app.command(cls=Command)
def check(
    file: Annotated[
        list[str], typer.Argument(help="files, or - to read stdin; each in its own language", metavar="FILE")
    ],
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
    except syntax.Uncheckable as err:
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


@app.command(name="models", cls=Command)
def list_models(json_out: Json = False) -> None:
    """List the model families: what each runs, its attention, its canvas, its own decoder, how it fills a span and
    how the server runs concurrent requests."""
    from ..models import families

    with reported():
        if json_out:
            emit(json.dumps([f.to_dict() for f in families.ROWS], indent=2))
            return
        for f in families.ROWS:
            emit(f"{f.name}: {f.models}")
            emit(f"    attention {f.attention}; canvas of {f.canvas}; decoder {f.decoder}; infill {f.infill}")
            emit(f"    runs on {f.runs_on}; serve: {f.serve}; checked: {f.checked}")
