"""A whole bench: the suite, the settings, this rank's tasks, resume from --out, and the outputs.

Stream first: `BenchRun.stream()` and `compare()` yield Samples as they finish (the live
view draws them); `BenchRun.finish()` gathers them and writes the outputs.

Infill tasks get an oracle length: each hole has exactly the canonical middle's token
count, the upper-bound protocol of docs/research/field.md E (Open-dLLM's "oracle length").
Under torchrun (env RANK/WORLD_SIZE) each rank decodes every WORLD_SIZE-th task and rank 0
gathers the Samples and writes the same outputs one process would.

Its rooms: the decoder settings and sweeps (configs), one decode scored into a Sample (sample),
`dlmcode compare`'s runs (compare), the ranks of a torchrun launch (ranks). This module hands on
the names the CLI and tests use from them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import InputError, UsageError
from ..jobs import batch
from ..models.base import Dlm
from . import report, sandbox
from .compare import compare, compare_one, compare_summary, compare_temperature
from .configs import EDITOR, FILL_LENGTHS, ORACLE, UNKNOWN, Config, attach_all, configs, rows
from .metrics import Sample, sample_key
from .ranks import Ranks, watched
from .sample import GENERATE_LENGTH, STOP, completion_tokens, decode, run_one, samples, scored, truncate
from .suites import Suite, Task

SAMPLES_FILE = "samples.jsonl"
PART_FILE = "samples.rank{}.jsonl"  # a rank's samples while a sharded run is going


@dataclass
class BenchRun:
    """A bench ready to go: the suite, the settings, this rank's tasks and what is already done."""

    suite_name: str
    configs: list[Config]
    limit: int | None = None
    seed: int = 0
    length: int = GENERATE_LENGTH
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)
    out: Path | None = None
    ranks: Ranks = field(default_factory=Ranks)
    strict: bool = True  # decoders were named: one that cannot run here is an error, not skipped
    batch_size: int = 1  # decodes sharing each model forward (dlmcode/jobs/batch.py)
    suite: Suite = field(default_factory=lambda: Suite("", []))  # set by load()
    previous: dict[tuple, Sample] = field(default_factory=dict)  # samples found in --out, by key
    notes: list[str] = field(default_factory=list)  # what the user should know (printed on stderr)
    written: list[Path] = field(default_factory=list)  # the files finish() wrote

    def load(self, dlm: Dlm) -> None:
        """The tasks (heldout-span cuts at dlm's token boundaries), assistants, and --out's samples."""
        from . import suites

        self.suite = suites.load(self.suite_name, self.limit, dlm.tokenizer)
        if self.suite.has_tests and self.limits.isolated:
            sandbox.require()  # refuse now, in one line, rather than at the first test
        if not self.suite.tasks:
            raise InputError(f"suite {self.suite_name!r} has no tasks: nothing to run")
        if any(t.mode == "generate" for t in self.suite.tasks) and self.length >= dlm.context:
            raise UsageError(
                f"--length {self.length} leaves no room for the prompt in the model's context ({dlm.context} tokens)"
            )
        self.configs, skipped = attach_all(self.configs, dlm, self.strict)
        self.notes = [f"{self.suite_name}: {self.length_note}", *skipped]
        if self.out is not None:
            self.previous = report.read_samples(self.out, SAMPLES_FILE, PART_FILE.format("*"))

    @property
    def tasks(self) -> list[Task]:
        """This rank's share of the suite."""
        return self.ranks.share(self.suite.tasks)

    @property
    def length_note(self) -> str:
        generate = any(t.mode == "generate" for t in self.suite.tasks)
        mode = self.configs[0].fill_length if self.configs else ORACLE
        if generate:
            return f"{self.length} tokens generated per prompt" if mode == ORACLE else FILL_LENGTHS[UNKNOWN]
        return FILL_LENGTHS[mode]

    def wanted(self, tasks: list[Task]) -> list[tuple]:
        return [sample_key(t.task_id, c.name, c.settings, self.seed) for t in tasks for c in self.configs]

    def done(self) -> list[Sample]:
        """This rank's samples already in --out (resume)."""
        return [self.previous[k] for k in self.wanted(self.tasks) if k in self.previous]

    def stream(self, dlm: Dlm) -> Iterator[Sample]:
        """Join the ranks, then decode this rank's missing samples, appending each to --out."""
        self.ranks.start(dlm.device.type)
        stream = watched(
            samples(self.tasks, self.configs, dlm, self.seed, self.length, self.limits, self.previous, self.batch_size),
            self.ranks,
        )
        if self.out is None:
            return stream
        name = SAMPLES_FILE if self.ranks.world == 1 else PART_FILE.format(self.ranks.rank)
        return report.appended(stream, self.out / name)

    def finish(self, new: list[Sample], model: str) -> dict | None:
        """Gather every rank's new samples; rank 0 writes the outputs and returns the summary."""
        gathered = self.ranks.gather([s.to_dict() for s in new])
        if gathered is None:
            return None
        merged = dict(self.previous) | {s.key: s for s in map(Sample.from_dict, gathered)}
        current = [merged[k] for k in self.wanted(self.suite.tasks) if k in merged]
        summary = self.summary(current, model)
        if self.out is not None:
            found = current + self.others(merged)
            self.written = report.write_outputs(self.out, SAMPLES_FILE, PART_FILE.format("*"), found, summary)
        return summary

    def others(self, merged: dict[tuple, Sample]) -> list[Sample]:
        """Samples in --out from other settings or tasks: kept in the file, left out of the summary."""
        wanted = set(self.wanted(self.suite.tasks))
        return [s for k, s in merged.items() if k not in wanted]

    def summary(self, current: list[Sample], model: str) -> dict:
        return {
            "suite": self.suite.name,
            "model": model,
            "tasks": len(self.suite.tasks),
            "seed": self.seed,
            "length": self.length_note,
            "fill_length": self.configs[0].fill_length if self.configs else ORACLE,
            "quality": "pass_at_1" if self.suite.has_tests else "exact_match",
            "rows": rows(current, self.configs),
        }


def prepare_bench(
    suite: str,
    names: list[str],
    options: list[str],
    sweeps: list[str],
    limit: int | None,
    seed: int,
    length: int,
    out: Path | None,
    limits: dict[str, float],
    batch_size: int = 1,
    fill_length: str = ORACLE,
) -> BenchRun:
    """A BenchRun from command-line values, all checked before any model loads; then call load()."""
    from . import suites

    suites.loader_for(suite)
    suites.check_limit(limit)
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is an existing file; give a folder (a new one, or one to resume)")
    if length < 1:
        raise UsageError(f"--length {length}: give a positive number of tokens")
    batch.Batcher(batch_size)  # a UsageError for a batch size below 1
    try:
        fence = sandbox.Limits(**limits)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if fill_length not in FILL_LENGTHS:
        raise UsageError(f"--fill-length {fill_length!r}: give one of {', '.join(FILL_LENGTHS)}")
    chosen = configs(names, options, sweeps, fill_length=fill_length)
    return BenchRun(
        suite, chosen, limit, seed, length, fence, out, Ranks.from_env(), strict=bool(names), batch_size=batch_size
    )


def written_note(paths: list[Path]) -> str:
    plotted = any(p.suffix == ".png" for p in paths)
    return f"wrote {', '.join(map(str, paths))}" + ("" if plotted else f"; no plot: {report.PLOT_HELP}")


__all__ = [
    "EDITOR",
    "FILL_LENGTHS",
    "GENERATE_LENGTH",
    "ORACLE",
    "STOP",
    "UNKNOWN",
    "BenchRun",
    "Config",
    "Ranks",
    "attach_all",
    "compare",
    "compare_one",
    "compare_summary",
    "compare_temperature",
    "completion_tokens",
    "configs",
    "decode",
    "prepare_bench",
    "rows",
    "run_one",
    "samples",
    "scored",
    "truncate",
    "watched",
    "written_note",
]
