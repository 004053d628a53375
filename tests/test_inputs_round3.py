"""The third round of inputs nobody tried (issue 27), through the real `dlmcode` commands: each is
one line on stderr and the exit code the design gives, or the right result, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cli_run import SOURCE, one_line_error, run

# Thousands of unary operators in a row: CPython's compiler gives up (MemoryError from its parser
# past about 6,000, RecursionError below), so no verdict can be had on this code.
DEEP = "x = " + "not " * 10_000 + "1\n"
TOO_DEEP = "the code is too deeply nested to check"


@pytest.fixture
def deep(tmp_path):
    path = tmp_path / "deep.py"
    path.write_text(SOURCE + DEEP)
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["infill", "--span", "2"],
        ["infill", "--span", "2", "-o", "guard=true"],
        ["infill", "--span", "2", "-d", "syntax-guard"],
        ["generate", "--length", "4"],
        ["compare", "--span", "2", "-d", "threshold"],
    ],
    ids=["infill", "guarded", "syntax-guard", "generate", "compare"],
)
def test_code_too_deep_to_check_is_one_line(model, deep, args):
    line = one_line_error(run(args[0], deep, *args[1:], "-m", model, "-q"), 1)
    assert TOO_DEEP in line


def test_check_reports_every_file_it_can_beside_one_too_deep(tmp_path, deep):
    good, bad = tmp_path / "a.py", tmp_path / "b.go"
    good.write_text("x = 1\n")
    bad.write_text("package main\nfunc main() {\n")
    result = run("check", good, deep, bad)
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert result.stderr == f"dlmcode: error: {deep}: {TOO_DEEP} (Python's compiler gives up)\n"
    assert result.stdout.startswith(f"{bad}:2:")  # the file after the deep one is still checked
    reports = json.loads(run("check", good, deep, bad, "--json").stdout)
    assert [(r["file"], r["ok"], r.get("error", "")[:38]) for r in reports] == [
        (str(good), True, ""),
        (str(deep), False, TOO_DEEP),
        (str(bad), False, ""),
    ]


def test_a_suite_line_of_deep_json_is_one_line(tmp_path):
    suite = tmp_path / "deep.jsonl"
    suite.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    line = one_line_error(run("bench", "-s", suite, "-d", "threshold", "-q"), 1)
    assert line == f"dlmcode: error: {suite}:1: the JSON is too deeply nested to read"


@pytest.mark.parametrize("args", [["--temperature", "1e308"], ["-o", "temperature=1e308"]])
def test_an_absurd_temperature_is_refused_before_decoding(model, source, args):
    """1e308 times the Gumbel noise overflows to inf and the mask token won the argmax (an AssertionError)."""
    line = one_line_error(run("infill", source, "--span", "2", "-m", model, "-q", *args), 2)
    assert "temperature=1e+308 must be 0 to 1000" in line


def test_check_says_fill_markers_are_dlmcodes_own(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    return ⟦fill⟧\n")
    result = run("check", path)
    assert result.exit_code == 1 and result.stdout.startswith(f"{path}:2:")
    assert result.stderr == (
        f"dlmcode: note: {path} holds ⟦fill⟧ markers: dlmcode's own, for `dlmcode infill` to fill; they are not "
        "code, so they count as syntax errors here\n"
    )
    path.write_text("x = '⟦fill⟧'\n")  # a marker in a string breaks nothing: no note
    assert run("check", path).stderr == ""


def test_length_auto_with_every_marker_sized_fills_them(model, tmp_path):
    """Nothing left for the length rule to size: --length auto is the markers' own lengths (a TypeError before)."""
    path = tmp_path / "sized.py"
    path.write_text("def f():\n    return ⟦fill:4⟧\n")
    result = run("infill", path, "--length", "auto", "-m", model, "-q", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["filled"] == 4


@pytest.mark.parametrize("encoding", ["cp1252", "latin-1"])
def test_non_latin_text_on_a_cp1252_or_latin1_stdout_goes_out_as_utf8(model, tmp_path, encoding):
    """PYTHONIOENCODING=cp1252 is what Windows gives a redirected stdout: the code still comes out whole,
    in UTF-8 as it was read, not as a UnicodeEncodeError."""
    path = tmp_path / "日本.py"
    path.write_text("# 日本語のコメント\n" + SOURCE)
    env = os.environ | {"PYTHONIOENCODING": encoding, "HF_HUB_OFFLINE": "1"}
    for args in (["infill", path, "--span", "3", "-m", model, "-q"], ["check", path], ["check", path, "--json"]):
        done = subprocess.run([sys.executable, "-m", "dlmcode", *map(str, args)], capture_output=True, env=env)
        assert done.returncode == 0 and done.stderr == b"", done.stderr.decode(errors="replace")
        if args[0] == "infill":
            assert done.stdout.decode("utf-8").startswith("# 日本語のコメント\ndef add(a, b):\n")
    bad = tmp_path / "壊れた.py"
    bad.write_text("def f(:\n")
    done = subprocess.run([sys.executable, "-m", "dlmcode", "check", str(bad)], capture_output=True, env=env)
    assert done.returncode == 1 and done.stdout.decode("utf-8").startswith(f"{bad}:1:")


@pytest.mark.parametrize(
    "args, says",
    [
        (["--lengths", "100000"], "a prompt of 100000 tokens and 64 holes is past 8192 tokens"),
        (["--lengths", "20000000"], "a prompt of 20000000 tokens and 64 holes is past 8192 tokens"),
        (["--gen", "100000"], "a prompt of 2048 tokens and 100000 holes is past 8192 tokens"),
        (["--lengths", "128", "--gen", "2000"], "give --gen up to 1024 and --repeats up to 100"),
        (["--repeats", "1000000"], "give --gen up to 1024 and --repeats up to 100"),
    ],
)
def test_speed_numbers_are_bounded_before_the_model_loads(tmp_path, args, says):
    """The model named does not exist: the bound answering first shows it is checked before any load."""
    line = one_line_error(run("speed", *args, "-m", tmp_path / "no-model", "-q"), 2)
    assert says in line


def test_compare_samples_are_bounded(model, source):
    line = one_line_error(run("compare", source, "--span", "2", "-n", "1000000000", "-m", model, "-q"), 2)
    assert "--samples 1000000000: give 1 to 1000" in line


def test_speed_shape_past_the_memory_limit_is_one_line():
    """A published 8B shape under a 4 GiB address-space limit (as a container gives): one line, not 133 of traceback."""
    import resource

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    done = subprocess.run(
        [sys.executable, "-m", "dlmcode", "speed", "--shape", "llada-8b", "--device", "cpu", "--quick", "-q"],
        capture_output=True,
        text=True,
        preexec_fn=limited,
        env=os.environ | {"HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr == "dlmcode: error: --shape llada-8b does not fit in cpu memory as float32; try --dtype bf16\n"
