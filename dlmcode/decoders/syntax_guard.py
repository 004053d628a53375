"""syntax-guard (ours): Fast-dLLM's factor rule with a floor, run under the guard.

Each call the model proposes a token for every hole. The parallel rule (Fast-dLLM's factor
bar 1 - f/(n+1), at least `floor` tokens; `spread`, after DUS, off by default: never two adjacent
holes in one call) picks among those of the active block; the completability guard (dlmcode/text/guard.py,
handed over by the job, on by default) admits each pick only while the holes left can still
be filled so that the file parses. It commits the model's own tokens only: a pick the guard turns away
waits for a later call (the guard is not asked for a less likely stand-in: a one-token decoder would commit
another hole's own token first), and other holes of the block are offered in its place once; a stand-in
is committed only when no hole's own token fits (`Run.admit`). A pick that starts a comment waits while
the other picks go (committed with them, it would hold whatever follows it on its line), and so do the picks
after it on its line: committed before it, they would be judged as its comment's text and tie the line to a
comment for good, even once the model wants code there (`Run.outside`). When only such a comment start and
what it would hold are left, and the model is unsure of it (under 0.5), its best token that starts no comment
goes in its place if the guard admits it (`Run.uncommented`): a fill that is only a comment is no fill.

`spread` was on until issue 26's fifth round: on 100 humaneval-infill-single tasks it took 3.72 calls for
a 9.5-token line (TPF 2.55), once the guard no longer let a comment it put in a hole hold the model's
tokens; off, 3.11 calls (TPF 3.05) at the same exact match, pass@1 and trivial rate (docs/guard.md).

Before the guard existed this decoder steered with a syntax oracle (dlmcode/text/oracle.py): it
committed proposals outside the draft's new errors first (`flags`), reopened tokens that sat
in an error (`reopen`) and re-decoded broken regions (`repairs`). Under the guard, measured
on 30 humaneval-infill-multi tasks no target uses (from index 1000, every 130th), none of the
three changed exact match or pass@1 (6.7 % and 3.3 % with or without each), while reopening
and repairs cost 15-27 % more calls (TPF 4.9 with both off, 3.9 with both on); so all three are
off by default and kept as settings. Without a guard (the decoder called directly, as the
contract tests do, or a job whose guarantee cannot hold) it is the parallel rule alone.
Every rule and default here is our choice; no paper has one.

Budget: every call commits at least one hole, and at most reopen x n + repairs x min(n,
repair_size) tokens are ever reopened, so `max_calls` bounds every decode.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..core import sampling
from ..core.canvas import Canvas, Predict, Step
from ..core.contracts import Oracle
from .base import BaseDecoder, blocks, check, open_gate, setting, with_holes

EMPTY = torch.empty(0, dtype=torch.long)
UNSURE = 0.5  # a comment start the model is less sure of than this gives way to its best code token (ours)


@dataclass(frozen=True)
class SyntaxGuard(BaseDecoder):
    """ours: commit 8+ tokens a call by Fast-dLLM's factor rule, guarded so the fill always parses."""

    guard: bool = setting(
        True,
        "commit only tokens after which the holes left can still be filled so that the file parses",
        fixed="syntax-guard always guards; `-d factor` is its rule unguarded",
    )
    factor: float = setting(
        4.0, "parallel rule: commit the n most confident safe proposals while the n-th has conf >= 1 - f/(n+1)"
    )
    floor: int = setting(8, "parallel rule: commit at least this many of the most confident safe proposals per call")
    topup: bool = setting(
        True, "when fewer than `floor` proposals are safe, commit the most confident flagged ones up to `floor`"
    )
    spread: bool = setting(False, "never commit two adjacent holes in one call (DUS's dilation; ours to combine)")
    patience: int = setting(2, "calls in a row a committed token must sit in a new error before it may be reopened")
    flags: bool = setting(
        False, "commit proposals outside the draft's new syntax errors first (the syntax oracle's flags)"
    )
    reopen: float = setting(0.0, "tokens reopened for persisting errors, at most this share of the holes per decode")
    reopen_per_call: int = setting(2, "tokens reopened for persisting errors, at most this many per call")
    repairs: int = setting(
        0, "times a complete but broken span has its smallest new-error region reopened and decoded again"
    )
    repair_size: int = setting(8, "tokens a repair reopens at most (the first ones of the region)")
    oracle: Oracle | None = field(default=None, repr=False, compare=False)  # set by the job (text/oracle.with_oracle)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.factor > 0, "factor", self.factor, "must be > 0")
        check(self.floor >= 1, "floor", self.floor, "must be >= 1")
        check(self.patience >= 1, "patience", self.patience, "must be >= 1")
        check(0 <= self.reopen <= 1, "reopen", self.reopen, "must be in [0, 1]")
        check(self.reopen_per_call >= 1, "reopen_per_call", self.reopen_per_call, "must be >= 1")
        check(self.repairs >= 0, "repairs", self.repairs, "must be >= 0")
        check(self.repair_size >= 1, "repair_size", self.repair_size, "must be >= 1")

    def reopen_budget(self, n_holes: int) -> int:
        return math.floor(self.reopen * n_holes)

    def max_calls(self, n_holes: int) -> int:
        """Each call commits a hole; holes ever to commit: n, plus every token reopened (both budgets)."""
        return n_holes + self.reopen_budget(n_holes) + self.repairs * min(n_holes, self.repair_size)

    def __call__(self, canvas: Canvas, predict: Predict, rng: torch.Generator) -> Iterator[Step]:
        run = Run(self, canvas, predict, rng)
        for number, positions in enumerate(blocks(canvas, self.block)):
            while bool(canvas.holes[positions].any()):
                canvas = yield from run.step(canvas, positions, {"block": number})
        if self.oracle is None:
            return
        span = canvas.writable.nonzero().squeeze(-1)  # (S,)
        for repair in range(self.repairs):
            region = self.broken_region(canvas)
            if region is None:
                return
            canvas = canvas.reopen(region)
            run.pending = region
            while canvas.n_holes:
                canvas = yield from run.step(canvas, span, {"block": -1, "repair": repair + 1})

    def broken_region(self, canvas: Canvas) -> Tensor | None:
        """The first `repair_size` positions of the smallest new-error region of a complete canvas; None when not
        broken."""
        verdict = self.oracle(canvas.tokens)
        if not verdict.broken or not verdict.regions:
            return None
        smallest = min(verdict.regions, key=len)  # (k,) span positions, sorted
        return smallest[: self.repair_size].to(canvas.tokens.device)


class Run:
    """One decode's state: calls, step index, reopen budget and streaks, a repair's pending reopen."""

    def __init__(self, decoder: SyntaxGuard, canvas: Canvas, predict: Predict, rng: torch.Generator) -> None:
        self.decoder, self.predict, self.rng = decoder, predict, rng
        self.calls = self.index = 0
        self.budget = decoder.reopen_budget(canvas.n_holes)
        self.streak = torch.zeros(
            len(canvas.tokens), dtype=torch.long
        )  # (L,) calls in a row a committed position was flagged
        self.pending = EMPTY  # positions a repair reopened before the next call
        self.gate = open_gate(decoder, canvas)

    def step(self, canvas: Canvas, positions: Tensor, info: dict) -> Iterator[Step]:
        """One call: draft, ask the oracle, reopen persisting errors, commit safe proposals; returns the new canvas."""
        d = self.decoder
        # by position: the span's rows (the holes it drafts, the commits it may reopen), not the user's code's
        logits = with_holes(self.predict, canvas, canvas.writable.nonzero().squeeze(-1))
        self.calls += 1
        device = canvas.tokens.device
        holes = canvas.holes.nonzero().squeeze(-1)  # (H,) every hole: the draft covers the whole span
        rows = logits[holes.to(logits.device)]  # (H, V)
        ids, conf, _ = sampling.propose(rows, d.temperature, self.rng, canvas.mask_id, canvas.late_ids)  # (H,), (H,)
        ids, conf = ids.to(device), conf.to(device)
        flagged = self.flags(canvas, holes, ids)  # (L,) bool
        reopened = self.reopen_persisting(canvas, positions, flagged, logits)
        canvas = canvas.reopen(reopened) if reopened.numel() else canvas
        active = torch.isin(holes, positions.to(device))  # (H,) holes of the active block
        chosen = choose(
            conf, active, active & ~flagged[holes], d.factor, d.floor, d.topup, holes if d.spread else None
        )  # (k,) rows of `holes`
        if self.gate is None:
            pos, ids, scores = holes[chosen], ids[chosen], conf[chosen]
        else:
            pos, ids, scores = self.admit(canvas, logits, holes, ids, conf, chosen, active)
        canvas = canvas.fill(pos, ids)
        info = info | {"flagged": float(flagged.sum())}
        all_reopened = torch.cat([self.pending.to(device), reopened])
        yield Step(self.index, canvas, pos, scores, self.calls, info, all_reopened)
        self.index += 1
        self.pending = EMPTY
        return canvas

    def admit(
        self, canvas: Canvas, logits: Tensor, holes: Tensor, ids: Tensor, conf: Tensor, chosen: Tensor, active: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The guard's commits of the chosen proposals, the model's own tokens only: where the guard turns a proposal
        away it may put a less likely token there, which a one-token decoder would never commit beside a hole whose
        own token fits; so those wait, and as many other holes of the block (the most confident, spread out, none
        whose token starts a comment) are offered once. A less likely token is committed only when neither offer
        admits any of the model's own. A pick that starts a comment waits while other picks go: committed with
        them, it would hold whatever follows it on its line (the model's junk as much as its code); the picks it would
        hold wait with it (`outside`)."""
        own = dict(zip(holes.tolist(), ids.tolist(), strict=True))
        escape = getattr(self.gate, "escape", None)  # a comment start fits anywhere: never offered for that alone
        plain = torch.tensor([escape is None or not escape(t) for t in ids.tolist()], dtype=torch.bool)  # (H,)
        plain = plain.to(holes.device) & self.outside(canvas, holes, ids, plain)
        if bool(plain[chosen].any()):
            chosen = chosen[plain[chosen]]
        elif escape is not None:  # only a comment start and what it would hold are left to commit
            coded = self.uncommented(canvas, logits, holes, ids, conf, chosen, escape)
            if coded is not None:
                return coded
        first = self.gate.admit(canvas.tokens, logits, holes[chosen], ids[chosen], conf[chosen], own=True)
        mine = owned(first, own)
        need = len(chosen) - int(mine.sum())
        if need <= 0:
            return first
        kept = tuple(t[mine] for t in first)
        taken = set(kept[0].tolist())
        rows = active & ~torch.isin(holes, holes[chosen])  # (H,) holes of the block not offered yet
        if self.decoder.spread:
            beside = torch.tensor([p + d for p in taken for d in (-1, 1)], dtype=holes.dtype, device=holes.device)
            rows &= ~torch.isin(holes, beside)
            rows = spread_out(conf, rows, holes)
        rows &= plain
        more = rows.nonzero().squeeze(-1)  # (M,)
        more = more[conf[more].argsort(descending=True, stable=True)[:need]]
        if more.numel():
            tokens = canvas.tokens.clone()
            tokens[kept[0]] = kept[1]
            second = self.gate.admit(tokens, logits, holes[more], ids[more], conf[more], own=True)  # holds `kept`
            also = owned(second, own)
            if taken or bool(also.any()):
                return tuple(torch.cat([a, b[also]]) for a, b in zip(kept, second, strict=True))
        elif taken:
            return kept
        top = chosen[conf[chosen].argmax()].view(1)  # no own token fits: what the guard puts at the best pick
        return self.gate.admit(canvas.tokens, logits, holes[top], ids[top], conf[top])

    def uncommented(
        self, canvas: Canvas, logits: Tensor, holes: Tensor, ids: Tensor, conf: Tensor, chosen: Tensor, escape: Any
    ) -> tuple[Tensor, Tensor, Tensor] | None:
        """Where every pick left is a comment start of the model's or a hole it would hold, and the model is unsure
        of the first such start (less than UNSURE likely), its most likely token there that starts no comment, when
        the guard admits that token as it is: the line is then written as code. Committed, the comment start would
        make the line comment text whatever the model wants there next, and a fill that is only a comment is no
        fill (the trivial fills of issue 26: `    #____string( =)`). None: no such start, or the guard turns its
        code token away (then the start and its line go together, as before)."""
        starts = [r for r in chosen.tolist() if escape(int(ids[r])) and float(conf[r]) < UNSURE]
        if not starts:
            return None
        row = min(starts, key=lambda r: int(holes[r]))  # the first: it holds the others
        at = holes[row].view(1)
        probs = torch.softmax(logits[at.to(logits.device)].float(), dim=-1)[0]  # (V,)
        code = sampling.likeliest_allowed(probs, lambda t: t == canvas.mask_id or escape(t))
        if code is None:
            return None
        prob, token = code
        proposal = torch.tensor([token], dtype=ids.dtype, device=ids.device)
        score = torch.tensor([prob], dtype=conf.dtype, device=conf.device)
        got = self.gate.admit(canvas.tokens, logits, at, proposal, score, own=True)
        admitted = got[0].numel() == 1 and int(got[0][0]) == int(at[0]) and int(got[1][0]) == token
        return got if admitted else None

    def outside(self, canvas: Canvas, holes: Tensor, ids: Tensor, plain: Tensor) -> Tensor:
        """(H,) bool: the holes outside every comment that a waiting comment start of the model's (a hole whose own
        token opens one: not `plain`) would open in the draft. Committed before it, their tokens would be checked
        as comment text, and the comment start could no longer be changed for code."""
        commented = getattr(self.gate, "commented", None)
        if commented is None or bool(plain.all()):
            return torch.ones_like(plain)
        draft = canvas.tokens.cpu().clone()
        draft[holes.cpu()] = ids.cpu()
        inside = commented(draft, holes[~plain].tolist())
        return torch.tensor([h not in inside for h in holes.tolist()], dtype=torch.bool, device=plain.device)

    def flags(self, canvas: Canvas, holes: Tensor, ids: Tensor) -> Tensor:
        """(L,) bool: span positions the oracle puts in new errors of the draft (none without an oracle)."""
        if self.decoder.oracle is None or not self.decoder.flags:
            return torch.zeros(len(canvas.tokens), dtype=torch.bool, device=canvas.tokens.device)
        draft = canvas.tokens.clone()
        draft[holes] = ids
        return self.decoder.oracle(draft).flagged.to(canvas.tokens.device)

    def reopen_persisting(self, canvas: Canvas, positions: Tensor, flagged: Tensor, logits: Tensor) -> Tensor:
        """Committed positions of the active block flagged `patience` calls in a row,
        least likely first, within budget."""
        device = canvas.tokens.device
        committed = canvas.writable & ~canvas.holes  # (L,)
        committed[~torch.isin(torch.arange(len(committed), device=device), positions.to(device))] = False
        self.streak = torch.where((flagged & committed).cpu(), self.streak + 1, 0)  # (L,)
        limit = min(self.budget, self.decoder.reopen_per_call)
        due = (committed.cpu() & (self.streak >= self.decoder.patience)).nonzero().squeeze(-1)  # (r,)
        if limit <= 0 or due.numel() == 0:
            return EMPTY.to(device)
        probs = logits[due.to(logits.device)].float().softmax(-1)  # (r, V)
        likely = (
            probs.gather(1, canvas.tokens[due].to(logits.device).unsqueeze(1)).squeeze(1).cpu()
        )  # (r,) p(committed token)
        picked = due[likely.argsort()[:limit]].sort().values  # (k,)
        self.budget -= picked.numel()
        self.streak[picked] = 0
        return picked.to(device)


def choose(
    conf: Tensor,
    active: Tensor,
    safe: Tensor,
    factor: float,
    floor: int,
    topup: bool = False,
    positions: Tensor | None = None,
) -> Tensor:
    """Rows to commit: the factor rule (at least `floor`) over safe rows; none safe: the most confident active row
    (topup: the most confident flagged rows fill up to `floor`). With `positions` (spread), a row next to
    a more confident candidate is left for a later call."""
    if positions is not None:
        active, safe = spread_out(conf, active, positions), spread_out(conf, safe, positions)
    rows = safe.nonzero().squeeze(-1)  # (S,)
    chosen = rows[:0]
    if rows.numel():
        scores, order = conf[rows].sort(descending=True)  # (S,)
        ranks = torch.arange(1, len(rows) + 1, device=conf.device, dtype=scores.dtype)
        ok = scores >= 1 - factor / (ranks + 1)
        ok[0] = True
        chosen = rows[order[: max(int(ok.long().cumprod(0).sum()), min(floor, len(rows)))]]
    want = floor if topup else 1
    if chosen.numel() >= want:
        return chosen
    rest = (active & ~safe).nonzero().squeeze(-1)  # (F,) flagged active rows
    extra = rest[conf[rest].argsort(descending=True)[: want - chosen.numel()]]
    return torch.cat([chosen, extra])


def owned(commits: tuple[Tensor, Tensor, Tensor], own: dict[int, int]) -> Tensor:
    """(k,) bool: the commits (positions, ids, scores) that hold the model's own proposal at their position."""
    pos, ids, _ = commits
    mine = [own.get(p) == t for p, t in zip(pos.tolist(), ids.tolist(), strict=True)]
    return torch.tensor(mine, dtype=torch.bool, device=pos.device)


def spread_out(conf: Tensor, rows: Tensor, positions: Tensor) -> Tensor:
    """(H,) bool: `rows` without any row whose position is next to a more confident kept row's."""
    kept = torch.zeros_like(rows)
    taken: set[int] = set()
    for r in rows.nonzero().squeeze(-1)[conf[rows].argsort(descending=True)].tolist():
        p = int(positions[r])
        if p - 1 not in taken and p + 1 not in taken:
            kept[r] = True
            taken.add(p)
    return kept
