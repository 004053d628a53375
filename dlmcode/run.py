"""One run's settings: which model to load and how, and how to decode with it.

The CLI builds one RunSettings per command from its flags and hands it down (fill's jobs,
compare); the Python API (`dlmcode.infill(source, span, **kwargs)`) maps its keyword
arguments onto one. The checks of these values live here (Typer's flag callbacks aside), so
each face rejects a bad value with the same one-line UsageError, before any model loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import UsageError

AUTO = "auto"
SEED_MAX = 2**63 - 1  # torch seeds are 64-bit; bench and compare add small offsets to the seed


@dataclass(frozen=True)
class RunSettings:
    """Model (name, device, dtype, family, remote code, offline) and decode (decoder, options,
    temperature, seed, length, language, KV cache) of one run."""

    model: str | None = None  # a folder or hub id; None: the built-in model
    device: str = "auto"
    dtype: str = "auto"
    family: str | None = None
    trust_remote_code: bool = False
    offline: bool = False
    decoder: Any = "low-confidence"  # a registry name, or a built Decoder
    options: Mapping[str, Any] | None = None  # the decoder's settings (with a name only)
    temperature: float | None = None  # None: the decoder's own
    seed: int = 0
    length: int | str | None = None  # holes: a number, "auto" (infill: room to spare) or None (infill: the span's own count)
    lang: str | None = None  # language of the breakage check; None: not checked
    cache: str = "none"  # KV cache: none, prefix or dual
    cache_refresh: int = 0

    def __post_init__(self) -> None:
        from .models.cache import CacheSettings

        CacheSettings(self.cache, refresh=self.cache_refresh)  # a UsageError naming a bad mode or refresh
        if isinstance(self.length, str) and self.length != AUTO:
            raise UsageError(f"--length {self.length!r}: give a positive number of tokens, or auto")
        if isinstance(self.length, int) and self.length <= 0:
            raise UsageError(f"--length {self.length}: give a positive number of tokens")
        if not 0 <= self.seed <= SEED_MAX:
            raise UsageError(f"--seed {self.seed} is out of range; give 0 to 2**63 - 1")

    def strict(self) -> RunSettings:
        """These settings, refused where a flag would do nothing (the CLI's rule; a bench sweep
        may pair a refresh with cache none on purpose)."""
        if self.cache_refresh and self.cache == "none":
            raise UsageError(f"--cache-refresh {self.cache_refresh} does nothing without a cache: add --cache prefix or --cache dual")
        return self
