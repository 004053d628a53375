"""Reading a request body as an attacker might send it: size, encoding, JSON, field types.

Every failure is a BadRequest with one line naming the field; the protocol module renders
it in its own error shape. Unknown fields are ignored (llama.cpp, OpenAI and Ollama do the
same); a known field of the wrong type is refused rather than guessed at.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request

from ..core.errors import UsageError
from ..core.settings import MAX_TEMPERATURE
from ..text import syntax
from .request import BadRequest

MAX_BODY = 8 * 1024 * 1024  # bytes: llama.vim's 16 extra chunks of 64 lines are far below this
# The most seconds a body may take to arrive, whole: a client that sends a byte a minute (or stops
# halfway) holds its connection and buffer this long at most. 8 MiB at 1 Mbit/s takes 67 s; our choice.
BODY_SECONDS = 120.0
# Bytes of request bodies held at once, all requests together (read, or being parsed): four whole
# MAX_BODY bodies. Forty clients sending 8 MiB each at once grew the server by 23 MB each; our bound.
MAX_IN_FLIGHT = 4 * MAX_BODY


class InFlight:
    """Bytes of request bodies the server holds at once; past `cap`, a body is refused (503) as it comes.
    One event loop reads every body, so the count needs no lock."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held = 0

    def take(self, size: int) -> None:
        if self.held + size > self.cap:
            raise BadRequest("the server is reading too many request bodies at once; try again shortly", 503)
        self.held += size

    def give(self, size: int) -> None:
        self.held -= size


IN_FLIGHT = InFlight(MAX_IN_FLIGHT)


async def read_json(request: Request, limit: int = MAX_BODY) -> dict[str, Any]:
    """The body as a JSON object; 413 past `limit` bytes (checked before and while reading), 408 past
    BODY_SECONDS, 503 past MAX_IN_FLIGHT bytes held by every request together; a client that leaves
    mid-body is answered 499 (to no one), not logged as a failure."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(f"the body is {declared} bytes, more than the server takes ({limit})", 413)
    data = bytearray()
    try:
        try:
            async with asyncio.timeout(BODY_SECONDS):
                await receive(request, data, limit)
        except TimeoutError:
            raise BadRequest(f"the body took more than {BODY_SECONDS:g} s to arrive", 408) from None
        except ClientDisconnect:
            raise BadRequest("the client went away before its body arrived", 499) from None
        return await asyncio.to_thread(parse, bytes(data))  # megabytes of JSON: the event loop answers meanwhile
    finally:
        IN_FLIGHT.give(len(data))


async def receive(request: Request, data: bytearray, limit: int) -> None:
    """The body's chunks into `data`, each counted in IN_FLIGHT before it is kept."""
    async for chunk in request.stream():
        IN_FLIGHT.take(len(chunk))
        data += chunk
        if len(data) > limit:
            raise BadRequest(f"the body is more than the server takes ({limit} bytes)", 413)


def parse(data: bytes) -> dict[str, Any]:
    if not data.strip():
        raise BadRequest("the body is empty: send a JSON object")
    try:
        value = json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise BadRequest("the body's JSON is nested too deeply") from None
    except UnicodeDecodeError:
        raise BadRequest("the body is not UTF-8 text") from None
    except ValueError as err:  # JSONDecodeError, an integer too long to convert, NaN
        raise BadRequest(f"the body is not valid JSON: {one_line(err)}") from None
    if not isinstance(value, dict):
        raise BadRequest(f"the body must be a JSON object, not {kind(value)}")
    if SURROGATE_ESCAPE.search(data):  # the only way a surrogate gets into valid UTF-8 JSON: skip the walk without one
        no_lone_surrogates(value)
    return value


SURROGATE = re.compile("[\ud800-\udfff]")
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def no_lone_surrogates(document: dict[str, Any]) -> None:
    """Refuse text that is not Unicode: JSON's "\\ud800" escape decodes to a lone surrogate,
    which no tokenizer, encoder or file takes. Checked once here, over every string and key of
    the document, so that no field of any protocol is forgotten. Iterative: the nesting json
    allows would overflow a recursive walk."""
    stack = [(key, item) for key, value in document.items() for item in (key, value)]
    while stack:
        field, item = stack.pop()
        if isinstance(item, dict):
            stack += [(field, x) for pair in item.items() for x in pair]
        elif isinstance(item, list):
            stack += [(field, x) for x in item]
        elif isinstance(item, str) and not item.isascii() and (bad := SURROGATE.search(item)):
            name = (
                "a key" if SURROGATE.search(field) else field
            )  # never echo the bad text itself: no answer could carry it
            raise BadRequest(f"{name} holds a lone surrogate ({bad.group()!a}): send valid Unicode text")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def one_line(err: Exception) -> str:
    return " ".join(str(err).split())[:200]


def kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


# One reader a JSON type: each opens the same way (absent or null: the default) and then checks its own type.
# One reader a JSON type (string, integer, number, boolean): each starts alike (absent: the default) and checks its
# own type; a shared reader taking the check would read no shorter.
def string(body: Mapping[str, Any], key: str, default: str = "") -> str:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise BadRequest(f"{key} must be a string, not {kind(value)}")
    return value


def integer(body: Mapping[str, Any], key: str, default: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():  # 128.0 from a JavaScript client
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{key} must be an integer, not {kind(value)}")
    if abs(value) > 2**31:
        raise BadRequest(f"{key} {value} is out of range")
    return value


def number(body: Mapping[str, Any], key: str, default: float | None = None) -> float | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"{key} must be a number, not {kind(value)}")
    return float(value)


def boolean(body: Mapping[str, Any], key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false, not {kind(value)}")
    return value


def strings(body: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """A string or a list of strings (OpenAI's and llama.cpp's `stop`)."""
    value = body.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"{key} must be a string or a list of strings")
    return tuple(value)


def mapping(body: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{key} must be an object, not {kind(value)}")
    return value


def temperature(body: Mapping[str, Any], key: str = "temperature") -> float | None:
    value = number(body, key)
    if value is not None and value < 0:
        raise BadRequest(f"{key} {value} must be >= 0")
    if value is not None and value > MAX_TEMPERATURE:
        raise BadRequest(f"{key} {value} must be at most {MAX_TEMPERATURE:g}")
    return value


def language(data: Mapping[str, Any], key: str = "lang") -> str | None:
    """The request's language, if it names one dlmcode knows: refused now, not after the decode."""
    name = string(data, key) or None
    if name is None:
        return None
    try:
        return syntax.language_for(lang=name)
    except UsageError as err:
        raise BadRequest(f"{key}: {err}") from None


def seed(body: Mapping[str, Any], key: str = "seed") -> int:
    value = integer(body, key, 0)
    return 0 if value is None or value < 0 else value  # llama.cpp's -1 (random seed): ours is 0, reproducible


def sampling(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The sampler fields every protocol has (Ollama keeps them in its `options`)."""
    return {"temperature": temperature(fields), "seed": seed(fields), "stop": strings(fields, "stop")}


def extensions(data: Mapping[str, Any]) -> dict[str, Any]:
    """dlmcode's own request fields, the same in every protocol: decoder, lines, lang."""
    return {
        "decoder": string(data, "decoder") or None,
        "lines": integer(data, "lines"),
        "lang": language(data),
    }
