"""The third round of inputs nobody tried (issue 27), through the real `dlmcode` commands: each is
one line on stderr and the exit code the design gives, or the right result, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
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


# The command run in a fresh interpreter that reports, whatever the command's end, its own peak memory (KiB).
# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across fork and exec, so a child of a pytest that
# has grown to 1.3 GB reported 1.3 GB whatever it used itself; VmHWM belongs to the process's own memory map.
PEAK = """
import sys
from dlmcode.cli.commands import main
sys.argv = ["dlmcode", *sys.argv[2:]]
try:
    main()
finally:
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(PEAK_FILE, "w") as f:
        f.write(peak)
"""


def peak_run(tmp_path, *args) -> tuple[subprocess.CompletedProcess, int]:
    """`dlmcode ARGS` in its own process, and its peak resident memory in MB."""
    peak = tmp_path / "peak"
    code = PEAK.replace("PEAK_FILE", repr(str(peak)))
    done = subprocess.run(
        [sys.executable, "-c", code, "-", *map(str, args)],
        capture_output=True,
        env=os.environ | {"HF_HUB_OFFLINE": "1"},
    )
    return done, int(peak.read_text()) // 1024


def eight_mib_line(path):
    """Two short lines, then one 8 MiB line of `x = 1 + 1 + ...` (the file cap is 8 MiB)."""
    head = "def f():\n    return 1\nx = 1"
    path.write_text(head + " + 1" * ((8 << 20) - len(head) - 1 >> 2) + "\n")
    return path


def test_a_fill_of_an_8_mib_one_line_file_takes_under_500_mb(model, tmp_path):
    """Without a language to check, the fill runs: only the window's tokens are made (2.4 GB for the
    whole line before). With one (.py), the code is too large to check: one line before the model loads
    (tree-sitter took 660 MB and compile() 890 MB on it)."""
    text = eight_mib_line(tmp_path / "big.txt")
    done, mb = peak_run(tmp_path, "infill", text, "--span", "2", "-m", model, "-q")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert mb < 500, mb
    assert done.stdout.startswith(b"def f():\n") and done.stdout.endswith(text.read_bytes()[-4096:])
    code = eight_mib_line(tmp_path / "big.py")
    done, mb = peak_run(tmp_path, "infill", code, "--span", "2", "-m", model, "-q")
    assert done.returncode == 1 and mb < 500, (done.stderr, mb)
    assert done.stderr == b"dlmcode: error: the code is too large to check (8.0 MiB; dlmcode checks at most 1 MiB)\n"


@pytest.mark.parametrize(
    "name, text",
    [
        ("cr.py", SOURCE.replace("\n", "\r")),  # bare CR (classic Mac)
        ("mixed.py", SOURCE.replace("\n", "\r\n", 3).replace("\n", "\r", 2)),  # LF, CRLF and CR in one file
        ("two\nlines.py", SOURCE),  # a line break in the name
        ('tab\t"quote".py', SOURCE),
    ],
    ids=["bare-cr", "mixed", "newline-in-name", "tab-and-quote-in-name"],
)
@pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")
def test_diff_applies_with_patch(model, tmp_path, monkeypatch, name, text):
    """`--diff` is a patch `patch -p1` applies, giving what infill prints (it wrote `\\ No newline` mid-hunk
    for bare CRs, and split the header at a newline in the name)."""
    monkeypatch.chdir(tmp_path)  # the diff names the file as given: relative, as a user runs it
    (tmp_path / name).write_bytes(text.encode())
    whole = run("infill", name, "--span", "2", "-m", model, "-q").stdout_bytes
    result = run("infill", name, "--span", "2", "-m", model, "-q", "--diff")
    assert result.exit_code == 0 and whole != text.encode(), result.stderr
    done = subprocess.run(["patch", "-p1", "--batch"], input=result.stdout_bytes, capture_output=True)
    assert done.returncode == 0, (done.stdout, done.stderr, result.stdout)
    assert (tmp_path / name).read_bytes() == whole


def test_syntax_guard_refuses_to_run_unguarded(model, source):
    """README: syntax-guard always guards; `-o guard=false` was accepted and silently ignored."""
    line = one_line_error(
        run("infill", source, "--span", "2", "-d", "syntax-guard", "-o", "guard=false", "-m", model), 2
    )
    assert "guard=False syntax-guard always guards; `-d factor` is its rule unguarded" in line


def test_a_guard_sweep_passes_syntax_guard_by(model, source):
    """compare --sweep guard=false,true over several decoders: syntax-guard runs once (guarded), not refused."""
    args = ["compare", source, "--span", "2", "-d", "syntax-guard", "-d", "threshold", "--sweep", "guard=false,true"]
    result = run(*args, "-m", model, "-q", "--json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["decoders"]
    assert sorted((r["decoder"], r["settings"]["guard"]) for r in rows) == [
        ("syntax-guard", True),
        ("threshold", False),
        ("threshold", True),
    ]


def test_generate_ends_its_output_with_a_newline(model, tmp_path):
    prompt = tmp_path / "p.py"
    prompt.write_text("def add(a, b):\n")
    args = ["generate", prompt, "--length", "4", "-m", model, "-q"]
    text = json.loads(run(*args, "--json").stdout)["text"]
    assert not text.endswith("\n")  # this fill ends mid-line, so the newline is the command's
    assert run(*args).stdout == text + "\n"


def test_help_keeps_its_default_notes_and_writes_arguments_plainly():
    """Rich markup took `[default: ...]` for a tag and dropped it; Typer 0.29 wrote `{file}` and `<bool>`."""
    text = run("infill", "-h").stdout
    assert " infill [OPTIONS] FILE\n" in text
    flat = " ".join(text.split())  # help wraps to the terminal's width
    assert "[default: the built-in model]" in flat and "[default: the decoder's]" in flat
    assert "<bool>" not in text and "{" not in text
    assert "hub id (downloaded once, then cached)" in flat
    assert " check [OPTIONS] FILE...\n" in run("check", "-h").stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (["--timeout", "1e308"], "sandbox timeout must be at most 3600.0, got 1e+308"),
        (["--cpu", "9223372036854775807"], "sandbox cpu must be at most 3600"),
        (["--memory", "9223372036854775807"], "sandbox memory_mb must be at most 1048576"),
    ],
)
def test_bench_sandbox_limits_are_bounded_before_the_model_loads(tmp_path, args, says):
    """--timeout 1e308 overflowed the sandbox's timer (an OverflowError traceback after the decode)."""
    suite = tmp_path / "one.jsonl"
    task = {"task_id": "t/0", "prompt": "def f():\n", "suffix": "\n", "canonical_solution": "    return 1\n"}
    suite.write_text(json.dumps(task | {"test": "def check(c):\n    assert c() == 1\n", "entry_point": "f"}) + "\n")
    line = one_line_error(run("bench", "-s", suite, "-d", "threshold", "-m", tmp_path / "no-model", "-q", *args))
    assert says in line
