"""Count broken served fills, guarded and not: llama.vim's body through the real app, on standard-library files.

    python -m benchmarks.serve_guard --requests 10 [--seed 0] [-d DECODER] [--heldout]

Per kind of request, the same cursors guarded and unguarded (`"options": {"guard": ...}`), with the
built-in model and the server's defaults: the cursor after the indentation of a random line of
code, whose text is gone (the user is writing that line); llama.vim's body (n_predict 128, n_indent,
its response fields). Kinds: `plain` (no time limit), `500ms` and `1ms` (t_max_predict_ms), an
`input_extra` chunk that `ends-in-docstring` or `begins-in-docstring`, and `16kb` (cursors more
than 16 KB into a file larger than the server keeps). A fill is broken when the file as the client
has it afterwards (the whole file, not the server's window: prefix, content, suffix) has a syntax
error the file without the line did not have (dlmcode's breakage rule). Prints one JSON object:
per kind and mode, requests, broken, gave_up (the answer said the guard gave up), timed_out, rest_witness (an
early end committed the guard's witness at the holes left: text the model may not have proposed).
`--heldout`: the standard library's held-out files (dlmcode/bench/heldout.py), code no built-in model trained on.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from dlmcode.core.entry import one_command
from dlmcode.text import syntax

STDLIB = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
KINDS = ("plain", "500ms", "1ms", "ends-in-docstring", "begins-in-docstring", "16kb")
FAR = 16_384 + 1_000  # a cursor this far in is past the server's window (512 tokens x 32 characters)


def files(large: bool, heldout: bool = False) -> list[Path]:
    if heldout:
        from dlmcode.bench.heldout import heldout_files

        found = sorted(STDLIB / name for name in heldout_files())
    else:
        found = sorted(p for p in STDLIB.glob("*.py") if p.is_file())
    sized = [p for p in found if (p.stat().st_size > 3 * FAR) == large and p.stat().st_size > 2_000]
    return [p for p in sized if compiles(p.read_text(errors="replace"))]


def compiles(text: str) -> bool:
    try:
        compile(text, "<file>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def cursor(text: str, rng: random.Random, far: bool) -> tuple[str, str]:
    """(prefix, suffix): the text up to a random code line's indentation, and after that line."""
    lines = text.splitlines(keepends=True)
    starts, at = [], 0
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#") and (not far or at > FAR):
            starts.append((at, line))
        at += len(line)
    start, line = rng.choice(starts)
    indent = len(line) - len(line.lstrip(" \t"))
    return text[: start + indent], "\n" + text[start + len(line) :]


def body(kind: str, prefix: str, suffix: str, guard: bool) -> dict[str, Any]:
    line = prefix.rfind("\n") + 1
    out: dict[str, Any] = {
        "input_prefix": prefix[:line],
        "prompt": prefix[line:],
        "input_suffix": suffix,
        "input_extra": [],
        "n_predict": 128,
        "n_indent": len(prefix) - line,
        "stop": [],
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "response_fields": ["content", "dlmcode/guard", "dlmcode/timed_out", "dlmcode/breakage"],
        "options": {"guard": guard},
    }
    if kind in ("500ms", "1ms"):
        out["t_max_predict_ms"] = int(kind[:-2])
    if kind == "ends-in-docstring":
        out["input_extra"] = [{"filename": "a.py", "text": 'def helper():\n    """Begins a docstring, never ends it\n'}]
    if kind == "begins-in-docstring":
        out["input_extra"] = [{"filename": "b.py", "text": 'the end of a docstring"""\n\nvalue = 1\n'}]
    return out


def measure(requests: int, seed: int, decoder: str | None, heldout: bool = False) -> dict[str, Any]:
    from starlette.testclient import TestClient

    from dlmcode.models import load
    from dlmcode.serve.app import make_app
    from dlmcode.serve.engine import Engine

    dlm = load()
    engine = Engine(dlm, decoder or "low-confidence", {"block": "8"}, "dual", lang="python")
    client = TestClient(make_app(engine))
    small, large = files(False, heldout), files(True, heldout)
    report: dict[str, Any] = {}
    for kind in KINDS:
        rng = random.Random(f"{seed}-{kind}")
        pool = large if kind == "16kb" else small
        cursors = []
        for _ in range(requests):
            path = rng.choice(pool)
            cursors.append((path.name, *cursor(path.read_text(errors="replace"), rng, kind == "16kb")))
        for guard in (False, True):
            counts = {"requests": 0, "broken": 0, "gave_up": 0, "timed_out": 0, "rest_witness": 0, "examples": []}
            for name, prefix, suffix in cursors:
                got = client.post("/infill", json=body(kind, prefix, suffix, guard)).json()
                broken = syntax.breakage(prefix + suffix, prefix + got["content"] + suffix, "python").broken
                counts["requests"] += 1
                counts["broken"] += broken
                counts["gave_up"] += bool((got.get("dlmcode/guard") or {}).get("gave_up"))
                counts["timed_out"] += bool(got.get("dlmcode/timed_out"))
                counts["rest_witness"] += (got.get("dlmcode/guard") or {}).get("rest") == "witness"
                if broken and len(counts["examples"]) < 3:
                    counts["examples"].append({"file": name, "at": len(prefix), "content": got["content"]})
            report[f"{kind} {'guarded' if guard else 'unguarded'}"] = counts
            print(
                kind,
                "guarded" if guard else "unguarded",
                {k: v for k, v in counts.items() if k != "examples"},
                file=sys.stderr,
                flush=True,
            )
    return report


def command(
    requests: Annotated[int, typer.Option(help="requests per kind (the same cursors guarded and not)")] = 10,
    seed: Annotated[int, typer.Option(help="seed of the cursors")] = 0,
    decoder: Annotated[str | None, typer.Option("--decoder", "-d", help="the server's decoder")] = None,
    heldout: Annotated[bool, typer.Option(help="the stdlib's held-out files (no built-in model trained on)")] = False,
) -> None:
    print(json.dumps(measure(requests, seed, decoder, heldout), indent=1))


def main(args: list[str] | None = None) -> None:
    one_command(command)(args)


if __name__ == "__main__":
    main()
