"""The command line: stdout carries only data, `-` reads stdin, --json fields, exit codes, bad input."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest

from cli_run import SOURCE, one_line_error, run
from ports import free_port, rank_env


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
    assert set(data) == {
        "text",
        "decoder",
        "model",
        "ids",
        "canvas",
        "calls",
        "filled",
        "tpf",
        "seconds",
        "breakage",
        "reopened",
        "guard",
        "notes",
        "processors",
        "sized",
        "expanded",
        "deleted",
    }
    assert data["decoder"]["name"] == "threshold" and data["decoder"]["settings"]["tau"] == 0.5
    assert data["processors"] == ["ban pad"]  # the span's own length: pads are never proposed
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
    whole = run("infill", source, "--span", "2", "-m", model, "-q").stdout
    new_line = whole.splitlines(keepends=True)[1]
    assert (
        new_line != "    return a + b\n" and whole.splitlines(keepends=True)[2:] == SOURCE.splitlines(keepends=True)[2:]
    )
    result = run("infill", source, "--span", "2", "-m", model, "--diff", "-q")
    assert result.exit_code == 0
    assert result.stdout == (
        f"--- a/{source}\n+++ b/{source}\n@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a + b\n+{new_line}"
        " \n \n class Point:\n"
    )


def test_json_with_diff_keeps_the_diff(model, source):
    plain = run("infill", source, "--span", "2", "-m", model, "--diff", "-q").stdout
    data = json.loads(run("infill", source, "--span", "2", "-m", model, "--diff", "--json", "-q").stdout)
    assert data["diff"] == plain and data["text"] == run("infill", source, "--span", "2", "-m", model, "-q").stdout


def test_in_place_with_diff_writes_and_prints_the_diff(model, source):
    plain = run("infill", source, "--span", "2", "-m", model, "--diff", "-q").stdout
    whole = run("infill", source, "--span", "2", "-m", model, "-q").stdout
    result = run("infill", source, "--span", "2", "-m", model, "--diff", "--in-place", "-q")
    assert result.exit_code == 0 and result.stdout == plain and source.read_text() == whole


def test_in_place_replaces_atomically_and_keeps_permissions(model, source):
    source.chmod(0o640)
    printed = run("infill", source, "--span", "2", "-m", model, "-q").stdout
    result = run("infill", source, "--span", "2", "-m", model, "--in-place", "-q")
    assert result.exit_code == 0 and result.stdout == ""
    assert source.read_text() == printed
    assert stat.S_IMODE(source.stat().st_mode) == 0o640
    assert [p.name for p in source.parent.iterdir()] == [source.name]  # no temp file left


def test_interrupt_during_in_place_leaves_file_intact(model, source, monkeypatch):
    import dlmcode.jobs.fill

    def interrupted(self, follow=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(dlmcode.jobs.fill.Job, "run", interrupted)
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
    from dlmcode.text import syntax

    filled = run("infill", "-", "--span", "2", "-m", model, "-q", input=SOURCE)
    assert filled.exit_code == 0 and filled.stdout != SOURCE
    report = syntax.check(filled.stdout, "python")
    checked = run("check", "-", input=filled.stdout)
    assert checked.exit_code == (0 if report.ok else 1)
    assert checked.stdout == "".join(f"stdin:{p.line}:{p.column + 1}: {p.message}\n" for p in report.problems)


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


def test_decoders_speaks_to_users_not_to_the_team():
    # The listing once carried the team's notes ("S6's reading, UNVERIFIED", "paper default
    # UNVERIFIED"); where a value comes from is for the code's comments and docs/, not the user.
    text = run("decoders").stdout
    for note in ("UNVERIFIED", "S6", "JSD", "Soft-NMS", "marginals"):
        assert note not in text, note


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
    assert "empty" in one_line_error(
        run("generate", empty, "-m", model)
    )  # nothing to continue; `check` passes it (test_check_passes_empty_files)


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


def test_check_takes_several_files_each_in_its_own_language(tmp_path):
    py, go, bad = tmp_path / "a.py", tmp_path / "b.go", tmp_path / "c.js"
    py.write_text("x = 1\n")
    go.write_text("package main\n\nfunc main() {}\n")
    bad.write_text("function f( {\n")
    assert run("check", py, go).exit_code == 0  # b.go parsed as Go: as Python it would be an error
    result = run("check", py, bad, go)
    assert result.exit_code == 1
    assert result.stdout and all(line.startswith(f"{bad}:") for line in result.stdout.splitlines())
    data = json.loads(run("check", py, bad, "--json").stdout)
    assert [(d["file"], d["lang"], d["ok"]) for d in data] == [
        (str(py), "python", True),
        (str(bad), "javascript", False),
    ]
    (tmp_path / "b.txt").write_text("hello\n")
    assert "b.txt" in one_line_error(run("check", bad, tmp_path / "b.txt"), 2)  # an unknown language, before any report


@pytest.mark.parametrize(
    "args, says",
    [
        (["--temperature", "inf"], "'--temperature': inf is not a finite number"),
        (["--temperature", "nan"], "'--temperature': nan is not a finite number"),
        (["-o", "temperature=inf"], "bad value 'inf' for temperature"),
        (["-o", "temperature=-inf"], "bad value '-inf' for temperature"),
        (["--seed", "1180591620717411303424"], "'--seed': 1180591620717411303424 is out of range"),
        (["--seed", "-1"], "'--seed': -1 is out of range"),
        (["--seed", "abc"], "'--seed'"),
        (["--no-such-flag"], "No such option: --no-such-flag"),
        (["--cache-refresh", "2"], "--cache-refresh 2 does nothing without a cache"),
    ],
)
def test_usage_errors_are_one_line_exit_2(model, source, args, says):
    line = one_line_error(run("infill", source, "--span", "2", "-m", model, *args), 2)
    assert says in line
    assert source.read_text() == SOURCE


def test_usage_errors_of_the_real_command_are_one_line(source):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "dlmcode", "infill", str(source), "--seed", "abc"], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("dlmcode: error: Invalid value for '--seed'")
    assert "dlmcode infill --help" in done.stderr


def test_non_finite_floats_are_refused_on_every_command(source, tmp_path):
    assert "--eos-penalty" in one_line_error(run("generate", source, "--eos-penalty", "inf"), 2)
    assert "--temperature" in one_line_error(run("compare", source, "--temperature", "nan"), 2)
    assert "--timeout" in one_line_error(run("bench", "-s", "heldout-single", "--timeout", "inf"), 2)


@pytest.fixture
def model_copy(model, tmp_path):
    import shutil

    path = tmp_path / "copy"
    shutil.copytree(model, path)
    return path


def edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | changes))


def test_config_json_with_a_wrong_type_is_one_line(model_copy, source):
    edit_config(model_copy, dim="big")
    line = one_line_error(run("infill", source, "--span", "2", "-m", model_copy), 1)
    assert line == f"dlmcode: error: model folder {str(model_copy)!r}: config.json: dim is 'big', expected an integer"
    edit_config(model_copy, dim=32, n_layers=True)
    assert "n_layers is True, expected an integer" in one_line_error(
        run("infill", source, "--span", "2", "-m", model_copy), 1
    )


def test_truncated_weights_are_one_line(model_copy, source):
    weights = model_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    line = one_line_error(run("infill", source, "--span", "2", "-m", model_copy), 1)
    assert f"model folder {str(model_copy)!r}: model.safetensors cannot be read, it is truncated or corrupt" in line


def test_weights_of_other_shapes_than_config_json_are_one_line(model_copy, source):
    edit_config(model_copy, dim=64)
    line = one_line_error(run("infill", source, "--span", "2", "-m", model_copy), 1)
    assert f"model folder {str(model_copy)!r}: model.safetensors does not match config.json: embed.weight is (" in line
    assert ", 32) in the weights, (" in line and ", 64) by config.json" in line


def test_a_corrupt_tokenizer_is_one_line(model_copy, source):
    (model_copy / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": 3}}')
    line = one_line_error(run("infill", source, "--span", "2", "-m", model_copy), 1)
    assert f"model folder {str(model_copy)!r}: tokenizer.json is not a readable tokenizer" in line


def test_bench_out_naming_a_file_is_refused_before_any_model_loads(tmp_path):
    taken = tmp_path / "results.txt"
    taken.write_text("mine\n")
    result = run("bench", "-s", "heldout-single", "--out", taken, "-m", tmp_path / "no-model")
    assert (
        one_line_error(result, 2)
        == f"dlmcode: error: --out {taken} is an existing file; give a folder (a new one, or one to resume)"
    )
    assert taken.read_text() == "mine\n"


def test_bench_on_an_empty_suite_is_an_error(model, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    line = one_line_error(run("bench", "-s", empty, "-m", model, "--out", tmp_path / "out"), 1)
    assert line == f"dlmcode: error: suite {str(empty)!r} has no tasks: nothing to run"
    assert not (tmp_path / "out").exists()


def test_a_custom_decoder_through_the_python_api_is_named_by_its_class(model):
    import dlmcode
    from dlmcode.decoders import build

    class Mine:
        """Any object meeting the Decoder contract: called with (canvas, predict, rng), yields Steps."""

        def __call__(self, canvas, predict, rng):
            return build("low-confidence")(canvas, predict, rng)

    dlm = dlmcode.load(model, device="cpu")
    mine = dlmcode.infill(SOURCE, span=(2, 2), dlm=dlm, decoder=Mine())
    same = dlmcode.infill(SOURCE, span=(2, 2), dlm=dlm, decoder="low-confidence")
    assert (mine.decoder, mine.settings, mine.text) == ("Mine", {}, same.text)


def test_nothing_shows_while_torch_imports_unless_stderr_is_a_terminal(model, source):
    import pty
    import subprocess
    import sys

    code = "import sys; from dlmcode.cli.commands import main; sys.argv = ['dlmcode', *sys.argv[1:]]; main()"
    args = [sys.executable, "-c", code, "infill", str(source), "--span", "2", "-m", model]
    piped = subprocess.run(args, capture_output=True, text=True)
    assert piped.returncode == 0 and "importing torch" not in piped.stderr
    main, tty = pty.openpty()
    with subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=tty) as proc:
        os.close(tty)
        seen = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the terminal closed: the command is done
                break
            if not chunk:
                break
            seen += chunk
    os.close(main)
    assert proc.returncode == 0
    assert seen.startswith("dlmcode: starting (importing torch)…\r\x1b[K".encode())


def training_view(records):
    import io

    from rich.console import Console

    from dlmcode.cli import view

    out = io.StringIO()
    last = view.follow_training(iter(records), Console(file=out, width=120))
    return last, out.getvalue()


def test_training_bar_ends_full_when_max_steps_ends_the_run():
    from dlmcode.cli.view import training_done

    step = {"step": 60, "loss": 2.5, "tok_s": 1000.0, "elapsed": 90.0, "budget": 120.0, "step_limit": 60}
    assert training_done(step) == 1.0 and training_done(step | {"step_limit": 0}) == 0.75
    assert training_done(step | {"step": 30, "step_limit": 120}) == 0.75  # time leads: the bar follows it
    last, shown = training_view([{"event": "data"}, step, {"event": "done", "step": 60}])
    assert last == {"event": "done", "step": 60}
    assert "100%" in shown and "step 60 · loss 2.500 · 1,000 tok/s" in shown and "75%" not in shown


def test_training_bar_says_what_it_does_before_the_first_loss():
    _, shown = training_view([])
    assert "preparing data…" in shown and "nan" not in shown
    _, shown = training_view([{"event": "data"}])
    assert "building the model…" in shown and "nan" not in shown


def module_command(module: str, *args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True)


def test_training_settings_use_the_one_typed_parser():
    from dlmcode.core.errors import UsageError
    from dlmcode.training.train import parse_overrides

    cfg = parse_overrides(["bf16=false", "lr=1e-3", "max_steps=7", "out=runs/x"])
    assert (cfg.bf16, cfg.lr, cfg.max_steps, cfg.out) == (False, 1e-3, 7, "runs/x")
    assert parse_overrides(["bf16=yes"]).bf16 is True
    for bad, says in [
        ("bf16=ture", "bad value 'ture' for training setting bf16"),
        ("lr=inf", "bad value 'inf' for training setting lr"),
        ("seq=1.5", "bad value '1.5' for training setting seq"),
        ("nope=1", "unknown training setting 'nope'"),
        ("seq", "bad -o 'seq': write -o key=value"),
    ]:
        with pytest.raises(UsageError, match=re.escape(says)):
            parse_overrides([bad])


def test_python_m_dlmcode_train_is_a_typer_command_with_one_line_errors():
    done = module_command("dlmcode.training.train", "bf16=ture")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "dlmcode: error: bad value 'ture' for training setting bf16 (expects bool)\n"
    assert module_command("dlmcode.training.train", "--bogus").stderr.startswith(
        "dlmcode: error: No such option: --bogus"
    )
    assert "key=value" in module_command("dlmcode.training.train", "--help").stdout


def test_python_m_dlmcode_heldout_is_a_typer_command_over_the_same_parser():
    from dlmcode.training.evaluate import DEFAULT_SUITE, parse_settings

    assert parse_settings([]).suite() == DEFAULT_SUITE
    cfg = parse_settings(["line=5", "one_line=no", "decoders=threshold"])
    assert (cfg.suite(), cfg.one_line, cfg.decoders) == ({"line": 5}, False, "threshold")
    done = module_command("dlmcode.training.evaluate", "line=abc")
    assert (
        done.returncode == 2
        and done.stderr == "dlmcode: error: bad value 'abc' for evaluation setting line (expects int)\n"
    )
    assert "key=value" in module_command("dlmcode.training.evaluate", "--help").stdout


def test_a_bench_rank_that_fails_stops_the_others_at_once(model, tmp_path):
    """Two `python -m dlmcode bench` processes with torchrun's worker environment; rank 1's model is
    missing. Rank 0 must stop with one line naming rank 1's error, not wait for it at the gather."""
    import subprocess
    import sys

    code = tmp_path / "code"
    code.mkdir()
    for i in range(6):
        (code / f"m{i}.py").write_text("".join(f"def f{i}_{j}(a, b):\n    return a * {j} + b\n\n\n" for j in range(20)))
    port = free_port()
    models = [model, str(tmp_path / "missing-model")]
    ranks = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dlmcode",
                "bench",
                "-s",
                str(code),
                "-m",
                models[r],
                "--out",
                str(tmp_path / "out"),
                "-q",
            ],
            env=rank_env(r, 2, port, DLMCODE_THREADS="1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    (_, lead_err), (_, other_err) = (rank.communicate(timeout=120) for rank in ranks)
    assert [rank.returncode for rank in ranks] == [1, 1]
    assert other_err.strip().splitlines() == [f"dlmcode: error: no such model folder: {models[1]}"]
    (line,) = lead_err.strip().splitlines()
    assert line == (
        f"dlmcode: error: stopping rank 0: rank 1 failed: no such model folder: {models[1]};"
        " run the same command again to resume"
    )
    done = (tmp_path / "out" / "samples.rank0.jsonl").read_text().splitlines()
    assert 1 <= len(done) < 10  # it stopped at its next sample, far short of its share


def test_thread_default_leaves_busy_cores_alone_and_takes_the_knob():
    from dlmcode.cli import cpu
    from dlmcode.core.errors import UsageError

    assert cpu.free_cores(2, 0.0, 2) == 2 and cpu.free_cores(2, 0.3, 2) == 1 and cpu.free_cores(2, 6.3, 2) == 1
    assert cpu.free_cores(8, 0.2, 8) == 7 and cpu.free_cores(8, 2.5, 8) == 5 and cpu.free_cores(64, 0.0, 16) == 16
    assert cpu.threads_wanted({}, cores=8, load=2.5, torch_default=8) == 5
    assert cpu.threads_wanted({"DLMCODE_THREADS": "3"}, cores=8, load=7.0, torch_default=8) == 3
    assert (
        cpu.threads_wanted({"OMP_NUM_THREADS": "4"}, cores=8, load=0.0, torch_default=4) is None
    )  # torch read it itself
    with pytest.raises(UsageError, match="DLMCODE_THREADS='0': give a number of threads, 1 or more"):
        cpu.threads_wanted({"DLMCODE_THREADS": "0"})


def test_the_command_line_sets_threads_and_the_library_does_not(model, source):
    import subprocess
    import sys

    code = (
        "import sys, torch; torch.set_num_threads(2); from dlmcode import models; models.load(sys.argv[1], "
        "device='cpu');"
        " assert torch.get_num_threads() == 2; from dlmcode.cli.commands import main; sys.argv = ['dlmcode', "
        "*sys.argv[2:]]; main()"
    )
    args = [sys.executable, "-c", code, model, "infill", str(source), "--span", "2", "-m", model, "-q"]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    bad = subprocess.run(args, capture_output=True, text=True, env=env | {"DLMCODE_THREADS": "many"})
    assert (
        bad.returncode == 2
        and bad.stderr == "dlmcode: error: DLMCODE_THREADS='many': give a number of threads, 1 or more\n"
    )
    assert subprocess.run(args, capture_output=True, text=True, env=env | {"DLMCODE_THREADS": "1"}).returncode == 0


def test_compare_labels_the_span_in_its_header(model, source, monkeypatch):
    monkeypatch.chdir(source.parent)  # a short name: the header fits on one line
    result = run("compare", source.name, "--span", "2", "-d", "threshold", "-m", model)
    assert result.exit_code == 0, result.stderr
    assert "compare · point.py · line 2 · 1 run(s) each" in result.stderr


def test_dlmcode_alone_prints_its_help_once():
    result = run()
    assert result.stdout.count("Usage:") == 1 and "infill" in result.stdout and result.stderr == ""


def test_a_config_json_asking_for_a_million_layers_fails_fast_without_allocating(model_copy, source, monkeypatch):
    """The shapes are checked against the weights' header before the model is built (it allocated 7.5 GB first)."""
    import resource

    from dlmcode.models import builtin

    built = []
    monkeypatch.setattr(builtin, "DlmcodeDiffusionLM", lambda *a, **k: built.append(a))
    edit_config(model_copy, n_layers=1_000_000)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    line = one_line_error(run("infill", source, "--span", "2", "-m", model_copy), 1)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    assert line.startswith(f"dlmcode: error: model folder {str(model_copy)!r}: model.safetensors lacks 'blocks.")
    assert "config.json implies are missing; it says n_layers 1000000" in line
    assert built == [] and grown_mb < 200, grown_mb


def test_the_shapes_config_json_implies_are_the_model_s_own():
    from dlmcode.models.builtin import BuiltinConfig, DlmcodeDiffusionLM, expected_shape

    cfg = BuiltinConfig(vocab_size=40, dim=16, n_layers=2, n_heads=2, ffn_mult=3)
    model = DlmcodeDiffusionLM(cfg, init_weights=False)
    assert {name: expected_shape(cfg, name) for name in model.state_dict()} == {
        name: tuple(t.shape) for name, t in model.state_dict().items()
    }
    assert expected_shape(cfg, "blocks.2.up.weight") is None and expected_shape(cfg, "blocks.01.up.weight") is None
