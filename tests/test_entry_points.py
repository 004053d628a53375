"""Every `python -m` entry point starts and reports errors the same way (dlmcode/core/entry.py):
a usage error or a DlmcodeError is one line on stderr, `dlmcode: error: ...`, and its exit code."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "dlmcode.training.train",
    "dlmcode.training.train_assistant",
    "dlmcode.training.evaluate",
    "dlmcode.training.corpus.__main__",
    "benchmarks.serve_load",
    "benchmarks.serve_length",
    "benchmarks.sandbox_cost",
    "benchmarks.length_probe",
    "benchmarks.threads",
    "benchmarks.merge",
    "benchmarks.gpu_check",
]


def exit_code(module: str, args: list[str]) -> int:
    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(module).main(args)
    return stopped.value.code


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
