"""Held-out infilling evaluation: deterministic tasks from the held-out stdlib files, scored.

Tasks (known span length; the model sees the file through spans.py's context window):
  line  - one non-blank line;
  lines - 2 to 5 lines starting at a non-blank line;
  span  - a random run of 1-32 tokens inside 1-3 lines (ASCII lines; a ⟦fill:N⟧ marker).
Metrics per task: exact match of the whole output text, token accuracy (hole ids against the
ids of the original text, position by position) and syntax-valid (no new breakage, as
syntax.breakage counts it). Line tasks also score two trivial baselines that every report
shows beside the model: delete the lines, and copy the lines above in their place.

Sources: "stdlib" (the held-out stdlib files, train.py's split) and "packages" (the held-out
packages of the corpus, `python -m dlmcode.training.corpus build`'s eval.jsonl.gz: boltons, toolz,
more-itertools, sortedcontainers, attrs, cachetools; never trained on). `rows` runs every
source x kind and prints the table a model card shows beside v1's.

Stream first: `run_tasks` yields one record per task; `summarize` folds records into rates.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import torch
import typer

from ..bench.heldout import (
    DEFAULT_SUITE,
    KINDS,
    MARKER,
    Task,
    heldout_files,
    line_offsets,
    make_tasks,
    sources,
)
from ..core.canvas import Decoder
from ..jobs import fill
from ..jobs.processors import Ban, Processor
from ..jobs.wiring import make_decoder
from ..models.base import Dlm
from ..text import syntax

LANG = "python"


@dataclass(frozen=True)
class Outcome:
    kind: str
    path: str
    lines: tuple[int, int]
    exact: bool
    correct: int  # hole tokens equal to the original's
    total: int  # tokens in the hole
    syntax_ok: bool  # no new breakage
    calls: int
    seconds: float
    target: str
    output: str  # the text the model put in the hole
    delete_ok: bool | None = None  # baseline: lines removed
    copy_ok: bool | None = None  # baseline: lines replaced by the lines above
    copy_exact: bool | None = None


def newline_ids(tokenizer) -> list[int]:
    """Ids of the tokens that contain a line break (byte-level BPE pieces with "Ċ")."""
    vocab = tokenizer.tok.get_vocab() if hasattr(tokenizer, "tok") else tokenizer.get_vocab()
    return sorted(i for piece, i in vocab.items() if "Ċ" in piece)


def one_line(dlm: Dlm) -> Ban:
    """Line breaks never proposed: a single-line span stays one line (the hole excludes the
    line's own break). Only for "line" tasks; our choice, reported separately."""
    return Ban(tuple(newline_ids(dlm.tokenizer)), "line breaks")


def run_task(
    task: Task,
    text: str,
    dlm: Dlm,
    decoder: str | Decoder,
    options: Mapping[str, Any] | None = None,
    processors: tuple[Processor, ...] = (),
) -> Outcome:
    """Fill one task's hole with `decoder` (a registry name with `options`, or one built) and score it."""
    target = text[task.start : task.end]
    truth = dlm.tokenizer.encode(target)
    if task.kind == "span":
        source = text[: task.start] + MARKER.format(max(1, len(truth))) + text[task.end :]
        job = fill.prepare_infill(source, None, dlm=dlm, decoder=decoder, options=options)
    else:
        job = fill.prepare_infill(text, task.lines, dlm=dlm, decoder=decoder, options=options)
    job.processors += processors
    start = time.perf_counter()
    result = job.run()
    seconds = time.perf_counter() - start
    ids = result.ids[: len(truth)]
    output = result.text[task.start : len(result.text) - (len(text) - task.end)]
    base = baselines(task, text) if task.kind != "span" else {}
    return Outcome(
        kind=task.kind,
        path=task.path,
        lines=task.lines,
        exact=result.text == text,
        correct=sum(a == b for a, b in zip(ids, truth, strict=False)),
        total=len(truth),
        syntax_ok=not syntax.breakage(text, result.text, LANG).broken,
        calls=result.calls,
        seconds=seconds,
        target=target,
        output=output,
        **base,
    )


def baselines(task: Task, text: str) -> dict[str, bool]:
    """Delete the lines; or put the k lines above in place of the k lines."""
    offsets = line_offsets(text)
    first, last = task.lines
    k = last - first + 1
    deleted = text[: offsets[first - 1]] + text[min(len(text), offsets[last]) :]
    above = text[offsets[max(0, first - 1 - k)] : offsets[first - 1]].removesuffix("\n") if first > 1 else ""
    copied = text[: task.start] + above + text[task.end :]
    return {
        "delete_ok": not syntax.breakage(text, deleted, LANG).broken,
        "copy_ok": not syntax.breakage(text, copied, LANG).broken,
        "copy_exact": copied == text,
    }


def run_tasks(
    tasks: Iterable[Task],
    files: Mapping[str, str],
    dlm: Dlm,
    decoder: str | Decoder,
    options=None,
    processors: tuple[Processor, ...] = (),
) -> Iterator[Outcome]:
    for task in tasks:
        yield run_task(task, files[task.path], dlm, decoder, options, processors)


def summarize(outcomes: Iterable[Outcome]) -> dict[str, Any]:
    """Rates over outcomes; `exact_no_encodings` leaves out the generated charmap tables."""
    rows = list(outcomes)
    if not rows:
        return {"n": 0}

    def rate(xs):
        return round(sum(xs) / len(xs), 4) if xs else None

    plain = [r for r in rows if not r.path.startswith("encodings/")]
    summary = {
        "n": len(rows),
        "exact": rate([r.exact for r in rows]),
        "exact_no_encodings": rate([r.exact for r in plain]),
        "token_accuracy": round(sum(r.correct for r in rows) / max(1, sum(r.total for r in rows)), 4),
        "syntax_ok": rate([r.syntax_ok for r in rows]),
        "tpf": round(sum(r.total for r in rows) / max(1, sum(r.calls for r in rows)), 3),
        "seconds_per_task": round(sum(r.seconds for r in rows) / len(rows), 3),
    }
    if rows[0].delete_ok is not None:
        summary |= {
            "baseline_delete_syntax_ok": rate([r.delete_ok for r in rows]),
            "baseline_copy_syntax_ok": rate([r.copy_ok for r in rows]),
            "baseline_copy_exact": rate([r.copy_exact for r in rows]),
        }
    return summary


DEFAULT_DECODERS = {"low-confidence": {}, "threshold": {"tau": 0.9}}  # the two decoders


def evaluate(
    dlm: Dlm,
    decoders: Mapping[str, Mapping[str, Any]] = DEFAULT_DECODERS,
    suite: Mapping[str, int] = DEFAULT_SUITE,
    seed: int = 0,
    one_line_rule: bool = True,
    files: Mapping[str, str] | None = None,
    source: str = "stdlib",
) -> Iterator[dict[str, Any]]:
    """For each task kind and decoder: one record per task, then a summary record. With
    one_line_rule, "line" tasks are also run with line breaks banned ("<decoder> +one-line").
    `files` defaults to the held-out stdlib files; every record names its `source`."""
    files = heldout_files() if files is None else files
    built = {name: make_decoder(name, options, None) for name, options in decoders.items()}  # once, for every task
    for kind, n in suite.items():
        tasks = make_tasks(files, kind, n, seed, dlm.tokenizer)
        variants = [(name, decoder, ()) for name, decoder in built.items()]
        if kind == "line" and one_line_rule:
            variants += [(name, decoder, (one_line(dlm),)) for name, decoder in built.items()]
        for i, (name, decoder, processors) in enumerate(variants):
            label = name + (" +one-line" if i >= len(decoders) else "")
            outcomes = []
            for outcome in run_tasks(tasks, files, dlm, decoder, None, processors):
                outcomes.append(outcome)
                yield {"event": "task", "source": source, "decoder": label, **asdict(outcome)}
            yield {"event": "summary", "source": source, "decoder": label, "kind": kind, **summarize(outcomes)}


def table(summaries: Iterable[Mapping[str, Any]]) -> str:
    """Summary records as a Markdown table (for the model card)."""
    summaries = list(summaries)
    cols = [
        "decoder",
        "kind",
        "n",
        "exact",
        "exact_no_encodings",
        "token_accuracy",
        "syntax_ok",
        "baseline_delete_syntax_ok",
        "baseline_copy_syntax_ok",
        "tpf",
    ]
    if any("source" in s for s in summaries):
        cols = ["source"] + cols
    return markdown(
        [c.replace("_", " ") for c in cols],
        [["" if s.get(c) is None else str(s.get(c)) for c in cols] for s in summaries],
    )


def markdown(head: list[str], rows: Iterable[list[str]]) -> str:
    """A Markdown table: a header row, the rule, one line per row of cells."""

    def line(cells):
        return "| " + " | ".join(cells) + " |"

    return "\n".join([line(head), "|" + "---|" * len(head), *map(line, rows)])


def versus(
    before: Iterable[Mapping[str, Any]], after: Iterable[Mapping[str, Any]], labels: tuple[str, str] = ("v1", "v2")
) -> str:
    """Two models' summary records side by side (a Markdown table, "before / after" in each
    cell), matched by source, decoder and kind; rows of only one model are left out."""

    def key(s):
        return (s.get("source", "stdlib"), s["decoder"], s["kind"])

    old = {key(s): s for s in before}
    cols = ["exact", "token_accuracy", "syntax_ok"]
    head = ["source", "decoder", "kind", "n"] + [f"{c.replace('_', ' ')} {labels[0]} / {labels[1]}" for c in cols]
    head += ["delete-line syntax ok", "copy-previous syntax ok"]
    rows = []
    for s in after:
        o = old.get(key(s))
        if o is None or o["n"] != s["n"]:
            continue
        cells = [*key(s), str(s["n"])] + [f"{o[c]} / **{s[c]}**" if s[c] > o[c] else f"{o[c]} / {s[c]}" for c in cols]
        cells += [
            "" if s.get(c) is None else str(s[c]) for c in ("baseline_delete_syntax_ok", "baseline_copy_syntax_ok")
        ]
        rows.append(cells)
    return markdown(head, rows)


@dataclass(frozen=True)
class EvalConfig:
    """`python -m dlmcode.training.evaluate` settings (key=value, parsed like training's)."""

    model: str = ""  # model folder ("" = the shipped built-in model)
    out: str = ""  # also append every record to this JSONL file
    line: int = 0  # tasks of each kind; when none of line/lines/span is given: DEFAULT_SUITE
    lines: int = 0
    span: int = 0
    packages: str = ""  # a corpus folder: its held-out packages are a second source beside the stdlib's
    sources: str = ""  # comma-separated subset of stdlib,packages ("" = every source)
    decoders: str = ",".join(DEFAULT_DECODERS)  # comma-separated decoder names
    one_line: bool = True  # also run "line" tasks with line breaks banned
    threads: int = 2  # torch CPU threads for this run

    def suite(self) -> dict[str, int]:
        given = {kind: getattr(self, kind) for kind in KINDS if getattr(self, kind)}
        return given or dict(DEFAULT_SUITE)


def parse_settings(args: list[str]) -> EvalConfig:
    from .config import overrides

    return overrides(EvalConfig(), args, what="evaluation setting")


def run(cfg: EvalConfig) -> list[dict[str, Any]]:
    """Evaluate as `cfg` says: summaries as JSON lines on stdout (every record to cfg.out too); return the summaries."""
    import json

    from ..models import builtin

    torch.set_num_threads(cfg.threads)  # a command of its own: it owns the process's threads
    path = Path(cfg.model) if cfg.model else Path(__file__).parents[1] / "weights" / "builtin"
    decoders = {name: DEFAULT_DECODERS.get(name, {}) for name in cfg.decoders.split(",")}
    chosen = sources(cfg.packages or None)
    chosen = {k: v for k, v in chosen.items() if k in cfg.sources.split(",")} if cfg.sources else chosen
    dlm = builtin.load(path, torch.device("cpu"), torch.float32)
    summaries = []
    for source, files in chosen.items():
        for record in evaluate(dlm, decoders, cfg.suite(), one_line_rule=cfg.one_line, files=files, source=source):
            if cfg.out:
                with open(cfg.out, "a") as f:
                    f.write(json.dumps(record) + "\n")
            if record["event"] == "summary":
                summaries.append(record)
                print(json.dumps(record), flush=True)
    return summaries


# starts as every python -m training module does (train.py says how; train_assistant's alike in shape)
def command(
    settings: Annotated[
        list[str] | None,
        typer.Argument(help="key=value: model, out, line, lines, span, packages, sources, decoders, one_line, threads"),
    ] = None,
) -> None:
    """Held-out infilling evaluation of a built-in-architecture model: summaries as JSON lines on
    stdout, then a Markdown table of them on stderr. With packages=, the held-out packages are a
    second source beside the stdlib's."""
    import sys

    from ..core.entry import reported

    with reported():
        summaries = run(parse_settings(settings or []))
        print(table(summaries), file=sys.stderr)


def main(args: list[str] | None = None) -> None:
    """`python -m dlmcode.training.evaluate [key=value ...]` (see `--help`)."""
    from ..core.entry import one_command

    one_command(command)(args)


if __name__ == "__main__":
    main()
