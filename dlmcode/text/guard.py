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
likely token at every hole) with everything committed in it, the draft read with the model's
close second choice at the few holes it is unsure of (`Session.second`), that reading over the
proposals too (`reread`: a proposal it changes is replaced by that second choice), the draft beside
a lone proposal, then the model's close seconds there that the witness or the draft holds, fillers in
the holes beside it, a bounded sweep of fillers over the draft's runs of holes, and then, for
each proposal left, the draft or fillers beside it. Why a witness and not a grammar:
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
The first witness is the first call's draft with its proposals when the judge passes it (a model that is right
needs no other), or its second reading; else the fillers' search (`Guard.witness`), run then and once a job. The
first witness and the fillers: text/witness.py, text/fillers.py; the strings and brackets around a hole:
text/literals.py.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..core import sampling
from .fillers import Filler, Fillers, Remembered, fillers, fits, indents, single_token  # noqa: F401 (the guard's names)
from .literals import LEXED, LITERALS, STRINGS, literal_at, open_literal, opened_after  # noqa: F401
from .witness import (  # noqa: F401
    CACHE,
    SWEEP,
    TRIALS,
    Around,
    Counted,
    Fit,
    Judge,
    Search,
    first_witness,
    free_runs,
    runs_beside,
    unique,
)

EASY = 2  # of TRIALS, what each proposal gets before any gets more: the witness, the draft (ours)
RARE = 64  # judge calls for it with the costly fillers of rare cuts too, when those of FIRST found none (ours)
FIRST = 128  # judge calls for the first witness from fillers, before decoding (ours: a hostile file costs at most this)
ADOPT, RETRY = (
    64,
    8,
)  # judge calls for a witness from the draft when no filler fitted: the first call, each later one (ours)
TOGETHER = 4  # judge calls per cut when admitting the proposals on one side of a cut together (ours)
SWEPT = 4  # proposals a cut may hold for fillers to be swept beyond it, unless the model is sure of them (ours)
SURE = 0.7  # ... its mean probability of them at least this (ours: below it such sweeps nearly never passed)
UNSURE = 0.25  # the second reading only when the model is unsure at most at this share of the holes (ours)
FEW = 2  # ... or at this many: the last holes of a fill, where the model's wrong guesses were left to the end (ours)
RIVAL = 0.25  # a hole's second choice at least this share as likely as its first: the draft's second reading (ours)
CANDIDATES = 4  # tokens tried at a rejected position: the proposal, then the next most likely (ours)
# a proposed comment start that opens its line, less likely than this, gives way to code that has a witness (ours)
COMMENT_SURE = 0.5
BESIDE = 3  # fillers tried in each run of holes beside a lone proposal (ours: docs/guard.md, Cost: of the passes,
# nearly all came from the first three, and building the others was most of the guard's time on large files; with
# several proposals a call, every filler the search reaches: capped there too, the decodes took more calls)
CHECKS_PER_CALL = 48  # judge calls one decoder call may spend before the rest of its proposals wait (ours)


@dataclass
class Stats:
    """What a guard did in one decode (summed over calls)."""

    checks: int = 0  # judge calls (parses), the first witness search's included
    seconds: float = 0.0  # every second the guard spent: the first witness search, then admitting each call's commits
    first: float = 0.0  # of `seconds`, the first witness search's
    ahead: float = 0.0  # of `first`, the seconds it ran before the decode began (Guard.witness read at a job's build)
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
    """Built by the job for one plan: the judge and a first witness (`witness`: found by `search` when it is first
    needed). `begin` starts one decode."""

    judge: Judge
    found: Tensor | None  # (L,) the first witness (the plan's canvas, every hole filled, judged 0); None: none yet
    mask_id: int
    around: Around | None = None  # with `fit`: fillers for the holes beside a proposal, in their current text
    fit: Fit | None = None
    where: Callable[[Tensor], int | None] | None = None  # a canvas -> the position its first new error is at
    candidates: int = CANDIDATES
    checks_per_call: int = CHECKS_PER_CALL
    first: Stats | None = None  # the first search's cost, not counted yet: the decode under way or the next counts it
    search: Callable[[], tuple[Tensor | None, Stats]] | None = None  # the first witness search, not run yet (`witness`)
    last: Stats | None = field(default=None, repr=False)  # the last decode's stats
    session: Session | None = field(default=None, repr=False)  # the last decode's session (a face ending it early)

    @property
    def witness(self) -> Tensor | None:
        """The first witness: `search` run now if it has not been (once; its cost in `first`). None: no filling of
        the holes was found; the decode's drafts may still give one."""
        if self.search is not None:
            search, self.search = self.search, None
            self.found, self.first = search()
        return self.found

    def begin(self, canvas: Tensor) -> Session:
        """A fresh decode from `canvas` (L,); its committed tokens must agree with the first witness. When that search
        has not run, the first call's draft is tried first (`Session.search`): beside a model whose first draft
        parses, it never runs."""
        if self.found is not None:
            assert bool(((canvas == self.mask_id) | (canvas == self.found.to(canvas.device))).all()), (
                "canvas and witness disagree"
            )
        self.last = Stats()
        witness = None if self.found is None else self.found.clone()
        self.session = Session(self, witness, self.last, int((canvas == self.mask_id).sum()))
        self.session.charge(ahead=True)  # a search already run (a witness read before): this decode counts it
        return self.session


class Session(Search):
    """One guarded decode: the current witness, and `admit`, the gate every commit goes through."""

    def __init__(self, guard: Guard, witness: Tensor | None, stats: Stats, total: int = 0) -> None:
        self.guard, self.witness, self.stats = guard, witness, stats
        self.memo: dict[bytes, int] = {}
        self.spent = 0  # checks in the current call
        self.total = total  # the holes the decode began with (`second`: how many the model may be unsure of)
        self.beside = -1  # fillers tried beside a proposal in the current call (-1: all)
        self.own = False  # this call's proposals are kept or turned away as they are: no less likely token is tried
        self.held: Tensor | None = None  # (L,) bool: what the witness searched for must agree with (`hides`)
        self.drafted: Tensor | None = None  # (L,) this call's draft: a comment start the model itself puts there
        self.read: tuple[Tensor, Tensor] | None = None  # this call's canvas and logits, for its draft's `second`
        self.seconded: Tensor | None = None  # the second reading made of them (None: not yet or none)
        self.ends: dict[int, str] = {}  # token -> its text (`text`), read for `hides` and `commented`

    def admit(
        self, tokens: Tensor, logits: Tensor, pos: Tensor, ids: Tensor, scores: Tensor, own: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The commits (positions, ids, scores) to make of a decoder's proposals, most confident first.

        Every returned commit keeps a witness; at least one commit is returned when any hole is offered.
        All its time is the guard's (Stats.seconds), the search's as well as the judge's. `own`: a proposal with
        no witness is not replaced by a less likely token (a decoder that commits the model's own tokens only
        would drop it), so none is searched for; the fallback's token may still be the witness's.
        """
        start, cpu = time.perf_counter(), time.thread_time()
        self.own = own
        try:
            return self.search(tokens, logits, pos, ids, scores)
        finally:
            self.stats.seconds += time.perf_counter() - start
            self.stats.cpu += time.thread_time() - cpu

    def holds(self, pos: Tensor, ids: Tensor) -> Tensor:
        """(k,) bool: whether the current witness has `ids` at `pos` (then committing them keeps it a witness); all
        True while there is none (the decode runs unguarded until one is found)."""
        if self.witness is None:
            return torch.ones(len(pos), dtype=torch.bool)
        return self.witness[pos.cpu()] == ids.cpu()

    def search(
        self, tokens: Tensor, logits: Tensor, pos: Tensor, ids: Tensor, scores: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """`admit`'s work."""
        device = tokens.device
        if pos.numel() == 0:
            return pos, ids, scores
        self.spent, self.beside = 0, BESIDE if pos.numel() == 1 else -1
        if self.witness is None and self.guard.search is not None:  # the first search not run: this draft first
            found = self.drafted_witness(tokens.cpu(), logits, pos.cpu(), ids.cpu())
            if found is not None:
                self.witness = found
                coded = None if self.own else self.uncommented(tokens.cpu(), logits, pos.cpu(), ids.cpu())
                return surest_first(pos, ids, scores, device) if coded is None else surest_first(*coded, device)
            self.start()
        if self.witness is None and not self.adopt(tokens, logits):
            self.stats.gave_up, self.stats.late = True, self.stats.late + 1  # unguarded until a witness is found:
            first = scores.cpu().argmax().view(1)  # one token a call meanwhile, so the drafts get more chances
            return pos[first.to(pos.device)], ids[first.to(ids.device)], scores[first.to(scores.device)]
        self.stats.gave_up = False
        order = scores.cpu().argsort(descending=True, stable=True)  # most confident first: the fallback takes the first
        tokens, pos, ids, scores = tokens.cpu(), pos.cpu()[order], ids.cpu()[order], scores.cpu()[order]
        coded = None if self.own else self.uncommented(tokens, logits, pos, ids)
        if coded is not None:
            return surest_first(*coded, device)
        every = tokens.clone()
        every[pos] = ids
        if self.agrees(every):  # the witness's own tokens: no check, and no draft to read
            return pos.to(device), ids.to(device), scores.to(device)
        draft = self.drafted = self.draft(tokens, logits)
        self.read, self.seconded = (tokens, logits), None
        found = self.complete(every, draft, pos[:0])  # the witness, the draft: one or two parses in the common case
        if found is None and not self.own:  # the second reading over the proposals too: one parse
            reread = self.reread(tokens, logits, pos, ids)
            if reread is not None:
                self.witness, ids = reread
                scores = torch.where(ids == every[pos], scores, self.likely(logits, pos, ids).to(scores.dtype))
                return surest_first(pos, ids, scores, device)
        if found is None and len(pos) == 1:  # the draft beside it first: no filler to build
            found = self.complete(every, draft, pos, EASY + 3, fillers=0)
            if found is None and not self.own:  # then its next candidates that the witness or draft holds
                kept: list[tuple[int, int, float]] = []
                rank = self.first_passing(
                    tokens.clone(), logits, draft, int(pos[0]), int(ids[0]), float(scores[0]), kept, cheap=True
                )
                if rank is not None:
                    self.stats.rejected, self.stats.replaced = self.stats.rejected + 1, self.stats.replaced + 1
                    _, token, prob = kept[0]
                    return (
                        pos.to(device),
                        torch.tensor([token], device=device),
                        torch.tensor([prob], dtype=scores.dtype, device=device),
                    )
            if found is None:  # then fillers in the runs beside it, before any sweep of the whole draft
                found = self.complete(every, draft, pos, TRIALS, self.beside)
        found = self.sweep(every, draft) if found is None else found  # fillers over the draft's runs
        if found is not None:  # the whole proposal at once
            self.witness = found
            return pos.to(device), ids.to(device), scores.to(device)
        covered = self.together(tokens, logits, draft, pos, ids)  # the proposals one witness holds, admitted at once
        current = tokens.clone()
        current[pos[covered]] = ids[covered]
        rest = ~covered
        out = self.one_by_one(current, logits, draft, pos[rest], ids[rest], scores[rest], fallback=not covered.any())
        return surest_first(*(torch.cat([a[covered], b]) for a, b in zip((pos, ids, scores), out, strict=True)), device)

    def uncommented(self, tokens: Tensor, logits: Tensor, pos: Tensor, ids: Tensor) -> tuple[Tensor, ...] | None:
        """(position, id, probability) of the model's most likely code token at a proposed comment start that opens
        its line (only blanks before it on that line) and that the model is less than COMMENT_SURE sure of, when that
        token has a witness; it is committed alone this call, in place of the comment start. None: no such start,
        or no witness for its code token (the comment start goes on as before). A comment start makes anything after
        it on its line parse, so beside a model whose line broke the witness, the guard's fallback blanks (a filler's
        spaces) are followed by the model's own ` #` and the fill is a comment line: a trivial fill where the
        unguarded model wrote code (`if result is not None:` became `#`, docs/guard.md, nineteenth round)."""
        starts = [i for i, t in enumerate(ids.tolist()) if self.escape(t) and self.opens_line(tokens, int(pos[i]), t)]
        if not starts or self.witness is None:
            return None
        i = min(starts, key=lambda k: int(pos[k]))  # the first: a later one may be inside its comment
        at = int(pos[i])
        row = logits[at].float().cpu()  # (V,)
        probs = torch.softmax(row, dim=-1)
        if float(probs[int(ids[i])]) >= COMMENT_SURE:
            return None
        code = sampling.likeliest_allowed(probs, lambda t: t == self.guard.mask_id or self.escape(t))
        if code is None:
            return None
        prob, token = code
        kept: list[tuple[int, int, float]] = []
        draft = self.drafted = self.draft(tokens, logits)
        self.read, self.seconded = (tokens, logits), None
        if self.admitted(tokens.clone(), draft, at, token, prob, kept) is None:
            return None
        self.stats.rejected, self.stats.replaced = self.stats.rejected + 1, self.stats.replaced + 1
        return torch.tensor([at]), torch.tensor([token], dtype=torch.long), torch.tensor([prob])

    def opens_line(self, tokens: Tensor, p: int, token: int) -> bool:
        """Whether `token` at `p` would open its line: its own text before its comment mark is blank after its last
        line break, and so is every committed token back to a line break (holes on the way are passed over: what
        the model writes there is not known yet, and a comment start it is unsure of before them is no better)."""
        text = self.text(token)
        mark = min((k for k in (text.find("#"), text.find("//"), text.find("/*")) if k >= 0), default=0)
        head = text[:mark]
        if "\n" in head:
            return not head.rsplit("\n", 1)[1].strip()
        if head.strip():
            return False
        for q in range(p - 1, -1, -1):
            t = int(tokens[q])
            if t == self.guard.mask_id:
                continue
            piece = self.text(t)
            if "\n" in piece:
                return not piece.rsplit("\n", 1)[1].strip()
            if piece.strip():
                return False
        return True

    def drafted_witness(self, tokens: Tensor, logits: Tensor, pos: Tensor, ids: Tensor) -> Tensor | None:
        """This call's draft with the proposals in it, or else its second reading (`second`: when the model is unsure
        at a few holes only), when the judge passes it (one check each): a witness for all of them, found without
        the first search (the holes' fillers, built cold for every hole of the plan). A model right at 9 holes in 10
        has its draft broken where it is wrong, and its second choice there is what the code needs."""
        fixed = tokens.clone()
        fixed[pos] = ids
        self.drafted, self.held = self.draft(tokens, logits), fixed != self.guard.mask_id
        self.read, self.seconded = (tokens, logits), None
        candidate = torch.where(self.held, fixed, self.drafted)
        if self.passes(candidate):
            return candidate
        second = self.second()
        candidate = None if second is None else torch.where(self.held, fixed, second)
        return candidate if candidate is not None and self.passes(candidate) else None

    def start(self, outside: bool = False) -> None:
        """The first witness search, run now (`Guard.witness`) and counted as this decode's (`outside` `admit`: a
        face's early end); its witness is this decode's (None: none found, the drafts are tried as before)."""
        found = self.guard.witness
        self.witness = None if found is None else found.clone()
        self.charge(outside=outside)

    def charge(self, ahead: bool = False, outside: bool = False) -> None:
        """Count the first search's cost (`Guard.first`) in this decode's stats, once: its checks and seconds;
        `ahead`: it ran before the decode began, so its seconds are not in the decode's own time; `outside`: it
        ran in this decode but not in `admit`, whose seconds are counted there."""
        paid, self.guard.first = self.guard.first, None
        if paid is None:
            return
        self.stats.checks += paid.checks
        self.stats.first += paid.seconds
        if ahead or outside:
            self.stats.seconds += paid.seconds
            self.stats.cpu += paid.cpu
        if ahead:
            self.stats.ahead += paid.seconds

    def agrees(self, fixed: Tensor) -> bool:
        """Whether the witness has every token of `fixed` (the proposals are its own) and no comment start the search
        put in it hides one: then it is still a witness, as `complete` finds first, with no check. Beside a model
        that is right this is most calls, and they skip the draft (an argmax over every hole's row, a third of the
        guard's time a call there: docs/guard.md). Without a draft every comment start counts as the search's, so
        this says yes only where `complete` would."""
        self.drafted, self.held = None, fixed != self.guard.mask_id
        witness = self.witness
        return torch.equal(torch.where(self.held, fixed, witness), witness) and not self.hides(witness)

    def reread(self, tokens: Tensor, logits: Tensor, pos: Tensor, ids: Tensor) -> tuple[Tensor, Tensor] | None:
        """(the witness, the ids to commit at `pos`) when the draft's second reading (`second`) replaces some of the
        proposals themselves and the judge passes it (one check): the model was unsure at those holes, its first
        choice there broke the draft with every proposal in it, and its close second is what the code needs (a
        model right at 9 holes in 10 that proposes one of its wrong tokens). Those proposals are turned away and
        replaced by that second choice; the others are admitted as they are. None: no such reading, or it fails.
        Before this, such a call swept fillers over the draft for a proposal no filler could hold, then admitted
        the proposals one by one (30 ms a call on a 229 KB file: docs/guard.md)."""
        second = self.second()
        if second is None:
            return None
        changed = (second[pos] != ids) & (second[pos] != self.drafted[pos])  # (k,) where it read its second choice
        if not bool(changed.any()):
            return None
        other = torch.where(changed, second[pos], ids)  # a sampled proposal that is not its first choice stays
        fixed = tokens != self.guard.mask_id
        candidate = torch.where(fixed, tokens, second)
        candidate[pos] = other
        self.held = fixed.clone()
        self.held[pos] = True
        if not self.passes(candidate):
            return None
        self.stats.rejected += int(changed.sum())
        self.stats.replaced += int(changed.sum())
        return candidate, other

    def likely(self, logits: Tensor, pos: Tensor, ids: Tensor) -> Tensor:
        """(k,) the model's probability of `ids` at `pos` (float32 rows, on the CPU)."""
        rows = logits[pos.to(logits.device)].float()  # (k, V)
        picked = rows.gather(1, ids.to(rows.device).unsqueeze(1)).squeeze(1)  # (k,)
        return (picked - torch.logsumexp(rows, 1)).exp().cpu()

    def together(self, tokens: Tensor, logits: Tensor, draft: Tensor, pos: Tensor, ids: Tensor) -> Tensor:
        """(k,) bool: the proposals admitted together under one witness: those on the left of a cut (the draft up
        to it; after it the witness, or fillers: `sweep`, a few checks), then of the rest those on the right of
        another. A multi-token decoder's proposals are spread over the holes; where the draft breaks the file
        after some of them, the ones before the break still agree with one witness, and one parse admits them
        all instead of one parse each (and a wait for the many with no witness of their own).

        Fillers repair where the model's text before a cut meets the witness after it, which helps only when that
        text is right: a cut holding more than SWEPT proposals is swept only when the model is sure of them (its
        mean probability of them at least SURE). Beside the built-in model such sweeps found a witness 7 times in 1,612
        (docs/guard.md, sixteenth round); beside a model sure of all but one closer, one admits half the span."""
        taken = torch.zeros(len(pos), dtype=torch.bool)
        if len(pos) < 2 or self.guard.around is None or self.guard.fit is None:
            return taken
        at = torch.arange(len(tokens))
        sure: Tensor | None = None  # (k,) the model's probability of each proposal, read when a large cut fails
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
                held = base != self.guard.mask_id  # what is committed and proposed: the draft before the cut is not
                held[here[take]] = True
                self.held = held
                kept = torch.where(fixed == self.guard.mask_id, self.witness, fixed)  # the witness beyond the cut
                if self.passes(kept):
                    found = kept
                else:  # fillers beyond the cut: around a few proposals, or many the model is sure of
                    swept = int(take.sum()) <= SWEPT
                    if not swept:
                        sure = self.likely(logits, pos, ids) if sure is None else sure
                        swept = float(sure[rest[take]].mean()) >= SURE
                    found = self.sweep(fixed, draft, TOGETHER, held) if swept else None
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

    def complete(
        self,
        fixed: Tensor,
        draft: Tensor,
        changed: Tensor,
        trials: int = 0,
        fillers: int = -1,  # noqa: F811
    ) -> Tensor | None:
        """`Search.complete`, where the witness's own tokens under its comment are not enough (`hides`)."""
        self.held = held = fixed != self.guard.mask_id
        base = torch.where(held, fixed, self.witness)
        if not (torch.equal(base, self.witness) and self.hides(base)):
            return super().complete(fixed, draft, changed, trials, fillers)
        mixed = torch.where(held, fixed, draft)
        candidates = itertools.chain([mixed], self.repairs(base, draft, ~held, changed, fillers))
        return next((c for c in itertools.islice(unique(candidates), trials or TRIALS) if self.passes(c)), None)

    def sweep(self, fixed: Tensor, draft: Tensor, budget: int = 0, held: Tensor | None = None) -> Tensor | None:
        # `held`: what no comment may hide (`hides`) when not all of `fixed` (`together`); errors: hidden fails
        self.held = fixed != self.guard.mask_id if held is None else held
        return super().sweep(fixed, draft, budget)

    def errors(self, canvas: Tensor) -> int:
        return 1 if self.hides(canvas) else super().errors(canvas)

    def hides(self, canvas: Tensor) -> bool:
        """Whether a comment start the search put in a hole hides a held token after it (committed, proposed, the
        user's): the judge passes `x = 1 # ) )`, but then a later call has to commit that ` #` (docs/guard.md).
        The model's own comment start (this call's draft has it there: its most likely token) is not the search's:
        it holds what follows it, as a committed or proposed one does, and a comment line is decoded in any order."""
        if self.held is None or not hasattr(self.guard.fit, "escape") or not hasattr(self.guard.fit, "tokenizer"):
            return False  # no comment starts known (a toy language)
        tokens = canvas.cpu().numpy()  # read at every check: numpy's operations cost a fraction of torch's here
        free = ~self.held.cpu().numpy()  # the holes, where a comment start would be the search's
        if self.drafted is not None:
            free &= tokens != self.drafted.cpu().numpy()  # ... unless the model itself put it there
        at = free.nonzero()[0]
        escape = self.guard.fit.escape  # bound once: this is read at every check, for every hole left
        starts = [p for p, t in zip(at.tolist(), tokens[at].tolist(), strict=True) if escape(t)]
        if not starts:
            return False
        ids, held = tokens.tolist(), self.held.tolist()
        return any(held[q] for p in starts for q in self.covered(ids, p))  # a `#` in a string counts too: a candidate

    def commented(self, tokens: Tensor, starts: list[int]) -> set[int]:
        """The positions of `tokens` that the comments the tokens at `starts` open hold (`covered`); none where the
        language has no comment starts known."""
        if not hasattr(self.guard.fit, "tokenizer"):
            return set()
        ids = tokens.tolist()
        return {q for start in starts for q in self.covered(ids, start)}

    def covered(self, ids: list[int], start: int) -> Iterator[int]:
        """The positions after `start` that the comment its token opens holds: to the end of its line (a block
        comment's: to its close), the token holding the end too when text comes before the end in it; none when it
        ends inside its own token."""
        mark = self.text(ids[start])
        close = "*/" if "/*" in mark and "//" not in mark.split("/*")[0] else "\n"
        if close in mark[max(mark.find("#"), mark.find("//"), mark.find("/*")) :]:
            return
        for q in range(start + 1, len(ids)):
            piece = self.text(ids[q])
            cut = piece.find(close)
            if cut < 0 or piece[:cut].strip():
                yield q
            if cut >= 0:
                return

    def text(self, token: int) -> str:
        """A token's text, read once a decode."""
        found = self.ends.get(token)
        if found is None:
            found = self.ends[token] = self.guard.fit.tokenizer.decode([token])
        return found

    def adopt(self, tokens: Tensor, logits: Tensor) -> bool:
        """A witness from this call's draft (whole, or with fillers in some runs of holes); False: none yet.

        No filler fitted before the first call: the draft is tried at every call (the first one
        searching longest), since the model's guesses improve as the canvas fills in; from the call
        a witness is found on, the decode is guarded, and so its fill parses."""
        budget = ADOPT if self.stats.late == 0 else RETRY
        self.drafted = self.draft(tokens.cpu(), logits)
        self.witness = self.sweep(tokens.cpu(), self.drafted, budget)
        return self.witness is not None

    def first_passing(
        self,
        current: Tensor,
        logits: Tensor,
        draft: Tensor,
        p: int,
        t: int,
        s: float,
        kept: list[tuple[int, int, float]],
        cheap: bool = False,
    ) -> int | None:
        """Admit the first candidate at `p` that has a witness (appended to `kept`, `current` updated); its rank, or
        None. The model's close seconds at `p` (each at least RIVAL times as likely as the proposal) are tried first
        with the witness and the draft alone (EASY), then every candidate with the whole search, the proposal first
        (`cheap`: the first part only). The proposal has had those two before (`one_by_one`, `search`); its fillers
        and the sweeps are the search's costly part, and where the built-in model's proposal was replaced, its next
        candidate passed at its first trial in most calls (docs/guard.md)."""
        options = self.options(logits, p, t, s)
        row = logits[p].float()  # (V,)
        least = RIVAL * float((row[t] - torch.logsumexp(row, 0)).exp())  # the model's close seconds only, first
        close = [rank for rank in range(1, len(options)) if options[rank][1] >= least]
        tried = [(rank, EASY) for rank in close] + ([] if cheap else [(rank, 0) for rank in range(len(options))])
        for rank, trials in tried:
            token, prob = options[rank]
            if self.admitted(current, draft, p, token, prob, kept, trials) is not None:
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
        found = self.complete(trial, draft, torch.tensor([p]), trials or TRIALS, self.beside)
        if found is not None:
            self.witness = found
            current[p] = token
            kept.append((p, token, prob))
        return found

    def second(self) -> Tensor | None:
        """This call's draft with the model's second choice at each hole where that is at least RIVAL times as likely
        as its first (never the mask, never a comment start: `escape`), when the model is that unsure at no more than
        UNSURE of the holes; None otherwise. A model that is sure of most of the fill and wrong at a few holes, where
        its second choice is the one the code needs, breaks its draft there: read this way, the draft parses and is a
        witness for the proposals that are right. A model unsure nearly everywhere (the built-in one) would get
        another draft, not a repair of this one (docs/guard.md, tenth round)."""
        if self.read is None or self.drafted is None:
            return None
        if self.seconded is None:
            tokens, logits = self.read
            holes = (tokens == self.guard.mask_id).nonzero().squeeze(-1)
            out = self.drafted.clone()
            limit = max(int(UNSURE * max(len(holes), self.total)), FEW)  # more unsure holes: no second reading
            found = self.choices(logits, holes[: limit + 1])  # unsure at all of them (the built-in model): stop there
            if found is not None and not (len(found[0]) > limit and bool(found[0].all())):
                more = self.choices(logits, holes[limit + 1 :])
                close, top = found if more is None else (torch.cat([found[0], more[0]]), torch.cat([found[1], more[1]]))
                if int(close.sum()) <= limit:
                    for i in close.nonzero().squeeze(-1).tolist():
                        other = int(top[i, 1])
                        if int(top[i, 0]) == int(self.drafted[holes[i]]) and not self.escape(other):
                            out[holes[i]] = other
            self.seconded = out if not torch.equal(out, self.drafted) else self.drafted
        return None if self.seconded is self.drafted else self.seconded

    def choices(self, logits: Tensor, holes: Tensor) -> tuple[Tensor, Tensor] | None:
        """(h,) whether the model is unsure at each of `holes` (its second choice at least RIVAL times as likely as
        its first) and (h, 2) its two first choices, on the CPU; None for no holes."""
        if not holes.numel():
            return None
        rows = sampling.without(logits[holes.to(logits.device)].float(), self.guard.mask_id)  # (h, V) a copy
        top = rows.topk(2, dim=-1)  # (h, 2)
        close = (top.values[:, 1] - top.values[:, 0]) >= math.log(RIVAL)  # p2 / p1 >= RIVAL
        return close.cpu(), top.indices.cpu()

    def options(self, logits: Tensor, p: int, token: int, score: float) -> list[tuple[int, float]]:
        """The proposal, then the most likely other tokens at `p` (never the mask, never a forbidden one)."""
        out = [(token, score)]
        if self.own:
            return out
        row = logits[p].float().cpu()  # (V,)
        total = torch.logsumexp(row, 0)  # probabilities of the few tokens read, without a softmax over all
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
        if holes.numel():  # the rows' argmax, read without copying them again (one copy each call was ~0.5 ms)
            rows = logits[holes.to(logits.device)]  # (H, V)
            top = rows.argmax(-1)  # (H,): the mask is its own argmax only in a rare row, recomputed without it
            bad = (top == self.guard.mask_id).nonzero().squeeze(-1)
            if bad.numel():
                top[bad] = sampling.without(rows[bad].float(), self.guard.mask_id).argmax(-1)
            out[holes] = top.cpu()
        return out


def surest_first(pos: Tensor, ids: Tensor, scores: Tensor, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """The commits (positions, ids, scores) most confident first (ties in their order), on `device`."""
    order = scores.cpu().argsort(descending=True, stable=True)
    return pos.cpu()[order].to(device), ids.cpu()[order].to(device), scores.cpu()[order].to(device)
