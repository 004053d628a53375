"""RunSettings: one object per run, its checks in one place, built by the CLI and carried to fill's jobs."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from typer.testing import CliRunner

import dlmcode
from dlmcode.cli import commands as cli
from dlmcode.cli import shared
from dlmcode.core.errors import UsageError
from dlmcode.core.run import SEED_MAX, ModelChoice, RunSettings
from dlmcode.jobs import fill

SOURCE = (
    "def add(a, b):\n    return a + b\n\n\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n     "
    "   self.y = y\n"
)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"cache": "prefx"}, "--cache 'prefx': use one of none, prefix, dual"),
        (
            {"cache": "prefix", "cache_refresh": -1},
            "--cache-refresh -1: give 0 (at block changes only) or a number of calls",
        ),
        ({"length": 0}, "--length 0: give a positive number of tokens"),
        ({"length": -3}, "--length -3: give a positive number of tokens"),
        ({"length": "lots"}, "--length 'lots': give a positive number of tokens, or auto"),
        ({"seed": -1}, "--seed -1 is out of range; give 0 to 2**63 - 1"),
        ({"seed": SEED_MAX + 1}, f"--seed {SEED_MAX + 1} is out of range; give 0 to 2**63 - 1"),
    ],
)
def test_bad_settings_are_one_usage_error(fields, says):
    with pytest.raises(UsageError) as err:
        RunSettings(**fields)
    assert str(err.value) == says


def test_good_settings_are_kept_as_given_and_frozen():
    run = RunSettings(
        model=ModelChoice("m", "cpu", "float32"),
        decoder="threshold",
        options={"tau": "0.5"},
        temperature=0.0,
        seed=SEED_MAX,
        length="auto",
        lang="python",
        cache="dual",
        cache_refresh=2,
    )
    assert (run.model.name, run.seed, run.length, run.cache, run.cache_refresh) == ("m", SEED_MAX, "auto", "dual", 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.seed = 1  # type: ignore[misc]
    assert dataclasses.replace(run, seed=4).seed == 4


def test_strict_refuses_a_refresh_without_a_cache_only_when_asked():
    lax = RunSettings(cache="none", cache_refresh=2)  # a bench sweep may pair them
    with pytest.raises(UsageError) as err:
        lax.strict()
    assert str(err.value) == "--cache-refresh 2 does nothing without a cache: add --cache prefix or --cache dual"
    cached = RunSettings(cache="prefix", cache_refresh=2)
    assert cached.strict() is cached


def test_python_api_checks_its_keywords_before_loading_a_model(monkeypatch):
    def no_model(dlm):
        raise AssertionError("a model was loaded for bad settings")

    monkeypatch.setattr(fill, "default_model", no_model)
    with pytest.raises(UsageError, match="^--cache 'prefx': use one of"):
        dlmcode.infill(SOURCE, (2, 2), cache="prefx")
    with pytest.raises(UsageError, match="^--length 0: give a positive number of tokens$"):
        dlmcode.generate("def f():\n", length=0)


def recording(monkeypatch):
    """Wrap the CLI's model loader and fill's job builders: note each ModelChoice and RunSettings they get, then do the
    real work."""
    seen: dict[str, list] = {"load": [], "infill": [], "generate": []}
    load, infill_job, generate_job = shared.load_model, fill.infill_job, fill.generate_job

    def load_model(choice, quiet):
        seen["load"].append(choice)
        return load(choice, quiet)

    def infill(source, span, dlm, run):
        seen["infill"].append(run)
        return infill_job(source, span, dlm, run)

    def generate(prompt, dlm, run, **kwargs):
        seen["generate"].append(run)
        return generate_job(prompt, dlm, run, **kwargs)

    monkeypatch.setattr(shared, "load_model", load_model)
    monkeypatch.setattr(fill, "infill_job", infill)
    monkeypatch.setattr(fill, "generate_job", generate)
    return seen


def test_infill_builds_one_settings_object_from_its_flags_and_decodes_with_it(model, tmp_path, monkeypatch):
    path = tmp_path / "point.py"
    path.write_text(SOURCE)
    seen = recording(monkeypatch)
    flags = [
        "--span",
        "7:8",
        "-m",
        model,
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "-d",
        "threshold",
        "-o",
        "tau=0.5",
        "-o",
        "block=4",
        "--seed",
        "3",
        "--temperature",
        "0.7",
        "--length",
        "6",
        "--cache",
        "prefix",
        "--cache-refresh",
        "2",
        "--offline",
        "-q",
    ]
    result = CliRunner().invoke(cli.app, ["infill", str(path), *flags])
    assert result.exit_code == 0, result.stderr
    expected = RunSettings(
        model=ModelChoice(model, "cpu", "float32", offline=True),
        decoder="threshold",
        options={"guard": "true", "tau": "0.5", "block": "4"},  # infill guards unless told guard=false
        temperature=0.7,
        seed=3,
        length=6,
        lang="python",
        cache="prefix",
        cache_refresh=2,
    )
    assert seen["load"] == [expected.model] and seen["infill"] == [expected]
    assert seen["load"][0] is seen["infill"][0].model  # built once, passed down
    dlm = dlmcode.load(model, device="cpu", dtype="float32")
    same = dlmcode.infill(
        SOURCE,
        (7, 8),
        dlm=dlm,
        decoder="threshold",
        options={"guard": "true", "tau": "0.5", "block": "4"},
        temperature=0.7,
        seed=3,
        length=6,
        lang="python",
        cache="prefix",
        cache_refresh=2,
    )
    assert result.stdout == same.text  # the Python API's keywords map onto the same settings


def test_generate_builds_one_settings_object_and_refuses_bad_ones_before_loading(model, tmp_path, monkeypatch):
    prompt = tmp_path / "prompt.py"
    prompt.write_text("def add(a, b):\n")
    seen = recording(monkeypatch)
    result = CliRunner().invoke(
        cli.app,
        ["generate", str(prompt), "-m", model, "--device", "cpu", "--length", "5", "--seed", "2", "--no-chat", "-q"],
    )
    assert result.exit_code == 0, result.stderr
    # no --decoder: None, the model family's own (Dlm.decoder), chosen once the model is loaded
    expected = RunSettings(
        model=ModelChoice(model, "cpu"), decoder=None, options={"guard": "true"}, seed=2, length=5, lang="python"
    )
    assert seen["load"] == [expected.model] and seen["generate"] == [expected]

    for flags, says in [
        (["--length", "0"], "dlmcode: error: --length '0': give a positive number of tokens, or auto"),
        (["--cache", "prefx"], "dlmcode: error: --cache 'prefx': use one of none, prefix, dual"),
        (
            ["--cache-refresh", "3"],
            "dlmcode: error: --cache-refresh 3 does nothing without a cache: add --cache prefix or --cache dual",
        ),
    ]:
        bad = CliRunner().invoke(cli.app, ["generate", str(prompt), "-m", model, *flags])
        assert (bad.exit_code, bad.stderr.strip(), bad.stdout) == (2, says, "")
    assert len(seen["load"]) == 1  # no model loaded for the bad ones


def test_speed_loads_the_model_its_settings_name(model):
    from dlmcode.bench import speed

    dlm, note = speed.load(ModelChoice(model, "cpu", "float32"))
    assert (dlm.device.type, dlm.dtype, note) == ("cpu", torch.float32, None)
    assert dlm.name == dlmcode.load(model, device="cpu", dtype="float32").name
    with pytest.raises(
        UsageError, match="^--shape times a random model of a published architecture: give it or --model, not both$"
    ):
        speed.load(ModelChoice(model), shape="llada-8b")
