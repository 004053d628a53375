"""The one `key=value` settings parser: decoder options (`-o tau=0.8`) and training settings
(`-o bf16=false`) both turn text into a field's type here, so every face rejects the same bad
values the same way (a misspelt bool is an error, never False; inf and nan are never numbers).
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any, Literal

TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
NONE_WORDS = ("none", "auto", "")


def pairs(args: list[str], flag: str = "-o") -> dict[str, str]:
    """`["tau=0.8", "block=32"]` -> {"tau": "0.8", "block": "32"}; ValueError names a pair without `=`."""
    out = {}
    for pair in args:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"bad {flag} {pair!r}: write {flag} key=value")
        out[key.strip()] = value.strip()
    return out


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
        return finite(float(raw), raw)
    if hint is int:
        return int(raw)
    if hint is str:
        return raw
    return hint(raw)


def to_bool(raw: str) -> bool:
    word = raw.strip().lower()
    if word not in TRUE + FALSE:
        raise ValueError(raw)
    return word in TRUE


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
