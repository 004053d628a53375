"""scripts/gpu_check.py, the GPU check ready for the next loan, run end to end on the CPU at a toy size."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    args = ["--tiny", "--device", "cpu", "--dtype", "fp32", "--prompt", "24", "--gen", "8", "--block", "4"]
    return load_script().main([*args, "--backend", "eager", "--repeats", "1", "--out", str(out)]), out


def test_every_step_runs_for_both_shapes(report):
    result, out = report
    assert out.read_text().strip() and [s["shape"] for s in result["shapes"]] == ["llada-8b", "dream-7b"]
    for shape in result["shapes"]:
        assert shape["skipped"] == [] and shape["peak_memory_mb"] is None  # no GPU: no GPU memory to report
        calls = shape["calls"]
        assert all(calls[m]["ms_per_call"] > 0 and calls[m]["calls"] == 8 for m in ("none", "prefix", "dual"))
        assert calls["prefix"]["full_calls"] == calls["dual"]["full_calls"] == 2  # one full run per block of 4
        assert shape["compiled"]["same_tokens"] is True and shape["compiled"]["max_logit_difference"] == 0.0
        assert shape["sampler"]["rows"] == 4 and shape["sampler"]["vocab"] == 4200
        assert 0 < shape["sampler"]["t1"]["share_of_call"] and "ms_per_call" in shape["guard"]
        assert set(shape["serve"]) == {"1", "4", "16"}
        assert all(level["requests_per_s"] > 0 and level["calls_per_s"] > 0 for level in shape["serve"].values())
        assert shape["serve"]["16"]["mean_batch"] > 1  # concurrent requests shared forwards


def test_steps_past_the_budget_are_skipped_and_named():
    args = ["--tiny", "--device", "cpu", "--dtype", "fp32", "--shapes", "llada-8b", "--budget", "0"]
    result = load_script().main(args)
    (shape,) = result["shapes"]
    assert shape["skipped"] == ["calls", "sampler", "guard", "serve", "compiled"]
