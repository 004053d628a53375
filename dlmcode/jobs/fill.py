"""The library's main jobs: infill spans of a file, or continue a prompt, or fill an editor's middle, with a chosen
decoder.

Each job plans the canvas (text/spans.py; a hole whose length nobody gave sized by the length rule, jobs/sizing.py,
or grown by the model, jobs/expanding.py), picks the logits processors (jobs/processors.py), and returns a `Job`
(jobs/job.py) whose decoder is wired from the run's settings (jobs/wiring.py). Stream first: `Job.steps()` is the
decoder's Step stream (the CLI draws it live); `Job.run()` drains it into a Result. `infill()` and `generate()` are
the one-call convenience API.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from .. import decoders
from ..core.canvas import Decoder
from ..core.errors import UsageError
from ..core.run import AUTO, RunSettings
from ..models.base import Dlm
from ..text import oracle, spans
from . import expanding, sizing
from .guarding import Client
from .job import Job, Result
from .processors import EndOfText, exact_length, growth_bans
from .wiring import decoding, wired

__all__ = [  # the jobs, and what a face reads of one: the record, its Result, a client's splice
    "Client",
    "Job",
    "Result",
    "extract_code",
    "generate",
    "generate_job",
    "infill",
    "infill_job",
    "prepare_generate",
    "prepare_infill",
    "prepare_middle",
]


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
    run = api_settings(decoder, options, length, seed, temperature, lang, cache, cache_refresh)
    return infill_job(source, span, default_model(dlm), run)


def api_settings(decoder, options, length, seed, temperature, lang, cache, cache_refresh) -> RunSettings:
    """The Python API's keywords (prepare_infill, prepare_generate, prepare_middle: they type them) as one run's
    settings, checked there."""
    return RunSettings(**locals())  # the parameters are RunSettings' fields, by name


def infill_job(source: str, span: tuple[int, int] | None, dlm: Dlm, run: RunSettings) -> Job:
    """prepare_infill's Job, from one run's settings (the CLI builds them from its flags)."""
    built, model = decoding(dlm, run)
    unknown = unknown_holes(source, span, run.length)
    if not unknown:  # --length auto with every marker sized (⟦fill:N⟧): nothing for the rule to size
        plan = spans.plan_infill(source, model.vocab, span, None if run.length == AUTO else run.length)
        return wired(Job(plan, model, built, run.seed, run.lang, processors=exact_length(model)))
    if growing(dlm):  # the model decides each length inside the decode: start small
        budget = auto_length(source, span, model.tokenizer, expanding.BUDGET)
        growth = grows(model, unknown, budget)
        start = min(growth.rule.start, budget)
        if span is not None:
            plan = spans.plan_infill(source, model.vocab, span, start)
        else:
            plan = spans.plan_infill(source, model.vocab, span, None, bare=[start] * len(unknown))
        return wired(Job(plan, model, built, run.seed, run.lang, processors=growth_bans(model), growth=growth))
    room = auto_length(source, span, model.tokenizer, sizing.rule_for(dlm.family).room)
    if span is not None:  # --span with --length auto: the span's one hole
        sized = probed(dlm, spans.plan_infill(source, model.vocab, span, room), [0])
        plan = spans.plan_infill(source, model.vocab, span, sized.lengths[0])
    else:
        plan_for = functools.partial(spans.plan_infill, source, model.vocab, span, None)
        sized = probed(dlm, plan_for(bare=[room] * len(unknown)), unknown)
        plan = plan_for(bare=sized.lengths)
    return wired(Job(plan, model, built, run.seed, run.lang, processors=exact_length(model), sized=sized))


def growing(dlm: Dlm) -> bool:
    """Whether the model decides a fill's length itself (expand and delete: jobs/expanding.py)."""
    return dlm.expand_id is not None and dlm.delete_id is not None


def grows(dlm: Dlm, variable: list[int], budget: int) -> expanding.Growth:
    """The growth of a job whose holes `variable` have no given length: each may reach `budget` positions, from
    the family's start (expanding.rule_for)."""
    tokens = expanding.Tokens(dlm.expand_id, dlm.delete_id)
    return expanding.Growth(tokens, tuple(variable), budget, dlm.context, expanding.rule_for(dlm.family))


def unknown_holes(source: str, span: tuple[int, int] | None, length: int | str | None) -> list[int]:
    """The holes whose length nobody gave: a span under --length auto; bare ⟦fill⟧ markers unless --length N."""
    if span is not None:
        return [0] if length == AUTO else []
    return bare_markers(source) if length is None or length == AUTO else []


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
    run = api_settings(decoder, options, length, seed, temperature, lang, cache, cache_refresh)
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
    holes = growth.rule.start if growth else sized.lengths[0] if sized else run.length
    plan, cut = whole_blocks(plan_for, holes, model)
    plan = dataclasses.replace(plan, canvas=dataclasses.replace(plan.canvas, late_ids=eos.late_ids(model)))
    processors = eos.processors(model)
    processors += growth_bans(model) if growth else ()
    finish = chat_reply(built, raw) if use_chat else None
    return wired(
        Job(
            plan,
            model,
            built,
            run.seed,
            run.lang,
            finish=finish,
            trim_at=model.eos_id,
            processors=processors,
            sized=sized,
            growth=growth,
            cut=cut,
        )
    )


def chat_reply(decoder: Decoder, raw: bool) -> Callable[[spans.Filled], str]:
    """What a chat job keeps of the reply: all of it (raw), or its code; a UsageError for a decoder that steers by
    the code's syntax, which a reply only has once its code is cut out after decoding."""
    if oracle.wants(decoder):
        raise UsageError(
            f"decoder {decoders.name_of(decoder)!r} cannot steer a chat reply (its code is cut out after decoding); "
            "use --no-chat"
        )
    return (lambda filled: filled.fills[0]) if raw else (lambda filled: extract_code(filled.fills[0]))


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
    run = api_settings(decoder, options, length, seed, temperature, lang, cache, cache_refresh)
    raw = default_model(dlm)
    built, model = decoding(raw, run)
    plan_for = functools.partial(spans.plan_middle, prefix, suffix, model.vocab)
    if unknown and growing(raw):  # the model decides the length inside the decode, up to the ceiling
        growth = grows(model, [0], length)
        plan = plan_for(min(growth.rule.start, length))
        return wired(Job(plan, model, built, seed, lang, processors=growth_bans(model), growth=growth, client=client))
    if unknown:
        sized = probed(raw, plan_for(min(length, sizing.rule_for(raw.family).room)), [0], end_ids or None)
        plan = plan_for(sized.lengths[0])
        return wired(Job(plan, model, built, seed, lang, processors=exact_length(model), sized=sized, client=client))
    plan = plan_for(length)
    plan = dataclasses.replace(plan, canvas=dataclasses.replace(plan.canvas, late_ids=end_ids))
    return wired(Job(plan, model, built, seed, lang, processors=() if end_ids else exact_length(model), client=client))


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
