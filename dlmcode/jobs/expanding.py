"""Holes that choose their own length inside the decode: expand and delete, for any decoder.

A model trained with DreamOn's objective (Wu et al. 2026, arXiv 2602.01326; ours:
dlmcode/training/expand.py) has two more things a hole may become: its expand token (the
hole stands for two or more tokens: it becomes two holes) and its delete token (the fill
ends here: this hole and every hole after it in the same fill leave the canvas; DreamOn's
`pad_eos_to_right` then `delete_eos_token`). A fill of unknown length starts small and grows
or shrinks as the model decides.

Decoders never know. The job runs the chosen decoder on the canvas as always, watching its
Steps; when a Step commits an expand or a delete, the job edits the canvas and the plan
(where each fill now lies), yields that Step on the edited canvas (the commits that stayed,
at their new positions; every consumer, a server's stream included, sees canvas and plan
agree), and starts the decoder again on it with the same random generator. So every
decoder, block or not, guarded or not, batched or not, runs unchanged; calls add up across
restarts. A guarded decode searches a witness for the holes that exist now at each restart
(from the model's draft once a fill holds committed tokens).

Budget (DreamOn's `max_gen_len` and `expand_budget`): a fill may not grow past `budget`
positions nor expand more than `budget` times, and the canvas never past the model's
context: there, and in holes whose length was given, the expand token's logit is -inf (as
DreamOn blocks it); the delete token is -inf outside the fills that may change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..core.canvas import Canvas, Step
from ..text import spans

START = 4  # holes a fill of unknown length starts from (DreamOn's evaluation sweeps initial lengths 4-64; ours)
BUDGET = 64  # most positions a fill of unknown length may reach (a ⟦fill⟧ marker; --length auto adds to a span's count)


@dataclass(frozen=True)
class Rule:
    """How a family's fills of unknown length start and lean: the holes a fill starts from, and constants added
    to the expand and delete logits where they may be proposed (a calibration, as the probe's bias is:
    jobs/sizing.py; chosen on tasks no reported benchmark uses, docs/length.md)."""

    start: int = START
    expand_bias: float = 0.0
    delete_bias: float = 0.0


PUBLISHED = Rule()  # DreamOn's decode as published: 4 holes (its min_gen_len), the logits as they are
RULES: dict[str, Rule] = {}  # a family's own rule, where one was calibrated


def rule_for(family: str) -> Rule:
    return RULES.get(family, PUBLISHED)


@dataclass(frozen=True)
class Tokens:
    """The model's two states of a variable hole (Dlm.expand_id, Dlm.delete_id)."""

    expand: int
    delete: int


@dataclass
class Growth:
    """Which holes of a plan may change length, their budget, and what happened to them."""

    tokens: Tokens
    variable: tuple[int, ...]  # hole indices (plan.holes) whose length nobody gave
    budget: int  # most positions one such fill may reach
    context: int  # the canvas never grows past it
    rule: Rule = PUBLISHED  # the holes a fill starts from, and the expand and delete logits' constants
    expanded: list[int] = field(default_factory=list)  # expansions so far, per variable hole
    deleted: list[int] = field(default_factory=list)  # positions deleted so far, per variable hole

    def __post_init__(self) -> None:
        self.expanded = self.expanded or [0] * len(self.variable)
        self.deleted = self.deleted or [0] * len(self.variable)

    def mask(self, plan: spans.Plan) -> tuple[Tensor, Tensor]:
        """(L,) bool each: where expand may be proposed now, and where delete may."""
        n = len(plan.canvas.tokens)
        expand, delete = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
        for k, hole in enumerate(self.variable):
            r = plan.positions[hole]
            delete[r.start : r.stop] = True
            if len(r) < self.budget and self.expanded[k] < self.budget and n < self.context:
                expand[r.start : r.stop] = True
        return expand, delete

    def processor(self, plan: spans.Plan) -> Limits:
        expand, delete = self.mask(plan)
        return Limits(self.tokens, expand, delete, self.rule.expand_bias, self.rule.delete_bias)

    def touched(self, step: Step) -> bool:
        """Whether the Step committed an expand or a delete."""
        ids = step.canvas.tokens[step.filled]
        return bool(((ids == self.tokens.expand) | (ids == self.tokens.delete)).any())

    def edit(self, plan: spans.Plan, canvas: Canvas) -> tuple[spans.Plan, Tensor]:
        """The plan after the canvas's expands and deletes are carried out (the counts are kept here), and where
        each old position went (edited)."""
        return edited(plan, canvas, self.variable, self.tokens, self)

    def lengths(self, plan: spans.Plan) -> tuple[int, ...]:
        """Positions each variable fill holds now (its tokens once decoded)."""
        return tuple(len(plan.positions[h]) for h in self.variable)


@dataclass(frozen=True)
class Limits:
    """The logits processor of one round: expand and delete only where `Growth.mask` allows."""

    tokens: Tokens
    expand: Tensor  # (L,) bool
    delete: Tensor  # (L,) bool
    expand_bias: float = 0.0  # added to the expand logit where it is allowed (Rule)
    delete_bias: float = 0.0  # added to the delete logit where it is allowed
    name: str = "expand and delete within the budget"

    def __call__(self, logits: Tensor) -> Tensor:
        out = logits.clone()  # (L, V)
        device = out.device
        expand, delete = self.expand.to(device), self.delete.to(device)
        if self.expand_bias:
            out[expand, self.tokens.expand] += self.expand_bias
        if self.delete_bias:
            out[delete, self.tokens.delete] += self.delete_bias
        out[~expand, self.tokens.expand] = float("-inf")
        out[~delete, self.tokens.delete] = float("-inf")
        return out

    def select(self, rows: Tensor) -> Limits:
        """The processor of the logits of positions `rows` only (a call that computes those: core/canvas.Predict)."""
        return dataclasses.replace(self, expand=self.expand[rows], delete=self.delete[rows])


def carried_out(run: Sequence[int], mask_id: int, tokens: Tokens) -> tuple[list[int], int, int]:
    """One fill's ids after its expands (-> two holes) and its first delete (it and the holes after it go):
    (ids, expansions, positions deleted). Committed tokens after a delete stay (DreamOn's rule)."""
    out, expanded, ended = [], 0, False
    for token in run:
        if ended and token in (mask_id, tokens.delete):
            continue
        if token == tokens.delete:
            ended = True
        elif token == tokens.expand:
            out += [mask_id, mask_id]
            expanded += 1
        else:
            out.append(token)
    return out, expanded, len(run) + expanded - len(out)


def edited(
    plan: spans.Plan, canvas: Canvas, variable: Sequence[int], tokens: Tokens, growth: Growth | None = None
) -> tuple[spans.Plan, Tensor]:
    """`plan` with `canvas`'s expands and deletes carried out in the holes `variable`: new canvas, new positions;
    and (L,) where each old position went (-1: it left the canvas, an expand's own position included)."""
    ids = canvas.tokens.tolist()
    writable = canvas.writable.tolist()
    pieces, span, positions, where, at, end = [], [], [], [], 0, 0
    for hole, r in enumerate(plan.positions):
        pieces.append(ids[end : r.start])
        span += writable[end : r.start]
        where += range(at, at + r.start - end)
        at += r.start - end
        run = ids[r.start : r.stop]
        if hole in variable:
            kept, expanded, deleted = carried_out(run, canvas.mask_id, tokens)
            if growth is not None:
                k = list(variable).index(hole)
                growth.expanded[k] += expanded
                growth.deleted[k] += deleted
            where += moves(run, canvas.mask_id, tokens, at)
            run = kept
        else:
            where += range(at, at + len(run))
        positions.append(range(at, at + len(run)))
        pieces.append(run)
        span += [True] * len(run)
        at, end = at + len(run), r.stop
    pieces.append(ids[end:])
    span += writable[end:]
    where += range(at, at + len(ids) - end)
    new = torch.tensor([i for piece in pieces for i in piece], dtype=torch.long, device=canvas.tokens.device)
    grown = Canvas(new, canvas.mask_id, canvas.late_ids, torch.tensor(span, dtype=torch.bool, device=new.device))
    holes = tuple(dataclasses.replace(h, length=len(p)) for h, p in zip(plan.holes, positions, strict=True))
    moved = torch.tensor(where, dtype=torch.long)
    return dataclasses.replace(plan, canvas=grown, positions=tuple(positions), holes=holes), moved


def moves(run: Sequence[int], mask_id: int, tokens: Tokens, at: int) -> list[int]:
    """Where each position of one fill goes under `carried_out`, from new position `at` (-1: it leaves)."""
    out, ended = [], False
    for token in run:
        if (ended and token in (mask_id, tokens.delete)) or token == tokens.delete:
            ended = True
            out.append(-1)
        elif token == tokens.expand:
            out.append(-1)
            at += 2
        else:
            out.append(at)
            at += 1
    return out


def edited_step(step: Step, plan: spans.Plan, moved: Tensor, index: int, calls: int) -> Step:
    """`step` on the edited canvas: its commits that stayed, at their new positions; the expands and deletes
    it committed are counted in `info` (they were commits: TPF counts them)."""
    new = moved[step.filled.cpu()]  # (k,)
    stays = new >= 0
    gone = moved[step.reopened.cpu()] if step.reopened.numel() else step.reopened
    info = {**step.info, "edit_commits": float(int((~stays).sum()))}
    return Step(index, plan.canvas, new[stays], step.scores[stays.to(step.scores.device)], calls, info, gone[gone >= 0])


def rounds(job, steps_of) -> Iterator[Step]:
    """A job's Steps with holes growing and shrinking: `steps_of(plan, limits)` starts the decoder on a plan's canvas;
    a Step that commits an expand or a delete is shown on the edited canvas (and `job.plan` is the edited plan by
    then), and the decoder starts again from it. Step indices and calls run on across rounds."""
    index = calls = 0
    growth: Growth = job.growth
    while job.plan.canvas.n_holes:
        for step in steps_of(job.plan, growth.processor(job.plan)):
            if not growth.touched(step):
                yield dataclasses.replace(step, index=index, calls=calls + step.calls)
                index += 1
                continue
            job.plan, moved = growth.edit(job.plan, step.canvas)
            yield edited_step(step, job.plan, moved, index, calls + step.calls)
            index, calls = index + 1, calls + step.calls
            break
        else:
            return  # the decoder finished with nothing left to edit
