"""The `dlmcode` Typer group: its name, help, `--version`; the commands register on it from
their family modules (dlmcode/cli/commands.py imports them all)."""

from __future__ import annotations

from typing import Annotated

import typer

from .. import __version__
from ..core.entry import OneLineErrors

HELP_NAMES = {"help_option_names": ["-h", "--help"]}  # commands inherit it from the group's context


app = typer.Typer(
    cls=OneLineErrors,
    rich_markup_mode=None,  # plain help: rich markup took every "[default: ...]" note for a tag and dropped it
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
