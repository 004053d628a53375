"""One loaded model and the server's defaults; turns a protocol-free `Fill` into an `Answer`.

Every protocol module parses its own body into a Fill, and renders the Answer in its own
shape. `Engine.check` validates what can fail before the model runs (decoder, settings,
ceiling), so a bad request is answered at once and never queued; `Engine.run` decodes (in
the queue's decode threads) through fill.prepare_middle, the length rule and steps.bounded.
With an `emit`, `run` also hands over the fill's text as it becomes final (`settled`), for
streams: whole lines that no later step and no rule can change any more.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import decoders
from ..core.canvas import Decoder, Step, last
from ..core.errors import DlmcodeError, UsageError
from ..core.run import check_batch
from ..jobs import batch as batching
from ..jobs import fill as jobs
from ..jobs import sizing, wiring
from ..jobs.processors import Remember
from ..models.base import Dlm
from ..text import syntax
from . import length, steps, trim
from .request import BadRequest, Fill


@dataclass(frozen=True)
class Answer:
    """What the server answers, before a protocol shapes it."""

    text: str
    stop: str  # end | length | time | stop | syntax | warmup
    holes: int  # holes opened
    tokens: int  # tokens in the answer (before the stop-string and syntax cuts)
    calls: int
    prompt_tokens: int  # context tokens on the canvas
    seconds: float
    decoder: str
    settings: Mapping[str, Any]
    breakage: dict[str, Any] | None  # of the text the client gets, against the file around it
    truncated: bool  # the context did not fit the model and was windowed
    guard: dict[str, Any] | None = None  # what the guard did (jobs/guarding.JobGuard.report); None: not asked

    @property
    def tpf(self) -> float:
        return self.holes / self.calls if self.calls else 0.0

    @property
    def timed_out(self) -> bool:
        return self.stop == steps.TIME

    def extras(self) -> dict[str, Any]:
        """The dlmcode fields every protocol adds to its answer."""
        return {
            "decoder": self.decoder,
            "settings": dict(self.settings),
            "calls": self.calls,
            "tpf": round(self.tpf, 4),
            "holes": self.holes,
            "breakage": self.breakage,
            "guard": self.guard,
            "stop_reason": self.stop,
            "timed_out": self.timed_out,
        }


WARMUP = "warmup"
GUARD = "guard"  # the decoder setting every request has on unless told guard=false (docs/serve.md)
KEPT_DECODERS = 64  # settings whose decoder the engine keeps built (a client may send any number of them)
Emit = Callable[[str], None]  # a stream's sink: the next piece of the fill's final text


@dataclass
class Engine:
    """The loaded model with the server's decoder, settings, cache and language."""

    dlm: Dlm
    decoder: str = "low-confidence"
    options: Mapping[str, Any] = field(default_factory=dict)
    cache: str = "none"
    cache_refresh: int = 0
    lang: str | None = None
    name: str = "dlmcode"  # the model name the protocols report
    lines: int = 1  # the length rule's line limit (length.py rule 3); 0: none
    batch: int = 1  # decodes sharing each model forward (queue.py); 1: one decode at a time, the model not routed
    own: Decoder | None = field(default=None, repr=False)  # the decoder of a request that names no settings, built
    # by the face before the model loaded (`served`); None: built at the first such request
    built: dict[tuple, Decoder] = field(default_factory=dict, init=False, repr=False)  # decoder_for's, by settings

    def __post_init__(self) -> None:
        check_batch(self.batch)
        if self.own is not None:  # the face's check and every plain request share it
            self.built[(*served(self.decoder, self.options), None)] = self.own
        if self.batch > 1:  # every model call of a decode joins the queue's next batched forward
            self.dlm = batching.batched(self.dlm)

    def check(self, req: Fill) -> Decoder:
        """The request's decoder, built; BadRequest for anything that would fail in the queue."""
        if req.ceiling is not None and req.ceiling != length.NO_CEILING:
            if req.ceiling < 0:
                raise BadRequest(
                    f"{req.ceiling_name} {req.ceiling}: give a number of tokens >= 0, or -1 for the server's rule"
                )
            if req.ceiling > self.dlm.context:
                context = self.dlm.context
                raise BadRequest(f"{req.ceiling_name} {req.ceiling} is past the model's context ({context} tokens)")
        if req.lines is not None and req.lines < 0:
            raise BadRequest(f"lines {req.lines}: give the most non-blank lines a fill may hold, or 0 for any")
        if req.time_ms is not None and req.time_ms < 0:
            raise BadRequest(f"t_max_predict_ms {req.time_ms}: give a time in ms >= 0 (0: no limit)")
        return self.decoder_for(*served(self.decoder, self.options, req.decoder, req.options), req.temperature)

    def decoder_for(self, name: str, options: tuple[tuple[str, str], ...], temperature: float | None) -> Decoder:
        """The decoder these settings build (jobs/wiring.py, as every face builds one), built once: the check at
        the door and the decode share it, and so do the requests that ask for the same; a BadRequest for a bad
        name or setting. Decoders are frozen: a job hands its own copy what it takes (its guard, its assistant)."""
        key = (name, options, temperature)
        found = self.built.get(key)
        if found is None:
            try:
                found = wiring.make_decoder(name, dict(options), temperature)
            except UsageError as err:
                raise BadRequest(str(err)) from None
            if len(self.built) < KEPT_DECODERS:
                self.built[key] = found
        return found

    def warmup(self, req: Fill) -> bool:
        """Nothing to predict (n_predict 0), or an editor's warm-up (n_predict 1, no code): answer at once."""
        return req.ceiling == 0 or (req.ceiling == 1 and not req.prefix.strip() and not req.suffix.strip())

    def run(self, req: Fill, cancel: threading.Event | None = None, emit: Emit | None = None) -> Answer:
        """Decode one request (blocking); steps.ClientGone when `cancel` is set between steps.
        `emit` gets each new piece of the fill's final text as the decode settles it; the
        Answer's text starts with what was emitted (the syntax rule keeps those lines)."""
        decoder = self.check(req)
        if self.warmup(req):
            return self.empty(decoder)
        start = time.perf_counter()
        req, trimmed = trim.trim(req, self.dlm.context, req.lang or self.lang)  # before any tokenizing: bounded cost
        if req.lang or self.lang:  # code no checker can take (syntax.Uncheckable) is a 400 now, not after the decode
            syntax.check(req.prefix + req.suffix, req.lang or self.lang)  # cached: the syntax rule's `before`
        n = length.holes(req.ceiling, self.dlm)
        ends = sizing.end_ids(self.dlm)
        splice = self.splice(req)
        client = jobs.Client(len(req.extra), req.prefix, req.suffix, splice.text)  # the guard judges what it gets
        try:
            job = jobs.prepare_middle(
                req.extra + length.heal(req.prefix)[0],
                req.suffix,
                n,
                dlm=self.dlm,
                decoder=decoder,
                seed=req.seed,
                lang=req.lang or self.lang,
                end_ids=ends,
                cache=self.cache,
                cache_refresh=self.cache_refresh,
                unknown=True,
                client=client,
            )  # lang: the guard's and syntax-guard's; n: a ceiling (dlmcode/jobs/sizing.py)
        except DlmcodeError as err:  # the text holds the model's mask token, the holes do not fit the context
            raise BadRequest(str(err)) from None
        remember = Remember(mask_id=self.dlm.mask_id)  # it reads every hole: each call computes their rows
        job.processors += (remember,)  # last: it keeps the logits the decoder sees
        deadline = start + req.time_ms / 1000 if req.time_ms else None
        complete = length.complete(self.dlm.tokenizer, self.lines_of(req))
        bounds = steps.Bounds(
            job.plan.positions[0],
            ends,
            complete,
            deadline,
            cancel or threading.Event(),
            settle=functools.partial(job.guarding.ending, end=ends[0] if ends else None),
        )  # an early end commits what the guard passes: the model's tokens, cut where they stop passing, if need be
        sent: list[str] = []  # what `emit` was given
        stream = steps.bounded(following(job, bounds), remember, bounds)
        if emit is not None and not reopens(job.decoder, len(job.plan.positions[0])):
            stream = self.streaming(stream, req, job, sent, emit)
        final = last(stream)
        return self.finish(req, job, final, bounds, start, trimmed, splice, "".join(sent))

    def splice(self, req: Fill) -> length.Splice:
        """The length rule's cuts for this request (rules 0, 2-4): the fill's ids -> the text the client gets."""
        return length.Splice(
            self.dlm.tokenizer,
            self.dlm.special_ids,
            sizing.end_ids(self.dlm),
            length.heal(req.prefix)[1],
            self.lines_of(req),
            length.whole_lines(req.prefix, req.suffix),
            req.stop,
            req.min_indent,
        )

    def streaming(
        self, stream: Iterator[Step], req: Fill, job: jobs.Job, sent: list[str], emit: Emit
    ) -> Iterator[Step]:
        """`stream` as it is; after each step, the text it settled beyond what was sent goes to `emit`."""
        done = ""
        for step in stream:
            yield step
            text = self.settled(req, job, step.canvas)
            if len(text) > len(done) and text.startswith(done):
                piece, done = text[len(done) :], text
                sent.append(piece)
                emit(piece)

    def settled(self, req: Fill, job: jobs.Job, canvas: Any) -> str:
        """The start of the fill that no later step and no rule of finish() can change.

        The committed run at the fill's start (no hole before it; decoders here never reopen),
        up to its last line break (later tokens can only add to its last line), through the
        line, stop-string and n_indent cuts, less the last stop string's length but one (a
        stop string may begin before the break and end after it). The syntax rule cuts whole
        lines and keeps those sent (keep_syntax's `least`).
        """
        region = job.plan.positions[0]
        tokens = canvas.tokens[region.start : region.stop]  # (H,)
        holes = (tokens == canvas.mask_id).nonzero()
        run = tokens[: int(holes[0]) if len(holes) else len(tokens)].tolist()
        ids, _ = length.cut_at_end(run, sizing.end_ids(self.dlm))
        kept_ids = [i for i in ids if i not in self.dlm.special_ids]
        text = length.unheal(self.dlm.tokenizer.decode(kept_ids) if kept_ids else "", length.heal(req.prefix)[1])
        whole = text[: max(0, text.rfind("\n"))]
        cut, _ = length.cut_lines(whole, self.lines_of(req), length.whole_lines(req.prefix, req.suffix))
        cut, _ = length.cut_at_stop(cut, req.stop)
        cut, _ = length.cut_at_indent(cut, req.min_indent)
        longest = max((len(s) for s in req.stop if s), default=1)
        return cut[: max(0, len(whole) - longest + 1)]

    def finish(
        self,
        req: Fill,
        job: jobs.Job,
        final: Any,
        bounds: steps.Bounds,
        start: float,
        trimmed: bool,
        splice: length.Splice,
        sent: str = "",
    ) -> Answer:
        region = job.plan.positions[0]
        canvas = final.canvas if final else job.plan.canvas
        cut = splice(canvas.tokens[region.start : region.stop].tolist())
        ids, ended, by_lines, stopped = cut.ids, cut.ended, cut.by_lines, cut.stopped
        least = sent.count("\n") + 1 if sent else 1  # lines a stream has sent: the syntax rule keeps them
        kept = length.keep_syntax(req.prefix, cut.text, req.suffix, req.lang or self.lang, least)
        ended = ended or (
            (job.sized is not None or job.growth is not None) and len(region) < length.holes(req.ceiling, self.dlm)
        )  # the length rule, or the model's own deletes, ended it
        reason = bounds.reason if bounds.reason == steps.TIME else steps.ENDED if ended or by_lines else steps.FULL
        reason = length.SYNTAX if kept.cut else length.STOP_STRING if stopped else reason
        windowed = job.plan.window[0] > len(req.extra) or job.plan.window[1] < len(job.plan.text)
        truncated = trimmed or windowed  # code (not input_extra) cut to fit the context
        return Answer(
            kept.text,
            reason,
            len(region),
            len(ids),
            final.calls if final else 0,
            len(canvas.tokens) - len(region),
            time.perf_counter() - start,
            decoders.name_of(job.decoder),
            decoders.settings_of(job.decoder),
            kept.breakage.to_dict() if kept.breakage else None,
            truncated,
            job.guarding.report(),
        )

    def lines_of(self, req: Fill) -> int:
        return self.lines if req.lines is None else req.lines

    def empty(self, decoder: Decoder) -> Answer:
        return Answer(
            "", WARMUP, 0, 0, 0, 0, 0.0, decoders.name_of(decoder), decoders.settings_of(decoder), None, False
        )


def following(job: jobs.Job, bounds: steps.Bounds) -> Iterator[Step]:
    """The job's Steps, `bounds.region` where the fill lies at each: a fill that grows and shrinks moves it
    (jobs/expanding.py edits the plan between Steps)."""
    for step in job.steps():
        bounds.region = job.plan.positions[0]
        yield step


def reopens(decoder: Decoder, holes: int) -> bool:
    """Whether the decoder may take committed tokens back (a remasking one): then nothing is final before the end."""
    budget = getattr(decoder, "reopens", None)
    return budget is not None and budget(holes) > 0


def served(
    decoder: str, options: Mapping[str, Any], asked: str | None = None, asked_options: Mapping[str, Any] | None = None
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The decoder name and settings (as `-o` texts) a request decodes with, on a server of `decoder` and `options`:
    the request's (`asked`, `asked_options`) over the server's where it names the server's decoder or none, and
    guarded unless the server or the request says no (syntax-guard carries its own guard)."""
    name = asked or decoder
    merged = {**options, **(asked_options or {})} if asked in (None, decoder) else dict(asked_options or {})
    if not (isinstance(name, str) and decoders.fixed(name, GUARD)):
        merged.setdefault(GUARD, options.get(GUARD, True))
    return name, tuple((k, text(v)) for k, v in merged.items())


def text(value: Any) -> str:
    """A JSON setting value as the text `-o key=value` would give; lists and objects are refused."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise BadRequest(f"decoder setting value {value!r}: give a number, a string or a boolean")
