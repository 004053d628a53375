"""One run's settings: which model to load and how, and how to decode with it.

The CLI builds one RunSettings per command from its flags and hands it down (fill's jobs,
compare); the Python API (`dlmcode.infill(source, span, **kwargs)`) maps its keyword
arguments onto one. The checks of these values live here (Typer's flag callbacks aside), so
each face rejects a bad value with the same one-line UsageError, before any model loads.
They import nothing heavy: the CLI builds a RunSettings before it imports torch (about 2 s),
so a misspelt --device or --cache is refused at once. What needs torch or the machine (is
there a CUDA device, is bf16 supported) is models/device.py's, when the model loads.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import UsageError

AUTO = "auto"
SEED_MAX = 2**63 - 1  # torch seeds are 64-bit; bench and compare add small offsets to the seed
CACHE_MODES = ("none", "prefix", "dual")
DEVICE_KINDS = ("cpu", "cuda", "mps")
# --device: a kind, and for CUDA an index; [0-9], not \d, which takes "cuda:８" (settings.py)
DEVICE = re.compile(r"(?P<kind>[a-z]+)(?::(?P<index>[0-9]+))?")
# --dtype name -> torch attribute (models/device.py maps them to torch dtypes)
DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}


@dataclass(frozen=True)
class ModelChoice:
    """Which model to load and how: what the model options of every command that loads one say."""

    name: str | None = None  # a folder or hub id; None: the built-in model
    device: str = "auto"
    dtype: str = "auto"
    family: str | None = None  # None: detected from the folder's config
    trust_remote_code: bool = False
    offline: bool = False  # never download (also HF_HUB_OFFLINE=1)

    def __post_init__(self) -> None:
        check_device(self.device)
        check_dtype(self.dtype)


@dataclass(frozen=True)
class RunSettings:
    """The model (a ModelChoice) and the decode (decoder, options, temperature, seed, length,
    language, KV cache) of one run."""

    model: ModelChoice = field(default_factory=lambda: ModelChoice())  # which model, and how it loads
    decoder: Any = "low-confidence"  # a registry name, or a built Decoder; None: the model family's own (Dlm.decoder)
    options: Mapping[str, Any] | None = None  # the decoder's settings (with a name only)
    temperature: float | None = None  # None: the decoder's own
    seed: int = 0
    length: int | str | None = (
        # holes: a number, "auto" (the length rule, dlmcode/jobs/sizing.py) or None (a span: its own count; bare ⟦fill⟧:
        # the length rule)
        None
    )
    lang: str | None = None  # language of the breakage check; None: not checked
    cache: str = "none"  # KV cache: none, prefix or dual
    cache_refresh: int = 0
    # the decoder these settings built (jobs/wiring.settled), so that a face builds it once; not a setting, and not
    # carried by dataclasses.replace: settings changed build their decoder anew
    built: Any = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_cache(self.cache, self.cache_refresh)
        if isinstance(self.length, str) and self.length != AUTO:
            raise UsageError(f"--length {self.length!r}: give a positive number of tokens, or auto")
        if isinstance(self.length, int) and self.length <= 0:
            raise UsageError(f"--length {self.length}: give a positive number of tokens")
        if not 0 <= self.seed <= SEED_MAX:
            raise UsageError(f"--seed {self.seed} is out of range; give 0 to 2**63 - 1")

    def holding(self, built: Any) -> RunSettings:
        """These settings with the decoder they built (jobs/wiring.settled)."""
        kept = dataclasses.replace(self)
        object.__setattr__(kept, "built", built)  # frozen: set once, on a copy no one else holds yet
        return kept

    def strict(self) -> RunSettings:
        """These settings, refused where a flag would do nothing (the CLI's rule; a bench sweep
        may pair a refresh with cache none on purpose)."""
        if self.cache_refresh and self.cache == "none":
            raise UsageError(
                f"--cache-refresh {self.cache_refresh} does nothing without a cache: add --cache prefix or --cache dual"
            )
        return self


def check_cache(mode: str, refresh: int) -> None:
    """--cache and --cache-refresh, or a UsageError naming the bad one."""
    if mode not in CACHE_MODES:
        raise UsageError(f"--cache {mode!r}: use one of {', '.join(CACHE_MODES)}")
    if refresh < 0:
        raise UsageError(f"--cache-refresh {refresh}: give 0 (at block changes only) or a number of calls")


# serve --batch: decodes sharing a forward; past this a forward only grows (and its memory) while each waits longer
MAX_BATCH = 64


def check_batch(size: int) -> None:
    """serve --batch, or a UsageError (checked before torch imports, and by the server's Engine)."""
    if not 1 <= size <= MAX_BATCH:
        raise UsageError(f"--batch {size}: give 1 to {MAX_BATCH} decodes sharing a forward")


def check_device(name: str) -> re.Match[str] | None:
    """--device spelt right: auto (None), cpu, mps, cuda or cuda:N; whether it exists is checked at load.

    Only CUDA takes an index: `cpu:1` named a device that does not exist and ran on the CPU anyway.
    """
    name = name.strip().lower()
    if name == AUTO:
        return None
    m = DEVICE.fullmatch(name)
    if m is None or m["kind"] not in DEVICE_KINDS:
        raise UsageError(f"--device {name!r}: unknown device; use one of auto, {', '.join(DEVICE_KINDS)} or cuda:N")
    if m["index"] is not None and m["kind"] != "cuda":
        raise UsageError(f"--device {name!r}: only CUDA devices are numbered; use --device {m['kind']}")
    return m


def check_dtype(name: str) -> None:
    """--dtype: auto or one of DTYPE_NAMES."""
    name = name.strip().lower()
    if name != AUTO and name not in DTYPE_NAMES:
        raise UsageError(f"--dtype {name!r}: unknown dtype; use auto or one of {', '.join(DTYPE_NAMES)}")


@dataclass(frozen=True)
class CacheSettings:
    """How a cached predict runs (the CLI's --cache and --cache-refresh)."""

    mode: str = "none"  # none | prefix (keep k/v before the block) | dual (also after it)
    block: int = 0  # holes per block: the decoder's `block` setting (0 = all holes are one block)
    refresh: int = (
        0  # run every position at least every N calls; 0 = only when the block moves (Fast-dLLM), 1 = every call
    )

    def __post_init__(self) -> None:
        check_cache(self.mode, self.refresh)  # run.py: the CLI checks the same before torch imports
        if self.block < 0:
            raise UsageError(f"block={self.block}: holes per block must be >= 0")
