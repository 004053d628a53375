"""The shipped built-in model: loads offline and fast, predicts, round-trips the stdlib."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import torch

from dlmcode.bench import heldout
from dlmcode.models import builtin
from dlmcode.training import evaluate

WEIGHTS = Path(str(resources.files("dlmcode.weights") / "builtin"))
GUARD_TASKS = 20  # held-out single lines in the regression guard
# share filled without new breakage; the shipped model (v2) scores 0.65 on these 20 (v1: 0.60; a guard, not the
# benchmark)
GUARD_SYNTAX_OK = 0.5


@pytest.fixture(scope="module")
def dlm():
    return builtin.load(WEIGHTS, torch.device("cpu"), torch.float32)


@pytest.mark.shipped
def test_shipped_files_are_small_and_typed():
    size = sum(p.stat().st_size for p in WEIGHTS.iterdir())
    assert size < 25 * 2**20
    assert builtin.matches({"model_type": "dlmcode", "architectures": ["DlmcodeDiffusionLM"]})
    assert (WEIGHTS / "MODEL_CARD.md").exists()


@pytest.mark.shipped
def test_loads_offline_without_transformers():
    """The shipped model loads and predicts on torch, safetensors and tokenizers alone (what keeps it a few seconds on
    CPU)."""
    code = (
        "import sys, torch; from pathlib import Path; "
        "from dlmcode.models import builtin; "
        f"d = builtin.load(Path({str(WEIGHTS)!r}), torch.device('cpu'), torch.float32); "
        "d.predict(torch.tensor(d.tokenizer.encode('x = 1\\n'))); "
        "print(' '.join(m for m in ('transformers', 'huggingface_hub') if m in sys.modules))"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.shipped
def test_predicts_logits_aligned_to_positions(dlm):
    ids = torch.tensor(dlm.tokenizer.encode("def f(x):\n    return x + 1\n"), dtype=torch.long)
    ids[3] = dlm.mask_id
    logits = dlm.predict(ids)
    assert logits.shape == (len(ids), len(dlm.tokenizer.tok.get_vocab())) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()
    assert {dlm.mask_id, dlm.pad_id, dlm.eos_id, dlm.bos_id} <= dlm.special_ids


@pytest.mark.shipped
@pytest.mark.slow
def test_tokenizer_round_trips_every_stdlib_file(dlm):
    """Every corpus file (train and held-out, ~11 MB) decodes back byte for byte: ~10 s on an
    idle 2-core machine (parsing the stdlib is half of it); kept whole rather than sampled."""
    files = heldout.corpus_files(heldout.stdlib_root())
    encs = dlm.tokenizer.tok.encode_batch(list(files.values()), add_special_tokens=False)
    bad = [p for p, e, text in zip(files, encs, files.values(), strict=True) if dlm.tokenizer.decode(e.ids) != text]
    assert not bad


@pytest.mark.shipped
@pytest.mark.slow
def test_heldout_single_lines_regression_guard(dlm):
    files = heldout.heldout_files()
    tasks = heldout.make_tasks(files, "line", GUARD_TASKS, seed=0)
    outcomes = list(evaluate.run_tasks(tasks, files, dlm, "low-confidence"))
    summary = evaluate.summarize(outcomes)
    assert summary["syntax_ok"] >= GUARD_SYNTAX_OK, summary


TOY = {"a.py": "import os\n\n\ndef f(x):\n    y = x + 1\n    return y\n", "b.py": "x = 1\ny = 2\nz = 3\n"}


def test_heldout_tasks_are_deterministic_line_holes():
    first = heldout.make_tasks(TOY, "line", 5, seed=3)
    assert first == heldout.make_tasks(TOY, "line", 5, seed=3)
    for task in first:
        hole = TOY[task.path][task.start : task.end]
        assert hole.strip() and "\n" not in hole  # a non-blank line, its line break stays outside
    lines = heldout.make_tasks(TOY, "lines", 3, seed=0)
    assert all(2 <= t.lines[1] - t.lines[0] + 1 <= 5 for t in lines)


def test_heldout_baselines():
    start = TOY["a.py"].index("    return y")
    task = heldout.Task("line", "a.py", start, start + len("    return y"), (6, 6))
    assert TOY["a.py"][task.start : task.end] == "    return y"
    base = evaluate.baselines(task, TOY["a.py"])
    assert base["delete_ok"] and base["copy_ok"] and not base["copy_exact"]


def test_versus_puts_two_models_side_by_side():
    old = [
        {
            "source": "stdlib",
            "decoder": "low-confidence",
            "kind": "line",
            "n": 100,
            "exact": 0.08,
            "token_accuracy": 0.2262,
            "syntax_ok": 0.63,
            "baseline_delete_syntax_ok": 0.76,
            "baseline_copy_syntax_ok": 0.64,
        },
        {
            "source": "packages",
            "decoder": "low-confidence",
            "kind": "span",
            "n": 100,
            "exact": 0.02,
            "token_accuracy": 0.1,
            "syntax_ok": 0.6,
        },
    ]
    new = [{**old[0], "exact": 0.12, "syntax_ok": 0.61}, {**old[1], "n": 50}, {**old[1], "kind": "lines"}]
    lines = evaluate.versus(old, new).splitlines()
    assert lines[0] == (
        "| source | decoder | kind | n | exact v1 / v2 | token accuracy v1 / v2 | syntax ok v1 / v2 "
        "| delete-line syntax ok | copy-previous syntax ok |"
    )
    assert (
        lines[2]
        == "| stdlib | low-confidence | line | 100 | 0.08 / **0.12** | 0.2262 / 0.2262 | 0.63 / 0.61 | 0.76 | 0.64 |"
    )
    assert len(lines) == 3  # a row with another task count, or missing from the first model, is not compared
