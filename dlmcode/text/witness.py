"""The witness search: a filling of every hole that the judge passes, found among bounded candidates.

The guard (text/guard.py) admits a proposal when some witness holds it; this module finds one: the
first witness from fillers before decoding (`first_witness`, a coordinate search over the runs of holes),
and, inside a decode, the candidates for one proposal or for a whole draft (`Search`: the current witness
with the proposal in it, the draft with it, fillers in the holes beside it, a bounded sweep), each judged
once (a canvas is never judged twice in one decode).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .memo import Lazy, has

Judge = Callable[[Tensor], int]  # (L,) canvas without holes -> new syntax errors of its splice (0: passes)
Around = Callable[
    [Tensor, int, int], tuple[str, str]
]  # (canvas, start, stop) -> text before and after positions [start, stop)
Fit = Callable[[str, str, int], Sequence[list[int]]]  # (text before, text after, n) -> fillers of exactly n ids
TRIALS = 12  # witness candidates one proposal may cost at most (ours)
SWEEP = 16  # judge calls a call may spend repairing the draft under all its proposals at once (ours)
CACHE = 8192  # judged canvases remembered per decode


class Search:
    """A decode's witness search (text/guard.Session's half that finds witnesses): `guard` (the Guard: judge,
    mask id, fillers), `witness` (the current one), `stats`, `memo` (judged canvases) and `spent` (checks this
    call) are the session's."""

    guard: Any
    witness: Tensor | None
    stats: Any
    memo: dict[bytes, int]
    spent: int

    def count(self, canvas: Tensor) -> int:
        """The judge's verdict, counted as the guard's work (its time is in `admit`'s)."""
        self.stats.checks += 1
        return self.guard.judge(canvas)

    def complete(
        self, fixed: Tensor, draft: Tensor, changed: Tensor, trials: int = 0, fillers: int = -1
    ) -> Tensor | None:
        """A witness that agrees with every token of `fixed` (holes are free), or None if the search finds none
        among its first `trials` candidates (0: TRIALS)."""
        free = fixed == self.guard.mask_id  # (L,)
        base = torch.where(free, self.witness, fixed)
        if torch.equal(base, self.witness):
            return self.witness  # the proposal is the witness's own choice: nothing to check
        mixed = torch.where(free, draft, fixed)
        candidates = itertools.chain(
            [base, mixed], self.seconds(free, fixed), self.repairs(base, draft, free, changed, fillers)
        )  # the second reading and the repairs built only if needed
        for candidate in itertools.islice(unique(candidates), trials or TRIALS):
            if self.passes(candidate):
                return candidate
        return None

    def sweep(self, fixed: Tensor, draft: Tensor, budget: int = 0) -> Tensor | None:
        """A witness for all of `fixed` from the draft with fillers in some runs of holes
        (coordinate search, bounded)."""
        if self.guard.around is None or self.guard.fit is None:
            return None
        free = fixed == self.guard.mask_id
        mixed = torch.where(free, draft, fixed)
        runs = [range(int(r[0]), int(r[-1]) + 1) for r in free_runs(free)]
        if not runs:
            return None
        runs = self.broken_first(mixed, runs)
        around = self.guard.around
        seeds = [mixed[r.start : r.stop].tolist() for r in runs]
        texts = lambda i: around(mixed, runs[i].start, runs[i].stop)  # noqa: E731 (read when the search gets there)
        return first_witness(fixed, runs, texts, self.guard.fit, self.errors, seeds, budget=budget or SWEEP)

    def broken_first(self, canvas: Tensor, runs: list[range]) -> list[range]:
        """`runs` with the one the judge's first new error of `canvas` is in (or the last before it) first, the
        others in order: a sweep changes one run at a time, so the run that breaks the draft is the one to repair,
        and the runs before it cost fillers and checks for nothing (docs/guard.md, seventh round). As they are
        when the guard has no `where` or the canvas has no new error."""
        if self.guard.where is None or len(runs) < 2:
            return runs
        self.stats.checks += 1  # a parse, though not a verdict
        at = self.guard.where(canvas)
        if at is None:
            return runs
        k = max((i for i, r in enumerate(runs) if r.start <= at), default=0)
        return [runs[k], *runs[:k], *runs[k + 1 :]]

    def seconds(self, free: Tensor, fixed: Tensor) -> Iterator[Tensor]:
        """The draft's second reading with `fixed`, if any (`second`): made only when the search gets to it."""
        second = self.second()
        if second is not None:
            yield torch.where(free, second, fixed)

    def second(self) -> Tensor | None:
        """(L,) the draft with the model's close second choice at the holes it is unsure of; None: no other reading."""
        return None

    def repairs(
        self, base: Tensor, draft: Tensor, free: Tensor, changed: Tensor, fillers: int = -1
    ) -> Iterator[Tensor]:
        """Witness candidates that rewrite the holes just beside a proposal: with the draft, then with fillers."""
        runs = runs_beside(free, changed)
        for run in runs:
            trial = base.clone()
            trial[run] = draft[run]
            yield trial
        if self.guard.around is None or self.guard.fit is None or fillers == 0:
            return
        for run in runs[:2]:
            start, stop = int(run[0]), int(run[-1]) + 1
            if stop - start != run.numel():
                continue  # a left and right run together: not one stretch of text
            before, after = self.guard.around(base, start, stop)
            made = self.guard.fit(before, after, stop - start)
            for ids in made if fillers < 0 else itertools.islice(made, fillers):
                trial = base.clone()
                trial[start:stop] = torch.tensor(ids, dtype=torch.long)
                yield trial

    def passes(self, canvas: Tensor) -> bool:
        return self.errors(canvas) == 0

    def errors(self, canvas: Tensor) -> int:
        """The judge's count of new errors, remembered per canvas (a trial is never judged twice)."""
        key = canvas.numpy().tobytes()
        found = self.memo.get(key)
        if found is None:
            found = self.count(canvas)
            self.spent += 1
            if len(self.memo) < CACHE:
                self.memo[key] = found
        return found


class Counted:
    """A judge that counts its calls (the first witness search's, which no session sees)."""

    def __init__(self, judge: Judge) -> None:
        self.judge, self.checks = judge, 0

    def __call__(self, canvas: Tensor) -> int:
        self.checks += 1
        return self.judge(canvas)


def free_runs(free: Tensor) -> list[Tensor]:
    """The maximal runs of consecutive free positions, in order."""
    where = free.nonzero().squeeze(-1)
    if where.numel() == 0:
        return []
    return list(torch.tensor_split(where, (torch.diff(where) > 1).nonzero().squeeze(-1).add(1).tolist()))


def runs_beside(free: Tensor, changed: Tensor) -> list[Tensor]:
    """The runs of free positions just left and just right of each changed position, then both together."""
    out = []
    n = len(free)
    for p in changed.tolist():
        left, right = _run(free, p - 1, -1, n), _run(free, p + 1, 1, n)
        out += [r for r in (left, right) if r.numel()]
        if left.numel() and right.numel():
            out.append(torch.cat([left, right]))
    return out


def _run(free: Tensor, start: int, step: int, n: int) -> Tensor:
    at, got = start, []
    while 0 <= at < n and bool(free[at]):
        got.append(at)
        at += step
    return torch.tensor(sorted(got), dtype=torch.long)


def unique(trials: Iterable[Tensor]) -> Iterator[Tensor]:
    """`trials` without repeats, lazily (a later trial is built only when the earlier ones failed)."""
    seen: set[bytes] = set()
    for t in trials:
        key = t.numpy().tobytes()
        if key not in seen:
            seen.add(key)
            yield t


def first_witness(
    canvas: Tensor,
    runs: Sequence[range],
    around: Sequence[tuple[str, str]] | Callable[[int], tuple[str, str]],
    fit: Fit,
    judge: Judge,
    seeds: Sequence[list[int]] | None = None,
    budget: int | None = None,
) -> Tensor | None:
    """A filling of every hole run that the judge passes, from fillers (coordinate search over holes); None: none found.

    `around` is each hole's (text before it, text after it) in the file (or a function of the run's index that
    reads it); `seeds` (the model's draft of each run) are tried first. With seeds, a run's text and fillers are
    read only when the search reaches it (a bounded sweep rarely gets past the first runs).
    """

    def fitted(i: int) -> Sequence[list[int]]:
        before, after = around(i) if callable(around) else around[i]
        found = fit(before, after, len(runs[i]))  # a Lazy (Fillers): made as far as the search reads it
        return found if seeds is None else Lazy(itertools.chain([seeds[i]], (o for o in found if o != seeds[i])))

    if seeds is None:
        options = [fitted(i) for i in range(len(runs))]
        if any(not o for o in options):
            return None
        read = [True] * len(runs)
    else:  # every run has its seed: the fillers of a run wait until the search tries something else there
        options, read = [[seed] for seed in seeds], [False] * len(runs)  # type: ignore[misc]
    choice = [0] * len(runs)

    def assemble() -> Tensor:
        out = canvas.clone()
        for r, opts, c in zip(runs, options, choice, strict=True):
            out[r.start : r.stop] = torch.tensor(opts[c], dtype=torch.long)
        return out

    def tried(i: int) -> Iterator[int]:
        yield 0
        if not read[i]:
            options[i], read[i] = fitted(i), True
        c = 1
        while has(options[i], c):  # each filler made when the search gets to it
            yield c
            c += 1

    best, spent = judge(assemble()), 1
    for _ in range(2):
        for i in range(len(runs)):
            for c in tried(i):
                if best == 0:
                    return assemble()
                if budget is not None and spent >= budget:
                    return None
                keep, choice[i] = choice[i], c
                errors, spent = judge(assemble()), spent + 1
                if errors < best:
                    best = errors
                else:
                    choice[i] = keep
    return assemble() if best == 0 else None


@dataclass(frozen=True)
class Filler:
    """Text that fits a hole of any length from a minimum up: `pre`, then `unit` m times, then `post`."""

    pre: str
    unit: str  # one token's text, repeated to reach the hole's length ("" with blank: the plan's pad)
    post: str
    least: int = 0  # m at least
