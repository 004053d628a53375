"""The guard's side of a job: the guard (text/guard.py) built for the job's plan, what it judges (the user's code with
the fill spliced in, text/judge.py, or a face's client's splice), a face's early end through it, and what it did.

A job (jobs/job.py) is a plain record of one decode; the wiring (jobs/wiring.py) gives it a `JobGuard`, which reads
the job as it is now (a growing fill edits its plan between rounds) and keeps per job what the guard reuses: the
judge, each hole's literals. The faces read it from there: the server's early end (`ending`) and its per-answer report
(`report`), the CLI's view (`built`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..core import contracts
from ..core.canvas import Decoder
from ..models.base import Dlm
from ..text import guard, judge, spans

CUTS = 64  # judge calls an early end may spend looking for where the model's own tokens stop passing (ours)
GAVE_UP = "no filling of the holes parses (does the code around them parse?)"


@dataclass(frozen=True)
class Client:
    """How a face's client takes a one-hole plan's fill (the server's editors): what the guard judges and
    breakage measures, so that both see the text the client splices, not the canvas.

    The canvas starts with `context` characters that are for the model only (input_extra: other files),
    and its prefix is healed (dlmcode/serve/length.py); the client puts `splices(ids)` (the hole's ids
    after the server's cuts) between the file's own `prefix` and `suffix`."""

    context: int  # leading characters of the plan's text that are not the file (input_extra)
    prefix: str  # the file before the hole, as the client has it
    suffix: str  # the file after the hole
    splices: Callable[[list[int]], str]  # the hole's token ids -> the text the client splices


class Record(Protocol):
    """What the guard reads of a job (jobs/job.Job): its plan and model, how its fill is spliced and judged."""

    plan: spans.Plan  # the plan now (a growing fill's changes between rounds)
    dlm: Dlm
    decoder: Decoder  # as wired: the guard sits in it
    lang: str | None
    finish: Callable[[spans.Filled], str] | None  # a chat reply's code, cut out after decoding
    trim_at: int | None
    client: Client | None
    notes: list[str]

    @property
    def reference(self) -> tuple[str, list[tuple[int, int]]]: ...  # the user's code, each hole's chars in it

    def spliced(self, canvas: Any) -> spans.Filled: ...  # the text a finished canvas stands for


class JobGuard:
    """The guard of one job: built for its plan (anew for each plan of a growing fill), judging its witnesses."""

    def __init__(self, job: Record, decoder: Decoder) -> None:
        self.job = job
        self.unguarded = decoder  # the decoder before the oracle and the guard: a growing job guards each plan anew
        self.guarded_for = job.plan
        self.rest: str | None = None  # a face's early end (ending): "model" (its top tokens passed) or "witness"
        self.window: judge.Window | None = None  # set: fillers read the judge's window, not the file (`clipped`)

    def for_plan(self, plan: spans.Plan, decoder: Decoder) -> Decoder:
        """The decoder for one round of a growing job over `plan`: its guard made for this plan when it is new."""
        if plan is not self.guarded_for and contracts.guarded(self.unguarded):
            decoder, self.guarded_for = self.with_guard(self.unguarded), plan
        return decoder

    def with_guard(self, decoder: Decoder) -> Decoder:
        """The decoder with this plan's guard, or unguarded with a note saying why the guarantee cannot hold."""
        why = self.unguardable()
        if why is not None:
            self.job.notes.append(f"guard: {why}; decoding unguarded")
            return dataclasses.replace(decoder, completer=None)
        plan = self.job.plan
        every = guard.Fillers(self.job.lang, self.job.dlm.tokenizer, self.blank(), rare=True)  # the calls' too
        # a growing fill that holds committed tokens has no fillers' search: its witness comes from a draft
        fresh = not plan.canvas.writable.logical_xor(plan.canvas.holes).any()
        search = functools.partial(self.first_witness, plan, every) if fresh else None
        return dataclasses.replace(
            decoder,
            completer=guard.Guard(
                self.keeps, None, plan.canvas.mask_id, self.text_around, every, self.judged.first_break, search=search
            ),
        )

    def first_witness(self, plan: spans.Plan, every: guard.Fillers) -> tuple[torch.Tensor | None, guard.Stats]:
        """The plan's first witness from fillers, bounded, and what finding it cost (the guard runs it when a decode
        first needs it: Guard.witness); None: none, the model's drafts may give one."""
        began, cpu = time.perf_counter(), time.thread_time()
        counted = guard.Counted(self.keeps)

        def search(fillers: guard.Fillers, budget: int) -> torch.Tensor | None:
            return guard.first_witness(
                plan.canvas.tokens, plan.positions, self.around(), fillers, counted, budget=budget
            )

        found = search(guard.Fillers(self.job.lang, self.job.dlm.tokenizer, self.blank()), guard.FIRST)
        if found is None:  # the costly fillers of rare cuts, once, before the model's drafts
            found = search(every, guard.RARE)
        if found is None and self.judged.small() is not None:  # a typo of the user's misled the fillers
            self.window = self.judged.small()
            found = search(every, guard.RARE)
            if found is None:
                self.window = None
        cost = guard.Stats(checks=counted.checks, seconds=time.perf_counter() - began, cpu=time.thread_time() - cpu)
        return found, cost

    def keeps(self, tokens: torch.Tensor) -> int:
        """The guard's verdict on a witness: the judge's new errors, or 1 when the fill escapes (`escapes`)."""
        return self.judge(tokens) or int(self.escapes(tokens))

    def escapes(self, tokens: torch.Tensor) -> bool:
        """Whether a fill turns the user's code after a hole into a comment or a string (a `#` that comments
        out the rest of the line, a quote it leaves open): the judge passes such a text, the user would not.
        The literal each hole ends in must be one of `literals`, or the one it began in."""
        lang, job = self.job.lang, self.job
        if job.client is not None:
            filled = job.spliced(dataclasses.replace(job.plan.canvas, tokens=tokens, span=None))
            text, regions = filled.text, filled.regions
        else:  # the splice's text alone: its line ranges cost a count over the whole file at every check
            text, regions = spans.joined(job.plan, tokens, job.dlm.tokenizer, job.dlm.special_ids, job.trim_at)
        for (start, end), want in zip(regions, self.literals, strict=True):
            began = {guard.open_literal(text[:start], lang)} if None in want else set()
            if guard.literal_at(text, end, lang) not in want | began:
                return True
        return False

    @functools.cached_property
    def literals(self) -> list[set[str | None]]:
        """Per hole, the literals its fill may end in: the user's own there, or (a marker, no text of theirs)
        code, the string the code after it starts inside of, or (None) the literal the hole began in."""
        user, regions = self.job.reference
        lang = self.job.lang
        return [
            {guard.literal_at(user, b, lang)} if b > a else {"", guard.opened_after(user[b:], lang), None}
            for a, b in regions
        ]

    def unguardable(self) -> str | None:
        if self.job.lang is None:
            return "the code's language is unknown (name it with --lang)"
        if self.job.finish is not None:
            return "a chat reply's code is cut out of it after decoding"
        return None

    def judge(self, tokens: torch.Tensor) -> int:
        """New syntax errors of the canvas `tokens` (no holes) once spliced: the breakage rule, judged on the
        smallest window of the file that decides it (text/judge.py); a client's file with its splice (Client)."""
        return self.judged(tokens)

    @functools.cached_property
    def judged(self) -> judge.Judge:
        job = self.job
        if job.client is None:
            tokenizer, drop = job.dlm.tokenizer, job.dlm.special_ids
            return judge.Judge(job.plan, tokenizer, job.lang, job.reference, drop, job.trim_at)
        prefix, run = job.client.prefix, job.plan.positions[0]
        text = prefix + job.client.suffix
        plan = spans.Plan(
            text, job.plan.canvas, (spans.Hole(len(prefix), len(prefix), len(run)),), (run,), (0, len(text))
        )
        return judge.Judge(plan, job.dlm.tokenizer, job.lang, job.reference, decode=job.client.splices)

    def blank(self) -> int | None:
        """A token a witness may put in a hole to leave it empty: a pad the plan lets the model commit (last),
        else the end-of-text that ends a continuation (generate: nothing after it is kept)."""
        late = set(self.job.plan.canvas.late_ids)
        pad = next((i for i in sorted(late) if i in self.job.dlm.special_ids and i != self.job.trim_at), None)
        return pad if pad is not None else self.job.trim_at

    def text_around(self, tokens: torch.Tensor, start: int, stop: int) -> tuple[str, str]:
        """The text before and after canvas positions [start, stop) of one hole (other holes as the user's text)."""
        ids, plan, dlm = tokens.tolist(), self.job.plan, self.job.dlm
        hole, run = next((h, r) for h, r in zip(plan.holes, plan.positions, strict=True) if r.start <= start < r.stop)
        head, tail = (
            spans.decode_fill(part, dlm.tokenizer, dlm.special_ids, self.job.trim_at)
            for part in (ids[run.start : start], ids[stop : run.stop])
        )
        before = plan.text[self.file_start : hole.start_char] + head
        return self.clipped(plan.holes.index(hole), before, plan.text[hole.end_char :], tail)

    def around(self) -> list[tuple[str, str]]:
        """Each hole's text before and after it in the user's code (as the canvas has it: a client's context left
        out, its prefix healed, since fillers are tokens on the canvas)."""
        text = self.job.plan.text
        return [
            self.clipped(i, text[self.file_start : h.start_char], text[h.end_char :])
            for i, h in enumerate(self.job.plan.holes)
        ]

    def clipped(self, index: int, before: str, after: str, tail: str = "") -> tuple[str, str]:
        """(before, tail + after) of hole `index`, as the judge reads them when `window` is set: from the window's
        start, its head above, to its end, its tail below. The fillers then see the code the judge judges, where the
        whole file would show them the user's own errors elsewhere (an unclosed bracket above reads as the hole's
        to close; a broken line below as the hole's to bridge): the first witness of a file with a typo."""
        window = self.window
        if window is None:
            return before, tail + after
        end = window.stop - self.judged.plan.holes[index].end_char  # the judge's text after the hole, to its end
        return window.head + before[window.start :], tail + after[:end] + window.tail

    @property
    def file_start(self) -> int:
        """Where the user's file starts in the plan's text: after a client's context (input_extra)."""
        return self.job.client.context if self.job.client is not None else 0

    @property
    def session(self) -> Any:
        """The guard's session of the decode under way (its witness), or None when unguarded."""
        completer = built(self.job.decoder)
        return completer.session if completer is not None and contracts.guarded(self.job.decoder) else None

    def ending(self, tokens: torch.Tensor, proposed: torch.Tensor, end: int | None = None) -> torch.Tensor:
        """(h,) the ids to commit at every hole left of canvas `tokens` when a face ends the decode early (the
        server's time limit, the fill's end): `proposed` when the guard passes them; else, with an `end` token
        (one the client's splice ends the fill at), the longest run of `proposed` that passes with the fill ended
        after it ("cut": the model's own tokens, never a filler's); else the witness's own (which agrees with every
        commit so far), so an early end is guarded too. Unguarded, or before any witness was found, `proposed`."""
        session = self.session
        if session is not None and session.witness is None and session.guard.search is not None:
            session.start(outside=True)  # no call has needed the first witness yet: it is needed now
        if session is None or session.witness is None:
            return proposed
        holes = tokens == self.job.plan.canvas.mask_id  # (L,)
        trial = tokens.clone()
        trial[holes] = proposed.to(tokens.device)
        if session.passes(trial.cpu()):
            self.rest = "model"
            return proposed
        ids = proposed.cpu()
        stop = next((k for k, i in enumerate(ids.tolist()) if i == end), len(ids)) if end is not None else 0
        for k in range(stop - 1, max(stop - 1 - CUTS, -1), -1):  # keep the first k of them, end the fill after
            kept = torch.cat([ids[:k], torch.full((len(ids) - k,), end, dtype=ids.dtype)])  # type: ignore[arg-type]
            trial[holes] = kept.to(tokens.device)
            if session.passes(trial.cpu()):
                self.rest = "cut"
                return kept.to(proposed.device)
        self.rest = "witness"
        return session.witness[holes.cpu()].to(proposed.device)

    def report(self) -> dict[str, Any] | None:
        """What the guard did, for a face that reports it per answer (serve): None when the decode was not asked
        to be guarded; `gave_up` (and `why`) when it could not hold, so the decode ran unguarded."""
        if not contracts.guarded(self.job.decoder):
            return None
        completer = built(self.job.decoder)
        stats = completer.last if completer is not None else None
        counts = {k.removeprefix("guard_"): v for k, v in (stats.to_dict() if stats is not None else {}).items()}
        gave_up = completer is None or bool(stats is not None and stats.gave_up)
        why = (self.unguardable() or GAVE_UP) if gave_up else None
        return counts | {"gave_up": gave_up, "why": why, "rest": self.rest}


def built(decoder: Decoder) -> guard.Guard | None:
    """The guard a job handed `decoder` (JobGuard.with_guard), or None: it runs unguarded."""
    completer = contracts.completer_of(decoder)
    return completer if isinstance(completer, guard.Guard) else None


def first_search(decoder: Decoder) -> float:
    """The seconds the guard's first witness search took before the decode just run began, when that decode paid
    them (one run in the decode is in its own time already)."""
    completer = built(decoder)
    return completer.last.ahead if completer is not None and completer.last is not None else 0.0


def stats(decoder: Decoder, notes: list[str]) -> dict[str, float] | None:
    """The guard's counters for the decode just run; None when it ran unguarded (and a note in `notes` says why)."""
    completer = built(decoder)
    if completer is None or completer.last is None:
        return None
    if completer.last.gave_up:
        note = f"guard: {GAVE_UP}; decoding unguarded"
        notes += [note] if note not in notes else []
        return None
    return completer.last.to_dict()
