"""benchmarks.merge: samples of several --out folders joined over the first N tasks of a suite."""

import gzip
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks import merge
from dlmcode.bench import suites
from dlmcode.bench.metrics import Sample
from dlmcode.models import load


def sample(task, output, decoder="low-confidence", settings=None, broken=False):
    settings = (
        settings if settings is not None else {"temperature": 0.0, "block": 0, "steps": None, "tokens_per_step": None}
    )
    breakage = {"broken": broken, "new_errors": int(broken), "first_line": None, "touches_span": False}
    return Sample(
        task=task.task_id,
        decoder=decoder,
        settings=settings,
        seed=0,
        output=output,
        passed=None,
        exact=output == task.canonical,
        breakage=breakage,
        calls=4,
        filled=8,
        tokens=8,
        tpf=2.0,
        seconds=0.1,
    )


def write(folder, samples, gz=False):
    folder.mkdir()
    text = "".join(json.dumps(s.to_dict()) + "\n" for s in samples)
    if gz:
        (folder / "samples.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    else:
        (folder / "samples.jsonl").write_text(text)


def test_merge_joins_folders_rescores_and_leaves_out_partial_groups(tmp_path, capsys):
    tasks = suites.load("heldout-multi", 2, load().tokenizer).tasks
    a, b = tmp_path / "a", tmp_path / "b"
    # the stored breakage says 'not broken' for an invalid fill: re-scoring must correct it
    write(a, [sample(tasks[0], tasks[0].canonical), sample(tasks[1], "def (:\n", broken=False)])
    threshold = {"temperature": 0.0, "block": 0, "tau": 0.5}
    write(b, [sample(tasks[0], tasks[0].canonical, "threshold", threshold)], gz=True)  # one task of two: left out
    summary = merge.merge("heldout-multi", 2, [a, b])
    assert [r["decoder"] for r in summary["rows"]] == ["low-confidence"]
    row = summary["rows"][0]
    assert row["n"] == 2 and row["syntax_valid"] == 0.5 and row["exact_match"] == 0.5
    assert "left out threshold" in capsys.readouterr().err


def test_swept_names_only_the_settings_off_their_defaults():
    assert merge.swept("threshold", {"temperature": 1.0, "block": 0, "tau": 0.5}) == {"tau": 0.5}
    assert merge.swept("threshold", {"temperature": 0.0, "block": 0, "tau": 0.9}) == {}
