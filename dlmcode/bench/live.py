"""The live view of `compare` and `bench` on stderr: one row per decoder setting.

Each row: a progress bar, pass@1 (where tests run), exact match against the original
middle, the running breakage rate, the trivial-fill rate (dlmcode/text/trivial.py), TPF, calls,
tokens reopened (by a remasking decoder), the proposals the guard turned away (guarded: the
breakage it prevented) and completion tokens per second. Only
draws; it animates only when stderr is a terminal (elsewhere a progress line a minute), and the
final table is the same table without the progress bars.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator

from rich.console import Console
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from .configs import Config
from .metrics import Sample, Tally

BAR_WIDTH = 12
WIDTHS = {
    "pass@1": 6,
    "exact": 6,
    "breakage": 8,
    "trivial": 7,
    "TPF": 5,
    "calls": 5,
    "reopen": 6,
    "away": 4,
    "tok/s": 6,
}  # "100.0%", "12.50", "123.4", "1234.5"
LOG_SECONDS = 60.0  # without a terminal, one progress line this often


class Board:
    """Running tallies of every decoder setting, drawn as a table."""

    def __init__(self, configs: list[Config], total: int, out: Console, title: str, show_pass: bool = False):
        self.labels = {c.key(): c.label for c in configs}
        self.tallies = {c.key(): Tally() for c in configs}
        self.total, self.out, self.title, self.show_pass = total, out, title, show_pass
        self.live = False  # drawing the live table (with progress bars) rather than the final one

    def add(self, sample: Sample) -> None:
        key = (sample.decoder, json.dumps(sample.settings, sort_keys=True))
        if key in self.tallies:
            self.tallies[key].add(sample)

    def follow(self, samples: Iterator[Sample], earlier: Iterable[Sample] = ()) -> list[Sample]:
        """Consume the Sample stream (after counting `earlier` ones, from a resume); return the new ones."""
        for sample in earlier:
            self.add(sample)
        if not self.out.is_terminal or self.out.quiet:
            return self._logged(samples)
        new, self.live = [], True
        # opened as cli/view.py opens its Live for a decode (stderr, transient, stdout left alone): the bench
        # draws its own table at its own rate, and imports nothing from the CLI above it
        with Live(
            self.table(),
            console=self.out,
            transient=True,
            refresh_per_second=4,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live:
            for sample in samples:
                new.append(self._added(sample))
                live.update(self.table())
        self.live = False
        return new

    def _logged(self, samples: Iterator[Sample]) -> list[Sample]:
        """No terminal: a plain progress line every LOG_SECONDS instead of a live table."""
        new, last = [], time.monotonic()
        for sample in samples:
            new.append(self._added(sample))
            if time.monotonic() - last >= LOG_SECONDS:
                last = time.monotonic()
                self.out.print(self.progress_line(), soft_wrap=True)
        return new

    def progress_line(self) -> str:
        done = sum(t.n for t in self.tallies.values())
        return f"{self.title}: {done}/{self.total * len(self.tallies)} samples"

    def _added(self, sample: Sample) -> Sample:
        self.add(sample)
        return sample

    def table(self) -> Table:
        lines = [(self.labels[key], tally.row()) for key, tally in self.tallies.items()]
        return table(self.title, lines, self.total, self.show_pass, bar=self.live)


def summary_table(summary: dict, title: str) -> Table:
    """The final table of a bench, from its summary (every rank's samples)."""
    lines = [(row["label"], row) for row in summary["rows"]]
    return table(title, lines, summary["tasks"], summary["quality"] == "pass_at_1")


def table(title: str, lines: list[tuple[str, dict]], total: int, show_pass: bool, bar: bool = False) -> Table:
    """One row per setting: its label and summary row (metrics.Tally.row); a progress bar while live.

    The columns are fixed before the first sample, so the live table never jumps wider: `reopen` and
    `away` (proposals the guard turned away) are always there (0 for a decoder that took nothing back
    or ran unguarded), and every column is as wide as its
    widest usual value from the first frame (WIDTHS)."""
    rates = ["pass@1"] * show_pass + ["exact", "breakage", "trivial"]
    grid = Table(title=title, title_justify="left", header_style="bold", collapse_padding=True, pad_edge=False)
    grid.add_column("setting", no_wrap=True, min_width=max((len(label) for label, _ in lines), default=7))
    if bar:
        grid.add_column("progress", justify="left", min_width=BAR_WIDTH)
    grid.add_column("done", justify="right", min_width=2 * len(str(total)) + 1)
    for name in [*rates, "TPF", "calls", "reopen", "away", "tok/s"]:
        grid.add_column(name, justify="right", min_width=WIDTHS.get(name, len(name)))
    for label, row in lines:
        values = [row["pass_at_1"]] * show_pass + [row["exact_match"], row["breakage_rate"], row.get("trivial")]
        progress = [ProgressBar(total=total, completed=row["n"], width=BAR_WIDTH)] * bar
        grid.add_row(
            label,
            *progress,
            f"{row['n']}/{total}",
            *map(_percent, values),
            _number(row["tpf"], 2),
            _number(row["calls"], 1),
            str(row.get("reopened", 0)),
            str(row.get("turned_away", 0)),
            _number(row["tokens_per_s"], 1),
        )
    return grid


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _number(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"
