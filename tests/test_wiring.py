"""One place wires a decode (dlmcode/jobs/wiring.py): every face (the CLI, the server, the bench) decodes with the
decoder the same settings build there, built from the registry once per run (per setting for the server), and a Job
is a plain record until the wiring hands its decoder the oracle and the guard for its plan."""

from __future__ import annotations

import dataclasses

import pytest
from starlette.testclient import TestClient

from dlmcode import decoders
from dlmcode.bench import runner
from dlmcode.core.run import RunSettings
from dlmcode.jobs import guarding, wiring
from dlmcode.jobs.job import Job
from dlmcode.models import load
from dlmcode.serve.app import make_app
from dlmcode.serve.engine import Engine
from dlmcode.serve.request import Fill
from dlmcode.text import spans

from cli_run import SOURCE, run
from editors import llama_vim_body

PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n"


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """The names `decoders.build` is asked for from now on (every face builds through it)."""
    asked: list[str] = []
    real = decoders.build

    def counted(name, options=None):
        asked.append(name)
        return real(name, options)

    monkeypatch.setattr(decoders, "build", counted)
    return asked


@pytest.fixture
def decoded(monkeypatch) -> list:
    """The decoder each decode from now on runs (a Job's steps, which every face drains)."""
    seen: list = []
    real = Job.steps

    def steps(self):
        seen.append(self.decoder)
        return real(self)

    monkeypatch.setattr(Job, "steps", steps)
    return seen


def test_a_cli_infill_builds_its_decoder_once(model, source, builds):
    result = run("infill", source, "--span", "2", "-m", model, "-d", "threshold", "-o", "block=4", "--quiet")
    assert result.exit_code == 0, result.stderr
    assert builds == ["threshold"]  # checked before the model loads, and that one decodes


def test_a_cli_generate_builds_its_decoder_once(model, source, builds):
    result = run("generate", source, "--length", "8", "-m", model, "-d", "threshold", "--no-chat", "--quiet")
    assert result.exit_code == 0, result.stderr
    assert builds == ["threshold"]


def test_the_server_builds_a_decoder_once_per_setting(model, builds):
    client = TestClient(make_app(Engine(load(model, device="cpu", dtype="fp32"), "threshold", {"block": "4"})))
    for seed in (0, 1):  # checked at the door and decoded: one build for both requests
        r = client.post("/infill", json={**llama_vim_body(PREFIX, "", SUFFIX), "n_predict": 4, "seed": seed})
        assert r.status_code == 200, r.text
    assert builds == ["threshold"]
    body = {**llama_vim_body(PREFIX, "", SUFFIX), "n_predict": 4, "options": {"block": 2}}
    assert client.post("/infill", json=body).status_code == 200
    assert builds == ["threshold", "threshold"]  # a request's own settings build their own decoder


def test_the_bench_builds_each_setting_once(builds):
    found = runner.configs(["threshold", "low-confidence"], ["block=4"], ["guard=true,false"])
    assert len(found) == 4
    assert sorted(builds) == sorted(["threshold"] * 2 + ["low-confidence"] * 2)  # names checked, nothing thrown away


def test_the_cli_server_and_bench_decode_with_the_same_wired_decoder(model, source, decoded):
    """threshold, block 4, guarded: the CLI's flags, a request to the server, a compare setting."""
    cli = run("infill", source, "--span", "2", "-m", model, "-d", "threshold", "-o", "block=4", "--quiet")
    assert cli.exit_code == 0, cli.stderr
    dlm = load(model, device="cpu", dtype="fp32")
    Engine(dlm, "threshold", {"block": "4"}, lang="python").run(Fill(PREFIX, SUFFIX, ceiling=4))
    (config,) = runner.configs(["threshold"], ["block=4", "guard=true"], [])
    runner.compare_one(SOURCE, (2, 2), "point", dlm, config, 0, RunSettings(lang="python"))
    assert len(decoded) == 3
    assert all(d == decoded[0] for d in decoded), decoded  # the settings, field by field
    assert all(guarding.built(d) is not None for d in decoded)  # each handed a guard for its own plan
    assert decoders.settings_of(decoded[0])["block"] == 4 and decoders.settings_of(decoded[0])["guard"] is True


def test_a_job_is_a_plain_record_until_the_wiring_hands_its_decoder_the_guard(model):
    dlm = load(model, device="cpu", dtype="fp32")
    plan = spans.plan_infill(SOURCE, dlm.vocab, (2, 2), 4)
    guarded = decoders.build("low-confidence", {"guard": "true"})
    job = Job(plan, dlm, guarded, 0, "python")
    assert job.decoder is guarded and job.guarding is None and guarding.built(job.decoder) is None
    assert wiring.wired(job) is job
    assert guarding.built(job.decoder) is not None and job.guarding.unguarded is guarded
    assert job.decoder == guarded  # the same settings: what the wiring adds is not a setting


def test_a_chat_reply_drops_only_the_default_guard(builds):
    held = wiring.settled(RunSettings(decoder="threshold", options={"guard": "true", "block": "4"}))
    dropped = wiring.default_guard(held)
    assert dropped.options == {"block": "4"} and dropped.built == decoders.build("threshold", {"block": "4"})
    assert builds == ["threshold", "threshold"]  # the one `settled` built, and this test's own: none in between
    named = wiring.default_guard(RunSettings(decoder=None, options={"guard": "true", "block": "4"}))
    assert named.options == {"block": "4"} and named.built is None  # the family's own, built once the model loads
    fixed = wiring.default_guard(wiring.settled(RunSettings(decoder="syntax-guard")))
    assert fixed.built.guard is True  # syntax-guard's guard is its own, not a default a face turned on


def test_settings_changed_build_their_decoder_anew():
    held = wiring.settled(RunSettings(decoder="threshold", options={"block": "4"}))
    assert held == RunSettings(decoder="threshold", options={"block": "4"})  # the decoder held is not a setting
    assert held.built == decoders.build("threshold", {"block": "4"})
    assert dataclasses.replace(held, options={"block": "2"}).built is None
