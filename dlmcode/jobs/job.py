"""One decode as a plain record (`Job`: the plan, the model, the decoder as wired, the seed and what the fill's
text needs), its Step stream and what it produced (`Result`).

The jobs that make one (jobs/fill.py: infill, generate, an editor's middle) plan the canvas; the wiring
(jobs/wiring.py) builds the decoder and hands it what it takes; `Job.steps()` is the decoder's Step stream over
the model's predict and the job's logits processors, and `Job.run()` drains it into a Result: the filled text,
calls, TPF and breakage.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .. import decoders
from ..core.canvas import Decoder, Step, last
from ..models.base import Dlm
from ..models.blocks import BlockPredict, Ended
from ..text import spans, syntax
from . import expanding, guarding, sizing
from .guarding import Client, JobGuard
from .processors import Processor, names, processed

Follow = Callable[[Iterator[Step]], Step | None]


@dataclass(frozen=True)
class Result:
    """What a decode produced, with its cost and the syntax it broke."""

    text: str  # the whole output (file with spans replaced, or prompt plus continuation / extracted code)
    ids: list[int]  # token ids decoded into the holes, in position order, before any trimming
    canvas: list[int]  # every token id of the final canvas
    calls: int  # model forward passes
    filled: int  # holes filled
    seconds: float
    breakage: syntax.Breakage | None  # None when the language is unknown
    decoder: str
    settings: Mapping[str, Any]
    model: str
    reopened: int = 0  # committed tokens a decoder took back (each was decoded again; TPF still counts holes)
    fill_lines: tuple[tuple[int, int], ...] = ()  # 1-based inclusive lines of `text` each fill stands on
    guard: Mapping[str, Any] | None = None  # a guarded decode's counters (guard.Stats); None: unguarded
    notes: tuple[str, ...] = ()  # one line each, for the user: why a guard asked for could not hold
    processors: tuple[str, ...] = ()  # what was done to the logits (jobs/processors.py), by name
    sized: tuple[
        int, ...
    ] = ()  # holes the length rule chose per hole of unknown length (jobs/sizing.py); its call is in `calls`
    expanded: int = 0  # holes that became two (a model trained to expand: jobs/expanding.py)
    deleted: int = 0  # holes that left the canvas (the same)

    @property
    def tpf(self) -> float:
        """Tokens committed per call."""
        return self.filled / self.calls if self.calls else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "decoder": {"name": self.decoder, "settings": dict(self.settings)},
            "model": self.model,
            "ids": self.ids,
            "canvas": self.canvas,
            "calls": self.calls,
            "filled": self.filled,
            "reopened": self.reopened,
            "tpf": round(self.tpf, 4),
            "seconds": round(self.seconds, 4),
            "breakage": self.breakage.to_dict() if self.breakage else None,
            "guard": dict(self.guard) if self.guard is not None else None,
            "notes": list(self.notes),
            "processors": list(self.processors),
            "sized": list(self.sized),
            "expanded": self.expanded,
            "deleted": self.deleted,
        }


@dataclass
class Job:
    """What one decode needs: the plan (canvas and how to splice it back), the model, the decoder as wired
    (jobs/wiring.py: built once, its assistant, oracle and guard handed over), the seed, and how its text is made."""

    plan: spans.Plan
    dlm: Dlm
    decoder: Decoder
    seed: int
    lang: str | None
    originals: tuple[str, ...] | None = (
        None  # the user's text per hole when the plan lacks it (a benchmark's hidden middle)
    )
    finish: Callable[[spans.Filled], str] | None = (
        None  # a chat job: the code cut out of the reply, all of it the model's
    )
    trim_at: int | None = None  # generate: the completion ends at the first end-of-text
    processors: tuple[Processor, ...] = ()  # what happens to the logits, in order (jobs/processors.py)
    notes: list[str] = dataclasses.field(default_factory=list)  # one line each for the user (a guard that cannot hold)
    sized: sizing.Sized | None = None  # the length rule's probe (its call and seconds count in the Result)
    growth: expanding.Growth | None = None  # holes that expand and delete as the model decides (then `plan` follows)
    block_predict: BlockPredict | None = None  # a block family's last decode's predict (its forwards, for FLOPs)
    cut: spans.Plan | None = None  # the asked length's plan when the canvas was made longer to end on a block
    client: Client | None = None  # a face's client that splices the fill itself (serve); None: the plan's splice
    guarding: JobGuard | None = dataclasses.field(
        default=None, repr=False, compare=False
    )  # the guard's side of this job (jobs/wiring.wired gives it one); None: built as a bare record, unwired

    def steps(self) -> Iterator[Step]:
        """The decoder's Steps; their `calls` include the length rule's probe, so every face counts it.

        A block family's decode gets a fresh exact-cache predict, whose noise (if any) is drawn
        from the decoder's own generator (models/blocks.py)."""
        rng = torch.Generator().manual_seed(self.seed)
        if self.growth is not None:
            return expanding.rounds(self, functools.partial(self.round, rng=rng))
        canvas, predict = self.plan.canvas, self.dlm.predict
        if self.dlm.blocks is not None:
            end = self.trim_at if self.finish is None else None  # generate's end of text (a chat reply runs on)
            predict = self.block_predict = BlockPredict(self.dlm.blocks, canvas.tokens, canvas.mask_id, rng, end_id=end)
            canvas = dataclasses.replace(canvas, blocks=predict.starts)
        steps = self.decoder(canvas, processed(predict, self.processors), rng)
        steps = until_ended(steps) if self.dlm.blocks is not None else steps
        return shifted(steps, self.probe_calls) if self.probe_calls else steps

    def round(self, plan: spans.Plan, limits: expanding.Limits, rng: torch.Generator) -> Iterator[Step]:
        """One round of a growing job: the decoder from `plan`'s canvas, its guard made for this plan."""
        if self.guarding is not None:
            self.decoder = self.guarding.for_plan(plan, self.decoder)
        return self.decoder(plan.canvas, processed(self.dlm.predict, (limits, *self.processors)), rng)

    @property
    def probe_calls(self) -> int:
        return self.sized.calls if self.sized else 0

    def run(self, follow: Follow = last) -> Result:
        """Decode (through `follow`, which consumes the Step stream) and splice the result."""
        start = time.perf_counter()
        taken: list[int] = []  # tokens each Step reopened
        committed: list[int] = []  # tokens each Step committed
        final = follow(counting(self.steps(), taken, committed))
        probe = self.sized.seconds if self.sized else 0.0
        seconds = time.perf_counter() - start + probe + guarding.first_search(self.decoder)
        canvas = final.canvas if final else self.plan.canvas
        left = canvas.n_holes if final else 0  # holes after an end of text a block family stopped at (until_ended)
        if left and self.trim_at is not None:  # they are cut off with it: the end of text stands in for them
            canvas = dataclasses.replace(
                canvas, tokens=canvas.tokens.masked_fill(canvas.holes, self.trim_at), span=None
            )
        if self.cut is not None:  # the tokens past the asked length finished the last block; they are dropped
            plan = self.cut
            canvas = dataclasses.replace(canvas, tokens=canvas.tokens[: len(plan.canvas.tokens)], span=None, blocks=())
            filled = spans.splice(plan, canvas, self.dlm.tokenizer, drop_ids=self.dlm.special_ids, trim_at=self.trim_at)
        else:
            filled = self.spliced(canvas)
        text = self.finish(filled) if self.finish else filled.text
        return Result(
            text=text,
            ids=filled.ids,
            canvas=canvas.tokens.tolist(),
            calls=final.calls if final else self.probe_calls,
            filled=sum(committed) if self.growth else self.plan.canvas.n_holes - left,
            seconds=seconds,
            breakage=self.breakage(filled, text),
            decoder=decoders.name_of(self.decoder),
            settings=decoders.settings_of(self.decoder),
            model=self.dlm.name,
            reopened=sum(taken),
            guard=guarding.stats(self.decoder, self.notes),
            notes=tuple(self.notes),
            processors=names(self.processors),
            fill_lines=((1, spans.count_lines(text)),) if self.finish else tuple(filled.span_lines),
            sized=self.sized.lengths if self.sized else self.growth.lengths(self.plan) if self.growth else (),
            expanded=sum(self.growth.expanded) if self.growth else 0,
            deleted=sum(self.growth.deleted) if self.growth else 0,
        )

    @property
    def before(self) -> str:
        """The user's code, which breakage is measured against (spans.reference); a chat request is not code."""
        return "" if self.finish else self.reference[0]

    @functools.cached_property
    def reference(self) -> tuple[str, list[tuple[int, int]]]:
        """The user's code and each hole's [start, end) chars in it (spans.reference; a client's file), once per job."""
        if self.client is not None:
            at = len(self.client.prefix)
            return self.client.prefix + self.client.suffix, [(at, at)]
        return spans.reference(self.plan, self.originals)

    def spliced(self, canvas: Any) -> spans.Filled:
        """The text a finished canvas stands for: the plan's splice, or what a face's client splices."""
        if self.client is None:
            return spans.splice(
                self.plan, canvas, self.dlm.tokenizer, drop_ids=self.dlm.special_ids, trim_at=self.trim_at
            )
        run = self.plan.positions[0]
        ids = canvas.tokens[run.start : run.stop].tolist()
        fill, start = self.client.splices(ids), len(self.client.prefix)
        text, end = self.client.prefix + fill + self.client.suffix, start + len(fill)
        return spans.Filled(text, ids, [fill], [spans.line_range(text, start, end)], [(start, end)])

    def breakage(self, filled: spans.Filled, text: str) -> syntax.Breakage | None:
        """The syntax errors of `text` that the user's code did not have, one rule for every mode (docs/usage.md)."""
        if self.lang is None:
            return None
        if self.finish:  # the whole reply is the model's: one hole, in an empty text
            return syntax.breakage("", text, self.lang, holes=[syntax.Region((0, 0), (0, len(text)))])
        before, regions = self.reference
        holes = [syntax.Region(b, a) for b, a in zip(regions, filled.regions, strict=True)]
        return syntax.breakage(before, text, self.lang, holes=holes)


def until_ended(steps: Iterator[Step]) -> Iterator[Step]:
    """A block family's Steps until its predict says the end of text is behind the active block (blocks.Ended):
    the holes after it stay holes, as its generate leaves them, and are not counted as filled."""
    try:
        yield from steps
    except Ended:
        return


def shifted(steps: Iterator[Step], calls: int) -> Iterator[Step]:
    """The Step stream with `calls` more model calls counted in each Step (the length rule's probe)."""
    for step in steps:
        yield dataclasses.replace(step, calls=step.calls + calls)


def counting(steps: Iterator[Step], taken: list[int], committed: list[int] | None = None) -> Iterator[Step]:
    """The Step stream as it is, noting in `taken` how many tokens each Step reopened (and in `committed` how many
    it committed)."""
    for step in steps:
        taken.append(len(step.reopened))
        if committed is not None:  # an expand or delete commit left the canvas: the Step counts it in `info`
            committed.append(len(step.filled) + int(step.info.get("edit_commits", 0)))
        yield step
