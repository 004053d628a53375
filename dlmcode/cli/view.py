"""Rich views on stderr: the canvas filling in live, and one summary line at the end.

Only draws; never decides. Nothing animates unless stderr is a terminal, and stdout is
never written here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from .. import decoders
from ..core.canvas import Step, last
from ..jobs import guarding
from ..jobs.job import Job, Result

HOLE = "░"  # how a hole is drawn
REOPENED = "▒"  # how a hole is drawn that held a committed token until a decoder took it back
CONTEXT_CHARS = 300  # context shown around the holes


def console(quiet: bool = False) -> Console:
    """The stderr console every view draws on (quiet: draws nothing)."""
    return Console(stderr=True, quiet=quiet, highlight=False)


class CanvasView:
    """Draws a Job's canvas as its holes are committed."""

    def __init__(self, job: Job, out: Console):
        self.job, self.out = job, out
        self.pieces: dict[int, str] = {}
        self.holes = job.plan.canvas.holes
        self.total = int(self.holes.sum())
        self.taken_back: set[int] = set()  # reopened positions that are holes again
        self.reopened = 0  # tokens reopened so far
        self.last = -1  # index of the last Step tracked

    def follow(self, steps: Iterator[Step]) -> Step | None:
        """Consume the Step stream, drawing it live on a terminal; return the last Step."""
        if not self.out.is_terminal or self.out.quiet:
            return last(steps)
        final = None
        with Live(
            self.render(None),
            console=self.out,
            transient=True,
            refresh_per_second=12,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live:
            for final in steps:
                live.update(self.render(final))
        return final

    def piece(self, token: int) -> str:
        if token not in self.pieces:
            self.pieces[token] = self.job.dlm.tokenizer.decode([token])
        return self.pieces[token]

    def track(self, step: Step | None) -> None:
        """Follow what the Steps reopened (each Step once, in order): reopening comes before the commits."""
        if step is None or step.index <= self.last:
            return
        self.last = step.index
        self.reopened += len(step.reopened)
        self.taken_back = (self.taken_back | set(step.reopened.tolist())) - set(step.filled.tolist())

    def render(self, step: Step | None) -> Text:
        self.track(step)
        canvas = step.canvas if step else self.job.plan.canvas
        if len(canvas.tokens) != len(self.holes):  # a fill grew or shrank (jobs/expanding.py): its positions moved
            self.holes, self.taken_back = canvas.writable, set()
            self.total = int(self.holes.sum())
        fresh = set(step.filled.tolist()) if step else set()
        body = Text()
        for pos in self.window():
            token = int(canvas.tokens[pos])
            if token == canvas.mask_id and pos in self.taken_back:
                body.append(REOPENED, style="bold yellow")
            elif token == canvas.mask_id:
                body.append(HOLE, style="dim magenta")
            elif pos in fresh:
                body.append(self.piece(token), style="bold green")
            elif bool(self.holes[pos]):
                body.append(self.piece(token), style="green")
            else:
                body.append(self.piece(token), style="dim")
        return Text("\n").join([self.header(step), body])

    def header(self, step: Step | None) -> Text:
        calls = step.calls if step else 0
        filled = self.total - (step.canvas.n_holes if step else self.total)
        tpf = filled / calls if calls else 0.0
        completer = guarding.built(self.job.decoder)
        name = decoders.name_of(self.job.decoder) + (" (guarded)" if completer is not None else "")
        taken = f" · reopened {self.reopened}" if self.reopened else ""
        stats = getattr(completer, "last", None)
        away = f" · turned away {stats.rejected}" if stats is not None else ""  # the breakage the guard prevented
        return Text(
            f"{name} · step {step.index + 1 if step else 0} · calls {calls} · "
            f"filled {filled}/{self.total} · TPF {tpf:.2f}{taken}{away}",
            style="bold",
        )

    def window(self) -> range:
        """Canvas positions to draw: the holes with some context either side."""
        where = self.holes.nonzero().squeeze(-1)
        if where.numel() == 0:
            return range(0)
        reach = CONTEXT_CHARS // 4  # about four characters a token
        start = max(0, int(where[0]) - reach)
        return range(start, min(len(self.holes), int(where[-1]) + reach + 1))


def summary(result: Result) -> str:
    """One line: what was filled, at what cost, the syntax it broke, and, guarded, what the guard turned away."""
    taken = f", reopened {result.reopened}" if result.reopened else ""
    if result.expanded or result.deleted:  # the model chose the length: holes it split and removed
        taken += f", expanded {result.expanded}, deleted {result.deleted}"
    guarded = f" ({turned_away(result.guard)})" if result.guard is not None else ""
    line = (
        f"{result.decoder}{guarded}: filled {result.filled} holes in {result.calls} calls "
        f"(TPF {result.tpf:.2f}{taken}) in {result.seconds:.2f} s"
    )
    return f"{line} · {breakage_text(result)}"


def turned_away(guard: Any) -> str:
    """What the guard turned away: the decoder's proposals with no filling that parses after them (the breakage
    it prevented; each replaced by a less likely token that has one, or left for a later call)."""
    rejected, replaced = int(guard["guard_rejected"]), int(guard["guard_replaced"])
    if not rejected:
        return "guarded: no proposal turned away"
    noun = "proposal" if rejected == 1 else "proposals"
    return f"guarded: {rejected} {noun} turned away, {replaced} replaced"


def breakage_text(result: Result) -> str:
    b = result.breakage
    if b is None:
        return "breakage: not checked (unknown language; use --lang)"
    if not b.broken:
        return "breakage: none"
    where = "inside" if b.touches_span else "outside"
    lines = ", ".join(str(x) if x == y else f"{x}-{y}" for x, y in result.fill_lines)
    one = len(result.fill_lines) == 1 and result.fill_lines[0][0] == result.fill_lines[0][1]
    filled = f"the filled line {lines}" if one else f"the filled lines {lines}" if lines else "the filled lines"
    return f"breakage: {b.new_errors} new syntax error(s), first at line {b.first_line} ({where} {filled})"


def follow_speed(items: Iterator[Any], out: Console) -> list[Any]:
    """Draw `dlmcode speed`'s stream and return its rows: a note (str) is printed; a progress event
    (bench.speed.Next) replaces the spinner's line on a terminal, and elsewhere is a plain line of
    its own, so a log shows which item of how many a long run has reached."""
    from ..bench.speed import Next

    rows: list[Any] = []
    with out.status("speed: warming up…") if out.is_terminal else nullcontext() as status:
        for item in items:
            if isinstance(item, str):
                out.print(item, soft_wrap=True)
            elif isinstance(item, Next) and status is not None:
                status.update(f"{item}…")
            elif isinstance(item, Next):
                out.print(str(item), soft_wrap=True)
            else:
                rows.append(item)
    return rows


def follow_training(records: Iterator[dict], out: Console) -> dict:
    """Draw training progress (a bar over the wall-time budget or max_steps, whichever ends the run
    first; loss, tokens/s); return the last record. Before the first step it says what it is doing."""
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("training"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[status]}"),
        TimeRemainingColumn(),
    )
    record: dict = {}
    with Progress(*columns, console=out, transient=False, redirect_stdout=False, redirect_stderr=False) as bar:
        task = bar.add_task("train", total=None, status="preparing data…")
        for record in records:
            if "loss" in record:
                status = f"step {record['step']} · loss {record['loss']:.3f} · {record['tok_s']:,.0f} tok/s"
                bar.update(task, total=1.0, completed=training_done(record), status=status)
            elif record.get("event") == "data":
                bar.update(task, status="building the model…")
            elif record.get("event") == "checkpoint":
                bar.console.print(f"checkpoint at step {record['step']}: held-out loss {record['heldout_loss']:.4f}")
            elif record.get("event") == "done":
                bar.update(task, total=1.0, completed=1.0)  # the run ended: by time, by max_steps, or resumed past both
    return record


def training_done(record: dict) -> float:
    """Share of the run done: wall time over the budget, or steps over the step limit (max_steps, steps) if that ends it
    sooner."""
    share = record["elapsed"] / record["budget"] if record.get("budget") else 0.0
    if record.get("step_limit"):
        share = max(share, record["step"] / record["step_limit"])
    return min(share, 1.0)
