"""The bench's decoder settings: one Config per row (a decoder, its swept values, its cache and fill length),
made from -o settings and --sweep axes, and the summary's row for each."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import decoders
from ..core import contracts, settings
from ..core.canvas import Decoder
from ..core.errors import DlmcodeError, UsageError
from ..core.run import CacheSettings
from ..jobs import wiring
from ..models import cache as kvcache
from ..models.base import Dlm
from .metrics import Sample, Tally

ORACLE_NOTE = "oracle length: each hole has exactly the canonical middle's token count"
ORACLE, UNKNOWN, EDITOR = "oracle", "unknown", "editor"  # --fill-length: how an infill hole's length is set
FILL_LENGTHS = {
    ORACLE: ORACLE_NOTE,
    UNKNOWN: "unknown length: the length rule sizes each hole (dlmcode/jobs/sizing.py; its probe call counts), or a "
    "model trained to expand and delete grows it from 4 holes (jobs/expanding.py)",
    EDITOR: "editor's length: the length rule sizes each hole (or the model grows it), then the fill is cut after its "
    "first non-blank line (dlmcode serve's --lines 1)",
}
RUN_SETTINGS = (
    "cache",
    "cache_refresh",
)  # settings of how a decoder is run, not of the decoder: every decoder has them


@dataclass(frozen=True)
class Config:
    """One decoder setting: a row of the summary and a point of its decoder's Pareto curve."""

    name: str
    decoder: Decoder
    sweep: dict[str, str] = field(default_factory=dict)  # this point's swept values
    cache: CacheSettings = field(default_factory=CacheSettings)  # block: the decoder's
    fill_length: str = ORACLE  # how infill holes are sized (FILL_LENGTHS)

    @property
    def settings(self) -> dict[str, Any]:
        """The decoder's settings, the cache's when there is one, and the fill length when it is not the
        oracle's (so rows and resume keys tell them apart)."""
        length = {} if self.fill_length == ORACLE else {"length": self.fill_length}
        if self.cache.mode == "none":
            return decoders.settings_of(self.decoder) | length  # refresh means nothing without a cache
        refresh = {"cache_refresh": self.cache.refresh} if self.cache.refresh else {}
        return decoders.settings_of(self.decoder) | {"cache": self.cache.mode} | refresh | length

    def model(self, dlm: Dlm) -> Dlm:
        """`dlm` behind a fresh cache for one decode (itself without one)."""
        return kvcache.with_cache(dlm, self.cache.mode, self.cache.refresh, self.cache.block)

    @property
    def label(self) -> str:
        """The row's name: the decoder, its swept values, and `(guarded)` when the guard is on but not swept."""
        marked = ["(guarded)"] if contracts.guarded(self.decoder) and "guard" not in self.sweep else []
        length = [] if self.fill_length == ORACLE else [f"length={self.fill_length}"]
        return " ".join([self.name, *(f"{k}={v}" for k, v in self.sweep.items()), *marked, *length])

    def key(self) -> tuple[str, str]:
        return self.name, json.dumps(self.settings, sort_keys=True)


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """'tau=0.7,0.9' -> ('tau', ['0.7', '0.9'])."""
    key, sep, values = text.partition("=")
    points = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not key.strip() or not points:
        raise UsageError(f"bad --sweep {text!r}: write --sweep key=v1,v2,...")
    return key.strip(), points


def configs(
    names: list[str], options: list[str], sweeps: list[str], temperature: float | None = None, fill_length: str = ORACLE
) -> list[Config]:
    """Every decoder (none named: all of them) with -o settings and the cartesian product of its sweeps.

    A setting or sweep applies to the decoders that have it; one that no decoder has is an error.
    `cache` and `cache_refresh` (RUN_SETTINGS) apply to every decoder: `--sweep cache=none,prefix`.
    """
    names = names or list(decoders.DECODERS)
    for name in names:
        decoders.registered(name)  # an unknown name fails here, listing the decoders; each point builds its own
    given = settings.parse_options(options)
    axes = dict(parse_sweep(s) for s in sweeps)
    for key in [*given, *axes]:
        if not any(key in _fields(name) for name in names):
            raise UsageError(f"no chosen decoder has the setting {key!r} ({', '.join(names)})")
    found: dict[tuple[str, str], Config] = {}
    for name in dict.fromkeys(names):
        for config in _points(name, given, axes, temperature):
            config = dataclasses.replace(config, fill_length=fill_length)
            found.setdefault(config.key(), config)
    return list(found.values())


def _points(
    name: str, given: dict[str, str], axes: dict[str, list[str]], temperature: float | None
) -> Iterator[Config]:
    own = {k: v for k, v in axes.items() if k in _fields(name)}
    for values in itertools.product(*own.values()):
        point = dict(zip(own, values, strict=True))
        options = {k: v for k, v in given.items() if k in _fields(name)} | point
        run = {k: options.pop(k) for k in RUN_SETTINGS if k in options}
        decoder = wiring.make_decoder(name, options, temperature)
        yield Config(name, decoder, point, cache_settings(run, getattr(decoder, "block", 0)))


def cache_settings(run: dict[str, str], block: int) -> CacheSettings:
    """-o/--sweep cache=... and cache_refresh=... as CacheSettings (a UsageError for bad values)."""
    try:
        refresh = int(run.get("cache_refresh", 0))
    except ValueError:
        raise UsageError(f"cache_refresh={run['cache_refresh']!r}: give a whole number of calls") from None
    return CacheSettings(run.get("cache", "none"), block, refresh)


def _fields(name: str) -> set[str]:
    """The settings a sweep or a shared -o sets for decoder `name`: not one it fixes (syntax-guard's guard)."""
    own = {f.name for f in dataclasses.fields(decoders.DECODERS[name]) if f.init and not f.metadata.get("fixed")}
    return own | set(RUN_SETTINGS)


def attach_all(configs: list[Config], dlm: Dlm, strict: bool) -> tuple[list[Config], list[str]]:
    """Give decoders that take an assistant (codila) theirs, once; not strict: skip one that has none."""
    kept, skipped = [], []
    for config in configs:
        try:
            kept.append(dataclasses.replace(config, decoder=wiring.with_assistant(config.decoder, dlm)))
        except DlmcodeError as err:
            if strict:
                raise
            skipped.append(f"skipping {config.label}: {err}")
    return kept, skipped


def rows(found: list[Sample], configs: list[Config]) -> list[dict]:
    """One summary row per setting, in the order the settings were given."""
    tallies = {c.key(): Tally() for c in configs}
    for s in found:
        tallies[s.decoder, json.dumps(s.settings, sort_keys=True)].add(s)
    return [
        {"decoder": c.name, "label": c.label, "sweep": c.sweep, "settings": c.settings, **tallies[c.key()].row()}
        for c in configs
    ]
