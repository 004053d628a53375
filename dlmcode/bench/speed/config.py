"""What the speed grid times: its bounds and settings (SpeedConfig), the CLI's full and quick grids,
and the model it times (`load`: a named model, a random stand-in at a published shape, or the built-in)."""

from __future__ import annotations

from dataclasses import dataclass

from ... import decoders
from ...core.errors import UsageError
from ...core.run import CacheSettings, ModelChoice
from ...models.base import Dlm

# The most the grid times, checked before the model loads (our bounds): a canvas past 8192 tokens is
# minutes a call on a CPU (and its attention alone gigabytes), the suite's longest is 2048 + 64; one-token-
# a-call decoders make `gen` calls per row; the fastest of more than 100 repeats says nothing more.
MAX_CANVAS = 8192
MAX_GEN = 1024
MAX_REPEATS = 100
BASELINE = "low-confidence"  # one token per call: the reference every ratio is taken against
EXACT = "exact"  # a block family's exact cache of finished blocks (models/blocks.py)


@dataclass(frozen=True)
class SpeedConfig:
    lengths: tuple[int, ...] = (128, 512, 2048)  # prompt tokens
    gen: int = 64  # holes after the prompt
    block: int = 32  # holes a decoder chooses from per call (options_for); the overhead target is for up to 32
    caches: tuple[str, ...] = ("none", "prefix", "dual")  # "none" always runs: the baseline needs it
    names: tuple[str, ...] = ()  # decoders; () = every registered one
    seed: int = 0
    repeats: int = 1  # decodes per row; times are the fastest repeat (the least disturbed by other processes)
    # every decoder guarded (dlmcode/text/guard.py; syntax-guard always is): the guard's time per call is a column
    guard: bool = False

    def __post_init__(self) -> None:
        if not self.lengths or min(self.lengths) <= 0 or self.gen <= 0 or self.block < 0 or self.repeats < 1:
            raise UsageError("speed: prompt lengths, --gen and --repeats must be positive, --block >= 0")
        if max(self.lengths) + self.gen > MAX_CANVAS:
            raise UsageError(
                f"speed: a prompt of {max(self.lengths)} tokens and {self.gen} holes is past {MAX_CANVAS} tokens, "
                "the longest canvas it times"
            )
        if self.gen > MAX_GEN or self.repeats > MAX_REPEATS:
            raise UsageError(f"speed: give --gen up to {MAX_GEN} and --repeats up to {MAX_REPEATS}")
        for mode in self.caches:
            CacheSettings(mode)  # a UsageError naming a bad mode
        for name in self.names:
            decoders.registered(name)  # a UsageError naming an unknown decoder; nothing is built to check it

    @property
    def modes(self) -> list[str]:
        return ["none"] + [m for m in self.caches if m != "none"]  # without a cache first: the baseline's mode

    @property
    def decoder_names(self) -> list[str]:
        names = list(self.names or decoders.DECODERS)
        return [BASELINE] + [n for n in names if n != BASELINE]  # the baseline runs first at each length

    @property
    def total(self) -> int:
        """Decodes timed in all (repeats aside): one per prompt length, decoder and cache mode."""
        return len(self.lengths) * len(self.decoder_names) * len(self.modes)


# The CLI's grid, and --quick's: one short prompt, half the holes, the prefix cache and three
# decoders besides the baseline (a confidence threshold, a parallel rule, one that weighs pairs of
# holes), so that a first look takes seconds where the full grid takes minutes.
FULL = {"lengths": "128,512,2048", "gen": 64, "cache": "prefix,dual", "decoders": ()}
QUICK = {"lengths": "128", "gen": 32, "cache": "prefix", "decoders": ("threshold", "factor", "mean-field")}


def load(choice: ModelChoice, shape: str | None = None) -> tuple[Dlm, str | None]:
    """The model `choice` names, to time, and a note when it is a random stand-in (`shape`, or the built-in weights
    missing)."""
    from ... import models
    from ...core.errors import ModelError
    from ...models.device import resolve_device, resolve_dtype
    from .. import standins

    name, device = choice.name, choice.device
    if shape is not None:
        if name is not None:
            raise UsageError("--shape times a random model of a published architecture: give it or --model, not both")
        where = resolve_device(device)
        dtype = resolve_dtype(choice.dtype, where)
        try:
            dlm = standins.published(shape, where, dtype)
        except (MemoryError, RuntimeError) as err:  # torch.OutOfMemoryError, and the CPU allocator's RuntimeError
            if not isinstance(err, MemoryError) and "memory" not in str(err).lower():
                raise
            size = str(dtype).removeprefix("torch.")
            raise ModelError(f"--shape {shape} does not fit in {where} memory as {size}; try --dtype bf16") from None
        return dlm, f"{dlm.name}: random weights at the published shapes (times are real; TPF and outputs mean nothing)"
    try:
        return models.load(
            name, device=device, dtype=choice.dtype, family=choice.family, trust_remote_code=choice.trust_remote_code
        ), None
    except ModelError:
        if name is not None:
            raise
    dlm = standins.builtin_stand_in(resolve_device(device))
    return (
        dlm,
        "the built-in weights are not installed: timing a random model of its architecture and size"
        " (TPF means nothing)",
    )


def grid(
    lengths: str | None, gen: int | None, block: int, cache: str | None, names: list[str], repeats: int, quick: bool
) -> SpeedConfig:
    """The CLI's flags as a SpeedConfig: a flag left out takes FULL's value, or QUICK's with --quick."""
    default = QUICK if quick else FULL
    given = {"lengths": lengths, "gen": gen, "cache": cache}
    lengths, gen, cache = (
        default[k] if v is None else v for k, v in given.items()
    )  # --gen 0 stays 0: an error, not a default
    modes = tuple(m.strip() for m in cache.split(",") if m.strip())
    return SpeedConfig(parse_lengths(lengths), gen, block, modes, tuple(names) or default["decoders"], repeats=repeats)


def parse_lengths(text: str) -> tuple[int, ...]:
    """'128,512,2048' -> (128, 512, 2048), or a UsageError."""
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--lengths {text!r}: give prompt lengths in tokens, comma-separated (128,512,2048)") from None
