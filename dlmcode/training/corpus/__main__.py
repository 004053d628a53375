"""`python -m dlmcode.training.corpus build|tokenize|pin`: thin Typer commands over the corpus library.
Progress records go to stderr as JSON lines; the final record (or summary) to stdout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from ...core.entry import command_group, group_command
from ...core.errors import DlmcodeError

app = command_group(__doc__)
DEFAULT_CACHE = Path.home() / ".cache" / "dlmcode" / "corpus-wheels"
Cache = Annotated[Path, typer.Option(help="where downloaded wheels are kept (checked against the manifest's sha256)")]


@contextmanager
def one_line() -> Iterator[None]:
    """A refused licence or a file error as a DlmcodeError, so that it is one line like any other."""
    from .licenses import LicenseRefused

    try:
        yield
    except (LicenseRefused, OSError) as error:
        raise DlmcodeError(str(error)) from None


def emit(records) -> dict:
    last = {}
    for last in records:
        typer.echo(json.dumps(last), err=True)
    typer.echo(json.dumps(last))
    return last


@group_command(app)
def build(
    out: Annotated[
        Path, typer.Argument(help="output folder (train.jsonl.gz, eval.jsonl.gz, NOTICES.md, report.json, SHA256)")
    ],
    cache: Cache = DEFAULT_CACHE,
    manifest: Annotated[
        Path | None, typer.Option(help="manifest.json to build from [default: the one shipped]")
    ] = None,
) -> None:
    """Download the pinned releases (pip, hashes checked) and build the cleaned corpus."""
    from . import build as building
    from . import fetch

    with one_line():
        emit(building.build(out, cache, manifest or fetch.MANIFEST))


@group_command(app)
def tokenize(
    corpus: Annotated[Path, typer.Argument(help="a folder written by `build`")],
    out: Annotated[Path, typer.Argument(help="output folder: tokenizer.json, train.u16.xz, valid.u16.xz, meta.json")],
    vocab_size: Annotated[
        int, typer.Option(help="BPE vocabulary of the new tokenizer (incl. 4 special tokens)")
    ] = 4096,
    tokenizer: Annotated[
        Path | None, typer.Option(help="use this tokenizer.json instead of training one on the corpus")
    ] = None,
    fraction: Annotated[
        float, typer.Option(help="keep this share of the training files (a fixed hash of the path); validation: all")
    ] = 1.0,
) -> None:
    """Tokenize a built corpus into the compact file `dlmcode train -o data=OUT` reads."""
    from . import tokens

    with one_line():
        emit(tokens.tokenize(corpus, out, vocab_size, tokenizer, fraction))


@group_command(app)
def pin(
    specs: Annotated[list[str], typer.Argument(help="releases as name==version")],
    role: Annotated[str, typer.Option(help="train, or eval for a held-out package")] = "train",
    cache: Cache = DEFAULT_CACHE,
    manifest: Annotated[Path | None, typer.Option(help="manifest.json to update [default: the one shipped]")] = None,
) -> None:
    """Download releases, check their licences, and add (or re-pin) them in the manifest."""
    from . import fetch

    path = manifest or fetch.MANIFEST
    with one_line():
        pinned = fetch.pin(specs, cache, role)
    releases = fetch.load_manifest(path) if path.exists() else []
    names = {fetch.canonical(r.name) for r in pinned}
    releases = [r for r in releases if fetch.canonical(r.name) not in names] + pinned
    fetch.save_manifest(releases, path)
    for r in pinned:
        typer.echo(f"{r.spec} {r.license} {r.file} sha256:{r.sha256}")


def main(args: list[str] | None = None) -> None:
    app(args, prog_name="python -m dlmcode.training.corpus")


if __name__ == "__main__":
    main()
