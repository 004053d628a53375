"""The one `key=value` settings parser: decoder options (`-o tau=0.8`) and training settings
(`-o bf16=false`) both turn text into a field's type here, so every face rejects the same bad
values the same way (a misspelt bool is an error, never False; inf and nan are never numbers).

Numbers are ASCII digits, everywhere: these settings, `--span`, `--length`, every numeric flag
(cli.py) and DLMCODE_THREADS. Python's int() and float() also take fullwidth and other Unicode
digits ("８"), underscores ("1_0") and surrounding space; a shell user never means those, and
one rule for every number means no flag accepts what another refuses. An int is at most
INT_MAX: every count and seed ends up a 64-bit integer (torch's int64), and a larger one
failed deep inside with `ValueError: Overflow`.
"""

from __future__ import annotations

import math
import re
import types
import typing
from typing import Any, Literal

TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
NONE_WORDS = ("none", "auto", "")
INT_MAX = 2**63 - 1  # the largest int64: torch's integer type, which every count and seed becomes
# The hottest sampling temperature, for every face (decoders, serve): past it every token is about as
# likely as any other, and near 1e308 the Gumbel noise times T overflows to inf, which a banned
# token's -inf turns into NaN (the mask token won the argmax). Our bound.
MAX_TEMPERATURE = 1000.0
INT = re.compile(r"[+-]?[0-9]+")
FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def pairs(args: list[str], flag: str = "-o") -> dict[str, str]:
    """`["tau=0.8", "block=32"]` -> {"tau": "0.8", "block": "32"}; ValueError names a pair without `=`."""
    out = {}
    for pair in args:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"bad {flag} {pair!r}: write {flag} key=value")
        out[key.strip()] = value.strip()
    return out


def parse_options(pairs_given: list[str] | None) -> dict[str, str]:
    """-o key=value pairs as a dict, or a UsageError naming the bad one; the values are the decoder's
    to check (decoders.build). No torch here: the CLI calls it before torch imports."""
    from .errors import UsageError

    try:
        return pairs(pairs_given or [])
    except ValueError as err:
        raise UsageError(str(err)) from None


def convert(raw: str, hint: Any) -> Any:
    """`raw` as a value of the type `hint` (int, float, bool, str, Literal, X | None); ValueError if it is not one."""
    args = typing.get_args(hint)
    if isinstance(hint, str):  # a dataclass field's type under `from __future__ import annotations`
        hint = {"int": int, "float": float, "bool": bool, "str": str}.get(hint, hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # e.g. int | None
        if raw.lower() in NONE_WORDS and type(None) in args:
            return None
        return convert(raw, next(a for a in args if a is not type(None)))
    if typing.get_origin(hint) is Literal:
        if raw not in args:
            raise ValueError(raw)
        return raw
    if hint is bool:
        return to_bool(raw)
    if hint is float:
        return to_float(raw)
    if hint is int:
        return to_int(raw)
    if hint is str:
        return raw
    return hint(raw)


def to_bool(raw: str) -> bool:
    word = raw.strip().lower()
    if word not in TRUE + FALSE:
        raise ValueError(raw)
    return word in TRUE


class OutOfRange(ValueError):
    """A number outside what any setting can hold (too large, inf, nan); its message says so."""


def expects(hint: Any, err: ValueError) -> str:
    """What a bad value's message says it should be: the range it left, or the type it is not."""
    return str(err) if isinstance(err, OutOfRange) else f"expects {type_name(hint)}"


def to_int(raw: str) -> int:
    """ASCII digits with an optional sign, within +-INT_MAX, as an int; ValueError otherwise."""
    if not INT.fullmatch(raw.strip()):
        raise ValueError(raw)
    value = int(raw)
    if abs(value) > INT_MAX:
        raise OutOfRange(f"{raw} is out of range; give -(2**63 - 1) to 2**63 - 1")
    return value


def to_float(raw: str) -> float:
    """An ASCII decimal number (1, 0.5, .5, 1e-3) that is finite, as a float; ValueError otherwise."""
    spelt = FLOAT.fullmatch(raw.strip()) is not None
    if not spelt and raw.strip().lower().lstrip("+-") not in ("inf", "infinity", "nan"):
        raise ValueError(raw)
    value = float(raw)
    if not math.isfinite(value):  # inf, nan, and 1e400, which float() makes inf
        raise OutOfRange(f"{raw} is not a finite number")
    return value


def finite(value: float, raw: Any = None) -> float:
    """`value` if it is a finite number; inf and nan are never a setting (ValueError)."""
    if not math.isfinite(value):
        raise ValueError(raw if raw is not None else value)
    return value


def type_name(hint: Any) -> str:
    """Readable type for messages and listings: 'int', 'float', 'int or none', 'one of a|b'."""
    if typing.get_origin(hint) is Literal:
        return "one of " + "|".join(map(str, typing.get_args(hint)))
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if args and len(args) < len(typing.get_args(hint)):
        return f"{type_name(args[0])} or none"
    return getattr(hint, "__name__", str(hint))
