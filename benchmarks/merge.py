"""Merge the samples of several `dlmcode bench --out` folders into one table and Pareto plot.

Sweeps are often run as several bench runs (one per decoder, or added later); this joins
their samples.jsonl(.gz) files over the first N tasks of a suite, keeps each (decoder,
settings) group only when it covers every one of those tasks, re-scores breakage with the
current rule (runs made before a change of syntax.py then compare alike), and writes
STEM.json, STEM.png/.svg (report.plot) and a Markdown table on stdout.

    python -m benchmarks.merge heldout-multi 30 docs/pareto-heldout-multi-guard docs/bench/runs/hm-*
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated

import typer

from dlmcode import decoders
from dlmcode.bench import report, suites
from dlmcode.bench.metrics import Sample, Tally
from dlmcode.bench.runner import SAMPLES_FILE
from dlmcode.core.entry import one_command
from dlmcode.text import syntax


def read_samples(folder: Path) -> Iterator[Sample]:
    """Every sample of a bench --out folder (samples.jsonl, or its gzipped copy)."""
    for path in (folder / SAMPLES_FILE, folder / (SAMPLES_FILE + ".gz")):
        if path.exists():
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as f:
                yield from (Sample.from_dict(json.loads(line)) for line in f if line.strip())


def rescored(sample: Sample, task: suites.Task) -> Sample:
    """The sample with its breakage measured again by the current rule (syntax.breakage)."""
    if sample.error or sample.breakage is None or task.mode != "infill":
        return sample
    p, canonical = len(task.prompt), task.canonical or ""
    hole = syntax.Region((p, p + len(canonical)), (p, p + len(sample.output)))
    found = syntax.breakage(
        task.prompt + canonical + task.suffix, task.prompt + sample.output + task.suffix, task.lang, holes=[hole]
    )
    return dataclasses.replace(sample, breakage=found.to_dict())


def groups(samples: Iterable[Sample], tasks: dict[str, suites.Task]) -> dict[tuple[str, str], dict[str, Sample]]:
    """(decoder, settings as JSON) -> {task id: sample}, only for the chosen tasks."""
    found: dict[tuple[str, str], dict[str, Sample]] = {}
    for s in samples:
        if s.task in tasks:
            key = (s.decoder, json.dumps(s.settings, sort_keys=True))
            found.setdefault(key, {})[s.task] = rescored(s, tasks[s.task])
    return found


def swept(name: str, settings: dict) -> dict:
    """The settings that differ from the decoder's defaults (temperature aside): what was swept."""
    defaults = decoders.settings_of(decoders.build(name))
    return {k: v for k, v in settings.items() if k != "temperature" and defaults.get(k, v) != v}


def rows(found: dict[tuple[str, str], dict[str, Sample]], n_tasks: int) -> list[dict]:
    out = []
    for (name, settings), by_task in found.items():
        if len(by_task) != n_tasks:
            print(f"left out {name} {settings}: {len(by_task)} of {n_tasks} tasks", file=sys.stderr)
            continue
        tally = Tally()
        for s in by_task.values():
            tally.add(s)
        own = swept(name, json.loads(settings))
        label = " ".join([name, *(f"{k}={v}" for k, v in own.items())])
        out.append({"decoder": name, "label": label, "sweep": own or {"setting": "default"}, "own": own, **tally.row()})
    return sorted(out, key=lambda r: (r["decoder"], r["tpf"]))


def table(summary: dict) -> str:
    """The merged rows as a Markdown table."""
    tests = summary["quality"] == "pass_at_1"
    cols = ["TPF", "syntax-valid", "exact match", *(["pass@1"] if tests else []), "trivial", "reopened/task", "calls"]
    lines = ["| decoder | setting | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for r in summary["rows"]:
        values = [f"{r['tpf']:.2f}", _pct(r["syntax_valid"]), _pct(r["exact_match"])]
        values += ([_pct(r["pass_at_1"])] if tests else []) + [
            _pct(r["trivial"]),
            f"{r['reopened'] / r['n']:.1f}",
            f"{r['calls']:.1f}",
        ]
        setting = ", ".join(f"{k}={v}" for k, v in r["own"].items()) or "defaults"
        lines.append(f"| `{r['decoder']}` | {setting} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f} %"


def merge(suite: str, n: int, folders: list[Path]) -> dict:
    """The summary of the first `n` tasks of `suite` over every folder's samples."""
    from dlmcode.models import load

    tasks = {t.task_id: t for t in suites.load(suite, n, load().tokenizer).tasks}
    found = groups((s for folder in folders for s in read_samples(folder)), tasks)
    merged = rows(found, len(tasks))
    tests = any(r["pass_at_1"] is not None for r in merged)
    return {
        "suite": suite,
        "model": "builtin",
        "tasks": len(tasks),
        "length": f"first {len(tasks)} tasks, oracle length",
        "quality": "pass_at_1" if tests else "exact_match",
        "rows": merged,
    }


def command(
    suite: Annotated[str, typer.Argument(help="the suite the runs used")],
    n: Annotated[int, typer.Argument(help="merge over its first N tasks")],
    stem: Annotated[Path, typer.Argument(help="write STEM.json, STEM.png and STEM.svg")],
    folders: Annotated[list[Path], typer.Argument(help="bench --out folders")],
) -> None:
    """Merge bench runs over the first N tasks of a suite: a table on stdout, a summary and a plot."""
    summary = merge(suite, n, folders)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    report.plot(summary, stem)
    print(table(summary))


def main(args: list[str] | None = None) -> None:
    one_command(command)(args)


if __name__ == "__main__":
    main()
