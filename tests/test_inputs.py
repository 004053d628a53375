"""The command line's inputs (issue 19): checked before torch imports, one rule for numbers,
bounded reads, full disks, bare-CR line breaks, empty files, and each bad one a single line."""

from __future__ import annotations

import errno
import gzip
import json
import os
import subprocess
import sys

import pytest

from dlmcode import __version__
from dlmcode.core import files

from cli_run import one_line_error, run

SOURCE = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    pass\n"
# Runs the CLI in a fresh process and says on its last stderr line whether torch was imported.
PROBE = (
    "import sys\nfrom dlmcode.cli.commands import main\nsys.argv = ['dlmcode', *sys.argv[1:]]\n"
    "try:\n    main()\nfinally:\n    print('torch' in sys.modules, file=sys.stderr)\n"
)


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "point.py"
    path.write_text(SOURCE)
    return path


def cli(*args, env=None, stdout=subprocess.PIPE, input=None):
    """`dlmcode ARGS` in a fresh process: (returncode, stderr lines but the probe's, torch imported)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, args)],
        capture_output=stdout is None,
        text=True,
        env=os.environ | (env or {}),
        stdout=stdout,
        stderr=subprocess.PIPE,
        input=input,
    )
    *lines, imported = done.stderr.strip().splitlines()
    return done.returncode, lines, imported == "True"


# ---------------------------------------------------------------- 1: checks before torch


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["infill", "nope.py", "--span", "1"], "no such file: nope.py"),
        (["infill", "{src}", "--span", "99"], "past the end of the file"),
        (["infill", "{src}", "--span", "2", "--length", "x"], "--length 'x'"),
        (["infill", "{src}", "--span", "2", "-o", "tau"], "bad -o 'tau'"),
        (["infill", "{src}", "--span", "2", "--device", "gpu"], "--device 'gpu'"),
        (["infill", "{src}", "--span", "2", "--dtype", "fp8"], "--dtype 'fp8'"),
        (["infill", "{src}", "--span", "2", "--cache", "both"], "--cache 'both'"),
        (["generate", "nope.txt"], "no such file"),
        (["compare", "{src}", "--span", "0"], "line numbers start at 1"),
        (["bench", "-s", "nope.jsonl", "--out", "/proc/dlmcode-nope"], "--out /proc/dlmcode-nope"),
    ],
)
def test_bad_input_is_refused_before_torch_imports(source, args, says):
    code, lines, imported = cli(*[a.format(src=source) for a in args])
    assert code != 0 and len(lines) == 1 and says in lines[0], lines
    assert not imported  # about 0.3 s to the error instead of 2 s


def test_a_bad_decoder_setting_is_refused_before_the_model_loads(source, tmp_path):
    missing = tmp_path / "no-model"  # loading it would be the error, were the model loaded first
    assert "unknown decoder 'nope'" in one_line_error(
        run("infill", source, "--span", "2", "-d", "nope", "-m", missing), 2
    )
    assert "bad value 'x' for tau" in one_line_error(
        run("infill", source, "--span", "2", "-d", "threshold", "-o", "tau=x", "-m", missing), 2
    )


# ---------------------------------------------------------------- 2: --version, -h


def test_version_and_h():
    version = run("--version")
    assert version.exit_code == 0 and version.stdout == f"dlmcode {__version__}\n"
    assert run("-h").stdout == run("--help").stdout and "infill" in run("-h").stdout
    short, long = run("infill", "-h"), run("infill", "--help")
    assert short.exit_code == 0 and short.stdout == long.stdout and "--span" in short.stdout


# ---------------------------------------------------------------- 3, 11: numbers


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-o", "block=100000000000000000000"], "100000000000000000000 is out of range"),
        (["-o", "block=-100000000000000000000"], "is out of range"),
        (["-d", "threshold", "-o", "tau=０.５"], "bad value '０.５' for tau"),
        (["-d", "threshold", "-o", "tau=1e400"], "1e400 is not a finite number"),
        (["-o", "block=1_0"], "bad value '1_0' for block"),
        (["--length", "８"], "--length '８'"),
        (["--length", "²"], "--length '²'"),
        (["--seed", "７"], "'--seed': '７' is not a whole number in ASCII digits"),
        (["--temperature", "０.５"], "'--temperature': '０.５' is not a number in ASCII digits"),
        (["--cache-refresh", "1_0"], "'--cache-refresh': '1_0' is not a whole number"),
        (["--span", "9"], "'--span': given 2 times; give it once"),
        (["--length", "4", "--length", "5"], "'--length': given 2 times"),
        (["--device", "cpu:1"], "--device 'cpu:1': only CUDA devices are numbered"),
        (["--device", "cuda:８"], "--device 'cuda:８': unknown device"),
    ],
)
def test_one_rule_for_numbers_and_options_given_once(model, source, args, says):
    line = one_line_error(run("infill", source, "--span", "2", "-m", model, *args), 2)
    assert says in line


def test_fullwidth_span_and_length_are_refused_alike(model, source):
    for flag in (["--span", "７"], ["--span", "2", "--length", "７"], ["--span", "2", "-o", "block=７"]):
        assert "７" in one_line_error(run("infill", source, *flag, "-m", model), 2)


def test_repeatable_options_and_flags_still_repeat(model, source):
    result = run("infill", source, "--span", "2", "-m", model, "-o", "block=4", "-o", "steps=4", "-q", "-q")
    assert result.exit_code == 0, result.stderr


def test_train_settings_follow_the_same_rule():
    assert "bad value '８' for training setting steps" in one_line_error(run("train", "-o", "steps=８"), 2)
    assert "is out of range" in one_line_error(run("train", "-o", "seed=100000000000000000000"), 2)


# ---------------------------------------------------------------- 4: DLMCODE_THREADS


def test_threads_above_the_cores_are_one_line(source, model):
    cores = os.cpu_count()
    code, lines, imported = cli("infill", source, "--span", "2", "-m", model, env={"DLMCODE_THREADS": "100000"})
    assert (code, lines, imported) == (
        2,
        [f"dlmcode: error: DLMCODE_THREADS=100000: this machine has {cores} CPU cores; give 1 to {cores}"],
        False,
    )
    code, lines, _ = cli("infill", source, "--span", "2", "-m", model, env={"DLMCODE_THREADS": "２"})
    assert code == 2 and "give a number of threads" in lines[0]


# ---------------------------------------------------------------- 5: bench --out


@pytest.mark.parametrize("where", ["/proc/dlmcode-xyz", "/sys/dlmcode-xyz", "{file}/sub", "{file}"])
def test_bench_out_is_checked_before_anything_loads(tmp_path, where):
    afile = tmp_path / "afile"
    afile.write_text("x")
    out = where.format(file=afile)
    missing = tmp_path / "no-model"  # the model would fail next; --out must fail first
    line = one_line_error(run("bench", "-s", "humaneval-infill-single", "-m", missing, "--out", out, "--limit", "1"), 2)
    assert line.startswith(f"dlmcode: error: --out {out}")


def test_bench_out_probe_leaves_nothing_behind(tmp_path):
    out = tmp_path / "new" / "runs"
    files.output_folder(out)
    assert not (tmp_path / "new").exists()


def test_bench_out_probed_by_ranks_at_once_never_fails_one(tmp_path):
    """The ranks of one bench probe the same new --out at the same moment: one rank's cleanup must
    not remove the folder another is probing (it did: 'cannot write a file there (No such file or
    directory)' on rank 0, which then never joined, and rank 1 waited for it)."""
    import subprocess
    import sys

    out = tmp_path / "new" / "runs"
    probe = (
        "from pathlib import Path\nfrom dlmcode.core import files\n"
        f"for _ in range(300): files.output_folder(Path({str(out)!r}))"
    )
    procs = [subprocess.Popen([sys.executable, "-c", probe], stderr=subprocess.PIPE, text=True) for _ in range(3)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- 6: suites that are not UTF-8


def test_a_suite_that_is_not_utf8_is_one_line_naming_its_line(tmp_path, model):
    row = {"task_id": "t/0", "prompt": "def f():\n", "suffix": "\n", "canonical_solution": "    return 1\n"}
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(json.dumps(row).encode() + b"\n" + b'{"task_id": "caf\xe9"}\n')
    line = one_line_error(run("bench", "-s", bad, "-m", tmp_path / "no-model"), 1)
    assert line == f"dlmcode: error: {bad}:2: not UTF-8 text (bad byte at column 17)"
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(json.dumps(row).encode())[:20])
    assert f"cannot read {broken}" in one_line_error(run("bench", "-s", broken, "-m", model), 1)


# ---------------------------------------------------------------- 7: full disks


def test_stdout_on_a_full_disk_is_one_line(source, model):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    for args in (["infill", source, "--span", "2", "-m", model, "-q"], ["check", source, "--json"], ["decoders"]):
        with open("/dev/full", "w") as full:
            code, lines, _ = cli(*args, stdout=full, env={"DLMCODE_THREADS": "1"})
        assert (code, lines) == (1, ["dlmcode: error: cannot write to stdout: No space left on device"])


def test_in_place_on_a_full_disk_is_one_line_and_the_file_intact(source, model, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", full)
    line = one_line_error(run("infill", source, "--span", "2", "-m", model, "--in-place", "-q"), 1)
    assert line == f"dlmcode: error: cannot write {source}: No space left on device; it was left unchanged"
    assert source.read_text() == SOURCE
    assert [p.name for p in source.parent.iterdir()] == [source.name]  # no temp file left


# ---------------------------------------------------------------- 8: bounded reads


def limited_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a read without a bound fails here, not on the machine


def test_endless_and_oversized_input_is_one_line(model, source, monkeypatch):
    if os.path.exists("/dev/zero") and sys.platform == "linux":
        done = subprocess.run(
            [sys.executable, "-m", "dlmcode", "infill", "/dev/zero", "--span", "1", "-m", model],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=limited_memory,
        )
        assert (done.returncode, done.stderr) == (
            1,
            "dlmcode: error: /dev/zero is larger than 8 MiB, the most dlmcode reads\n",
        )
    monkeypatch.setattr(files, "MAX_SOURCE", len(SOURCE) - 1)
    assert "stdin is larger than" in one_line_error(run("infill", "-", "--span", "1", "-m", model, input=SOURCE))
    assert "point.py is larger than" in one_line_error(run("check", source))
    monkeypatch.setattr(files, "MAX_SOURCE", len(SOURCE))
    assert run("check", source).exit_code == 0  # exactly the cap is fine


# ---------------------------------------------------------------- 9: empty files


@pytest.mark.parametrize("name", ["__init__.py", "a.js", "a.ts", "a.tsx", "a.go", "a.rs", "A.java", "a.c", "a.cpp"])
def test_check_passes_empty_files(tmp_path, name):
    empty = tmp_path / name
    empty.write_text("")
    blank = tmp_path / f"blank{empty.suffix}"
    blank.write_text("\n   \n")
    result = run("check", empty, blank)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
    assert json.loads(run("check", "-", "--json", input="").stdout)["ok"] is True


# ---------------------------------------------------------------- 10: bare CR


def test_a_bare_cr_is_a_line_break_to_span_as_to_python(model, tmp_path):
    crlines = tmp_path / "cr.py"
    crlines.write_bytes(b"a = 1\rb = (\rc = 3\r")
    assert "which has 3 lines" in one_line_error(run("infill", crlines, "--span", "4", "-m", model), 2)
    checked = run("check", crlines)
    assert f"{crlines}:2:5: '(' was never closed\n" in checked.stdout  # line 2, as Python and --span count
    result = run("infill", crlines, "--span", "2", "-m", model, "-q", "--length", "3")
    assert result.exit_code == 0, result.stderr
    out = result.stdout_bytes
    assert out.startswith(b"a = 1\r") and out.endswith(b"\rc = 3\r") and b"\n" not in out  # the file's own breaks
    whole = run("infill", crlines, "--span", "1:3", "-m", model, "-q", "--diff")
    assert whole.exit_code == 0, whole.stderr


# ---------------------------------------------------------------- 12: check columns


def test_check_json_columns_are_1_based_like_the_text(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n    y = 2\n")
    text = run("check", bad).stdout
    (problem,) = json.loads(run("check", bad, "--json").stdout)["problems"]
    assert text == f"{bad}:2:{problem['column']}: {problem['message']}\n"
    assert problem["column"] == 4 and problem["start_byte"] == 9  # compile() places it at the 4th column, byte offset 9
