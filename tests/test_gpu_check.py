"""benchmarks/gpu_check.py, the GPU check ready for the next loan, run end to end on the CPU at a toy size."""

from __future__ import annotations

import dataclasses
import json

import pytest

from benchmarks import gpu_check
from dlmcode import decoders

TINY = ["--tiny", "--device", "cpu", "--dtype", "fp32", "--prompt", "24", "--gen", "8", "--block", "4"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    with pytest.raises(SystemExit) as done:  # the module's entry point, as `python -m benchmarks.gpu_check` runs it
        gpu_check.main([*TINY, "--backend", "eager", "--repeats", "1", "--out", str(out)])
    assert done.value.code == 0
    return json.loads(out.read_text())


def test_every_step_runs_for_both_shapes(report):
    assert [s["shape"] for s in report["shapes"]] == ["llada-8b", "dream-7b"]
    for shape in report["shapes"]:
        assert shape["skipped"] == [] and shape["peak_memory_mb"] is None  # no GPU: no GPU memory to report
        calls = shape["calls"]
        assert all(calls[m]["ms_per_call"] > 0 and calls[m]["calls"] == 8 for m in ("none", "prefix", "dual"))
        assert calls["prefix"]["full_calls"] == calls["dual"]["full_calls"] == 2  # one full run per block of 4
        assert shape["compiled"]["same_tokens"] is True and shape["compiled"]["max_logit_difference"] == 0.0
        assert shape["sampler"]["rows"] == 4 and shape["sampler"]["vocab"] == 4200
        assert 0 < shape["sampler"]["t1"]["share_of_call"] and "ms_per_call" in shape["guard"]
        assert 0 < shape["sampler"]["renoise"]["share_of_call"]
        assert all(shape["renoise"][k]["calls"] >= 8 for k in ("plain", "guarded"))  # 2 blocks of 4 calls at least
        assert set(shape["decoders"]) == set(decoders.DECODERS)
        ran = {name: row for name, row in shape["decoders"].items() if "skipped" not in row}
        assert set(shape["decoders"]) - set(ran) == {"codila"}  # no assistant for the random weights
        assert all(row.get("calls", 0) >= 1 for row in ran.values()), ran
        assert set(shape["serve"]) == {"1", "4", "16"}
        assert all(level["requests_per_s"] > 0 and level["calls_per_s"] > 0 for level in shape["serve"].values())
        assert shape["serve"]["16"]["mean_batch"] > 1  # concurrent requests shared forwards


def test_steps_past_the_budget_are_skipped_and_named():
    settings = gpu_check.Settings("cpu", "fp32", tiny=True, shapes=("llada-8b",), budget=0)
    (shape,) = gpu_check.run(settings)["shapes"]
    assert shape["skipped"] == ["calls", "sampler", "guard", "renoise", "serve", "compiled", "decoders"]


def test_a_failing_step_is_reported_and_the_others_still_run(monkeypatch):
    def broken(*args):
        raise RuntimeError("no such kernel")

    monkeypatch.setattr(gpu_check, "guard", broken)
    settings = gpu_check.Settings("cpu", "fp32", tiny=True, shapes=("dream-7b",), prompt=16, gen=4, block=4)
    (shape,) = gpu_check.run(dataclasses.replace(settings, no_compile=True))["shapes"]
    assert shape["guard"] == {"error": "RuntimeError: no such kernel"} and "ms_per_call" in shape["calls"]["none"]
    assert set(shape["serve"]) == {"1", "4", "16"}
