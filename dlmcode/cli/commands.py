"""The `dlmcode` command line: thin Typer commands over the library.

stdout carries only data (code, or one JSON document with --json); the live view, the
summary line, warnings and errors go to stderr. Exit codes: 0 ok, 1 error (or syntax
errors found by `check`), 2 usage error, 130 interrupted (Ctrl-C); `serve` stopped by
SIGTERM (a service manager's stop) exits 0 after one line: that is its normal end.

Each command checks what it was given (files, spans, numbers, settings, the --out folder)
before it imports torch (about 2 s) and before it loads a model, cheapest first: a typo
costs a tenth of a second, not a model load.

The commands live by family: fill (infill, generate), check (check, decoders), bench (compare,
bench), speed, serve, train; they share their flags (flags.py) and helpers (shared.py), and
register on the one Typer group (app.py). This module gathers them: `dlmcode` starts here.
"""

from __future__ import annotations

from . import bench, check, fill, serve, speed, train  # noqa: F401 (each registers its commands on app)
from .app import app

__all__ = ["app", "main"]


def main() -> None:
    app()
