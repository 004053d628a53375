"""The decoder registry: CLI name -> decoder class, settings parsing and listing.

Adding a decoder is one file and one line in DECODERS; the contract tests pick it up.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from ..errors import UsageError
from .base import Decoder
from .codila import Codila
from .dico import DiCo
from .eb import EntropyBound
from .entropy import Entropy
from .factor import Factor
from .low_confidence import LowConfidence
from .margin import Margin
from .mean_field import MeanField
from .random import Random
from .threshold import Threshold

DECODERS: dict[str, type[Decoder]] = {
    "low-confidence": LowConfidence,
    "random": Random,
    "margin": Margin,
    "entropy": Entropy,
    "threshold": Threshold,
    "factor": Factor,
    "eb": EntropyBound,
    "mean-field": MeanField,
    "dico": DiCo,
    "codila": Codila,
}


def build(name: str, options: Mapping[str, Any] | None = None) -> Decoder:
    """A decoder by registry name, with settings given as strings (from `-o key=value`) or values."""
    cls = DECODERS.get(name)
    if cls is None:
        raise UsageError(f"unknown decoder {name!r}; choose from: {', '.join(DECODERS)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, raw in (options or {}).items():
        if key not in fields:
            raise UsageError(f"decoder {name!r} has no setting {key!r}; its settings: {', '.join(fields)}")
        values[key] = parse_value(name, key, raw, hints[key])
    try:
        return cls(**values)
    except (ValueError, TypeError) as err:
        raise UsageError(f"decoder {name!r}: {err}") from None


def parse_options(pairs: list[str]) -> dict[str, str]:
    """`["tau=0.8", "block=32"]` -> {"tau": "0.8", "block": "32"}."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"bad -o {pair!r}: write -o key=value")
        options[key.strip()] = value.strip()
    return options


def parse_value(decoder: str, key: str, raw: Any, hint: Any) -> Any:
    """Convert one setting from text to its field type, or raise a UsageError naming it."""
    if not isinstance(raw, str):
        return raw
    try:
        return _convert(raw, hint)
    except ValueError:
        raise UsageError(f"decoder {decoder!r}: bad value {raw!r} for {key} (expects {type_name(hint)})") from None


def _convert(raw: str, hint: Any) -> Any:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # e.g. int | None
        if raw.lower() in ("none", "auto", ""):
            if type(None) in args:
                return None
        return _convert(raw, next(a for a in args if a is not type(None)))
    if typing.get_origin(hint) is Literal:
        if raw not in args:
            raise ValueError(raw)
        return raw
    if hint is bool:
        if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(raw)
        return raw.lower() in ("true", "1", "yes")
    if hint is float:
        value = float(raw)
        if value != value:  # nan
            raise ValueError(raw)
        return value
    return hint(raw)


def type_name(hint: Any) -> str:
    """Readable type for messages and listings: 'int', 'float', 'int or none', 'one of a|b'."""
    if typing.get_origin(hint) is Literal:
        return "one of " + "|".join(map(str, typing.get_args(hint)))
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if args and len(args) < len(typing.get_args(hint)):
        return f"{type_name(args[0])} or none"
    return getattr(hint, "__name__", str(hint))


def describe(name: str) -> dict[str, Any]:
    """Name, one-line description and settings (type, default, help) of a registered decoder."""
    cls = DECODERS[name]
    hints = typing.get_type_hints(cls)
    settings = [
        {"name": f.name, "type": type_name(hints[f.name]), "default": f.default, "help": f.metadata.get("help", "")}
        for f in dataclasses.fields(cls)
        if f.init and f.repr
    ]
    return {"name": name, "description": (cls.__doc__ or "").strip().splitlines()[0], "settings": settings}


def settings_of(decoder: Decoder) -> dict[str, Any]:
    """The decoder's settings as a JSON-ready dict (its exact configuration)."""
    return {f.name: getattr(decoder, f.name) for f in dataclasses.fields(decoder) if f.repr}


def name_of(decoder: Decoder) -> str:
    return next(key for key, cls in DECODERS.items() if type(decoder) is cls)
