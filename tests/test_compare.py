"""dlmcode compare: each decoder N times on one span, live rows on stderr, --json on stdout."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from dlmcode.bench import runner
from dlmcode.cli.commands import app
from dlmcode.core.errors import UsageError

SOURCE = "def add(a, b):\n    return a + b\n\n\nx = [1, 2, 3]\n"
ROW_FIELDS = {
    "decoder",
    "settings",
    "n",
    "errors",
    "breakage_rate",
    "syntax_valid",
    "exact_match",
    "trivial",
    "tpf",
    "calls",
    "reopened",
    "tokens_per_s",
    "seconds",
    "runs",
}


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "add.py"
    path.write_text(SOURCE)
    return path


def run(*args, input=None):
    return CliRunner().invoke(app, ["compare", *map(str, args)], input=input)


def test_compare_json_fields_and_sampling_note(model, source):
    result = run(source, "--span", "2", "-m", model, "-d", "threshold", "-d", "low-confidence", "-n", "2", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert (found["span"], found["samples"], found["temperature"], found["input"]) == ([2, 2], 2, 1.0, str(source))
    assert [d["decoder"] for d in found["decoders"]] == ["threshold", "low-confidence"]
    for row in found["decoders"]:
        assert ROW_FIELDS <= set(row) and row["n"] == 2 and row["settings"]["temperature"] == 1.0
        assert [r["seed"] for r in row["runs"]] == [0, 1]
        assert all(
            r["breakage"] is not None and r["exact"] in (True, False) and r["trivial"] in (True, False)
            for r in row["runs"]
        )
        assert row["trivial"] == sum(r["trivial"] for r in row["runs"]) / 2 and row["reopened"] == 0
        assert row["exact_match"] == sum(r["exact"] for r in row["runs"]) / 2
    assert "temperature 1.0" in result.stderr and "threshold" in result.stderr and "breakage" in result.stderr


def test_a_remasking_decoder_reports_what_it_reopened(model, source):
    result = run(
        source, "--span", "2", "-m", model, "-d", "wino", "-o", "tau_wide=0.0", "-o", "tau_narrow=1.0", "--json"
    )
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["decoders"][0]
    taken = [r["reopened"] for r in row["runs"]]
    assert row["reopened"] == sum(taken) and taken[0] > 0  # tau_narrow=1: every committed token falls below it
    assert row["tpf"] == round(
        row["runs"][0]["filled"] / row["runs"][0]["calls"], 4
    )  # TPF: holes over calls, reopening or not


def test_one_sample_keeps_the_decoders_temperature_and_is_reproducible(model, source):
    first = json.loads(run(source, "--span", "2", "-m", model, "-d", "threshold", "--json").stdout)
    again = json.loads(run(source, "--span", "2", "-m", model, "-d", "threshold", "--json").stdout)
    assert first["temperature"] is None and first["decoders"][0]["settings"]["temperature"] == 0.0
    assert first["decoders"][0]["runs"][0]["output"] == again["decoders"][0]["runs"][0]["output"]


def test_markers_have_no_exact_match(model, tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f(x):\n    return ⟦fill:3⟧\n")
    found = json.loads(run(path, "-m", model, "-d", "margin", "--json").stdout)
    assert found["span"] is None and found["decoders"][0]["exact_match"] is None


@pytest.mark.parametrize(
    "args, says",
    [
        (["--span", "2", "-n", "2", "--temperature", "0"], "identical samples"),
        (["--span", "2", "-n", "0"], "--samples 0"),
        (["--span", "2", "-d", "nope"], "unknown decoder"),
        (["--span", "2", "-d", "low-confidence", "-o", "tau=0.5"], "no chosen decoder has the setting 'tau'"),
    ],
)
def test_bad_compare_options_are_one_line(model, source, args, says):
    result = run(source, "-m", model, *args)
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("dlmcode: error: ") and says in line


def test_compare_temperature_rule():
    assert runner.compare_temperature(1, None) == (None, None)
    assert runner.compare_temperature(3, 0.5) == (0.5, None)
    temperature, note = runner.compare_temperature(3, None)
    assert temperature == 1.0 and "temperature 1.0" in note
    with pytest.raises(UsageError):
        runner.compare_temperature(2, 0.0)


def test_the_live_table_keeps_its_columns_from_the_first_frame(model, source, monkeypatch):
    # On a terminal the table is redrawn as samples arrive; a column that appeared mid-run (reopen,
    # once wino took a token back) made every later frame wider than the first.
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # Rich: draw live, as on a terminal
    monkeypatch.setenv("COLUMNS", "120")
    result = run(
        source,
        "--span",
        "2",
        "-m",
        model,
        "-d",
        "threshold",
        "-d",
        "wino",
        "-o",
        "tau_wide=0.0",
        "-o",
        "tau_narrow=1.0",
        "-n",
        "3",
    )
    assert result.exit_code == 0, result.output
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", result.stderr)  # drop cursor moves and colours
    headers = [line for line in plain.splitlines() if "setting" in line and "breakage" in line]
    tops = {len(line.rstrip()) for line in plain.splitlines() if line.lstrip().startswith("┏")}
    assert len(headers) >= 2 and all("reopen" in h for h in headers)  # the first frame (nothing done yet) too
    assert len(tops) == 2  # one width while live (with the progress bars), one for the final table
