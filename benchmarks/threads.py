"""How CPU thread counts hold up when the machine is busy: `python -m benchmarks.threads`.

One infill with the built-in model (`dlmcode infill FILE --span A:B --json`), each in a fresh
process, with torch's default thread count, with 1 thread and with 2, first on an idle machine,
then while one busy-looping process per core competes for the CPUs. The decode time is the
`seconds` of the result (model loading excluded). dlmcode/cli/cpu.py's default comes from this.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from dlmcode.core.entry import one_command
from dlmcode.core.errors import DlmcodeError

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "stack.py"
BURN = "while True: pass"


@contextlib.contextmanager
def busy(processes: int) -> Iterator[None]:
    """`processes` busy-looping Pythons for the length of the block (0: idle)."""
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(processes)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def torch_default_threads() -> int:
    """What torch picks in a fresh process with no thread variables set."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DLMCODE_THREADS")}
    code = "import torch; print(torch.get_num_threads())"
    return int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout)


def infill_seconds(threads: int, source: Path, span: str, model: str | None) -> float:
    """Decode time of one infill run by the CLI in a fresh process on `threads` threads."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | {"DLMCODE_THREADS": str(threads)}
    cmd = [
        sys.executable,
        "-m",
        "dlmcode",
        "infill",
        str(source),
        "--span",
        span,
        "--json",
        "-q",
        *(["-m", model] if model else []),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise DlmcodeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
    return float(json.loads(done.stdout)["seconds"])


def measure(source: Path, span: str, model: str | None, burners: int) -> list[dict]:
    default = torch_default_threads()
    counts = {f"torch default ({default})": default, "1": 1, "2": 2}
    rows = []
    for load, n in (("idle", 0), (f"busy ({burners} busy-looping processes)", burners)):
        with busy(n):
            for label, threads in counts.items():
                rows.append(
                    {"load": load, "threads": label, "seconds": round(infill_seconds(threads, source, span, model), 3)}
                )
    return rows


def command(
    source: Annotated[Path, typer.Option(help="file to infill")] = EXAMPLE,
    span: Annotated[str, typer.Option(help="lines A:B to rewrite")] = "10:11",
    model: Annotated[str | None, typer.Option("--model", "-m", help="model [default: the built-in one]")] = None,
    burners: Annotated[int, typer.Option(help="busy-looping processes for the busy runs [default: one per core]")] = 0,
) -> None:
    """Time one infill idle and busy with torch's default, 1 and 2 threads; a table on stderr, JSON on stdout."""
    cores = os.cpu_count() or 1
    rows = measure(source, span, model, burners or cores)
    for row in rows:
        typer.echo(f"{row['load']:<40} threads {row['threads']:<18} {row['seconds']:8.3f} s", err=True)
    typer.echo(json.dumps({"cores": cores, "source": str(source), "span": span, "rows": rows}))


def main(args: list[str] | None = None) -> None:
    one_command(command)(args)


if __name__ == "__main__":
    main()
