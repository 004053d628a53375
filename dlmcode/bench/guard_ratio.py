"""Guarded against unguarded time, per decoder, beside the built-in model and beside models that are mostly right
(issue 26's 1.2x target): `dlmcode speed --guard --guard-tasks N`.

Each decoder fills the first N `humaneval-infill-multi` tasks (oracle length, seed 0) as `dlmcode bench --sweep
guard=false,true` fills them, the unguarded and the guarded decode of a task one after the other (a shared machine's
load falls on both alike); a row sums the decodes' CPU time in this thread, the model's forwards included.

Beside the built-in model the guard's time is mostly what a wrong proposal costs: its drafts are broken nearly
everywhere, so most calls search for a witness. Beside a stand-in right at a share of the holes (`guard_cost.knowing`,
the file's own token most likely there, a random one elsewhere) that runs the built-in model's forward at every call
and throws its logits away, the same decodes say what the guard costs a model that is mostly right, at the same
forward's price: the case the 1.2x target was set for (a 7-8B model, 90 % or more of its tokens right).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..models.base import Dlm

SUITE = "humaneval-infill-multi"
TARGET = 1.2  # guarded time at most this times the unguarded


@dataclass
class RatioRow:
    """One decoder beside one model: its tasks decoded unguarded and guarded, summed."""

    decoder: str
    right: float | None = None  # the stand-in's share of holes right; None: the model itself (--model's)
    tasks: int = 0
    plain_s: float = 0.0  # unguarded decodes, CPU seconds of this thread
    guarded_s: float = 0.0  # guarded decodes, the guard included
    guard_s: float = 0.0  # of guarded_s, the guard's own (Stats.cpu)
    plain_calls: int = 0
    guarded_calls: int = 0
    plain_valid: int = 0  # fills the breakage rule does not count broken
    guarded_valid: int = 0
    errors: int = 0  # decodes that stopped with an error (not timed)

    def add(self, plain: tuple[float, int, bool, float], guarded: tuple[float, int, bool, float]) -> None:
        """One task's unguarded and guarded decode (`decoded`'s)."""
        self.tasks += 1
        self.plain_s, self.plain_calls, self.plain_valid = (
            self.plain_s + plain[0],
            self.plain_calls + plain[1],
            self.plain_valid + plain[2],
        )
        self.guarded_s, self.guarded_calls, self.guarded_valid, self.guard_s = (
            self.guarded_s + guarded[0],
            self.guarded_calls + guarded[1],
            self.guarded_valid + guarded[2],
            self.guard_s + guarded[3],
        )

    @property
    def ratio(self) -> float:
        return self.guarded_s / self.plain_s if self.plain_s else 0.0

    @property
    def share(self) -> float:
        """The guard's share of the guarded time."""
        return self.guard_s / self.guarded_s if self.guarded_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self) | {"ratio": self.ratio, "guard_share": self.share}
        d |= {"target": TARGET, "met": 0 < self.ratio <= TARGET}
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in d.items()}


def ratios(dlm: Dlm, names: list[str], tasks: int, rights: tuple[float | None, ...] = (None,)) -> Iterator[RatioRow]:
    """A row per decoder in `names` and model (None in `rights`: `dlm` itself; a share: the stand-in right at it); a
    decoder that is always guarded (syntax-guard) has none."""
    from . import configs, suites

    suite = suites.load(SUITE, tasks, dlm.tokenizer)
    for name in names:
        if not guardable(name):
            continue  # always guarded (syntax-guard): no unguarded time to hold it to
        points = configs.configs([name], [], ["guard=false,true"])
        plain, guarded = configs.attach_all(points, dlm, strict=True)[0]
        for share in rights:
            row = RatioRow(name, share)
            for i, task in enumerate(suite.tasks):
                model = dlm if share is None else stand_in(dlm, task, share, seed=i)
                without, under = (decoded(task, config, model) for config in (plain, guarded))
                if without is None or under is None:
                    row.errors += 1
                else:
                    row.add(without, under)
            yield row


def guardable(name: str) -> bool:
    """Whether the decoder `name` runs with and without the guard (`guard` is a setting of its own, not fixed)."""
    from .. import decoders

    fields = dataclasses.fields(decoders.DECODERS[name])
    return any(f.name == "guard" and f.init and not f.metadata.get("fixed") for f in fields)


def stand_in(dlm: Dlm, task: Any, right: float, seed: int) -> Dlm:
    """`guard_cost.knowing` for a task's hole (its canonical middle's tokens), paying the built-in forward a call."""
    from .guard_cost import knowing

    return knowing(dlm, list(dlm.tokenizer.encode(task.canonical)), right, seed=seed, forward=True)


def decoded(task: Any, config: Any, dlm: Dlm) -> tuple[float, int, bool, float] | None:
    """(CPU seconds, calls, valid, the guard's CPU seconds) of one decode of `task`; None: it stopped with an error."""
    from ..core.errors import DlmcodeError
    from .sample import MODES, decode

    start = time.thread_time()
    result = decode(task, config, dlm, 0, 0)
    seconds = time.thread_time() - start
    if isinstance(result, DlmcodeError):
        return None
    mode = MODES[task.mode]
    breakage = mode.breakage(task, result, mode.output(task, result))
    guard = float((result.guard or {}).get("guard_cpu_seconds", 0.0))
    return seconds, result.calls, not (breakage and breakage.broken), guard


def ratio_table(rows: list[RatioRow], model: str = "built-in") -> Any:
    """The rows as a table; `model`: what the rows without a stand-in were decoded by."""
    from rich import box
    from rich.table import Table

    title = f"guarded against unguarded · {SUITE}, CPU time a task, the forward included"
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    columns = ("decoder", "model", "tasks", "s unguarded", "s guarded", "x", "guard share", "calls", "valid")
    for name in columns:
        t.add_column(name, justify="left" if name in ("decoder", "model") else "right", no_wrap=True)
    for r in rows:
        n = max(r.tasks, 1)
        t.add_row(
            r.decoder,
            model if r.right is None else f"right {r.right:.0%}",
            str(r.tasks) + (f" ({r.errors} failed)" if r.errors else ""),
            f"{r.plain_s / n:.3f}",
            f"{r.guarded_s / n:.3f}",
            ("[green]" if 0 < r.ratio <= TARGET else "[red]") + f"{r.ratio:.2f}x",
            f"{r.share:.0%}",
            f"{r.plain_calls / n:.1f} -> {r.guarded_calls / n:.1f}",
            f"{r.plain_valid}/{r.tasks} -> {r.guarded_valid}/{r.tasks}",
        )
    return t
