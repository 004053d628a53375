"""The `dlmcode` command run in-process, as the CLI tests run it, and what a user error must look like."""

from __future__ import annotations

from typer.testing import CliRunner

from dlmcode.cli.commands import app

# A small file to infill: the CLI tests' `source` fixture (conftest.py) writes it as point.py.
SOURCE = (
    "def add(a, b):\n    return a + b\n\n\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n     "
    "   self.y = y\n"
)


def run(*args, input=None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def one_line_error(result, code=None) -> str:
    """A user error: non-zero exit, exactly one `dlmcode: error:` line on stderr, no traceback, nothing on stdout."""
    assert result.exit_code != 0, result.stdout
    if code is not None:
        assert result.exit_code == code, result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlmcode: error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return lines[0]
