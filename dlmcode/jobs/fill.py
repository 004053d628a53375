"""The library's main jobs: infill spans of a file, or continue a prompt, with a chosen decoder.

Stream first: `prepare_infill` / `prepare_generate` return a Job whose `steps()` is the
decoder's Step stream (the CLI draws it live); `Job.run()` drains it into a Result.
`infill()` and `generate()` are the one-call convenience API.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import decoders
from ..core import contracts
from ..core.assistant import TRAIN_HINT, check, token_table
from ..core.canvas import Decoder, Step, last
from ..core.contracts import TakesAssistant
from ..core.errors import ModelError, UsageError
from ..core.run import AUTO, RunSettings
from ..models import cache as kvcache
from ..models.assistant_lm import load_cached, shipped_path
from ..models.base import Dlm
from ..models.blocks import BlockPredict, Ended
from ..text import guard, judge, oracle, spans, syntax
from . import expanding, sizing
from .processors import EndOfText, Processor, exact_length, growth_bans, names, processed

Follow = Callable[[Iterator[Step]], Step | None]


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
    """A prepared decode: the plan (canvas and how to splice it back), model, decoder, seed."""

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
    rest: str | None = None  # guarded, a face's early end (ending): "model" (its top tokens passed) or "witness"

    def __post_init__(self) -> None:
        self.unguarded = self.decoder  # a growing job builds the guard anew for each plan
        if oracle.wants(
            self.decoder
        ):  # syntax-guard: a syntax oracle of this plan, handed over like codila's assistant
            self.decoder = oracle.with_oracle(
                self.decoder,
                self.plan,
                self.dlm.tokenizer,
                self.lang,
                spans.reference(self.plan, self.originals)[0] if not self.finish else "",  # the plan's own text
                self.dlm.special_ids,
                self.trim_at,
                decoders.name_of(self.decoder),
            )
        if contracts.guarded(self.decoder):
            self.decoder = self.with_guard(self.decoder)
        self.guarded_for = self.plan

    # ------------------------------------------------------------ the guard (dlmcode/text/guard.py)

    def with_guard(self, decoder: Decoder) -> Decoder:
        """The decoder with this plan's guard, or unguarded with a note saying why the guarantee cannot hold."""
        why = self.unguardable()
        if why is not None:
            self.notes.append(f"guard: {why}; decoding unguarded")
            return dataclasses.replace(decoder, completer=None)
        began = time.perf_counter()  # the first search is the guard's time too (Stats.first)
        fit = guard.Fillers(self.lang, self.dlm.tokenizer, self.blank())
        counted = guard.Counted(self.keeps)
        found = (
            guard.first_witness(
                self.plan.canvas.tokens, self.plan.positions, self.around(), fit, counted, budget=guard.FIRST
            )
            if not self.plan.canvas.writable.logical_xor(self.plan.canvas.holes).any()
            else None
        )  # None: from a draft (also once a growing fill holds committed tokens); bounded, as every search
        first = guard.Stats(checks=counted.checks, seconds=time.perf_counter() - began)
        return dataclasses.replace(
            decoder,
            completer=guard.Guard(self.keeps, found, self.plan.canvas.mask_id, self.text_around, fit, first=first),
        )

    def keeps(self, tokens: torch.Tensor) -> int:
        """The guard's verdict on a witness: the judge's new errors, or 1 when the fill escapes (`escapes`)."""
        return self.judge(tokens) or int(self.escapes(tokens))

    def escapes(self, tokens: torch.Tensor) -> bool:
        """Whether a fill turns the user's code after a hole into a comment or a string (a `#` that comments
        out the rest of the line, a quote it leaves open): the judge passes such a text, the user would not.
        The literal each hole ends in must be one of `literals`, or the one it began in."""
        filled = self.spliced(dataclasses.replace(self.plan.canvas, tokens=tokens, span=None))  # as `reference`
        for (start, end), want in zip(filled.regions, self.literals, strict=True):
            began = {guard.open_literal(filled.text[:start], self.lang)} if None in want else set()
            if guard.literal_at(filled.text, end, self.lang) not in want | began:
                return True
        return False

    @functools.cached_property
    def literals(self) -> list[set[str | None]]:
        """Per hole, the literals its fill may end in: the user's own there, or (a marker, no text of theirs)
        code, the string the code after it starts inside of, or (None) the literal the hole began in."""
        user, regions = self.reference
        return [
            {guard.literal_at(user, b, self.lang)} if b > a else {"", guard.opened_after(user[b:], self.lang), None}
            for a, b in regions
        ]

    def unguardable(self) -> str | None:
        if self.lang is None:
            return "the code's language is unknown (name it with --lang)"
        if self.finish is not None:
            return "a chat reply's code is cut out of it after decoding"
        return None

    def judge(self, tokens: torch.Tensor) -> int:
        """New syntax errors of the canvas `tokens` (no holes) once spliced: the breakage rule, judged on the
        smallest window of the file that decides it (text/judge.py); a client's file with its splice (Client)."""
        return self.judged(tokens)

    @functools.cached_property
    def judged(self) -> judge.Judge:
        if self.client is None:
            tokenizer, drop = self.dlm.tokenizer, self.dlm.special_ids
            return judge.Judge(self.plan, tokenizer, self.lang, self.reference, drop, self.trim_at)
        prefix, run = self.client.prefix, self.plan.positions[0]
        text = prefix + self.client.suffix
        plan = spans.Plan(
            text, self.plan.canvas, (spans.Hole(len(prefix), len(prefix), len(run)),), (run,), (0, len(text))
        )
        return judge.Judge(plan, self.dlm.tokenizer, self.lang, self.reference, decode=self.client.splices)

    def blank(self) -> int | None:
        """A token a witness may put in a hole to leave it empty: a pad the plan lets the model commit (last),
        else the end-of-text that ends a continuation (generate: nothing after it is kept)."""
        late = set(self.plan.canvas.late_ids)
        pad = next((i for i in sorted(late) if i in self.dlm.special_ids and i != self.trim_at), None)
        return pad if pad is not None else self.trim_at

    def text_around(self, tokens: torch.Tensor, start: int, stop: int) -> tuple[str, str]:
        """The text before and after canvas positions [start, stop) of one hole (other holes as the user's text)."""
        ids = tokens.tolist()
        hole, run = next(
            (h, r) for h, r in zip(self.plan.holes, self.plan.positions, strict=True) if r.start <= start < r.stop
        )
        head, tail = (
            spans.decode_fill(part, self.dlm.tokenizer, self.dlm.special_ids, self.trim_at)
            for part in (ids[run.start : start], ids[stop : run.stop])
        )
        return self.plan.text[self.file_start : hole.start_char] + head, tail + self.plan.text[hole.end_char :]

    def around(self) -> list[tuple[str, str]]:
        """Each hole's text before and after it in the user's code (as the canvas has it: a client's context left
        out, its prefix healed, since fillers are tokens on the canvas)."""
        text = self.plan.text
        return [(text[self.file_start : h.start_char], text[h.end_char :]) for h in self.plan.holes]

    @property
    def file_start(self) -> int:
        """Where the user's file starts in the plan's text: after a client's context (input_extra)."""
        return self.client.context if self.client is not None else 0

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

    @property
    def session(self) -> Any:
        """The guard's session of the decode under way (its witness), or None when unguarded."""
        completer = self.built_guard
        return completer.session if completer is not None and getattr(self.decoder, "guard", False) else None

    def ending(self, tokens: torch.Tensor, proposed: torch.Tensor) -> torch.Tensor:
        """(h,) the ids to commit at every hole left of canvas `tokens` when a face ends the decode early (the
        server's time limit, the fill's end): `proposed` when the guard passes them, else the witness's own
        (which agrees with every commit so far), so an early end is guarded too. Unguarded, or before any
        witness was found, `proposed` as they are."""
        session = self.session
        if session is None or session.witness is None:
            return proposed
        holes = tokens == self.plan.canvas.mask_id  # (L,)
        trial = tokens.clone()
        trial[holes] = proposed.to(tokens.device)
        if session.passes(trial.cpu()):
            self.rest = "model"
            return proposed
        self.rest = "witness"
        return session.witness[holes.cpu()].to(proposed.device)

    def guard_report(self) -> dict[str, Any] | None:
        """What the guard did, for a face that reports it per answer (serve): None when the decode was not asked
        to be guarded; `gave_up` (and `why`) when it could not hold, so the decode ran unguarded."""
        if not getattr(self.decoder, "guard", False):
            return None
        completer = self.built_guard
        stats = completer.last if completer is not None else None
        counts = {k.removeprefix("guard_"): v for k, v in (stats.to_dict() if stats is not None else {}).items()}
        gave_up = completer is None or bool(stats is not None and stats.gave_up)
        why = (self.unguardable() or GAVE_UP) if gave_up else None
        return counts | {"gave_up": gave_up, "why": why, "rest": self.rest}

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
        if plan is not self.guarded_for and contracts.guarded(self.unguarded):
            self.decoder, self.guarded_for = self.with_guard(self.unguarded), plan
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
        seconds = time.perf_counter() - start + (self.sized.seconds if self.sized else 0.0) + self.first_search()
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
            guard=self.guard_stats(),
            notes=tuple(self.notes),
            processors=names(self.processors),
            fill_lines=((1, spans.count_lines(text)),) if self.finish else tuple(filled.span_lines),
            sized=self.sized.lengths if self.sized else self.growth.lengths(self.plan) if self.growth else (),
            expanded=sum(self.growth.expanded) if self.growth else 0,
            deleted=sum(self.growth.deleted) if self.growth else 0,
        )

    @property
    def built_guard(self) -> guard.Guard | None:
        """The guard this job handed its decoder (`with_guard`), or None: it ran unguarded."""
        completer = contracts.completer_of(self.decoder)
        return completer if isinstance(completer, guard.Guard) else None

    def first_search(self) -> float:
        """The seconds the guard's first witness search took, when the decode just run was the one that paid them."""
        completer = self.built_guard
        return completer.last.first if completer is not None and completer.last is not None else 0.0

    def guard_stats(self) -> dict[str, float] | None:
        """The guard's counters for the decode just run; None when it ran unguarded (and a note says why)."""
        completer = self.built_guard
        if completer is None or completer.last is None:
            return None
        if completer.last.gave_up:
            note = f"guard: {GAVE_UP}; decoding unguarded"
            self.notes += [note] if note not in self.notes else []
            return None
        return completer.last.to_dict()

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


GAVE_UP = "no filling of the holes parses (does the code around them parse?)"
AUTO_MAX_EXTRA = 32  # the built-in model never saw more than 32 pads after a hole's content
GENERATE_ROOM = 128  # the probe's holes for generate --length auto: the default --length (at most half the context)


def auto_length(source: str, span: tuple[int, int] | None, tokenizer: Any, room: int) -> int:
    """The probe's holes for --length auto: a span's token count with room to spare (half again, at
    least 8, at most AUTO_MAX_EXTRA), or the length rule's `room` for markers (jobs/sizing.py)."""
    if span is None:
        return room
    start, end = spans.line_span(source, span)
    n = len(tokenizer.encode(source[start:end]))
    return n + min(AUTO_MAX_EXTRA, max(8, n // 2))


def probed(dlm: Dlm, plan: spans.Plan, unknown: list[int], ends: tuple[int, ...] | None = None) -> sizing.Sized:
    """The length rule's probe over `plan` (its holes `unknown` opened at the rule's room): one call."""
    rule = sizing.rule_for(dlm.family)
    regions = [plan.positions[i] for i in unknown]
    return sizing.size(dlm.predict, plan.canvas.tokens, regions, ends or sizing.end_ids(dlm), rule.bias)


def bare_markers(source: str) -> list[int]:
    """Which holes of a marked file have no length of their own (bare ⟦fill⟧), by hole index."""
    return [i for i, (_, _, count) in enumerate(spans.find_markers(source)) if count is None]


def make_decoder(decoder: str | Decoder, options: Mapping[str, Any] | None, temperature: float | None) -> Decoder:
    """A decoder from a registry name and settings (or an instance), with `temperature` applied."""
    built = decoders.build(decoder, options) if isinstance(decoder, str) else decoder
    if temperature is not None:
        try:
            built = dataclasses.replace(built, temperature=temperature)
        except ValueError as err:
            raise UsageError(f"--temperature: {err}") from None
    return built


def default_model(dlm: Dlm | None) -> Dlm:
    if dlm is not None:
        return dlm
    from ..models import load

    return load()


def prepare_infill(
    source: str,
    span: tuple[int, int] | None = None,
    *,
    dlm: Dlm | None = None,
    decoder: str | Decoder = "low-confidence",
    options: Mapping[str, Any] | None = None,
    length: int | str | None = None,
    seed: int = 0,
    temperature: float | None = None,
    lang: str | None = None,
    cache: str = "none",
    cache_refresh: int = 0,
) -> Job:
    """A Job that rewrites lines span[0]..span[1] (1-based, inclusive), or the file's fill markers.

    `cache` (none, prefix, dual) and `cache_refresh` set the KV cache (models/cache.py).
    The keyword arguments are a RunSettings' fields (run.py); infill_job takes one.
    """
    run = RunSettings(
        decoder=decoder,
        options=options,
        length=length,
        seed=seed,
        temperature=temperature,
        lang=lang,
        cache=cache,
        cache_refresh=cache_refresh,
    )
    return infill_job(source, span, default_model(dlm), run)


def infill_job(source: str, span: tuple[int, int] | None, dlm: Dlm, run: RunSettings) -> Job:
    """prepare_infill's Job, from one run's settings (the CLI builds them from its flags)."""
    built, model = decoding(dlm, run)
    unknown = unknown_holes(source, span, run.length)
    if not unknown:  # --length auto with every marker sized (⟦fill:N⟧): nothing for the rule to size
        plan = spans.plan_infill(source, model.vocab, span, None if run.length == AUTO else run.length)
        return Job(plan, model, built, run.seed, run.lang, processors=exact_length(model))
    if growing(dlm):  # the model decides each length inside the decode: start small
        budget = auto_length(source, span, model.tokenizer, expanding.BUDGET)
        if span is not None:
            plan = spans.plan_infill(source, model.vocab, span, min(expanding.START, budget))
        else:
            plan = spans.plan_infill(source, model.vocab, span, None, bare=[expanding.START] * len(unknown))
        growth = grows(model, unknown, budget)
        return Job(plan, model, built, run.seed, run.lang, processors=growth_bans(model), growth=growth)
    room = auto_length(source, span, model.tokenizer, sizing.rule_for(dlm.family).room)
    if span is not None:  # --span with --length auto: the span's one hole
        sized = probed(dlm, spans.plan_infill(source, model.vocab, span, room), [0])
        plan = spans.plan_infill(source, model.vocab, span, sized.lengths[0])
    else:
        plan_for = functools.partial(spans.plan_infill, source, model.vocab, span, None)
        sized = probed(dlm, plan_for(bare=[room] * len(unknown)), unknown)
        plan = plan_for(bare=sized.lengths)
    return Job(plan, model, built, run.seed, run.lang, processors=exact_length(model), sized=sized)


def growing(dlm: Dlm) -> bool:
    """Whether the model decides a fill's length itself (expand and delete: jobs/expanding.py)."""
    return dlm.expand_id is not None and dlm.delete_id is not None


def grows(dlm: Dlm, variable: list[int], budget: int) -> expanding.Growth:
    """The growth of a job whose holes `variable` have no given length: each may reach `budget` positions."""
    tokens = expanding.Tokens(dlm.expand_id, dlm.delete_id)
    return expanding.Growth(tokens, tuple(variable), budget, dlm.context)


def unknown_holes(source: str, span: tuple[int, int] | None, length: int | str | None) -> list[int]:
    """The holes whose length nobody gave: a span under --length auto; bare ⟦fill⟧ markers unless --length N."""
    if span is not None:
        return [0] if length == AUTO else []
    return bare_markers(source) if length is None or length == AUTO else []


def decoding(dlm: Dlm, run: RunSettings) -> tuple[Decoder, Dlm]:
    """The run's decoder (temperature applied, codila's assistant attached) and the model behind its KV cache.

    No decoder named (None): the family's own, with the settings it publishes under the run's."""
    name, options = run.decoder, run.options
    if name is None:
        name, options = dlm.decoder, {**dlm.decoder_options, **(run.options or {})}
    built = with_assistant(make_decoder(name, options, run.temperature), dlm)  # codila: its assistant
    if dlm.blocks is not None:  # a block family's exact cache stands behind every decode (models/blocks.py)
        if run.cache != "none":
            raise UsageError(
                f"--cache {run.cache}: model {dlm.name!r} ({dlm.family}) decodes block by block with its own exact "
                "cache"
            )
        return built, dlm
    return built, kvcache.with_cache(dlm, run.cache, run.cache_refresh, getattr(built, "block", 0))


def prepare_generate(
    prompt: str,
    *,
    dlm: Dlm | None = None,
    decoder: str | Decoder = "low-confidence",
    options: Mapping[str, Any] | None = None,
    length: int | str = 128,
    seed: int = 0,
    temperature: float | None = None,
    lang: str | None = "python",
    chat: bool | None = None,
    raw: bool = False,
    eos: EndOfText | None = None,
    cache: str = "none",
    cache_refresh: int = 0,
) -> Job:
    """A Job that continues `prompt` with `length` holes; with a chat model the prompt is a request.

    The keyword arguments but chat, raw and eos are a RunSettings' fields (run.py); generate_job takes one.
    """
    run = RunSettings(
        decoder=decoder,
        options=options,
        length=length,
        seed=seed,
        temperature=temperature,
        lang=lang,
        cache=cache,
        cache_refresh=cache_refresh,
    )
    return generate_job(prompt, default_model(dlm), run, chat=chat, raw=raw, eos=eos)


def generate_job(
    prompt: str,
    dlm: Dlm,
    run: RunSettings,
    *,
    chat: bool | None = None,
    raw: bool = False,
    eos: EndOfText | None = None,
) -> Job:
    """prepare_generate's Job, from one run's settings; `length` is a number of tokens, or auto
    (the length rule reads it from one call over GENERATE_ROOM holes, end-of-text as the end)."""
    if not isinstance(run.length, int) and run.length != AUTO:
        raise UsageError(f"--length {run.length!r}: give a positive number of tokens, or auto")
    built, model = decoding(dlm, run)
    use_chat = (model.chat is not None) if chat is None else chat
    if use_chat and model.chat is None:
        raise UsageError(f"--chat: model {model.name!r} has no chat template")
    eos = eos or EndOfText()
    text = model.chat(prompt) if use_chat else prompt
    plan_for = functools.partial(spans.plan_generate, text, model.vocab)
    sized = growth = None
    room = min(GENERATE_ROOM, model.context // 2)
    if run.length == AUTO and growing(dlm):
        growth = grows(model, [0], room)
    elif run.length == AUTO:
        ends = tuple(i for i in (model.eos_id, model.eot_id) if i is not None)
        sized = probed(dlm, plan_for(room), [0], ends)
    plan, cut = whole_blocks(plan_for, expanding.START if growth else sized.lengths[0] if sized else run.length, model)
    plan = dataclasses.replace(plan, canvas=dataclasses.replace(plan.canvas, late_ids=eos.late_ids(model)))
    processors = eos.processors(model)
    processors += growth_bans(model) if growth else ()
    if not use_chat:
        return Job(
            plan,
            model,
            built,
            run.seed,
            run.lang,
            trim_at=model.eos_id,
            processors=processors,
            sized=sized,
            growth=growth,
            cut=cut,
        )
    if oracle.wants(built):
        raise UsageError(
            f"decoder {decoders.name_of(built)!r} cannot steer a chat reply (its code is cut out after decoding); use "
            "--no-chat"
        )
    reply = (lambda filled: filled.fills[0]) if raw else (lambda filled: extract_code(filled.fills[0]))
    return Job(
        plan,
        model,
        built,
        run.seed,
        run.lang,
        finish=reply,
        trim_at=model.eos_id,
        processors=processors,
        sized=sized,
        growth=growth,
        cut=cut,
    )


def whole_blocks(
    plan_for: Callable[[int], spans.Plan], length: int, model: Dlm
) -> tuple[spans.Plan, spans.Plan | None]:
    """The plan of `length` holes, and None; on a family whose blocks sit at multiples of its block size, a plan
    that ends on a block's end (its generate decodes whole blocks, the holes past the asked length among them)
    and the asked one, to cut the result back to."""
    plan = plan_for(length)
    spec = model.blocks
    if spec is None or not spec.aligned or len(plan.canvas.tokens) % spec.size == 0:
        return plan, None
    extra = spec.size - len(plan.canvas.tokens) % spec.size
    longer = plan_for(length + extra)
    if len(longer.canvas.tokens) != len(plan.canvas.tokens) + extra:  # windowed to the context: as asked
        return plan, None
    return longer, plan


def prepare_middle(
    prefix: str,
    suffix: str,
    length: int,
    *,
    dlm: Dlm | None = None,
    decoder: str | Decoder = "low-confidence",
    options: Mapping[str, Any] | None = None,
    seed: int = 0,
    temperature: float | None = None,
    lang: str | None = None,
    end_ids: tuple[int, ...] = (),
    cache: str = "none",
    cache_refresh: int = 0,
    unknown: bool = False,
    client: Client | None = None,
) -> Job:
    """A Job that fills `length` holes at an editor's cursor, between `prefix` and `suffix` (the server's job).

    `unknown`: `length` is only a ceiling; the length rule (jobs/sizing.py) reads the fill's
    length from one call over min(length, its room) holes, with `end_ids` (default: the
    family's) as the ends, and the holes then hold code only. Otherwise `end_ids` (pad,
    end-of-text) may end the fill early: they are committed last, and the caller cuts the
    fill at the first (Result.ids); without them the holes hold code only. `client`: the guard judges, and
    breakage measures, the text the server's client splices (Client).
    """
    run = RunSettings(
        decoder=decoder,
        options=options,
        length=length,
        seed=seed,
        temperature=temperature,
        lang=lang,
        cache=cache,
        cache_refresh=cache_refresh,
    )
    raw = default_model(dlm)
    built, model = decoding(raw, run)
    plan_for = functools.partial(spans.plan_middle, prefix, suffix, model.vocab)
    if unknown and growing(raw):  # the model decides the length inside the decode, up to the ceiling
        growth = grows(model, [0], length)
        plan = plan_for(min(expanding.START, length))
        return Job(plan, model, built, seed, lang, processors=growth_bans(model), growth=growth, client=client)
    if unknown:
        sized = probed(raw, plan_for(min(length, sizing.rule_for(raw.family).room)), [0], end_ids or None)
        plan = plan_for(sized.lengths[0])
        return Job(plan, model, built, seed, lang, processors=exact_length(model), sized=sized, client=client)
    plan = plan_for(length)
    plan = dataclasses.replace(plan, canvas=dataclasses.replace(plan.canvas, late_ids=end_ids))
    return Job(plan, model, built, seed, lang, processors=() if end_ids else exact_length(model), client=client)


FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(reply: str) -> str:
    """The fenced code blocks of a chat reply joined, or the whole reply when it has none."""
    blocks = FENCE.findall(reply)
    return "\n".join(block.rstrip("\n") for block in blocks) + "\n" if blocks else reply


def infill(source: str, span: tuple[int, int] | None = None, **kwargs: Any) -> Result:
    """Rewrite a span of `source` (see prepare_infill for the arguments) and return the Result."""
    return prepare_infill(source, span, **kwargs).run()


def generate(prompt: str, **kwargs: Any) -> Result:
    """Continue `prompt` (see prepare_generate for the arguments) and return the Result."""
    return prepare_generate(prompt, **kwargs).run()


def with_assistant(decoder: Decoder, dlm: Dlm) -> Decoder:
    """Give a decoder that takes an assistant (codila) one that fits `dlm`; other decoders pass through.

    No assistant set: the shipped one for the built-in model, else a ModelError saying how to
    train one. A path (`-o assistant=DIR`) is loaded. Either way the tokenizer must match.
    """
    if not (isinstance(decoder, TakesAssistant) and dataclasses.is_dataclass(decoder)):
        return decoder  # a custom decoder (any object meeting the Decoder contract) passes through too
    assistant = decoder.assistant
    if assistant is None and dlm.family != "builtin":
        raise ModelError(f"codila needs an assistant for this model; {TRAIN_HINT}")
    if assistant is None or isinstance(assistant, (str, Path)):
        where = shipped_path() if assistant is None else Path(assistant)
        if assistant is None and not where.is_dir():
            raise ModelError(
                f"the built-in model's assistant is not installed (no folder {where}); reinstall dlmcode or "
                f"{TRAIN_HINT}"
            )
        assistant = load_cached(str(where), str(dlm.device), dlm.dtype)
    check(assistant, token_table(dlm.tokenizer), repr(dlm.name))
    return dataclasses.replace(decoder, assistant=assistant)
