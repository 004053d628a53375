"""The guard on by default where a user wants code (infill, generate, serve), off where decoders are measured
(compare, bench), and what it turned away shown in every guarded run."""

from __future__ import annotations

import json

from starlette.testclient import TestClient

from dlmcode.cli import view
from dlmcode.serve.app import make_app
from dlmcode.serve.engine import Engine

from cli_run import run
from serve_tiny import tiny_dlm


def test_infill_runs_guarded_unless_told_guard_false(model, source):
    on = run("infill", source, "--span", "2", "-m", model, "--json")
    assert on.exit_code == 0, on.stderr
    data = json.loads(on.stdout)
    assert data["decoder"]["settings"]["guard"] is True and "guard_rejected" in data["guard"]
    assert "(guarded: " in on.stderr and "turned away" in on.stderr  # the summary line says what it turned away
    off = run("infill", source, "--span", "2", "-m", model, "--json", "-o", "guard=false")
    data = json.loads(off.stdout)
    assert data["decoder"]["settings"]["guard"] is False and data["guard"] is None and "guarded" not in off.stderr


def test_generate_runs_guarded_unless_told_guard_false(model, tmp_path):
    prompt = tmp_path / "p.py"
    prompt.write_text("def f(x):\n")
    on = json.loads(run("generate", prompt, "--length", "8", "-m", model, "--json").stdout)
    assert on["decoder"]["settings"]["guard"] is True
    off = json.loads(run("generate", prompt, "--length", "8", "-m", model, "--json", "-o", "guard=false").stdout)
    assert off["decoder"]["settings"]["guard"] is False and off["guard"] is None


def test_generate_with_a_chat_model_leaves_the_guard_off_unless_asked(model, tmp_path, monkeypatch):
    # a chat reply's code is cut out of it after decoding: a default guard could only say it cannot hold
    import dataclasses

    from dlmcode.cli import shared

    loading = shared.load_model
    monkeypatch.setattr(shared, "load_model", lambda *a: dataclasses.replace(loading(*a), chat=lambda p: p))
    prompt = tmp_path / "p.py"
    prompt.write_text("Write a function.\n")
    plain = run("generate", prompt, "--length", "8", "-m", model, "--json")
    assert plain.exit_code == 0, plain.stderr
    assert json.loads(plain.stdout)["decoder"]["settings"]["guard"] is False and "guard:" not in plain.stderr
    asked = run("generate", prompt, "--length", "8", "-m", model, "--json", "-o", "guard=true")
    assert "guard: a chat reply's code is cut out" in asked.stderr  # asked for, it says why it cannot hold


def test_compare_measures_each_decoders_own_breakage_unless_swept(model, source):
    got = run("compare", source, "--span", "2", "-m", model, "-d", "threshold", "--json", "--quiet")
    assert got.exit_code == 0, got.stderr
    (row,) = json.loads(got.stdout)["decoders"]
    assert row["settings"]["guard"] is False and row["turned_away"] == 0
    swept = run("compare", source, "--span", "2", "-m", model, "-d", "threshold", "--sweep", "guard=true", "--json")
    (row,) = json.loads(swept.stdout)["decoders"]
    assert row["settings"]["guard"] is True and "turned_away" in row["runs"][0]
    assert "away" in swept.stderr  # the board's column


def test_bench_measures_each_decoders_own_breakage_unless_swept(model, tmp_path):
    from cli_run import SOURCE

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "point.py").write_text(SOURCE)
    base = ("bench", "-s", tmp_path / "src", "-m", model, "-d", "low-confidence", "--limit", "1", "--json", "--quiet")
    got = run(*base, "--out", tmp_path / "plain")
    assert got.exit_code == 0, got.stderr
    (row,) = json.loads(got.stdout)["rows"]
    assert row["settings"]["guard"] is False and row["turned_away"] == 0 and row["guard_share"] == 0.0
    swept = run(*base, "--sweep", "guard=false,true", "--out", tmp_path / "swept")
    assert swept.exit_code == 0, swept.stderr
    rows = json.loads(swept.stdout)["rows"]
    assert [r["settings"]["guard"] for r in rows] == [False, True] and rows[1]["guard_share"] > 0


def test_the_summary_line_says_what_the_guard_turned_away():
    stats = {"guard_rejected": 3, "guard_replaced": 2, "guard_checks": 40}
    assert view.turned_away(stats) == "guarded: 3 proposals turned away, 2 replaced"
    assert view.turned_away({**stats, "guard_rejected": 0}) == "guarded: no proposal turned away"


PREFIX, SUFFIX, BROKEN = "def add(a, b):\n    ", "\n", "return (a + b"


def test_serve_decodes_every_request_guarded_unless_told_guard_false():
    dlm, _ = tiny_dlm(PREFIX, BROKEN)
    c = TestClient(make_app(Engine(dlm, lang="python")))
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 20}
    for extra in ({}, {"decoder": "threshold"}):  # the server's decoder, or one the request names
        got = c.post("/infill", json={**body, **extra}).json()
        assert got["dlmcode"]["settings"]["guard"] is True and got["dlmcode"]["breakage"]["broken"] is False
    off = c.post("/infill", json={**body, "options": {"guard": False}}).json()
    assert off["content"] == BROKEN and off["dlmcode"]["guard"] is None
    server_off = TestClient(make_app(Engine(dlm, options={"guard": "false"}, lang="python")))
    for extra in ({}, {"decoder": "threshold"}):  # `dlmcode serve -o guard=false` holds for any decoder
        got = server_off.post("/infill", json={**body, **extra}).json()
        assert got["dlmcode"]["settings"]["guard"] is False and got["content"] == BROKEN
