"""`dlmcode compare`'s runs: each setting n times on one input, round-robin, and its --json summary."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

from ..core.errors import UsageError
from ..core.run import RunSettings
from ..jobs import fill
from ..models.base import Dlm
from ..text import spans, trivial
from .configs import Config, rows
from .metrics import Sample, exact_match
from .sample import completion_tokens, guard_fields

# compare's runs per decoder: a breakage rate from 1000 samples is within 3 points; more is a bench, not a look
MAX_SAMPLES = 1000


def compare_temperature(n: int, temperature: float | None) -> tuple[float | None, str | None]:
    """The temperature for n samples per decoder, and a note when it was chosen for the user."""
    if not 1 <= n <= MAX_SAMPLES:
        raise UsageError(f"--samples {n}: give 1 to {MAX_SAMPLES}")
    if n > 1 and temperature is None:
        return (
            1.0,
            f"--samples {n}: sampling at temperature 1.0 so that samples differ (set --temperature to change it)",
        )
    if n > 1 and temperature == 0:
        raise UsageError(f"--samples {n} with --temperature 0 gives {n} identical samples; use a temperature above 0")
    return temperature, None


def compare(
    source: str, span: tuple[int, int] | None, name: str, dlm: Dlm, configs: list[Config], n: int, run: RunSettings
) -> Iterator[Sample]:
    """Each setting n times on the same input, seeds 0..n-1, round-robin so that rows advance together.

    `run` gives the length and language; each config its decoder and cache, each round its seed."""
    for seed in range(n):
        for config in configs:
            yield compare_one(source, span, name, dlm, config, seed, run)


def compare_one(
    source: str, span: tuple[int, int] | None, name: str, dlm: Dlm, config: Config, seed: int, run: RunSettings
) -> Sample:
    run = dataclasses.replace(
        run,
        decoder=config.decoder,
        options=None,
        seed=seed,
        cache=config.cache.mode,
        cache_refresh=config.cache.refresh,
    )
    job = fill.infill_job(source, span, dlm, run)
    result = job.run()
    output, exact, plain = result.text, None, None
    if span is not None:
        a, b = spans.line_span(source, span)
        output = result.text[a : len(result.text) - (len(source) - b)]
        exact = exact_match(output, source[a:b])
        plain = trivial.is_trivial(output, job.lang) if job.lang else None  # markers: several fills, not classified
    return Sample(
        name,
        config.name,
        config.settings,
        seed,
        output,
        None,
        exact,
        result.breakage.to_dict() if result.breakage else None,
        result.calls,
        result.filled,
        completion_tokens(result.ids, dlm),
        round(result.tpf, 4),
        round(result.seconds, 4),
        trivial=plain,
        reopened=result.reopened,
        **guard_fields(config.settings, result),
    )


def compare_summary(found: list[Sample], configs: list[Config], meta: dict) -> dict:
    """compare --json: the input, then per setting its summary row and every run."""
    runs = {c.key(): [] for c in configs}
    for s in found:
        runs[s.decoder, json.dumps(s.settings, sort_keys=True)].append(_run(s))
    table = rows(found, configs)
    return meta | {"decoders": [row | {"runs": runs[c.key()]} for row, c in zip(table, configs, strict=True)]}


def _run(s: Sample) -> dict:
    return {
        "seed": s.seed,
        "output": s.output,
        "exact": s.exact,
        "breakage": s.breakage,
        "calls": s.calls,
        "filled": s.filled,
        "tokens": s.tokens,
        "tpf": s.tpf,
        "seconds": s.seconds,
        "trivial": s.trivial,
        "reopened": s.reopened,
        "turned_away": s.turned_away,
    }
