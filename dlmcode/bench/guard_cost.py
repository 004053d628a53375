"""The guard where users meet it (issue 26): what it costs a model call on real files, and whether a typo of
the user's elsewhere blinds it. `dlmcode speed --guard` runs both (`--typos N` sets the second's size).

Cost: guarded infills (low-confidence at 1 and 4 tokens a call, the built-in model) of 3-line spans
at PLACES places spread over standard-library files of about 11, 49 and 229 KB (this
interpreter's queue.py, pathlib.py and _pydecimal.py); the guard's seconds (Stats.seconds: its
first witness search and every admission) per model call, as a share of one uncached forward of
the model on a 512-token canvas, measured in the same run (before each row). Targets: at most 2 % up to 50 KB, 5 %
above.

Beside a strong model (`right`, `dlmcode speed --guard-right`): the same decodes with a stand-in model whose most
likely token at each hole is the file's own at a share `right` of the holes (elsewhere a random token, the file's
own second), in an order of its own (a confidence drawn per hole). The built-in model's drafts are broken nearly
everywhere, so its rows say what the guard costs beside a weak model; these say what it costs beside one that is
mostly right: the guard's own floor, and what each miss adds. The yardstick is the built-in model's forward in
both.

Typos: a guarded fill of a 3-line span inside a function, with one broken line or one unclosed
bracket of the user's inserted 15 or more lines above or below it, outside its function; the fill
must compile once the user's line is taken out again (target: 99 % of the fills; one whose guard gave up counts
against it). On this interpreter's files by default, or on the stdlib's held-out ones (HELDOUT_TYPO_FILES).
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import sysconfig
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.canvas import logits_at, rowwise
from ..core.errors import UsageError
from ..core.run import RunSettings
from ..models.base import Dlm

FILES = ("queue.py", "pathlib.py", "_pydecimal.py")  # about 11, 49 and 229 KB (CPython 3.11)
PLACES = 4  # 3-line spans per file, spread evenly
TOKENS_PER_CALL = (1, 4)
FORWARDS = 7  # timed forwards of the yardstick; the median counts
SMALL, SMALL_TARGET, LARGE_TARGET = 50_000, 0.02, 0.05  # bytes; guard seconds per call / one forward
TYPOS = ("value = = 1", "value = call(1,")  # one broken line, one unclosed bracket
TYPO_FILES = ("queue.py", "textwrap.py", "pathlib.py")
HELDOUT_TYPO_FILES = ("gzip.py", "multiprocessing/connection.py", "enum.py")  # held out: no built-in model trained on
TYPO_TARGET = 0.99
AWAY = 15  # lines between a typo and the span, at least


@dataclass
class CostRow:
    """One file at one tokens-per-call: the guarded decodes of its spans, summed."""

    file: str
    size: int  # bytes
    tokens_per_step: int
    right: float | None = None  # the stand-in's share of holes right (`knowing`); None: the model itself
    decodes: int = 0
    calls: int = 0
    guard_s: float = 0.0  # Stats.seconds, summed: the first searches and every admission
    first_s: float = 0.0  # of guard_s, the first witness searches
    judge_s: float = 0.0  # of guard_s, in the judge (text/judge.py); the rest is the witness search's own work
    checks: int = 0  # the judge's verdicts
    unguarded: int = 0  # decodes that found no witness (said, and decoded unguarded)
    skipped: int = 0  # spans the model's context cannot hold (a small model): not decoded
    broken: int = 0  # fills the breakage rule counts broken
    forward_s: float = 0.0  # the yardstick: one uncached forward on a 512-token canvas
    guard_cpu_s: float = 0.0  # guard_s in the decoding thread's CPU time (Stats.cpu)
    forward_cpu_s: float = 0.0  # the yardstick in CPU time (on a shared machine, wall time is mostly waiting)

    @property
    def per_call(self) -> float:
        return self.guard_s / max(self.calls, 1)

    @property
    def share(self) -> float:
        return self.per_call / self.forward_s

    @property
    def share_cpu(self) -> float:
        """The same share with both sides in CPU time: what the load of a shared machine does not move."""
        return self.guard_cpu_s / max(self.calls, 1) / self.forward_cpu_s if self.forward_cpu_s else 0.0

    @property
    def target(self) -> float:
        return SMALL_TARGET if self.size <= SMALL else LARGE_TARGET

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self) | {"per_call_s": self.per_call, "share_of_forward": self.share}
        d |= {"share_of_forward_cpu": self.share_cpu}
        d |= {"target": self.target, "met": self.share <= self.target}
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in d.items()}


def stdlib(name: str) -> str:
    return (Path(sysconfig.get_paths()["stdlib"]) / name).read_text(encoding="utf-8")


def forward_seconds(dlm: Dlm) -> tuple[float, float]:
    """The median of FORWARDS uncached forwards of a 512-token canvas (448 tokens of code, 64 holes), in wall and in
    this thread's CPU time."""
    from .speed import canvas

    tokens = canvas(dlm, 448, 64).tokens.to(dlm.device)
    for _ in range(2):  # untimed: the first calls pay for allocation
        dlm.predict(tokens)
    times, cpus = [], []
    for _ in range(FORWARDS):
        start, cpu = time.perf_counter(), time.thread_time()
        dlm.predict(tokens)
        times.append(time.perf_counter() - start)
        cpus.append(time.thread_time() - cpu)
    return statistics.median(times), statistics.median(cpus)


def places(text: str, n: int) -> list[tuple[int, int]]:
    """n 3-line spans (1-based, inclusive) spread over `text`, each starting on a line of code."""
    lines = text.split("\n")
    out = []
    for k in range(n):
        at = int(len(lines) * (k + 0.5) / n)
        while at < len(lines) - 3 and (not lines[at].strip() or lines[at].strip().startswith("#")):
            at += 1
        out.append((at + 1, at + 3))
    return out


def guarded(dlm: Dlm, text: str, span: tuple[int, int], tokens_per_step: int, seed: int = 0) -> Any:
    """One guarded low-confidence infill of `span` (the job, run)."""
    from ..jobs import fill

    options = {"guard": "true", "tokens_per_step": str(tokens_per_step)}
    run = RunSettings(decoder="low-confidence", options=options, lang="python", seed=seed)
    job = fill.infill_job(text, span, dlm, run)
    return job, job.run()


def cost(dlm: Dlm, files: tuple[str, ...] = FILES, n: int = PLACES, right: float | None = None) -> Iterator[CostRow]:
    """One row per file and tokens per call, its yardstick measured just before it (on a shared machine the
    load changes during a run: the ratio is taken under the same load). `right`: decoded by the stand-in of
    `knowing` that gets this share of the holes right, not by `dlm` (whose forward is still the yardstick)."""
    for name in files:
        text = stdlib(name)
        for k in TOKENS_PER_CALL:
            wall, cpu = forward_seconds(dlm)
            row = CostRow(name, len(text.encode("utf-8")), k, right, forward_s=wall, forward_cpu_s=cpu)
            for i, span in enumerate(places(text, n)):
                model = dlm if right is None else knowing(dlm, own_tokens(dlm, text, span), right, seed=i)
                try:
                    job, result = guarded(model, text, span, k)
                except UsageError:  # the span and the text between its holes outgrow the model's context
                    row.skipped += 1
                    continue
                stats = job.decoder.completer.last
                row.decodes += 1
                row.calls += result.calls
                row.guard_s += stats.seconds
                row.guard_cpu_s += stats.cpu
                row.first_s += stats.first
                row.judge_s += job.guarding.judged.seconds
                row.checks += stats.checks
                row.unguarded += result.guard is None
                row.broken += bool(result.breakage and result.breakage.broken)
            yield row


def own_tokens(dlm: Dlm, text: str, span: tuple[int, int]) -> list[int]:
    """The span's own tokens, as the plan sizes its hole (text/spans.py: the span's token count)."""
    from ..text.spans import line_span

    start, end = line_span(text, span)
    return list(dlm.tokenizer.encode(text[start:end]))


def knowing(dlm: Dlm, truth: list[int], right: float, seed: int = 0, below: float = 1.0, forward: bool = False) -> Dlm:
    """A stand-in for a strong model on a canvas with one run of len(truth) holes: at each hole, its most likely
    token is the file's own (`truth`) at a share `right` of the holes, chosen once (a random token elsewhere, with
    the file's own second, `below` logits under it); each hole's top logit is drawn once, from 2 to 8, so a
    decoder commits them in an order of its own. Rows of committed positions favour their token. No forward runs
    (it costs nothing) unless `forward`: then each call runs `dlm`'s own for the same rows and throws its logits
    away, so that a call costs what the model's does (bench/guard_ratio.py)."""
    g = torch.Generator().manual_seed(seed)
    vocab = int(dlm.predict(torch.tensor([dlm.mask_id], device=dlm.device)).shape[-1])
    n = len(truth)
    own = torch.tensor(truth, dtype=torch.long)  # (n,)
    wrong = torch.rand(n, generator=g) >= right  # (n,) bool
    other = torch.randint(0, vocab, (n,), generator=g)  # (n,)
    for _ in range(2):  # a random token, never the file's own nor the mask
        other = torch.where((other == own) | (other == dlm.mask_id), (other + 1) % vocab, other)
    top = 2 + 6 * torch.rand(n, generator=g)  # (n,)
    first: list[int] = []  # where the holes start: read off the first canvas, whose holes are all open

    def predict(tokens: Tensor, rows: Tensor | None = None) -> Tensor:
        if forward:
            logits_at(dlm.predict, tokens, rows)
        tokens = tokens.cpu()
        if not first:
            first.append(int((tokens == dlm.mask_id).nonzero()[0]))
        rows = torch.arange(len(tokens)) if rows is None else rows.cpu()
        out = torch.full((len(rows), vocab), -8.0)
        at = rows - first[0]  # (R,) hole index, where 0 <= at < n
        hole = (at >= 0) & (at < n)
        r, i = hole.nonzero().squeeze(-1), at[hole]
        out[r, torch.where(wrong[i], other[i], own[i])] = top[i]
        out[r[wrong[i]], own[i][wrong[i]]] = top[i][wrong[i]] - below
        kept = (~hole).nonzero().squeeze(-1)
        out[kept, tokens[rows[kept]]] = 5.0
        return out.to(dlm.device)

    return dataclasses.replace(dlm, predict=rowwise(predict), cached=None, forward_batch=None, run_rows=None)


@dataclass
class TypoRow:
    """Guarded fills beside one kind of typo, above or below."""

    typo: str
    where: str  # above or below
    fills: int = 0
    guarded: int = 0  # the rest gave up: no witness was found, the fill was decoded unguarded
    compiles: int = 0  # guarded fills that compile once the typo is taken out
    counted_broken: int = 0  # guarded fills the whole file's breakage rule counts broken (with the typo in)

    @property
    def share(self) -> float:
        """Fills that were guarded and compile once the typo is fixed, of all fills: a give-up counts against it."""
        return self.compiles / max(self.fills, 1)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"compiles_share": round(self.share, 4), "target": TYPO_TARGET}


def typo_case(text: str, rnd: random.Random, above: bool) -> tuple[tuple[int, int], int] | None:
    """A 3-line span inside a function and a line AWAY+ lines above or below it outside that function
    (0-based, where the typo goes in), or None."""
    from ..text import judge

    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    for _ in range(50):
        first = rnd.randrange(AWAY + 1, len(lines) - AWAY - 4)
        if not lines[first].startswith("        ") or not lines[first].strip():
            continue  # a line inside a method's (or nested) body
        span = (first + 1, first + 3)
        found = next(judge.python_windows(text, [(starts[first], starts[first + 3])]), None)
        if found is None:
            continue
        top, bottom = (bisect_line(starts, x) for x in found[:2])  # the function's lines
        pick = range(0, min(first - AWAY, top)) if above else range(max(first + 3 + AWAY, bottom + 1), len(lines) - 1)
        if len(pick):
            return span, rnd.choice(pick)
    return None


def bisect_line(starts: list[int], offset: int) -> int:
    import bisect

    return bisect.bisect_right(starts, offset) - 1


def typos(dlm: Dlm, n: int, files: tuple[str, ...] = TYPO_FILES, seed: int = 26) -> list[TypoRow]:
    """n guarded fills beside a typo (the kinds and places in turn), their rows by kind and place."""
    rows = {(t, w): TypoRow(t, w) for t in TYPOS for w in ("above", "below")}
    rnd = random.Random(seed)
    texts = [stdlib(f) for f in files]
    for i in range(n):
        typo, above = TYPOS[i % 2], i % 4 < 2
        text = texts[i % len(texts)]
        found = typo_case(text, rnd, above)
        if found is None:
            continue
        (first, last), at = found
        lines = text.split("\n")
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())] if lines[at].strip() else ""
        broken = "\n".join([*lines[:at], indent + typo, *lines[at:]])
        shift = 1 if above else 0
        try:
            _, result = guarded(dlm, broken, (first + shift, last + shift), rnd.choice(TOKENS_PER_CALL), seed=i)
        except UsageError:  # the span outgrows the model's context (a small model): not a fill
            continue
        row = rows[typo, "above" if above else "below"]
        row.fills += 1
        if result.guard is None:
            continue
        row.guarded += 1
        row.counted_broken += bool(result.breakage and result.breakage.broken)
        out = result.text.split("\n")
        out.remove(indent + typo)
        row.compiles += compiles("\n".join(out))
    return list(rows.values())


def compiles(text: str) -> bool:
    """Whether CPython compiles `text` (its warnings are not errors, and not printed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(text, "<fill>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return False
    return True


def cost_table(rows: list[CostRow]) -> Any:
    from rich import box
    from rich.table import Table

    title = "guard per model call · share of one uncached forward, 512 tokens"
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    columns = ("model", "file", "KB", "tok/call", "calls", "checks/call", "guard ms/call", "judge ms/call")
    columns += ("first ms", "of fwd", "of fwd, CPU", "target", "unguarded")
    for name in columns:
        t.add_column(name, justify="left" if name in ("model", "file") else "right", no_wrap=True)
    for r in rows:
        t.add_row(
            "built-in" if r.right is None else f"right {r.right:.0%}",
            r.file,
            f"{r.size / 1000:.0f}",
            str(r.tokens_per_step),
            str(r.calls),
            f"{r.checks / max(r.calls, 1):.1f}",
            f"{r.per_call * 1e3:.2f}",
            f"{r.judge_s * 1e3 / max(r.calls, 1):.2f}",
            f"{r.first_s * 1e3 / max(r.decodes, 1):.1f}",
            f"{r.share:.1%}",
            f"{r.share_cpu:.1%}",
            f"{r.target:.0%}",
            f"{r.unguarded}/{r.decodes}" + (f" ({r.skipped} too long)" if r.skipped else ""),
        )
    return t


def typo_table(rows: list[TypoRow]) -> Any:
    from rich import box
    from rich.table import Table

    title = "guarded fills beside a typo · compile once it is fixed"
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("typo", "where", "fills", "guarded", "compile", "of fills", "rule: broken"):
        t.add_column(name, justify="left" if name in ("typo", "where") else "right", no_wrap=True)
    for r in rows:
        cells = (str(r.fills), str(r.guarded), str(r.compiles), f"{r.share:.0%}", str(r.counted_broken))
        t.add_row(r.typo, r.where, *cells)
    return t
