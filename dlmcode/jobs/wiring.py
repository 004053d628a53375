"""One decode wired from the run's settings, the same for every face (the CLI, the server, the bench).

Before the model loads: `settled(run)` builds the run's decoder from the registry once (its settings checked, the
temperature applied) and puts it in the run, so that the decoder a command checks is the one that decodes. Once the
model is loaded: `decoding(dlm, run)` gives the decoder (the family's own when the run names none) its assistant
(codila, `with_assistant`) and the model its KV cache (models/cache.py). Once a job (jobs/job.py) has its plan:
`wired(job)` hands the decoder syntax-guard's oracle (text/oracle.py) and the guard for that plan (jobs/guarding.py).
What a decoder takes is named by a protocol in core/contracts.py, never by a field's name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import decoders
from ..core import contracts
from ..core.assistant import TRAIN_HINT, check, token_table
from ..core.canvas import Decoder
from ..core.contracts import TakesAssistant
from ..core.errors import ModelError, UsageError
from ..core.run import RunSettings
from ..models import cache as kvcache
from ..models.assistant_lm import load_cached, shipped_path
from ..models.base import Dlm
from ..text import oracle, spans
from .guarding import JobGuard
from .job import Job

GUARD = "guard"  # the setting a decoder asks for the guard by (core/contracts.Guarded)


def make_decoder(decoder: str | Decoder, options: Mapping[str, Any] | None, temperature: float | None) -> Decoder:
    """A decoder from a registry name and settings (or an instance), with `temperature` applied."""
    built = decoders.build(decoder, options) if isinstance(decoder, str) else decoder
    if temperature is not None:
        try:
            built = dataclasses.replace(built, temperature=temperature)
        except ValueError as err:
            raise UsageError(f"--temperature: {err}") from None
    return built


def settled(run: RunSettings) -> RunSettings:
    """`run` holding its decoder, built (a UsageError naming a bad name or setting): the registry imports torch, so a
    face calls this after its cheaper checks and before the model loads, and `decoding` builds nothing again. No
    decoder named: the family's own, built by `decoding` once the model is known."""
    if run.decoder is None:
        return run
    return run.holding(make_decoder(run.decoder, run.options, run.temperature))


def default_guard(run: RunSettings) -> RunSettings:
    """`run` with its decoder's guard setting back at the decoder's own default (off, but for syntax-guard's): for a
    face that turns the guard on by default, where the guard cannot hold (a chat reply's code is cut out after
    decoding). A decoder the settings held is kept, with that one field back, not built again."""
    unguarded = dataclasses.replace(run, options={k: v for k, v in (run.options or {}).items() if k != GUARD})
    held = run.built
    if held is None or not (isinstance(held, contracts.Guarded) and dataclasses.is_dataclass(held)):
        return unguarded if held is None else unguarded.holding(held)
    default = next(f.default for f in dataclasses.fields(held) if f.name == GUARD)
    return unguarded.holding(dataclasses.replace(held, guard=default))


def decoding(dlm: Dlm, run: RunSettings) -> tuple[Decoder, Dlm]:
    """The run's decoder (built, unless the run holds it: `settled`; codila's assistant attached) and the model
    behind its KV cache.

    No decoder named (None): the family's own, with the settings it publishes under the run's."""
    name, options = run.decoder, run.options
    if name is None:
        name, options = dlm.decoder, {**dlm.decoder_options, **(run.options or {})}
    built = run.built if run.built is not None else make_decoder(name, options, run.temperature)
    built = with_assistant(built, dlm)  # codila: its assistant
    if dlm.blocks is not None:  # a block family's exact cache stands behind every decode (models/blocks.py)
        if run.cache != "none":
            raise UsageError(
                f"--cache {run.cache}: model {dlm.name!r} ({dlm.family}) decodes block by block with its own exact "
                "cache"
            )
        return built, dlm
    return built, kvcache.with_cache(dlm, run.cache, run.cache_refresh, getattr(built, "block", 0))


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


def wired(job: Job) -> Job:
    """`job` with its decoder handed what it takes for the job's plan: syntax-guard's oracle, handed over like
    codila's assistant, and the guard (jobs/guarding.py; unguarded, with a note, where it cannot hold)."""
    decoder = job.decoder
    job.guarding = JobGuard(job, decoder)
    if oracle.wants(decoder):
        decoder = oracle.with_oracle(
            decoder,
            job.plan,
            job.dlm.tokenizer,
            job.lang,
            spans.reference(job.plan, job.originals)[0] if not job.finish else "",  # the plan's own text
            job.dlm.special_ids,
            job.trim_at,
            decoders.name_of(decoder),
        )
    if contracts.guarded(decoder):
        decoder = job.guarding.with_guard(decoder)
    job.decoder = decoder
    return job
