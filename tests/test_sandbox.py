"""The sandbox: generated code that loops, crashes or eats memory fails its sample, never the bench.

The infinite loop is tested once, inside a bench (it costs a second of CPU).
"""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
import torch

from dlmcode.bench import runner, sandbox, suites
from tiny import tiny_builtin

os.environ["HF_HUB_OFFLINE"] = "1"

FAST = sandbox.Limits(timeout=5, cpu=1, memory_mb=256)
BOMB = "hog = []\nwhile True:\n    hog.append(bytearray(10**7))\n"


def test_a_passing_and_a_failing_program():
    assert sandbox.run("assert sum([1, 2]) == 3\n", FAST).status == "passed"
    failed = sandbox.run("assert 1 == 2, 'nope'\n", FAST)
    assert failed.status == "failed" and not failed.passed and "AssertionError: nope" in failed.detail


def test_a_sleeping_loop_stops_at_the_wall_clock_timeout():
    outcome = sandbox.run("import time\nwhile True:\n    time.sleep(0.1)\n", sandbox.Limits(timeout=0.5))
    assert outcome.status == "timeout" and outcome.returncode is None and outcome.seconds < 3


def test_a_memory_bomb_stops_at_the_memory_limit():
    outcome = sandbox.run(BOMB, FAST)
    assert outcome.status == "memory" and outcome.seconds < FAST.timeout


def test_the_program_sees_only_its_own_folder_and_no_environment(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("token")
    assert sandbox.run(f"open({str(secret)!r}).read()\n", FAST).status == "failed"
    assert "outside the sandbox" in sandbox.run(f"import os\nos.listdir({str(tmp_path)!r})\n", FAST).detail
    assert "not allowed" in sandbox.run("import subprocess\nsubprocess.run(['true'])\n", FAST).detail
    own = "open('scratch.txt', 'w').write('x')\nassert open('scratch.txt').read() == 'x'\n"
    assert sandbox.run(own, FAST).passed
    os.environ["DLMCODE_SECRET"] = "1"
    try:
        assert sandbox.run("import os\nassert 'DLMCODE_SECRET' not in os.environ\n", FAST).passed
    finally:
        del os.environ["DLMCODE_SECRET"]


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="timeout"):
        sandbox.Limits(timeout=0)


def test_the_bench_goes_on_after_a_loop_and_a_memory_bomb(tmp_path):
    from dlmcode.models import load

    dlm = load(str(tiny_builtin(tmp_path / "model")))
    vocab = dlm.predict(torch.tensor([dlm.bos_id])).shape[-1]

    def pad_only(tokens):  # every hole becomes padding: the fill is empty, so each test runs as written
        logits = torch.zeros(len(tokens), vocab)  # (L, V)
        logits[:, dlm.pad_id] = 10.0
        return logits

    quiet = dataclasses.replace(dlm, predict=pad_only)
    tests = {"loop": "def check(f):\n    while True:\n        pass\n",
             "bomb": "def check(f):\n    hog = [bytearray(10**7) for _ in range(10**4)]\n",
             "ok": "def check(f):\n    assert f() == 1\n"}  # fmt: skip
    tasks = [suites.Task(name, "def f():\n    return 1\n# ", "\n", "note", test, "f") for name, test in tests.items()]
    configs = runner.configs(["low-confidence"], [], [])
    start = time.perf_counter()
    found = list(runner.samples(tasks, configs, quiet, 0, 8, FAST))
    assert [(s.task, s.status, s.passed) for s in found] == [
        ("loop", "cpu-limit", False), ("bomb", "memory", False), ("ok", "passed", True)]
    assert time.perf_counter() - start < FAST.timeout  # the loop ended at its 1 s of CPU, not the wall clock
    assert all(s.output == "" and s.calls > 0 for s in found)
