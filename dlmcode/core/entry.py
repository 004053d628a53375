"""How every entry point reports: the `dlmcode` commands and each `python -m dlmcode.…` module.

One rule for all of them (docs/design.md's rules): an error is one line on stderr and a
non-zero exit (2 for usage, 1 for the rest, 130 for Ctrl-C); an option is given once; a
number is written in ASCII digits. The commands themselves live in dlmcode/cli/ and in the
training modules; this module is below both, so neither imports the other for it.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from . import settings
from .errors import DlmcodeError

ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class OneLine:
    """Usage errors (`--seed abc`, an unknown flag) as one line on stderr and exit 2, like every
    other error here, in place of Typer's boxed panel."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except ClickException as err:
            if (
                type(err).__name__ == "NoArgsIsHelpError"
            ):  # `dlmcode` alone: its help (Typer's rich help printed it already)
                if err.format_message().strip():
                    typer.echo(err.format_message())
            else:
                typer.echo(f"dlmcode: error: {usage_line(err)}", err=True)
            code = err.exit_code
        except typer.Abort:
            typer.echo("dlmcode: aborted", err=True)
            code = 1
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


class StrictOptions:
    """Options given once, numbers in ASCII digits: checked on the raw arguments before Click
    converts them, since Click keeps only the last of a repeated option (`--span 7 --span 9`
    ran line 9) and its int() and float() take fullwidth digits (`--length ８`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        opts, _, order = self.make_parser(ctx).parse_args(args=list(args))  # raw strings, every occurrence in order
        for param, times in Counter(order).items():
            if times > 1 and takes_one_value(param):
                raise typer.BadParameter(f"given {times} times; give it once", ctx=ctx, param=param)
        for param in self.get_params(ctx):
            check_numbers(param, opts.get(param.name), ctx)
        return super().parse_args(ctx, args)


def takes_one_value(param: Any) -> bool:
    """An option with one value (not a flag, a counter or a repeatable option)."""
    return param.param_type_name == "option" and not (param.is_flag or param.count or param.multiple)


NUMBER_PARSERS = {int: settings.to_int, float: settings.to_float}


def number_type(param: Any) -> type | None:
    """int, float or None: the option's type as Typer >= 0.22 describes it, or as Click does."""
    described = getattr(param, "type_descriptor", None)
    if described is not None:
        return described.annotation if described.annotation in (int, float) else None
    return {"integer": int, "float": float}.get(getattr(getattr(param, "type", None), "name", None))


def check_numbers(param: Any, raw: Any, ctx: Any) -> None:
    """A numeric option's raw value(s) under settings.py's rule: ASCII digits, ints within int64."""
    parse = NUMBER_PARSERS.get(number_type(param))
    if parse is None or raw is None:
        return
    for value in raw if isinstance(raw, list | tuple) else [raw]:
        try:
            parse(value)
        except ValueError as err:
            what = "a whole number" if parse is settings.to_int else "a number"
            why = str(err) if isinstance(err, settings.OutOfRange) else f"{value!r} is not {what} in ASCII digits"
            raise typer.BadParameter(why, ctx=ctx, param=param) from None


class PlainUsage:
    """Arguments on the usage line as Click and man pages write them (FILE, FILE...): Typer 0.29 writes
    a required one {FILE}, which reads as a literal brace or a choice."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [REQUIRED_BRACES.sub(r"\1\2", piece) for piece in super().collect_usage_pieces(ctx)]


REQUIRED_BRACES = re.compile(r"^\{(.*)\}(\.\.\.)?$")


class OneLineErrors(OneLine, TyperGroup):
    """The `dlmcode` group, with one-line usage errors."""


class Command(PlainUsage, StrictOptions, TyperCommand):
    """A `dlmcode` command: each option given once, numbers in ASCII digits."""


class OneLineCommand(OneLine, PlainUsage, StrictOptions, TyperCommand):
    """A module's own command (`python -m dlmcode.training.train`), with one-line usage errors."""


def one_command(function: Any) -> typer.Typer:
    """A Typer app of the one command `function`, for a module entry point (`python -m
    dlmcode.training.evaluate`, `python -m benchmarks.serve_load`): every `python -m` module starts
    this way (or as a `command_group`), so its usage errors and its DlmcodeErrors are one line here."""
    single = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False, rich_markup_mode=None)
    single.command(cls=OneLineCommand)(reporting(function))
    return single


def command_group(help: str | None) -> typer.Typer:
    """A Typer app of several commands (`python -m dlmcode.training.corpus build|tokenize|pin`);
    add each with `group_command(app)`."""
    return typer.Typer(
        cls=OneLineErrors, add_completion=False, no_args_is_help=True, help=help, pretty_exceptions_show_locals=False
    )


def group_command(app: typer.Typer) -> Any:
    """Register a function as one command of a `command_group`, its errors reported as one line."""
    return lambda function: app.command(cls=Command)(reporting(function))


def reporting(function: Any) -> Any:
    """`function` run inside `reported()`; Typer reads its parameters through functools.wraps."""

    @functools.wraps(function)
    def command(*args: Any, **kwargs: Any) -> Any:
        with reported():
            return function(*args, **kwargs)

    return command


def usage_line(err: Any) -> str:
    """Click's message on one line, with the command to ask for help."""
    text = " ".join(err.format_message().split())
    ctx = getattr(err, "ctx", None)
    return f"{text} (see `{ctx.command_path} --help`)" if ctx is not None else text


@contextlib.contextmanager
def reported(interrupted: str = "no file was changed") -> Iterator[None]:
    """Turn user errors into one stderr line and an exit code; Ctrl-C into exit 130."""
    try:
        yield
    except DlmcodeError as err:
        typer.echo(f"dlmcode: error: {err}", err=True)
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt:
        typer.echo(f"dlmcode: interrupted; {interrupted}", err=True)
        raise typer.Exit(130) from None
