"""The completability guard: no commit ever leaves the file impossible to finish as code that parses.

The question is not "does the draft have a syntax error now?" (a canvas whose holes hold
the model's guesses is broken almost everywhere) but "can the holes that are left still be
filled, token for token, so that the file parses?" (Mündler, Dekoninck and Vechev, arXiv
2508.10111, decide it with a context-free grammar: the committed pieces and the holes between
them form a regular language that must still meet the grammar).

We decide it with a witness. A guarded decode carries one filling of every hole (a canvas
with no holes) that the judge passes, the judge being the very function that scores breakage
(`Job.judge`, text/judge.py: `syntax.breakage`'s rule against the user's code, on the smallest
window of the file that decides it: tree-sitter for every language, plus CPython's compiler
for Python). A proposal is admitted when some witness
agrees with everything committed so far plus the proposal. The search tries, each for one
parse: the current witness with the proposal in it, the model's own draft (this call's most
likely token at every hole) with everything committed in it, a bounded sweep of fillers over
the draft's runs of holes, and the draft or fillers in the holes beside the proposal. Why a
witness and not a grammar:
- soundness does not rest on the search or on a grammar we would have to write for eight
  languages (Python's indentation included): every witness is passed by the judge, and the
  last witness is the fill, so a guarded fill is never broken by the judge's own rule;
- the hole count is exact: a witness has exactly the holes that are left, so a decode can
  never paint itself into a corner that needs more tokens than it has (or end a fill early
  unless the plan allows pads: only then may a witness use them);
- what it cannot prove costs quality, never validity: a proposal that could be completed but
  for which no witness is found is replaced by the next most likely token that has one (never
  a comment start, which would make anything parse), or left for a later call; when nothing
  of a call is admitted, the witness's own token where the model likes it best is committed
  (the witness stays valid), so every call commits.
The first witness comes from fillers that fit any hole length (`first_witness`): `pass  #xxx`
at a candidate indentation, block heads nested as deep as the lines below, a name `xxx`, a
block comment `/*xxx*/`, the quote or brackets the code around needs. When none passes, each
call's draft is tried (one token a call meanwhile); a decode that never finds one ran
unguarded, and the job says so (docs/guard.md).
"""

from __future__ import annotations

import functools
import itertools
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..core import sampling
from . import pyshape, scans

Judge = Callable[[Tensor], int]  # (L,) canvas without holes -> new syntax errors of its splice (0: passes)
Around = Callable[
    [Tensor, int, int], tuple[str, str]
]  # (canvas, start, stop) -> text before and after positions [start, stop)
Fit = Callable[[str, str, int], list[list[int]]]  # (text before, text after, n) -> fillers of exactly n token ids
TRIALS = 12  # witness candidates one proposal may cost at most (ours)
EASY = 2  # of them, what each proposal gets before any gets more: the witness, the draft (ours)
SWEEP = 16  # judge calls a call may spend repairing the draft under all its proposals at once (ours)
RARE = 64  # judge calls for it with the costly fillers of rare cuts too, when those of FIRST found none (ours)
FIRST = 128  # judge calls for the first witness from fillers, before decoding (ours: a hostile file costs at most this)
ADOPT, RETRY = (
    64,
    8,
)  # judge calls for a witness from the draft when no filler fitted: the first call, each later one (ours)
TOGETHER = 4  # judge calls per cut when admitting the proposals on one side of a cut together (ours)
CANDIDATES = 4  # tokens tried at a rejected position: the proposal, then the next most likely (ours)
CHECKS_PER_CALL = 48  # judge calls one decoder call may spend before the rest of its proposals wait (ours)
CACHE = 8192  # judged canvases remembered per decode


@dataclass
class Stats:
    """What a guard did in one decode (summed over calls)."""

    checks: int = 0  # judge calls (parses), the first witness search's included
    seconds: float = 0.0  # every second the guard spent: the first witness search, then admitting each call's commits
    first: float = 0.0  # of `seconds`, the first witness search's (before the first call; counted by the decode)
    cpu: float = 0.0  # `seconds` in the decoding thread's CPU time (on a shared machine most wall time is waiting)
    rejected: int = 0  # proposals with no witness (replaced or left for later)
    replaced: int = 0  # rejected proposals replaced by a less likely token that has a witness
    fallback: int = 0  # calls where nothing was admitted and the witness's token was committed
    gave_up: bool = False  # no witness was ever found: the decode ran unguarded
    late: int = 0  # calls decoded unguarded before a witness was found (from the model's draft, at a later call)

    def to_dict(self) -> dict[str, float]:
        return {
            "guard_checks": self.checks,
            "guard_seconds": round(self.seconds, 6),
            "guard_first_seconds": round(self.first, 6),
            "guard_cpu_seconds": round(self.cpu, 6),
            "guard_rejected": self.rejected,
            "guard_replaced": self.replaced,
            "guard_fallback": self.fallback,
            "guard_gave_up": self.gave_up,
            "guard_late": self.late,
        }


@dataclass
class Guard:
    """Built by the job for one plan: the judge and a first witness. `begin` starts one decode."""

    judge: Judge
    witness: (
        Tensor | None
    )  # (L,) the first witness (the plan's canvas, every hole filled, judged 0); None: from the first draft
    mask_id: int
    around: Around | None = None  # with `fit`: fillers for the holes beside a proposal, in their current text
    fit: Fit | None = None
    candidates: int = CANDIDATES
    checks_per_call: int = CHECKS_PER_CALL
    first: Stats | None = None  # what the first witness search cost (the job's): the next decode counts it
    last: Stats | None = field(default=None, repr=False)  # the last decode's stats
    session: Session | None = field(default=None, repr=False)  # the last decode's session (a face ending it early)

    def begin(self, canvas: Tensor) -> Session:
        """A fresh decode from `canvas` (L,); its committed tokens must agree with the first witness."""
        if self.witness is not None:
            assert bool(((canvas == self.mask_id) | (canvas == self.witness.to(canvas.device))).all()), (
                "canvas and witness disagree"
            )
        self.last, paid = Stats(), self.first or Stats()
        self.last.checks, self.last.seconds, self.last.first = paid.checks, paid.seconds, paid.seconds
        self.last.cpu = paid.cpu
        self.first = None  # one search, counted once
        self.session = Session(self, None if self.witness is None else self.witness.clone(), self.last)
        return self.session


class Session:
    """One guarded decode: the current witness, and `admit`, the gate every commit goes through."""

    def __init__(self, guard: Guard, witness: Tensor | None, stats: Stats) -> None:
        self.guard, self.witness, self.stats = guard, witness, stats
        self.memo: dict[bytes, int] = {}
        self.spent = 0  # checks in the current call

    def admit(
        self, tokens: Tensor, logits: Tensor, pos: Tensor, ids: Tensor, scores: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The commits (positions, ids, scores) to make of a decoder's proposals, most confident first.

        Every returned commit keeps a witness; at least one commit is returned when any hole is offered.
        All its time is the guard's (Stats.seconds), the search's as well as the judge's.
        """
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return self.search(tokens, logits, pos, ids, scores)
        finally:
            self.stats.seconds += time.perf_counter() - start
            self.stats.cpu += time.thread_time() - cpu

    def search(
        self, tokens: Tensor, logits: Tensor, pos: Tensor, ids: Tensor, scores: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """`admit`'s work."""
        device = tokens.device
        if pos.numel() == 0:
            return pos, ids, scores
        self.spent = 0
        if self.witness is None and not self.adopt(tokens, logits):
            self.stats.gave_up, self.stats.late = True, self.stats.late + 1  # unguarded until a witness is found:
            first = scores.cpu().argmax().view(1)  # one token a call meanwhile, so the drafts get more chances
            return pos[first.to(pos.device)], ids[first.to(ids.device)], scores[first.to(scores.device)]
        self.stats.gave_up = False
        order = scores.cpu().argsort(descending=True, stable=True)  # most confident first: the fallback takes the first
        tokens, pos, ids, scores = tokens.cpu(), pos.cpu()[order], ids.cpu()[order], scores.cpu()[order]
        draft = self.draft(tokens, logits)
        every = tokens.clone()
        every[pos] = ids
        found = self.complete(every, draft, pos[:0])
        found = self.sweep(every, draft) if found is None else found
        if found is not None:  # the whole proposal at once: one or two parses in the common case
            self.witness = found
            return pos.to(device), ids.to(device), scores.to(device)
        covered = self.together(tokens, draft, pos, ids)  # the proposals one witness holds, admitted at once
        current = tokens.clone()
        current[pos[covered]] = ids[covered]
        rest = ~covered
        out = self.one_by_one(current, logits, draft, pos[rest], ids[rest], scores[rest], fallback=not covered.any())
        pos_, ids_, scores_ = (torch.cat([a[covered], b]) for a, b in zip((pos, ids, scores), out, strict=True))
        order = scores_.argsort(descending=True, stable=True)
        return pos_[order].to(device), ids_[order].to(device), scores_[order].to(device)

    def together(self, tokens: Tensor, draft: Tensor, pos: Tensor, ids: Tensor) -> Tensor:
        """(k,) bool: the proposals admitted together under one witness: those on the left of a cut (the draft up
        to it; after it the witness, or fillers: `sweep`, a few checks), then of the rest those on the right of
        another. A multi-token decoder's proposals are spread over the holes; where the draft breaks the file
        after some of them, the ones before the break still agree with one witness, and one parse admits them
        all instead of one parse each (and a wait for the many with no witness of their own)."""
        taken = torch.zeros(len(pos), dtype=torch.bool)
        if len(pos) < 2 or self.guard.around is None or self.guard.fit is None:
            return taken
        at = torch.arange(len(tokens))
        for left in (True, False):  # the left side first, then the right side of what is left
            rest = (~taken).nonzero().squeeze(-1)
            if len(rest) < 2:
                break
            base = tokens.clone()
            base[pos[taken]] = ids[taken]
            free = base == self.guard.mask_id
            here, n = pos[rest], len(rest)
            ordered = here.sort().values
            for count in dict.fromkeys((n, n - 1, (3 * n) // 4, n // 2, n // 4, 2)):
                if count < 2 or self.spent >= self.guard.checks_per_call // 2:
                    continue
                cut = ordered[count - 1] if left else ordered[n - count]
                side = (at <= cut) if left else (at >= cut)
                take = (here <= cut) if left else (here >= cut)
                fixed = torch.where(free & side, draft, base)
                fixed[here[take]] = ids[rest][take]
                kept = torch.where(fixed == self.guard.mask_id, self.witness, fixed)  # the witness beyond the cut
                found = kept if self.passes(kept) else self.sweep(fixed, draft, TOGETHER)
                if found is not None:
                    self.witness = found
                    taken[rest[take]] = True
                    break
        return taken

    def one_by_one(
        self,
        tokens: Tensor,
        logits: Tensor,
        draft: Tensor,
        pos: Tensor,
        ids: Tensor,
        scores: Tensor,
        fallback: bool = True,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Each proposal in turn, on top of those admitted before it: first every one with the cheap trials alone
        (the witness or the draft with it), so that one hard proposal cannot spend the call's checks that many
        easy ones need; then the rest with the whole search, where a rejected one tries the next candidates."""
        kept: list[tuple[int, int, float]] = []
        current = tokens.clone()
        hard = []
        for p, t, s in zip(pos.tolist(), ids.tolist(), scores.tolist(), strict=True):
            if self.admitted(current, draft, p, t, s, kept, EASY) is None:
                hard.append((p, t, s))
        for p, t, s in hard:
            if self.spent >= self.guard.checks_per_call:
                break  # the rest wait for a later call
            rank = self.first_passing(current, logits, draft, p, t, s, kept)
            self.stats.rejected += rank != 0
            self.stats.replaced += rank is not None and rank > 0
        if not kept and not fallback:
            return pos[:0], ids[:0], scores[:0]
        if not kept:  # nothing passes: the witness's own token where the model likes it best
            rows = logits[pos.to(logits.device)].float().cpu()  # (k, V)
            mine = (rows.gather(1, self.witness[pos].unsqueeze(1)).squeeze(1) - torch.logsumexp(rows, 1)).exp()  # (k,)
            plain = torch.tensor([not self.escape(int(t)) for t in self.witness[pos]])
            own = self.witness[pos] == draft[pos]  # the model's own top token there, not a filler's
            best = int((mine + own.float() - 2 * (~plain).float()).argmax())  # a comment start only when nothing else
            kept.append((int(pos[best]), int(self.witness[pos[best]]), float(mine[best])))
            self.stats.fallback += 1
        p_, t_, s_ = zip(*kept, strict=True)
        return torch.tensor(p_), torch.tensor(t_, dtype=torch.long), torch.tensor(s_, dtype=scores.dtype)

    def adopt(self, tokens: Tensor, logits: Tensor) -> bool:
        """A witness from this call's draft (whole, or with fillers in some runs of holes); False: none yet.

        No filler fitted before the first call: the draft is tried at every call (the first one
        searching longest), since the model's guesses improve as the canvas fills in; from the call
        a witness is found on, the decode is guarded, and so its fill parses."""
        budget = ADOPT if self.stats.late == 0 else RETRY
        self.witness = self.sweep(tokens.cpu(), self.draft(tokens.cpu(), logits), budget)
        return self.witness is not None

    def count(self, canvas: Tensor) -> int:
        """The judge's verdict, counted as the guard's work (its time is in `admit`'s)."""
        self.stats.checks += 1
        return self.guard.judge(canvas)

    def first_passing(
        self,
        current: Tensor,
        logits: Tensor,
        draft: Tensor,
        p: int,
        t: int,
        s: float,
        kept: list[tuple[int, int, float]],
    ) -> int | None:
        """Admit the first candidate at `p` that has a witness (appended to `kept`, `current` updated); its rank, or
        None."""
        for rank, (token, prob) in enumerate(self.options(logits, p, t, s)):
            if self.admitted(current, draft, p, token, prob, kept) is not None:
                return rank
        return None

    def admitted(
        self,
        current: Tensor,
        draft: Tensor,
        p: int,
        token: int,
        prob: float,
        kept: list[tuple[int, int, float]],
        trials: int = 0,
    ) -> Tensor | None:
        """The witness for `token` at `p` on top of `current` (then admitted: `kept`, `current`, the witness
        updated), trying at most `trials` candidates (0: all the search has); None when none passes."""
        trial = current.clone()
        trial[p] = token
        found = self.complete(trial, draft, torch.tensor([p]), trials or TRIALS)
        if found is not None:
            self.witness = found
            current[p] = token
            kept.append((p, token, prob))
        return found

    def options(self, logits: Tensor, p: int, token: int, score: float) -> list[tuple[int, float]]:
        """The proposal, then the most likely other tokens at `p` (never the mask, never a forbidden one)."""
        row = logits[p].float().cpu()  # (V,)
        total = torch.logsumexp(row, 0)  # probabilities of the few tokens read, without a softmax over all
        out = [(token, score)]
        k = min(self.guard.candidates + 2, row.numel())
        for other in row.topk(k).indices.tolist():
            if len(out) >= self.guard.candidates:
                break
            if other not in (token, self.guard.mask_id) and bool(torch.isfinite(row[other])) and not self.escape(other):
                out.append((other, float((row[other] - total).exp())))
        return out

    def escape(self, token: int) -> bool:
        """A comment start makes anything after it parse: the model may choose one, the guard never picks one for it."""
        check = getattr(self.guard.fit, "escape", None)
        return bool(check(token)) if check is not None else False

    def draft(self, tokens: Tensor, logits: Tensor) -> Tensor:
        """(L,) `tokens` with the model's most likely token at every hole (the mask never)."""
        holes = (tokens == self.guard.mask_id).nonzero().squeeze(-1)
        out = tokens.clone()
        if holes.numel():
            rows = sampling.without(logits[holes.to(logits.device)].float(), self.guard.mask_id)  # (H, V)
            out[holes] = rows.argmax(-1).cpu()
        return out

    def complete(self, fixed: Tensor, draft: Tensor, changed: Tensor, trials: int = 0) -> Tensor | None:
        """A witness that agrees with every token of `fixed` (holes are free), or None if the search finds none
        among its first `trials` candidates (0: TRIALS)."""
        free = fixed == self.guard.mask_id  # (L,)
        base = torch.where(free, self.witness, fixed)
        if torch.equal(base, self.witness):
            return self.witness  # the proposal is the witness's own choice: nothing to check
        mixed = torch.where(free, draft, fixed)
        candidates = itertools.chain(
            [base, mixed], self.repairs(base, draft, free, changed)
        )  # repairs built only if needed
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
        around = self.guard.around
        seeds = [mixed[r.start : r.stop].tolist() for r in runs]
        texts = lambda i: around(mixed, runs[i].start, runs[i].stop)  # noqa: E731 (read when the search gets there)
        return first_witness(fixed, runs, texts, self.guard.fit, self.errors, seeds, budget=budget or SWEEP)

    def repairs(self, base: Tensor, draft: Tensor, free: Tensor, changed: Tensor) -> Iterator[Tensor]:
        """Witness candidates that rewrite the holes just beside a proposal: with the draft, then with fillers."""
        runs = runs_beside(free, changed)
        for run in runs:
            trial = base.clone()
            trial[run] = draft[run]
            yield trial
        if self.guard.around is None or self.guard.fit is None:
            return
        for run in runs[:2]:
            start, stop = int(run[0]), int(run[-1]) + 1
            if stop - start != run.numel():
                continue  # a left and right run together: not one stretch of text
            before, after = self.guard.around(base, start, stop)
            for ids in self.guard.fit(before, after, stop - start):
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


# ---------------------------------------------------------------- the first witness


@dataclass(frozen=True)
class Filler:
    """Text that fits a hole of any length from a minimum up: `pre`, then `unit` m times, then `post`."""

    pre: str
    unit: str  # one token's text, repeated to reach the hole's length ("" with blank: the plan's pad)
    post: str
    least: int = 0  # m at least


class Fillers:
    """Fillers of an exact token count for a stretch of holes, given the text around it (cached)."""

    def __init__(self, lang: str, tokenizer: Any, blank: int | None, rare: bool = False) -> None:
        self.lang, self.tokenizer, self.blank = lang, tokenizer, blank
        self.coder = Remembered(tokenizer)  # fillers' texts are the same few dozen call after call
        self.rare = rare  # also the costly fillers for rare cuts (`fillers`): a second first search, every call's
        self.memo: dict[tuple[int, str, str, int, int], list[list[int]]] = {}
        self.escapes: dict[int, bool] = {}

    def escape(self, token: int) -> bool:
        """Whether a token starts a comment: the universal way to make the rest of a line
        parse, so never a replacement."""
        found = self.escapes.get(token)
        if found is None:
            text = self.tokenizer.decode([token])
            found = self.escapes[token] = any(mark in text for mark in COMMENTS.get(self.lang, ()))
        return found

    def __call__(self, before: str, after: str, n: int) -> list[list[int]]:
        key = (len(before), before[-CONTEXT:], after[:CONTEXT], len(after), n)  # a hole's text before it is
        found = self.memo.get(key)  # the plan's, up to what the decode wrote in it: its end and length tell it
        if found is None:
            made = fillers(self.lang, before, after, self.blank is not None, self.rare)
            found = fits(made, n, self.coder, self.blank)
            if len(self.memo) < CACHE:
                self.memo[key] = found
        return found


class Remembered:
    """A tokenizer's encode and decode, each text's answer kept (a tokenizer's answer depends on the text alone)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.encoded: dict[str, tuple[int, ...]] = {}
        self.decoded: dict[tuple[int, ...], str] = {}

    def encode(self, text: str) -> list[int]:
        found = self.encoded.get(text)
        if found is None:
            found = tuple(self.tokenizer.encode(text))
            if len(self.encoded) < CACHE:
                self.encoded[text] = found
        return list(found)

    def decode(self, ids: list[int]) -> str:
        key = tuple(ids)
        found = self.decoded.get(key)
        if found is None:
            found = self.tokenizer.decode(ids)
            if len(self.decoded) < CACHE:
                self.decoded[key] = found
        return found


COMMENTS = {"python": ("#",)} | {
    lang: ("//", "/*") for lang in ("c", "cpp", "java", "javascript", "typescript", "tsx", "go", "rust")
}
CONTEXT = 4000  # characters each side a filler looks at (brackets opened further away are not closed by fillers)
TEXTS = 32  # texts whose literal and bracket scans are remembered (a hole's text is asked for several times a call)


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

    def fitted(i: int) -> list[list[int]]:
        before, after = around(i) if callable(around) else around[i]
        found = fit(before, after, len(runs[i]))
        return found if seeds is None else [seeds[i], *(o for o in found if o != seeds[i])]

    if seeds is None:
        options = [fitted(i) for i in range(len(runs))]
        if any(not o for o in options):
            return None
        read = [True] * len(runs)
    else:  # every run has its seed: the fillers of a run wait until the search tries something else there
        options, read = [[seed] for seed in seeds], [False] * len(runs)
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
        yield from range(1, len(options[i]))

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


def fits(candidates: Sequence[Filler], length: int, tokenizer: Any, blank: int | None) -> list[list[int]]:
    """Each filler as exactly `length` token ids (those that cannot reach that length are left out), no repeats."""
    out: list[list[int]] = []
    for f in candidates:
        unit = blank if f.unit == "" else single_token(tokenizer, f.unit)
        if unit is None:
            continue
        pre = tokenizer.encode(f.pre) if f.pre else []
        post = tokenizer.encode(f.post) if f.post else []
        m = length - len(pre) - len(post)
        ids = pre + [unit] * m + post
        if m >= f.least and ids not in out:
            out.append(ids)
    return out


def single_token(tokenizer: Any, text: str) -> int | None:
    """The id of a token whose text is exactly `text`, if the tokenizer has one."""
    ids = tokenizer.encode(text)
    return ids[0] if len(ids) == 1 and tokenizer.decode(ids) == text else None


OPEN, CLOSE = "([{", ")]}"
C_LIKE = {"c", "cpp", "java", "javascript", "typescript", "tsx", "go", "rust"}


def fillers(lang: str, before: str, after: str, blank: bool, rare: bool = False) -> list[Filler]:
    """Fillers worth trying for a hole between `before` and `after`, most neutral first: each body as it
    is, then with the brackets `after` closes opened before it and those `before` left open closed after it.
    `rare`: also those that cost a second replay of the lines around (a comment the code after starts inside
    of, a head before the string it starts inside of): the first witness search tries them only when the
    others found none; every call's search has them (they let more proposals be admitted together)."""
    inside = open_literal(before, lang)
    close, opens = balance(before + inside, after)  # brackets inside the open literal are its text
    out = [Filler("", "", "")] if blank else []
    if inside:  # the hole starts inside a string or comment: end it first
        out += [Filler("", "x", inside + close), Filler("", "x", inside), Filler("", " ", inside + close)]
    quote = opened_after(after, lang)
    if inside in ("'", '"') and quote == inside * 3:  # `r"` before, `""` cut: the hole completes a triple quote
        out.append(Filler(inside * 2, "x", ""))
    if lang == "python" and not inside:  # a hole inside leading indentation: complete it, nothing more
        out += [Filler(i, " ", "") for i in dict.fromkeys([*indents(before, after), *completions(before, after)]) if i]
    if quote and not inside:  # the code after the hole starts inside a string: open it
        out += [
            Filler(i + q, "x", "")
            for q in openers_of(quote, after, lang)
            for i in [*indents(before, after), " ", ""][:3]
        ]
    if lang in ("c", "cpp"):
        out += directives(before, after)
    if lang == "python":  # lines that fit the blocks around, checked line by line (pyshape.py)
        out += [Filler(inside + start, " ", end) for start, end in pyshape.inline(before + inside, after, quote)]
        out += [Filler(inside + start, " ", end) for start, end in pyshape.bridges(before + inside, after)]
    for body in bodies(lang, before, after):
        out.append(body)
        if close or opens:
            out.append(Filler(opens + body.pre, body.unit, body.post + close, body.least))
    if blank:
        out += [Filler(opens + "x" + close, "", ""), Filler(opens + "pass", "", "")]
    if lang == "python" and inside != "\n":
        out += python_more(before, after, inside, close, quote, rare)
    if lang in C_LIKE:
        out += c_more(lang, before, after, inside, close, opens, quote, rare)
    return out


WORDS = ("include", "define", "ifndef", "ifdef", "endif", "elif", "else", "if", "undef", "pragma", "error")
AFTER_BLOCK = {"catch": "try {", "finally": "try {", "else": "if (x) {", "while": "do {"}  # `}` then this word


def c_more(
    lang: str, before: str, after: str, inside: str, close: str, opens: str, quote: str, rare: bool = False
) -> list[Filler]:
    """The C family's fillers for what the others miss (the attack classes' give-ups): the code after the hole
    starting inside a block comment (any filler of the code after it, the comment opened at its end), a
    directive whose word the hole cut (`#inc` | `lude`), a macro's line the hole must continue with a
    backslash, a template literal's `${` to close, a block whose `}` is followed by `catch`/`else` (its head),
    and a string the code after starts inside of within a call that the hole must open."""
    out = []
    line = before[before.rfind("\n") + 1 :]
    end, start = after.find("*/", 0, CONTEXT), after.find("/*", 0, CONTEXT)
    if rare and inside != "*/" and end >= 0 and (start < 0 or start > end):
        out += [Filler(f.pre, f.unit, f.post + "/*", f.least) for f in fillers(lang, before, after[end + 2 :], False)]
    if lang in ("c", "cpp") and inside in ("", "*/"):  # a directive's line the hole begins (a comment ended first)
        lead = inside + ("\n" if inside or line.strip() else "")
        for word in WORDS:
            cut = next((k for k in range(1, len(word)) if re.match(re.escape(word[k:]) + r"\b", after)), None)
            if cut is not None:
                out.append(Filler(lead, " ", "#" + word[:cut]))
        path = re.match(r"[\w./+-]*([>\"])", after)
        if path:  # an `#include`'s path the hole cut
            out.append(Filler(lead, " ", "#include " + ("<" if path.group(1) == ">" else '"') + "x"))
        if not inside and (line.rstrip().endswith("\\") or before[: len(before) - len(line)].rstrip().endswith("\\")):
            out += [Filler("", " ", "\\"), Filler(" x", " ", " \\")] if after.startswith("\n") else []
        if after.split("\n", 1)[0].strip() and re.search(r"^[ \t]*#[ \t]*\w", after[:400], re.M):
            out.append(Filler(lead, " ", "#define x"))  # a macro's name the hole cut, among other macros
    if inside == "`":
        template = before[before.rfind("`") + 1 :]
        if template.rfind("${") > template.rfind("}"):  # inside a `${...}`: close it, then the literal
            out += [Filler("", "x", "}`" + close), Filler("", "x", "}`"), Filler("", "x", "}`;")]
    masked = STRINGS.sub("", after[:CONTEXT])
    depth = 0
    for i, ch in enumerate(masked):
        depth += (ch in OPEN) - (ch in CLOSE)
        if depth < 0:
            if ch == "}":
                word = re.match(r"\s*(\w+)", masked[i + 1 :])
                head = AFTER_BLOCK.get(word.group(1)) if word else None
                if head:
                    out += [Filler(inside + close + head, " ", ""), Filler(inside + close + head + "/*", "x", "*/")]
            break
    if quote and not inside and opens:
        out += [Filler(i, " ", "x" + opens + q) for i in (" ", "") for q in openers_of(quote, after, lang)[:1]]
    if not inside and not line.strip() and re.match(r"[ \t]*\([^\n]*\)[ \t]*\{", after):  # `(x) {`: a head's
        out += [Filler("", " ", "if"), Filler("", " ", "while")]
    for stem in stems(after, C_WORDS):  # the hole ends in a word the code after goes on with
        out += [Filler("", "x", inside + close + "\n" + stem)] if inside in ("`", "'", '"') else []
        out += [Filler("", " ", stem)] if not inside and not line.strip() else []
    return out


C_WORDS = (
    "const", "let", "var", "return", "if", "else", "for", "while", "function", "this", "await", "async", "try",
    "catch", "throw", "new", "typeof", "static", "struct", "enum", "union", "unsigned", "int", "char", "void",
)  # fmt: skip
PY_WORDS = ("except", "return", "raise", "import", "from", "if", "elif", "else", "for", "while", "with", "def", "class")


def stems(after: str, words: Sequence[str]) -> list[str]:
    """The starts of a keyword whose rest begins `after` (`cons` for `t x = 1`), then `x` before a word's rest."""
    found = [w[:k] for w in words for k in range(1, len(w)) if re.match(re.escape(w[k:]) + r"\b", after)]
    return found[:2] + (["x"] if re.match(r"\w", after) else [])


def python_more(before: str, after: str, inside: str, close: str, quote: str, rare: bool = False) -> list[Filler]:
    """Python's fillers for what the others miss (the held-out suites' give-ups): a head before the docstring the
    code after the hole starts inside of, a line in brackets at the indentation of the line above, a line the
    code after goes on with a backslash, a head whose colon and line break the hole holds, and, where the
    code after starts inside a comment, any filler of the code below that line with the comment opened at its
    end (the escape rule admits that only where the user's own code is a comment there)."""
    out = []
    line = before[before.rfind("\n") + 1 :]
    first, _, rest = after.partition("\n")
    short = next((q for q in ('"', "'") if _odd(first, q)), "")  # a one-line string, where a docstring was read
    for q in dict.fromkeys(q for q in (quote, short) if q and not inside):
        out += [Filler(start, " ", end + q) for start, end in pyshape.bridges(before, q + after)] if rare else []
        out += [Filler(" = " + q, "x", "")] if line.strip() else []
    lead = _lead(next((x for x in reversed(before.split("\n")[:-1]) if x.strip()), ""))
    if close and not inside and not line.strip() and lead.startswith(line):  # a new line inside brackets
        out += [Filler(lead[len(line) :] + "x", "x", close), Filler(lead[len(line) :] + "x", "x", "")]
    below = rest.split("\n", 1)[0]
    if not first.strip() and below.strip() and not pyshape.parses(below.strip()):  # `\`: it goes on this line
        out += [Filler(s, " ", e + " \\") for s, e in pyshape.bridges(before + inside, " " + rest.lstrip(" \t"))]
    if line.strip() and first[:1] in (" ", "\t") and len(_lead(first)) > len(_lead(line)):  # the hole ends a head
        out += [Filler("", "x", inside + close + ":\n"), Filler(" x", "x", inside + close + ":\n")]
    for stem in stems(after, PY_WORDS) if not inside and not line.strip() else ():  # `  ex` | `cept x:`
        out += [Filler(i, " ", stem) for i in indents(before, after)[:2]]
    if rare and first.strip():  # the code after starts inside a comment
        below_line = fillers("python", before, "\n" + rest, False)
        out += [Filler(f.pre, f.unit, f.post + "  #", f.least) for f in below_line if not f.post.endswith("\\")]
    return out


C_BODIES = (
    Filler("/*", "x", "*/"),
    Filler("x", " ", ";"),
    Filler(" x", " ", ";"),
    Filler(";/*", "x", "*/"),
    Filler("x;/*", "x", "*/"),
    Filler("x/*", "x", "*/"),
    Filler("{/*", "x", "*/}"),
)
ANY_BODIES = (
    Filler("x", "x", ""),
    Filler(" x", "x", ""),
    Filler("", "x", "", least=1),
    Filler("0", " ", ""),
    Filler("", " ", ""),
)


def bodies(lang: str, before: str, after: str) -> list[Filler]:
    """The language's do-nothing code that stretches to any length: statements first, then expressions."""
    if lang != "python":
        return (list(C_BODIES) if lang in C_LIKE else []) + list(ANY_BODIES)
    at = indents(before, after)
    # a hole that ends where code goes on (a benchmark middle ends with its line break): its statements end the line
    end = "\n" if at and after[:1] not in ("", "\n", "\r") else ""
    out = [Filler(i + "pass", " ", end) for i in at] + [Filler(i + "pass  #", "x", end) for i in at]
    if after.lstrip(" \t").startswith(":"):  # a block's head whose colon is already there
        out += [Filler(i + "if x", " ", "") for i in at] + [Filler(i + "if x", "x", "") for i in at]
    line = next((line for line in after.split("\n") if line.strip()), "")
    below, word = _lead(line), line.strip().split(" ")[0].rstrip(":")
    close, opens = balance(before, after)
    if close and at:  # close the brackets first, then the lines below need a block's head at some shallower level
        out += [
            Filler(close + "\n" + openers_chain(i, below), " ", end)
            for i in dict.fromkeys(["", "    ", "        ", *at])
        ]
    for i in at:  # blocks that the lines below indent under, as many levels deep as they are
        chain = openers_chain(i, below)
        out += [Filler(chain, " ", end), Filler(chain + "  #", "x", end)]
        if word in CONTINUATIONS:  # `elif`/`else`/`except` below: a block of its own kind, with a body, at its level
            body = openers_chain(i, below + "    ", "try:" if word in ("except", "finally") else "if x:")
            out.append(Filler(body + "\n" + below + "    pass", " ", end))
        if opens:  # the lines below close brackets: open them in a statement (or a block's head)
            out += [Filler(i + "x = " + opens, " ", end), Filler(i + "if x" + opens, " ", end)]
    if opens_block(before, after):  # the hole ends a line whose next one is deeper: it ends with a colon
        close, _ = balance(before, after)
        out += [
            Filler(" x", "x", close + ":"),
            Filler("", "x", close + ":"),
            Filler(" x", " ", close + ":"),
            Filler("", "x", open_literal(before, lang) + close + ":"),
        ]
    return out + list(ANY_BODIES)


def opens_block(before: str, after: str) -> bool:
    """Whether the line the hole ends starts a block: the hole's line has code, the next line is deeper."""
    line = before[before.rfind("\n") + 1 :]
    if not line.strip() or not after.startswith("\n"):
        return False
    below = next((x for x in after.split("\n")[1:] if x.strip()), "")
    return len(_lead(below)) > len(_lead(line))


CONTINUATIONS = ("elif", "else", "except", "finally")


def openers_chain(indent: str, below: str, last: str = "if x:") -> str:
    """`if x:` at `indent`, nested as many levels as `below` is deeper (at least one); the deepest is `last`."""
    deeper = below[len(indent) :] if below.startswith(indent) and len(below) > len(indent) else "    "
    step = "\t" if deeper.startswith("\t") else "    "
    levels = max(1, len(deeper) // len(step))
    return "\n".join(indent + step * n + ("if x:" if n < levels - 1 else last) for n in range(levels))


def _lead(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def indents(before: str, after: str) -> list[str]:
    """Indentation a statement in the hole may still need: none when the hole's line already has code; else
    what completes the line's own leading whitespace to the line above's (deeper after a ':'), the line
    below's, one level out of either (a head over a body), or nothing more."""
    line = before[before.rfind("\n") + 1 :]
    if line.strip():
        return []
    above = next((x for x in reversed(before[: len(before) - len(line)].split("\n")) if x.strip()), "")
    below = next((x for x in after.split("\n") if x.strip()), "")
    levels = [_lead(above) + "    "] if above.rstrip().endswith(":") else []
    levels += [_lead(above), _lead(below), ""]
    levels += [
        x[:-4] for x in (_lead(below), _lead(above)) if x.endswith("    ")
    ]  # a head one level out (a body below it)
    return list(dict.fromkeys(x[len(line) :] for x in levels if x.startswith(line))) or [""]


STRINGS = re.compile(
    r"'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"|#[^\n]*|//[^\n]*|/\*.*?\*/", re.S
)


LEXED = {  # literals and comments, leftmost first, each to the end of the text when it is not closed
    "python": re.compile(
        r"""(?P<q>'''|\"\"\")(?:.*?(?P=q)|.*)|(?P<s>['"])(?:\\.|(?!(?P=s))[^\\\n])*(?:(?P=s)|\Z)|#[^\n]*""", re.S
    ),
    "c": re.compile(
        r"""/\*(?:.*?\*/|.*)|//[^\n]*|`(?:\\.|[^`\\])*(?:`|\Z)"""
        r"""|(?P<s>['"])(?:\\.|(?!(?P=s))[^\\\n])*(?:(?P=s)|\Z)""",
        re.S,
    ),
}


@functools.lru_cache(maxsize=TEXTS)
def open_literal(before: str, lang: str) -> str:
    """What ends the string or comment that `before` stops inside ("" when it stops in code), roughly:
    quotes with backslash escapes, Python's triple quotes, line and block comments, JavaScript's template
    literals. The whole text is lexed (a window could begin inside a docstring and read it inside out);
    a one-line string cut by a line break counts as ended there (the user's code is broken, not ours)."""
    spans = LITERALS["python" if lang == "python" else "c"].scan(before).spans
    if not spans or spans[-1][1] != len(before):
        return ""
    text = before[spans[-1][0] :]
    if text.startswith(("#", "//")):
        return "\n"
    for opener in ("'''", '"""', "/*", "`", "'", '"'):
        if text.startswith(opener):
            closer = "*/" if opener == "/*" else opener
            done = len(text) >= 2 * len(opener) and text.endswith(closer) and not _escaped(text, len(closer))
            return "" if done else closer
    return ""


def literal_at(text: str, at: int, lang: str) -> str:
    """The literal `text` is inside of at `at` (open_literal), a line comment counting as code when the rest of
    its line is blank (nothing of the user's is commented out)."""
    found = open_literal(text[:at], lang)
    rest = text[at : text.find("\n", at) if "\n" in text[at:] else len(text)]
    return "" if found == "\n" and not rest.strip() else found


def _escaped(text: str, tail: int) -> bool:
    """Whether the closer that ends `text` is escaped by an odd run of backslashes before it."""
    body = text[: len(text) - tail]
    return (len(body) - len(body.rstrip("\\"))) % 2 == 1


def openers_of(quote: str, after: str, lang: str) -> list[str]:
    """What may open the string `after` starts inside of: the quote, or a raw string's opener that its end
    names (Rust's `r#"` for `"#`, C++'s `R"(` for `)"`)."""
    first = after.split("\n", 1)[0]
    raw = {"rust": ('"#', 'r#"'), "cpp": (')"', 'R"(')}.get(lang)
    return [quote] + ([raw[1]] if raw is not None and quote == '"' and raw[0] in first else [])


DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b", re.M)


def directives(before: str, after: str) -> list[Filler]:
    """C preprocessor fillers: the `#` of a directive the hole cut at its start, an `#if` for an `#endif` (or
    `#else`) after the hole that lost its `#if`, an `#endif` for an `#if` before it that lost its own. A
    directive holds a whole line, so each stands on lines of its own."""
    out = []
    line = before[before.rfind("\n") + 1 :]
    if not line.strip() and re.match(r"(include|define|if|ifdef|ifndef|elif|else|endif|pragma|undef)\b", after):
        out.append(Filler("#", " ", ""))
    depth, need = 0, 0
    for m in DIRECTIVE.finditer(after[:CONTEXT]):
        depth += m.group(1).startswith("if") - (m.group(1) == "endif")
        if depth < 0 or (depth == 0 and m.group(1) in ("else", "elif")):
            need = 1
            break
    opened = sum((m.group(1).startswith("if")) - (m.group(1) == "endif") for m in DIRECTIVE.finditer(before))
    head = "" if not line.strip() else "\n"
    if need:
        out.append(Filler(head + "#if x\n", " ", ""))
    if opened > 0 and not need:
        out.append(Filler(head + "\n#endif\n", " ", ""))
    return out


def completions(before: str, after: str) -> list[str]:
    """Whitespace that completes a line's indentation, typed partly before the hole and partly after it, to a
    level some line around uses."""
    line = before[before.rfind("\n") + 1 :]
    first = after.split("\n", 1)[0]
    if line.strip() or not first.strip():
        return []
    tail = _lead(first)
    seen = {_lead(x) for x in (before[-2000:] + "\n" + after[:2000]).split("\n") if x.strip()}
    levels = seen | {x + "    " for x in seen} | {x + "\t" for x in seen}
    out = [x[len(line) : len(x) - len(tail)] for x in levels if x.startswith(line) and x.endswith(tail)]
    return sorted((x for x in out if x), key=len)


@functools.lru_cache(maxsize=TEXTS)
def opened_after(after: str, lang: str) -> str:
    """The quote of a string that `after` starts inside of, roughly ("" when it starts in code). Python: a
    triple quote whose count is odd up to the next top-level statement, or under which the lines after
    replay with fewer errors than as code (pyshape.py); else a backtick count that is odd; or a one-line
    quote that is odd on its first line."""
    window = after[:CONTEXT]
    if lang == "python":
        top = re.search(r"^(def|class|import|from|@|if __name__)\b", window, re.M)  # no docstring goes on past it
        odd = [q for q in ('"""', "'''") if _odd(window[: top.start()] if top is not None else window, q)]
        if odd:
            return odd[0]
        code = pyshape.replay(pyshape.lines(window)).errors
        inside = {q: pyshape.replay(pyshape.lines(q + window)).errors for q in ('"""', "'''") if q in window}
        best = min(inside, key=inside.__getitem__, default=None)
        if best is not None and inside[best] < code:
            return best
    elif _odd(window, "`"):
        return "`"
    first = window.split("\n", 1)[0]
    if '"""' in first or "'''" in first:
        return ""
    return next((q for q in ('"', "'") if _odd(first, q)), "")


def _odd(text: str, quote: str) -> bool:
    return (text.count(quote) - text.count("\\" + quote)) % 2 == 1


@functools.lru_cache(maxsize=TEXTS)
def balance(before: str, after: str) -> tuple[str, str]:
    """(closers, openers): what a hole must close of the brackets `before` leaves open, and open for the
    closers `after` has no opener for, so that the brackets match (strings and comments skipped, roughly).
    The enclosing brackets that `after` closes itself stay open: only the difference is made up."""
    left = _open_stack(before)  # bottom..top
    need = _unopened(after)  # in order of appearance: the first closes the innermost
    if len(need) >= len(left):
        extra = need[: len(need) - len(left)]
        return "", "".join(OPEN[CLOSE.index(c)] for c in reversed(extra))
    return "".join(CLOSE[OPEN.index(b)] for b in reversed(left[len(need) :])), ""


def _open_stack(text: str) -> list[str]:
    return list(OPENED.scan(text).state)


def _unopened(text: str) -> list[str]:
    return list(UNOPENED.scan(text).state)[::-1]


BRACKET = re.compile(r"[()\[\]{}]")


def _push(stack: tuple[str, ...], text: str, start: int, stop: int, spans: list[scans.Span]) -> tuple[str, ...]:
    """The brackets open after text[start:stop] outside strings and comments (`spans`), from `stack`."""
    found = BRACKET.findall("".join(scans.gaps(text, start, stop, spans)))
    if not found:
        return stack
    out = list(stack)
    for ch in found:
        if ch in OPEN:
            out.append(ch)
        elif out and out[-1] == OPEN[CLOSE.index(ch)]:
            out.pop()
    return tuple(out)


def _pull(stack: tuple[str, ...], text: str, start: int, stop: int, spans: list[scans.Span]) -> tuple[str, ...]:
    """The closers without an opener in text[start:stop] and after it (`stack`), outside strings and comments,
    read right to left."""
    found = BRACKET.findall("".join(scans.gaps(text, start, stop, spans)))
    if not found:
        return stack
    out = list(stack)
    for ch in reversed(found):
        if ch in CLOSE:
            out.append(ch)
        elif out and out[-1] == CLOSE[OPEN.index(ch)]:
            out.pop()
    return tuple(out)


# Scans of a hole's text before and after it, resumed call after call (text/scans.py): the brackets outside
# strings and comments, and the literal a text ends inside of.
OPENED = scans.Prefixes(STRINGS, ("'''", '"""', "/*"), _push, ())
UNOPENED = scans.Suffixes(STRINGS, _pull, ())
LITERALS = {lang: scans.Prefixes(pattern) for lang, pattern in LEXED.items()}
