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

from starlette.requests import Request

from .request import BadRequest

MAX_BODY = 8 * 1024 * 1024  # bytes: llama.vim's 16 extra chunks of 64 lines are far below this


async def read_json(request: Request, limit: int = MAX_BODY) -> dict[str, Any]:
    """The body as a JSON object; 413 past `limit` bytes (checked before and while reading)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(f"the body is {declared} bytes, more than the server takes ({limit})", 413)
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise BadRequest(f"the body is more than the server takes ({limit} bytes)", 413)
    return await asyncio.to_thread(parse, bytes(data))  # megabytes of JSON: the event loop keeps answering meanwhile


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
    return value


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
        "lang": string(data, "lang") or None,
    }
