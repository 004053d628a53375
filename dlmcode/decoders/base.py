"""What decoders share: the settings base class, the semi-autoregressive block loop, and the
loop of decoders that may take a token back.

A block decoder only says which holes of the active block to commit from the model's
logits (`choose`); `blockwise` owns calling the model, proposing tokens, committing and
yielding Steps, so the loop exists once (style: one loop per algorithm). Each call asks the
model for the rows it reads only (core/canvas.Predict): a block decoder's the active block's
holes, a revising decoder's the positions it may write; a guarded decode reads every row,
since the guard drafts every hole.

A revising decoder (`Revising`) sees every writable position on each call, committed ones
included, and says which holes to commit and which committed positions to reopen (`revise`);
`revising` owns the rest, and the reopen budget that keeps every decode finite: each call
commits at least one hole, and at most `reopens(n)` tokens are reopened in a decode, so a
decode of n holes makes at most n + reopens(n) calls.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from ..core import sampling
from ..core.canvas import At, Canvas, Predict, Step, logits_at
from ..core.contracts import Completer, Gate, gate_for
from ..core.settings import MAX_TEMPERATURE

EMPTY = torch.empty(0, dtype=torch.long)


def setting(default: Any, help: str, fixed: str = "") -> Any:
    """A decoder setting: a dataclass field with a default and a one-line help text. `fixed`: why a
    user may not change the default (syntax-guard's guard); `decoders.build` refuses another value
    with it, and sweeps and shared -o pass the setting by."""
    return field(default=default, metadata={"help": help, "fixed": fixed})


class BlockState(NamedTuple):
    """Where a block decoder is: which block, how many, its size at the start, the step in it."""

    number: int
    count: int
    holes: int  # holes in the block when it started
    step: int  # 0-based step within the block
    size: int = 0  # positions a block family's block spans (its first may hold the prompt's tail); 0: its holes
    offsets: Tensor | None = None  # (H,) each active hole's position less its block's first (shared loop only)


def start_of(canvas: Canvas, positions: Tensor) -> int:
    """Where the block of `positions` starts: its family block's first position (Canvas.blocks), else its first."""
    first = int(positions[0])
    return max((s for s in canvas.blocks if s <= first), default=first) if canvas.blocks else first


def span_of(canvas: Canvas, positions: Tensor) -> int:
    """Positions the block of `positions` spans: a family block's width (Canvas.blocks), else its holes."""
    if not canvas.blocks or positions.numel() == 0:
        return len(positions)
    first = int(positions[0])
    start = max(s for s in canvas.blocks if s <= first)
    return min((s for s in canvas.blocks if s > start), default=len(canvas.tokens)) - start


class Choice(NamedTuple):
    """Rows (indices into the active holes) to commit, and the score each was chosen by."""

    rows: Tensor  # (k,) long
    scores: Tensor  # (k,)


def blocks(canvas: Canvas, size: int) -> list[Tensor]:
    """Hole positions split, in position order, into runs of `size` holes (0: one run).

    On a LLaDA generate canvas (prompt then holes) these are exactly LLaDA's positional blocks.
    A block family's canvas names its own block starts (Canvas.blocks): the holes of each of
    those blocks are one run, whatever `size` says, since its model sees one block at a time.
    """
    holes = canvas.holes.nonzero().squeeze(-1)  # (H,)
    if holes.numel() == 0:
        return []
    if canvas.blocks:
        starts = torch.tensor(canvas.blocks, dtype=holes.dtype, device=holes.device)
        number = torch.searchsorted(starts, holes, right=True)  # (H,) 0: before the first block (context)
        return [holes[number == n] for n in number.unique().tolist()]
    return list(holes.split(size)) if size > 0 else [holes]


@dataclass(frozen=True)
class BaseDecoder:
    """Base of every decoder: settings every decoder has."""

    temperature: float = setting(0.0, "0 = argmax tokens; > 0 samples them from softmax(logits / T), in float64")
    block: int = setting(0, "holes per semi-autoregressive block, left to right; 0 = one block")
    guard: bool = setting(
        False, "commit only tokens after which the holes left can still be filled so that the file parses"
    )
    completer: Completer | None = field(
        default=None, repr=False, compare=False, metadata={"internal": True}
    )  # the job's guard (core/contracts.Completer; dlmcode.text.guard builds it)

    def __post_init__(self) -> None:
        hottest = f"must be 0 to {MAX_TEMPERATURE:g}"
        check(0 <= self.temperature <= MAX_TEMPERATURE, "temperature", self.temperature, hottest)
        check(self.block >= 0, "block", self.block, "must be >= 0")

    def __call__(self, canvas: Canvas, predict: Predict, rng: torch.Generator) -> Iterator[Step]:
        return blockwise(self, canvas, predict, rng)

    # Whether `choose` reads the confidences' values. False: at temperature 0 it gets conf 0 where the
    # proposal's probability is 0 (a late id), else 1, and no (H, V) softmax is made (sampling.propose_unscored).
    scores: ClassVar[bool] = True

    def choose(self, logits: Tensor, ids: Tensor, conf: Tensor, block: BlockState, rng: torch.Generator) -> Choice:
        """Which active holes to commit, given their logits (H, V), proposed ids and confidences (H,)."""
        raise NotImplementedError

    def steps_for(self, holes: int, number: int, count: int) -> int:
        """Calls a block of `holes` may take: at most one per hole (at least one token a call)."""
        return holes

    def max_calls(self, n_holes: int) -> int:
        """Upper bound on model calls for a canvas with `n_holes` holes (guarded: a call may commit one hole only)."""
        sizes = [n_holes] if self.block == 0 else [min(self.block, n_holes - i) for i in range(0, n_holes, self.block)]
        scheduled = sum(self.steps_for(n, b, len(sizes)) for b, n in enumerate(sizes))
        return max(scheduled, n_holes) if self.guard else scheduled


def check(ok: bool, name: str, value: Any, why: str) -> None:
    """Reject a bad setting with a message naming it."""
    if not ok:
        raise ValueError(f"{name}={value!r} {why}")


def blockwise(decoder: BaseDecoder, canvas: Canvas, predict: Predict, rng: torch.Generator) -> Iterator[Step]:
    """The semi-autoregressive loop: per block, call the model until the block has no holes.

    Guarded, a proposal the guard leaves for later is owed: the decoder no longer sees it (so
    that schedules count what they expect) and the loop offers it again on every later call.
    """
    calls = index = 0
    gate = open_gate(decoder, canvas)
    runs = blocks(canvas, decoder.block)
    for number, positions in enumerate(runs):
        step, owed, size = 0, EMPTY, span_of(canvas, positions)
        schedule = decoder.steps_for(len(positions), number, len(runs))
        open_ = canvas.holes[positions]  # (n,) which of the block's positions are holes, read once a call
        while bool(open_.any()):
            active = positions[open_]  # (H,)
            logits = read_rows(predict, canvas, active, gate is not None)  # (H, V); guarded: every hole's, by position
            calls += 1
            if gate is not None and step >= schedule:
                owed = active  # the schedule is spent: whatever is left is offered
            visible = active if gate is None else active[~torch.isin(active, owed)]
            pos, ids, scores = EMPTY, EMPTY, torch.empty(0)
            if visible.numel():
                rows = logits if gate is None else logits[visible.to(logits.device)]  # (H, V)
                state = BlockState(number, len(runs), len(positions), step, size, visible - start_of(canvas, positions))
                pos, ids, scores = propose(decoder, rows, canvas, visible, state, rng)
            if gate is not None:
                pos, ids, scores, owed = through_gate(
                    gate, canvas, logits, pos, ids, scores, owed, decoder.temperature, rng
                )
            canvas = canvas.fill(pos, ids)
            open_ = canvas.holes[positions]
            yield Step(index, canvas, pos, scores, calls, {"block": number})
            index += 1
            step += 1


def read_rows(predict: Predict, canvas: Canvas, active: Tensor, guarded: bool) -> Tensor:
    """The logits of the active holes (H, V); guarded, those of every hole of the canvas (the guard's draft fills them
    all), read by canvas position as an (L, V) tensor would be, without the output head on the rows it never reads."""
    if not guarded:
        return logits_at(predict, canvas.tokens, active)
    return with_holes(predict, canvas, canvas.holes.nonzero().squeeze(-1))  # type: ignore[return-value]


def with_holes(predict: Predict, canvas: Canvas, rows: Tensor) -> At:
    """The logits of positions `rows` and of every hole (the guard's draft reads them all), by canvas position: the
    output head on those rows only, not on the user's code around them (a seventh of a forward on a 512-token
    canvas of the built-in model). `rows` itself when it holds every hole (a revising decoder's span)."""
    holes = canvas.holes.nonzero().squeeze(-1).to(rows.device)
    read = rows if bool(torch.isin(holes, rows).all()) else torch.cat([rows, holes]).unique()  # (R,)
    return At(logits_at(predict, canvas.tokens, read), read, len(canvas.tokens))


def propose(
    decoder: BaseDecoder, rows: Tensor, canvas: Canvas, active: Tensor, block: BlockState, rng: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """The decoder's choice among the active holes, given their logits `rows` (H, V): their positions,
    proposed ids and scores."""
    if decoder.temperature == 0 and not decoder.scores:  # the same ids and zeros, without the softmax
        ids, conf = sampling.propose_unscored(rows, canvas.mask_id, canvas.late_ids)  # (H,), (H,) 0 or 1
    else:
        ids, conf, _ = sampling.propose(rows, decoder.temperature, rng, canvas.mask_id, canvas.late_ids)  # (H,), (H,)
    choice = decoder.choose(rows, ids, conf, block, rng)
    chosen = choice.rows.to(active.device)  # decoders work where the logits are (a GPU); the canvas stays put
    return active[chosen], ids[choice.rows].to(active.device), choice.scores.to(active.device)


# ---------------------------------------------------------------- the guard (dlmcode/text/guard.py)


def open_gate(decoder: object, canvas: Canvas) -> Gate | None:
    """The guard's session for one decode, or None when the decoder runs unguarded (or no job handed it a guard)."""
    return gate_for(decoder, canvas.tokens)


def through_gate(
    gate: Gate,
    canvas: Canvas,
    logits: Tensor,
    pos: Tensor,
    ids: Tensor,
    scores: Tensor,
    owed: Tensor,
    temperature: float,
    rng: torch.Generator,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The decoder's proposals and the owed holes (proposed anew) through the guard: what to commit, and what is owed
    now."""
    device = canvas.tokens.device
    owed = owed[canvas.holes[owed]]
    extra = owed[~torch.isin(owed, pos)]
    if extra.numel():
        rows = logits[extra.to(logits.device)]  # (E, V)
        more, conf, _ = sampling.propose(rows, temperature, rng, canvas.mask_id, canvas.late_ids)  # (E,), (E,)
        pos = torch.cat([pos, extra.to(device)])
        ids = torch.cat([ids.to(device), more.to(device)])
        scores = torch.cat([scores.to(device).to(conf.dtype), conf.to(device)])
    offered = pos
    pos, ids, scores = gate.admit(canvas.tokens, logits, pos, ids, scores)
    return pos, ids, scores, offered[~torch.isin(offered, pos)]


# ---------------------------------------------------------------- decoders that take tokens back


class Window(NamedTuple):
    """What a revising decoder sees on one call: one row per writable position, in position order.

    `ids`/`conf` are the proposal and its probability at every row (at a hole, zero for late ids,
    as for block decoders); `kept` at a committed row is the probability the model now gives the token
    committed there, read at that visible position (0 at holes).
    """

    logits: Tensor  # (P, V)
    ids: Tensor  # (P,) proposed token at every row (at committed rows too)
    conf: Tensor  # (P,) probability of ids
    kept: Tensor  # (P,) probability of the committed token; 0 at holes
    holes: Tensor  # (P,) bool: still a hole
    current: Tensor  # (P,) bool: in the active block
    upto: Tensor  # (P,) bool: in the active block or an earlier one
    block: BlockState
    calls: int  # this call's number, 1-based
    span: int  # writable positions in all (the holes the decode started with)
    mask_id: int
    late_ids: tuple[int, ...] = ()  # the canvas's tokens committed last (their conf is 0 at holes)


class Revision(NamedTuple):
    """Rows (into the Window) of holes to commit, their scores, and committed rows to reopen (most wanted first)."""

    commit: Tensor  # (k,) long, k >= 1
    scores: Tensor  # (k,)
    reopen: Tensor = EMPTY  # (r,) long


@dataclass(frozen=True)
class Revising(BaseDecoder):
    """A decoder that sees committed tokens too and may reopen them (`revise`); it may keep state
    for one decode in `memory`, a fresh dict per decode."""

    def __call__(self, canvas: Canvas, predict: Predict, rng: torch.Generator) -> Iterator[Step]:
        return revising(self, canvas, predict, rng)

    def revise(self, window: Window, memory: dict[str, Any], rng: torch.Generator) -> Revision:
        raise NotImplementedError

    # The precision of the Window's softmax (its conf and kept): float64, as LLaDA's and WINO's code score, unless
    # the decoder's reference scores in the logits' own (Saber: float32, a third of the softmax's time).
    precision: ClassVar[torch.dtype] = torch.float64

    def reads(self, holes: Tensor, current: Tensor, upto: Tensor) -> Tensor | None:
        """(P,) bool: the rows whose ids, conf and kept `revise` reads (the others hold the canvas's token and 0),
        given the Window's holes, current and upto; None: every row."""
        return None

    def reopens(self, n_holes: int) -> int:
        """Tokens a decode of `n_holes` holes may reopen in all (the loop enforces it)."""
        return 0

    def max_calls(self, n_holes: int) -> int:
        """Each call commits a hole: n holes plus every reopened token bound the calls."""
        return super().max_calls(n_holes) + self.reopens(n_holes)


# The shape every decoder repeats (docs/design.md's recipe): a frozen dataclass, each setting with its default and
# comment, checked in __post_init__; one shared checker would hide which setting each rule is for.
@dataclass(frozen=True)
class Remasking(Revising):
    """A revising decoder with a reopen budget setting."""

    max_reopen: float = setting(
        1.0, "tokens a decode may reopen, as a multiple of its holes (ours: bounds calls at (1 + this) x holes)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.max_reopen >= 0, "max_reopen", self.max_reopen, "must be >= 0")

    def reopens(self, n_holes: int) -> int:
        return math.floor(self.max_reopen * n_holes)


def revising(decoder: Revising, canvas: Canvas, predict: Predict, rng: torch.Generator) -> Iterator[Step]:
    """The loop of decoders that may reopen: per block, call the model until no hole is left in
    the block or an earlier one; each Step says what it reopened and what it committed. On a
    block family's canvas a decoder sees and reopens only the active block: the finished ones
    are in the model's exact cache, as its training had them."""
    span = canvas.writable.nonzero().squeeze(-1)  # (P,) the positions this decode may write
    runs = blocks(canvas, decoder.block)
    rank = torch.full((len(canvas.tokens),), -1, dtype=torch.long)  # block number of each writable position
    for number, positions in enumerate(runs):
        rank[positions] = number
    rank = rank[span]  # (P,)
    budget, total, calls, index, memory = decoder.reopens(canvas.n_holes), 0, 0, 0, {}
    gate = open_gate(decoder, canvas)
    for number, positions in enumerate(runs):
        upto, current, step = rank <= number, rank == number, 0  # (P,) bool each
        if canvas.blocks:  # a block family's finished blocks are final (in its exact cache): take back only here
            upto = current
        while bool((open_ := canvas.holes[span])[upto].any()):  # (P,) which writable positions are holes
            logits = logits_at(predict, canvas.tokens, span) if gate is None else with_holes(predict, canvas, span)
            calls += 1
            block = BlockState(number, len(runs), len(positions), step)
            rows = logits if gate is None else logits[span.to(logits.device)]  # (P, V); guarded: by position
            window = _window(canvas, span, open_, rows, decoder, rng, current, upto, block, calls)
            revision = decoder.revise(window, memory, rng)
            commit, scores, reopen = _checked(revision, window, budget)
            ids = window.ids[commit].to(span.device)
            commit, reopen = commit.to(span.device), reopen.to(span.device)  # decoders work where the logits are
            before, canvas = canvas, canvas.reopen(span[reopen]) if reopen.numel() else canvas
            pos, scores = span[commit], scores.to(span.device)
            if gate is not None:
                pos, ids, scores = gate.admit(canvas.tokens, logits, pos, ids, scores)
                if len(reopen) >= len(pos) and len(reopen) < len(commit):  # the guard cut the call's gain to nothing
                    reopen = given_back(gate, before, span, reopen, len(pos))
                    canvas = before.reopen(span[reopen]) if reopen.numel() else before
            budget -= len(reopen)
            total += len(reopen)
            canvas = canvas.fill(pos, ids)
            info = {"block": number, "reopened": total}  # reopened: tokens taken back so far
            yield Step(index, canvas, pos, scores, calls, info, span[reopen])
            index += 1
            step += 1


def given_back(gate: Gate, before: Canvas, span: Tensor, reopen: Tensor, commits: int) -> Tensor:
    """The rows of `reopen` (most wanted first) to take back when the guard admitted only `commits` of a call's
    commits: fewer than them, so that the call still gains a token as it would unguarded (a remasking decoder reopens
    fewer than it commits); the least wanted are given back first, each only where the witness holds its token (then
    the holes left stay completable with no check), so a call may still gain nothing where it holds none."""
    back = span[reopen]  # (r,) positions
    keep = torch.ones(len(back), dtype=torch.bool)
    held = gate.holds(back, before.tokens[back]).tolist()
    excess = len(back) - max(commits - 1, 0)
    for i in reversed(range(len(back))):
        if excess <= 0:
            break
        if held[i]:
            keep[i], excess = False, excess - 1
    return reopen[keep.to(reopen.device)]


def _window(
    canvas: Canvas,
    span: Tensor,
    holes: Tensor,
    rows: Tensor,
    decoder: Revising,
    rng: torch.Generator,
    current: Tensor,
    upto: Tensor,
    block: BlockState,
    calls: int,
) -> Window:
    device = rows.device  # rows: (P, V) the logits of the span; holes: (P,) which of its positions are holes
    holes, current, upto = holes.to(device), current.to(device), upto.to(device)  # (P,) each
    shown = canvas.tokens[span].to(device)  # (P,)
    read = decoder.reads(holes, current, upto)  # (P,) bool or None
    where = None if read is None or bool(read.all()) else read.nonzero().squeeze(-1)  # (R,) the rows proposed
    among = None if where is None else (len(span), where)  # the generator still advances for every row
    picked = rows if where is None else rows_at(rows, where)  # (R, V)
    ids, conf, soft = sampling.propose(
        picked, decoder.temperature, rng, canvas.mask_id, among=among, dtype=decoder.precision
    )  # (R,), (R,)
    at = holes if where is None else holes[where]  # (R,)
    tokens = torch.where(at, ids, shown if where is None else shown[where])  # (R,) a hole's mask id may lie outside
    if (
        canvas.late_ids
    ):  # late ids are committed last: zero at holes only (a committed row's reading is a verdict, not an order)
        conf = conf.masked_fill(at & torch.isin(ids, torch.tensor(canvas.late_ids, device=device)), 0.0)
    kept = soft.probability(tokens).masked_fill(at, 0.0)  # (R,) one softmax for both readings
    if where is not None:  # the rows not read: the canvas's token, probability 0
        ids = shown.clone().index_copy_(0, where, ids)  # (P,)
        conf, kept = spread(conf, where, len(span)), spread(kept, where, len(span))  # (P,) each
    return Window(rows, ids, conf, kept, holes, current, upto, block, calls, len(span), canvas.mask_id, canvas.late_ids)


def rows_at(rows: Tensor, where: Tensor) -> Tensor:
    """rows[where] for sorted `where`: on the CPU a view when it is one run of rows (a decoder that reads the blocks
    so far), no copy of (R, V); else the copy indexing makes (on a GPU the copy is cheap and reading `where`'s ends
    would wait for the device)."""
    if rows.device.type == "cpu" and where.numel() and int(where[-1]) - int(where[0]) + 1 == where.numel():
        return rows[int(where[0]) : int(where[-1]) + 1]
    return rows[where]


def spread(values: Tensor, where: Tensor, n: int) -> Tensor:
    """(n,) zeros with `values` at rows `where`."""
    return torch.zeros(n, dtype=values.dtype, device=values.device).index_copy_(0, where, values)


def _checked(revision: Revision, window: Window, budget: int) -> tuple[Tensor, Tensor, Tensor]:
    """The revision's commits, scores and reopens (cut to the budget left), after checking the contract."""
    commit = revision.commit.long()
    reopen = revision.reopen.long().to(commit.device)[: max(budget, 0)]
    assert commit.numel() >= 1, "a call must commit at least one hole"
    assert bool(window.holes[commit].all()), "commit of a position that is not a hole"
    assert not bool(window.holes[reopen].any()), "reopen of a hole"
    assert len(set(commit.tolist())) == commit.numel() and len(set(reopen.tolist())) == reopen.numel(), "a row twice"
    return commit, revision.scores, reopen
