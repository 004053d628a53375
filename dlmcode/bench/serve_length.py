"""Measure the server's length rule: the length unknown (an editor's ceiling) against the oracle length.

    python -m dlmcode.bench.serve_length --suite heldout-single --limit 100 [-d DECODER] [-o k=v]

Per task, two decodes of the same decoder: "editor" goes through the server's Engine with
`n_predict` = CEILING, as llama.vim sends it (the length rule opens the holes and ends the
fill); "oracle" opens exactly as many holes as the canonical middle's tokens (never a pad),
as `dlmcode bench` does. Prints one JSON object per mode: exact match, syntax-valid, pass@1
(tasks with tests, through bench/sandbox.py), mean calls and seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import torch

from .. import decoders
from ..jobs import fill as jobs
from ..models import load
from ..serve import length
from ..serve.engine import Engine
from ..serve.request import Fill
from ..text import syntax
from . import metrics, suites

CEILING = 128  # llama.vim's and llama.vscode's default n_predict


def oracle(engine: Engine, task: suites.Task, decoder: str, options: dict[str, str]) -> tuple[str, int]:
    """The fill with exactly the canonical middle's token count; (text, calls)."""
    n = max(1, len(engine.dlm.tokenizer.encode(task.canonical or "")))
    job = jobs.prepare_middle(
        task.prompt, task.suffix, n, dlm=engine.dlm, decoder=decoder, options=options, cache=engine.cache
    )
    result = job.run()
    region = job.plan.positions[0]
    ids = [i for i in result.canvas[region.start : region.stop] if i not in engine.dlm.special_ids]
    return engine.dlm.tokenizer.decode(ids), result.calls


def editor(engine: Engine, task: suites.Task) -> tuple[str, int]:
    answer = engine.run(Fill(task.prompt, task.suffix, ceiling=CEILING, lang=task.lang))
    return answer.text, answer.calls


def score(task: suites.Task, middle: str, tests: bool) -> dict[str, Any]:
    broken = syntax.breakage(task.original, task.prompt + middle + task.suffix, task.lang).broken
    row = {"exact": metrics.exact_match(middle, task.canonical or ""), "syntax_valid": not broken}
    if tests and task.test:
        from . import sandbox

        row["passed"] = sandbox.run(task.code(middle), task.test, task.entry_point or "").passed
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    out = {"tasks": n}
    for key in ("exact", "syntax_valid", "passed", "calls", "seconds"):
        values = [r[key] for r in rows if key in r]
        if values:
            out[key] = round(sum(values) / len(values), 4)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="heldout-single")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("-d", "--decoder", default="low-confidence")
    ap.add_argument(
        "-o", "--option", action="append", help="decoder setting key=value [default: block=8, as `dlmcode serve`]"
    )
    ap.add_argument("--cache", default="dual", help="KV cache, as `dlmcode serve` [default: dual]")
    ap.add_argument("--no-tests", action="store_true", help="skip pass@1 (the sandbox)")
    ap.add_argument("--out", help="write every task's rows here as JSON lines")
    ap.add_argument("--modes", default="editor,oracle", help="which decodes to run, comma-separated")
    ap.add_argument("--lines", type=int, default=1, help="the server's --lines (0: no line limit)")
    ap.add_argument("--threads", type=int, help="torch CPU threads (1 on a busy shared CPU) [default: torch's]")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    options = decoders.parse_options(args.option if args.option is not None else ["block=8"])
    dlm = load()
    engine = Engine(dlm, decoder=args.decoder, options=options, cache=args.cache, lang="python", lines=args.lines)
    tasks = suites.load(args.suite, args.limit, dlm.tokenizer).tasks
    rows: dict[str, list[dict[str, Any]]] = {"editor": [], "oracle": []}
    out = open(args.out, "w") if args.out else None
    for i, task in enumerate(tasks):
        runs = {"editor": lambda t: editor(engine, t), "oracle": lambda t: oracle(engine, t, args.decoder, options)}
        for mode in args.modes.split(","):
            run = runs[mode]
            start = time.perf_counter()
            middle, calls = run(task)
            row = {
                "task": task.task_id,
                "mode": mode,
                "middle": middle,
                "calls": calls,
                "seconds": time.perf_counter() - start,
            }
            row |= score(task, middle, not args.no_tests)
            rows[mode].append(row)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
        print(f"{i + 1}/{len(tasks)}", file=sys.stderr, end="\r")
    meta = {
        "suite": args.suite,
        "decoder": args.decoder,
        "options": options,
        "cache": args.cache,
        "ceiling": CEILING,
        "cap": length.cap(dlm),
        "lines": args.lines,
    }
    print(json.dumps({**meta, **{mode: summary(r) for mode, r in rows.items() if r}}))


if __name__ == "__main__":
    main()
