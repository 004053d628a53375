"""The decoder registry: CLI name -> decoder class, settings parsing and listing.

Adding a decoder is one file and one line in DECODERS; the contract tests pick it up.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from ..core import settings
from ..core.canvas import Decoder
from ..core.errors import UsageError
from .codila import Codila
from .dico import DiCo
from .dus import Dus
from .dynamic import Dynamic
from .eb import EntropyBound
from .entropy import Entropy
from .factor import Factor
from .low_confidence import LowConfidence
from .margin import Margin
from .mean_field import MeanField
from .prophet import Prophet
from .random import Random
from .renoise import Renoise
from .saber import Saber
from .subblocks import SubBlocks
from .syntax_guard import SyntaxGuard
from .threshold import Threshold
from .wino import Wino

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
    "wino": Wino,
    "saber": Saber,
    "prophet": Prophet,
    "dus": Dus,
    "syntax-guard": SyntaxGuard,
    "renoise": Renoise,
    "dynamic": Dynamic,
    "subblocks": SubBlocks,
}


def registered(name: str) -> type:
    """The decoder class registered as `name`, or a UsageError listing the registry (a name checked, nothing built)."""
    cls = DECODERS.get(name)
    if cls is None:
        raise UsageError(f"unknown decoder {name!r}; choose from: {', '.join(DECODERS)}")
    return cls


def build(name: str, options: Mapping[str, Any] | None = None) -> Decoder:
    """A decoder by registry name, with settings given as strings (from `-o key=value`) or values."""
    cls = registered(name)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and not f.metadata.get("internal")}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, raw in (options or {}).items():
        if key not in fields:
            raise UsageError(f"decoder {name!r} has no setting {key!r}; its settings: {', '.join(fields)}")
        values[key] = parse_value(name, key, raw, hints[key])
        if fields[key].metadata.get("fixed") and values[key] != fields[key].default:
            raise UsageError(f"decoder {name!r}: {key}={values[key]!r} {fields[key].metadata['fixed']}")
    try:
        return cls(**values)
    except (ValueError, TypeError) as err:
        raise UsageError(f"decoder {name!r}: {err}") from None


def fixed(name: str, key: str) -> str:
    """Why decoder `name` does not let setting `key` change ("": it does, or it has no such setting)."""
    cls = DECODERS.get(name)
    found = {f.name: f for f in dataclasses.fields(cls)}.get(key) if cls is not None else None
    return found.metadata.get("fixed", "") if found is not None else ""


def parse_value(decoder: str, key: str, raw: Any, hint: Any) -> Any:
    """Convert one setting from text to its field type, or raise a UsageError naming it."""
    if not isinstance(raw, str):
        return raw
    try:
        return _convert(raw, hint)
    except ValueError as err:
        raise UsageError(f"decoder {decoder!r}: bad value {raw!r} for {key} ({settings.expects(hint, err)})") from None


def _convert(raw: str, hint: Any) -> Any:
    return settings.convert(
        raw, hint
    )  # the one key=value parser (dlmcode/core/settings.py): no inf/nan, no misspelt bools


def type_name(hint: Any) -> str:
    """Readable type for messages and listings: 'int', 'float', 'int or none', 'one of a|b'."""
    return settings.type_name(hint)


def describe(name: str) -> dict[str, Any]:
    """Name, one-line description and settings (type, default, help) of a registered decoder."""
    cls = DECODERS[name]
    hints = typing.get_type_hints(cls)
    settings = [
        {"name": f.name, "type": type_name(hints[f.name]), "default": f.default, "help": f.metadata.get("help", "")}
        for f in dataclasses.fields(cls)
        if f.init and f.repr
    ]
    summary = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())  # the first paragraph, on one line
    return {"name": name, "description": summary, "settings": settings}


def settings_of(decoder: Any) -> dict[str, Any]:
    """The decoder's settings as a JSON-ready dict (its exact configuration); {} for a custom
    decoder that is not a dataclass."""
    if not dataclasses.is_dataclass(decoder):
        return {}
    return {f.name: getattr(decoder, f.name) for f in dataclasses.fields(decoder) if f.repr}


def name_of(decoder: Any) -> str:
    """The registry name of a registered decoder; any other object meeting the Decoder
    contract (a callable yielding Steps, e.g. passed through the Python API) is named by its class."""
    registered = (key for key, cls in DECODERS.items() if type(decoder) is cls)
    return next(registered, type(decoder).__name__)
