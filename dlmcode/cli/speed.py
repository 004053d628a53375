"""`dlmcode speed`: each decoder's time per call, side by side in one run, as ratios."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ..core.entry import Command, reported
from ..core.errors import UsageError
from ..core.run import ModelChoice
from .app import app
from .flags import MODEL, Quiet, model_flags
from .shared import emit, starting

# One Annotated type a flag, as in every cli module: the shape repeats, the names and help are each command's
# own (flags.py holds the flags several commands share).
Lengths = Annotated[
    str | None, typer.Option(help="prompt lengths in tokens, comma-separated [default: 128,512,2048; --quick: 128]")
]
Block = Annotated[
    int,
    typer.Option(
        help="holes a decoder chooses from per call: its `block`; codila keeps B = 4 and gets a window of block // "
        "4 blocks"
    ),
]
Cache = Annotated[
    str | None,
    typer.Option(help="cache modes timed besides none, comma-separated [default: prefix,dual; --quick: prefix]"),
]
Decoder = Annotated[
    list[str] | None,
    typer.Option(
        "--decoder",
        "-d",
        help="decoder to time (repeatable) [default: every decoder; --quick: threshold, factor, mean-field]",
    ),
]
Quick = Annotated[
    bool,
    typer.Option(
        "--quick",
        help="a small grid for a first look (seconds, not minutes): a 128-token prompt, 32 holes, no cache and "
        "prefix, low-confidence and three decoders; flags you give win",
    ),
]
Guard = Annotated[
    bool,
    typer.Option(
        "--guard",
        help="time every decoder guarded (-o guard=true); the guard's ms per call is a column; then the guard's "
        "time per call on standard-library files of 11, 49 and 229 KB, as a share of one forward",
    ),
]
GuardPlaces = Annotated[
    int,
    typer.Option(help="with --guard: 3-line spans per standard-library file whose guard cost is timed (0: none)"),
]
GuardRight = Annotated[
    str,
    typer.Option(
        help="with --guard: the same files decoded by a stand-in model right at these shares of the holes, "
        "comma-separated (empty: none): the guard's cost beside a strong model"
    ),
]
GuardTasks = Annotated[
    int,
    typer.Option(
        min=0,
        help="with --guard: each decoder's guarded time against unguarded on the first N humaneval-infill-multi "
        "tasks, beside the built-in model and the --guard-right stand-ins (which pay its forward a call); 0: none",
    ),
]
Typos = Annotated[
    int,
    typer.Option(help="with --guard: this many guarded fills beside a typo of the user's (compile once fixed?)"),
]
TyposHeldout = Annotated[
    bool,
    typer.Option(help="with --typos: on the standard library's held-out files, code no built-in model trained on"),
]
Shape = Annotated[
    str | None, typer.Option(help="time a random model of a published architecture instead: llada-8b or dream-7b")
]
JsonOut = Annotated[bool, typer.Option("--json", help="print the rows and targets as one JSON object on stdout")]

Against = Annotated[
    Path | None,
    typer.Option(
        help="also time the whole decode of a random 8-layer d512 LLaDA (32k vocabulary) here and with the dlmcode "
        "checkout in this folder (e.g. a worktree of an earlier commit), side by side",
    ),
]
Sampling = Annotated[
    bool,
    typer.Option("--sampling", help="also time a call at temperature 1 against 0 with a 126k vocabulary"),
]


@app.command(cls=Command)
@model_flags
def speed(
    lengths: Lengths = None,
    gen: Annotated[int | None, typer.Option(help="holes decoded after each prompt [default: 64; --quick: 32]")] = None,
    block: Block = 32,
    cache: Cache = None,
    repeats: Annotated[int, typer.Option(help="decodes per row; the fastest counts")] = 1,
    decoder: Decoder = None,
    quick: Quick = False,
    guard: Guard = False,
    guard_places: GuardPlaces = 4,
    guard_right: GuardRight = "1,0.9",
    guard_tasks: GuardTasks = 0,
    typos: Typos = 0,
    typos_heldout: TyposHeldout = False,
    against: Against = None,
    sampling: Sampling = False,
    choice: ModelChoice = MODEL,  # --model, --device, ... (flags.model_flags)
    shape: Shape = None,
    json_out: JsonOut = False,
    quiet: Quiet = False,
) -> None:
    """Time each decoder with and without a KV cache: ms per call, decoder overhead, calls, TPF, tokens/s, vs
    low-confidence."""
    with reported():
        with starting(quiet):
            from ..bench import speed as timing
            from . import cpu, view
        cfg = dataclasses.replace(timing.grid(lengths, gen, block, cache, decoder or [], repeats, quick), guard=guard)
        right = shares(guard_right)  # a bad share is said before the grid runs
        con = view.console(quiet)
        # as for every command: torch's one-per-core default ran several times slower on a busy machine
        cpu.configure_threads()
        with con.status("loading model…"):
            dlm, note = timing.load(choice, shape)
        rows = view.follow_speed(timing.stream(dlm, cfg), con)
        for line in filter(None, [note]):
            con.print(line, soft_wrap=True)
        table = timing.table(rows, f"speed · {dlm.name} · {dlm.device} · x = ratio to {timing.BASELINE} without cache")
        con.width = max(con.width, 132)  # 13 columns: never cropped, also when stderr is a file
        con.print(table)
        summary = timing.summary(rows, dlm, cfg, probes(against, sampling, dlm, con))
        if guard:
            summary |= guard_costs(dlm, guard_places, typos, con, typos_heldout, right)
            summary |= guard_ratios(dlm, cfg.names, guard_tasks, con, right)
        if json_out:
            emit(json.dumps(summary))


def probes(against: Path | None, sampling: bool, dlm: Any, con: Any) -> dict[str, Any]:
    """`speed --against` and `--sampling`: a whole decode here and in another checkout, and the cost of
    sampling against argmax on a wide vocabulary, each as a line on stderr and a field of the summary."""
    from ..bench import speed as timing

    found = {}
    if against is not None:
        with con.status(f"whole decode, here and in {against}…"):
            found["whole_decode"] = timing.against(against)
        con.print(timing.probe_line("whole decode", found["whole_decode"]), soft_wrap=True)
    if sampling:
        with con.status("temperature 1 against 0, 126k vocabulary…"):
            found["sampling"] = timing.sampling_cost(timing.wide_vocab_model(dlm.device))
        con.print(timing.probe_line("temperature 1 / 0", found["sampling"]), soft_wrap=True)
    return found


def shares(text: str) -> tuple[float, ...]:
    """--guard-right's shares, each in [0, 1]."""
    try:
        found = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--guard-right takes shares such as 1,0.9, got {text!r}") from None
    if not all(0 <= share <= 1 for share in found):
        raise UsageError(f"--guard-right: each share must be from 0 to 1, got {text!r}")
    return found


def guard_costs(
    dlm: Any, places: int, typos: int, con: Any, heldout: bool = False, right: tuple[float, ...] = ()
) -> dict[str, Any]:
    """`speed --guard`'s second part (bench/guard_cost.py): the guard's cost on standard-library files, decoded by
    the model and by stand-ins right at the shares `right`, and fills beside a typo; the tables on stderr, the
    rows for --json."""
    from ..bench import guard_cost

    rows = []
    for share in (None, *right) if places > 0 else ():
        for row in guard_cost.cost(dlm, n=places, right=share):
            model = "" if share is None else f" (a stand-in right at {share:.0%} of the holes)"
            line = f"guard: {row.file} at {row.tokens_per_step} a call{model}: {row.share:.1%} of a forward"
            con.print(line, soft_wrap=True)
            rows.append(row)
    if rows:
        con.width = max(con.width, 160)  # 13 columns: never cropped, also when stderr is a file
        con.print(guard_cost.cost_table(rows))
    out: dict[str, Any] = {"guard_files": [r.to_dict() for r in rows]}
    if typos:
        found = guard_cost.typos(dlm, typos, guard_cost.HELDOUT_TYPO_FILES) if heldout else guard_cost.typos(dlm, typos)
        con.print(guard_cost.typo_table(found))
        out["guard_typos"] = [r.to_dict() for r in found]
    return out


def guard_ratios(
    dlm: Any, names: tuple[str, ...], tasks: int, con: Any, right: tuple[float, ...] = ()
) -> dict[str, Any]:
    """`speed --guard --guard-tasks N`: each decoder's (`names`; none: every one) guarded time against unguarded
    (bench/guard_ratio.py), beside the model and the stand-ins right at the shares `right`; the table on stderr, the
    rows for --json."""
    if tasks <= 0:
        return {}
    from .. import decoders
    from ..bench import guard_ratio

    rows = []
    with con.status("guarded against unguarded…") as status:
        for row in guard_ratio.ratios(dlm, list(names or decoders.DECODERS), tasks, (None, *right)):
            status.update(f"guarded against unguarded: {row.decoder} done…")
            rows.append(row)
    con.width = max(con.width, 132)
    con.print(guard_ratio.ratio_table(rows, "built-in" if dlm is None else dlm.name))
    return {"guard_ratios": [r.to_dict() for r in rows]}
