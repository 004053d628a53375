"""A completion request as every protocol reduces it (`Fill`), and the error for one the server refuses.

Below the engine and the body parser alike: body.py raises BadRequest while it reads JSON,
trim.py shortens a Fill, and neither needs the engine (nor torch) for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class BadRequest(Exception):
    """A request the server refuses: one line, answered 4xx in the protocol's error shape."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Fill:
    """One completion request, as every protocol reduces it."""

    prefix: str
    suffix: str = ""
    ceiling: int | None = None  # n_predict / max_tokens / num_predict; None or -1: the length rule's cap
    ceiling_name: str = "n_predict"  # the field the client sent it in, for its errors
    decoder: str | None = None  # None: the server's
    options: Mapping[str, Any] = field(default_factory=dict)  # decoder settings (merged over the server's)
    temperature: float | None = None
    seed: int = 0
    time_ms: float | None = None  # t_max_predict_ms: past it, the holes left are committed at once
    stop: tuple[str, ...] = ()
    lang: str | None = None  # None: the server's
    extra: str = ""  # other files' text (llama.cpp input_extra): context before the prefix, for the model only
    min_indent: int = 0  # llama.cpp n_indent: the fill ends before a later line indented less
    lines: int | None = None  # non-blank lines the fill may hold (0: any); None: the server's
