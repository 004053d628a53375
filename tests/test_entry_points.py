"""Every `python -m` entry point starts and reports errors the same way (dlmcode/core/entry.py):
a usage error or a DlmcodeError is one line on stderr, `dlmcode: error: ...`, and its exit code."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def entry_modules() -> list[str]:
    """Every `python -m` module of the package and of benchmarks/, found by its `__main__` guard
    (or its name), so that a new one is held to the rule too; `python -m dlmcode` is the CLI's own."""
    found = []
    for path in sorted([*ROOT.joinpath("dlmcode").rglob("*.py"), *ROOT.joinpath("benchmarks").glob("*.py")]):
        if path.name == "__main__.py" or 'if __name__ == "__main__"' in path.read_text(encoding="utf-8"):
            found.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return [m for m in found if m != "dlmcode.__main__"]


MODULES = entry_modules()


def exit_code(module: str, args: list[str]) -> int:
    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(module).main(args)
    return stopped.value.code


def test_every_entry_point_is_found():
    assert {"dlmcode.training.corpus.__main__", "dlmcode.training.train", "benchmarks.serve_load"} <= set(MODULES)
    assert len(MODULES) >= 11


@pytest.mark.parametrize("module", MODULES)
def test_an_unknown_option_is_one_line_and_exit_2(module, capsys):
    assert exit_code(module, ["--no-such-option"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("dlmcode: error: No such option: --no-such-option")


def test_a_module_error_is_the_same_one_line(tmp_path, capsys):
    """The corpus printed its own `error: ...` (and a benchmark raised SystemExit with its own words)."""
    assert exit_code("dlmcode.training.corpus.__main__", ["tokenize", str(tmp_path / "none"), str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"dlmcode: error: {tmp_path / 'none'} holds no train.jsonl.gz")
