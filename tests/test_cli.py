"""The command line: stdout carries only data, `-` reads stdin, --json fields, exit codes, bad input."""

from __future__ import annotations

import json
import os
import stat

import pytest
from typer.testing import CliRunner

from dlmcode.cli import app
from tiny import tiny_builtin

os.environ["HF_HUB_OFFLINE"] = "1"

SOURCE = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(tiny_builtin(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "point.py"
    path.write_text(SOURCE)
    return path


def run(*args, input=None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def one_line_error(result, code=None):
    """A user error: non-zero exit, exactly one line on stderr, no traceback, nothing on stdout."""
    assert result.exit_code != 0, result.stdout
    if code is not None:
        assert result.exit_code == code
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dlmcode: error: ")
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return lines[0]


def test_infill_prints_whole_file_with_only_the_span_changed(model, source):
    result = run("infill", source, "--span", "7:8", "-m", model)
    assert result.exit_code == 0, result.stderr
    out = result.stdout.splitlines(keepends=True)
    original = SOURCE.splitlines(keepends=True)
    assert out[:6] == original[:6]
    assert "calls" in result.stderr and "breakage" in result.stderr
    assert "calls" not in result.stdout


def test_infill_stdin_equals_file(model, source):
    from_file = run("infill", source, "--span", "2", "-m", model, "--quiet")
    from_stdin = run("infill", "-", "--span", "2", "-m", model, "--quiet", input=SOURCE)
    assert from_file.exit_code == from_stdin.exit_code == 0
    assert from_stdin.stdout == from_file.stdout
    assert from_stdin.stderr == ""


def test_infill_json_fields(model, source):
    result = run("infill", source, "--span", "2", "-m", model, "--json", "-d", "threshold", "-o", "tau=0.5")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"text", "decoder", "model", "ids", "canvas", "calls", "filled", "tpf", "seconds", "breakage"}
    assert data["decoder"]["name"] == "threshold" and data["decoder"]["settings"]["tau"] == 0.5
    assert len(data["ids"]) == data["filled"] > 0
    assert 1 <= data["calls"] <= data["filled"]
    assert data["tpf"] == pytest.approx(data["filled"] / data["calls"], abs=1e-4)
    assert 1 not in data["canvas"]  # no hole ([MASK] is id 1) left
    assert set(data["breakage"]) == {"broken", "new_errors", "first_line", "touches_span"}
    assert data["text"].startswith("def add(a, b):\n")


def test_same_seed_same_output_different_seed_may_differ(model, source):
    args = ("infill", source, "--span", "6:8", "-m", model, "--temperature", "1", "--quiet")
    first, again = run(*args, "--seed", "3"), run(*args, "--seed", "3")
    assert first.stdout == again.stdout
    others = {run(*args, "--seed", str(s)).stdout for s in range(4, 8)}
    assert len(others | {first.stdout}) > 1


def test_diff_shows_only_the_span(model, source):
    result = run("infill", source, "--span", "2", "-m", model, "--diff", "-q")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"--- a/{source}\n+++ b/{source}\n") or result.stdout == ""
    assert "-    return a + b" in result.stdout or result.stdout == ""


def test_in_place_replaces_atomically_and_keeps_permissions(model, source):
    source.chmod(0o640)
    printed = run("infill", source, "--span", "2", "-m", model, "-q").stdout
    result = run("infill", source, "--span", "2", "-m", model, "--in-place", "-q")
    assert result.exit_code == 0 and result.stdout == ""
    assert source.read_text() == printed
    assert stat.S_IMODE(source.stat().st_mode) == 0o640
    assert [p.name for p in source.parent.iterdir()] == [source.name]  # no temp file left


def test_interrupt_during_in_place_leaves_file_intact(model, source, monkeypatch):
    import dlmcode.fill

    def interrupted(self, follow=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(dlmcode.fill.Job, "run", interrupted)
    result = run("infill", source, "--span", "2", "-m", model, "--in-place")
    assert result.exit_code == 130
    assert source.read_text() == SOURCE
    assert [p.name for p in source.parent.iterdir()] == [source.name]


def test_generate_continues_prompt(model, tmp_path):
    prompt = tmp_path / "prompt.py"
    prompt.write_text("def add(a, b):\n")
    result = run("generate", prompt, "--length", "8", "-m", model, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["text"].startswith("def add(a, b):\n")
    assert data["filled"] == 8 and len(data["ids"]) == 8
    assert data["canvas"][-8:] == data["ids"]


def test_pipeline_infill_then_check(model):
    filled = run("infill", "-", "--span", "2", "-m", model, "-q", input=SOURCE)
    checked = run("check", "-", input=filled.stdout)
    assert checked.exit_code in (0, 1)
    assert checked.exit_code == (1 if checked.stdout else 0)


def test_check_reports_errors_like_a_linter(tmp_path):
    good, bad = tmp_path / "good.py", tmp_path / "bad.js"
    good.write_text("x = 1\n")
    bad.write_text("function f( {\n  return 1;\n}\n")
    assert run("check", good).exit_code == 0
    result = run("check", bad)
    assert result.exit_code == 1
    assert result.stdout.startswith(f"{bad}:1:")
    data = json.loads(run("check", bad, "--json").stdout)
    assert data["errors"] >= 1


def test_check_stdin_defaults_to_python():
    assert run("check", "-", input="def f(:\n").exit_code == 1
    assert run("check", "-", "--lang", "go", input="package main\n").exit_code == 0


def test_decoders_lists_every_decoder():
    from dlmcode.decoders import DECODERS

    listed = json.loads(run("decoders", "--json").stdout)
    assert [d["name"] for d in listed] == list(DECODERS)
    text = run("decoders").stdout
    assert all(f"{name}:" in text for name in DECODERS)


@pytest.mark.parametrize(
    "args, code, says",
    [
        (["--span", "0"], 2, "0"),
        (["--span", "5:3"], 2, "5:3"),
        (["--span", "a:b"], 2, "a:b"),
        (["--span", "10-20"], 2, "10-20"),
        (["--span", "99"], 2, "8 lines"),
        (["--span", "2", "--length", "0"], 2, "--length"),
        (["--span", "2", "--length", "100000"], 2, "context"),
        (["--span", "2", "-d", "nope"], 2, "nope"),
        (["--span", "2", "-o", "nope=1"], 2, "nope"),
        (["--span", "2", "-o", "steps=many"], 2, "many"),
        (["--span", "2", "-d", "threshold", "-o", "tau=2"], 2, "tau"),
        (["--span", "2", "-o", "steps"], 2, "key=value"),
    ],
)
def test_bad_options_are_one_line_and_leave_file(model, source, args, code, says):
    line = one_line_error(run("infill", source, "-m", model, "--in-place", *args), code)
    assert says in line
    assert source.read_text() == SOURCE


def test_bad_files(tmp_path, model):
    binary, latin, empty = tmp_path / "b.py", tmp_path / "l.py", tmp_path / "e.py"
    binary.write_bytes(b"\x00\x01\x02abc")
    latin.write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    empty.write_text("")
    assert "no such file" in one_line_error(run("infill", tmp_path / "missing.py", "--span", "1", "-m", model))
    assert "directory" in one_line_error(run("infill", tmp_path, "--span", "1", "-m", model))
    assert "not a text file" in one_line_error(run("infill", binary, "--span", "1", "-m", model))
    assert "UTF-8" in one_line_error(run("infill", latin, "--span", "1", "-m", model))
    assert "empty" in one_line_error(run("infill", empty, "--span", "1", "-m", model))
    assert "empty" in one_line_error(run("check", "-", input=""))


def test_bad_models_and_devices(source, tmp_path, model):
    assert "no-such" in one_line_error(run("infill", source, "--span", "1", "-m", str(tmp_path / "no-such")))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "dlmcode"}')
    one_line_error(run("infill", source, "--span", "1", "-m", broken))
    assert "not-cached/model" in one_line_error(run("infill", source, "--span", "1", "-m", "not-cached/model"))
    import torch

    if not torch.cuda.is_available():
        assert "cuda" in one_line_error(run("infill", source, "--span", "1", "-m", model, "--device", "cuda")).lower()


def test_in_place_with_stdin_is_a_usage_error(model):
    one_line_error(run("infill", "-", "--span", "1", "-m", model, "--in-place", input=SOURCE), 2)


def test_no_span_and_no_markers(model, source):
    assert "⟦fill⟧" in one_line_error(run("infill", source, "-m", model))


def test_markers_fill_several_holes(model, tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f(a):\n    x = ⟦fill:3⟧\n    return ⟦fill:2⟧\n")
    data = json.loads(run("infill", path, "-m", model, "--json").stdout)
    assert data["filled"] == 5
    assert "⟦" not in data["text"]
    assert data["text"].startswith("def f(a):\n    x = ")


def test_length_auto_over_allocates_and_strips_pads(model, source):
    exact = json.loads(run("infill", source, "--span", "2", "-m", model, "--json").stdout)
    auto = json.loads(run("infill", source, "--span", "2", "-m", model, "--json", "--length", "auto").stdout)
    assert auto["filled"] == exact["filled"] + min(32, max(8, exact["filled"] // 2))
    assert auto["text"].startswith("def add(a, b):\n") and auto["text"].endswith("self.y = y\n")
    assert "[PAD]" not in auto["text"]
