"""The OpenAI completions protocol: POST /v1/completions, GET /v1/models.

`prompt` (a string, or a list of one), `suffix`, `max_tokens`, `temperature`, `seed`, `stop`,
`n`, `stream` (server-sent events ending with `data: [DONE]`). Without `suffix`, a prompt
with a FIM template in it (llama.vscode's OpenAI mode) is parsed back into prefix and suffix.
Our `decoder` and `options` ride in the body (the openai client's `extra_body`), and the
answer carries `dlmcode` (calls, tpf, breakage, ...).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

from . import body, fim
from .engine import Answer, Engine
from .request import BadRequest, Fill
from .stream import DONE_SSE, Shape, sse

MAX_N = 4
FINISH = {"end": "stop", "stop": "stop", "syntax": "stop", "length": "length", "time": "length", "warmup": "length"}


def error(message: str, status: int) -> JSONResponse:
    code = {401: "invalid_api_key", 404: "not_found", 413: "request_too_large"}.get(status)
    kind = "authentication_error" if status == 401 else "invalid_request_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code}}, status)


def prompt_text(data: Mapping[str, Any]) -> str:
    prompt = data.get("prompt", "")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string (or a list of one string)")
    return prompt


def completion(data: Mapping[str, Any]) -> Fill:
    prompt, suffix = prompt_text(data), body.string(data, "suffix")
    found = None if suffix else fim.parse(prompt)
    prefix, suffix = (found[0], found[1]) if found else (prompt, suffix)
    if data.get("echo") or data.get("logprobs"):
        raise BadRequest("echo and logprobs are not supported by dlmcode serve")
    return Fill(
        prefix=prefix,
        suffix=suffix,
        ceiling=body.integer(data, "max_tokens"),
        ceiling_name="max_tokens",
        options=body.mapping(data, "options"),
        **body.sampling(data),
        **body.extensions(data),
    )


def count(data: Mapping[str, Any]) -> int:
    n = body.integer(data, "n", 1)
    if not 1 <= n <= MAX_N:
        raise BadRequest(f"n {n}: give 1 to {MAX_N}")
    return n


def render(answers: list[Answer], engine: Engine) -> dict[str, Any]:
    tokens = sum(a.tokens for a in answers)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": engine.name,
        "choices": [
            {"text": a.text, "index": i, "logprobs": None, "finish_reason": FINISH[a.stop]}
            for i, a in enumerate(answers)
        ],
        "usage": {
            "prompt_tokens": answers[0].prompt_tokens,
            "completion_tokens": tokens,
            "total_tokens": answers[0].prompt_tokens + tokens,
        },
        "dlmcode": answers[0].extras() if len(answers) == 1 else [a.extras() for a in answers],
    }


def shape(engine: Engine) -> Shape:
    """OpenAI's stream: chunks `{choices: [{text, index, finish_reason: null}]}` as each choice's fill
    settles, then one with its finish_reason (and our `dlmcode`), and `data: [DONE]` after all."""
    head = {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": engine.name,
    }

    def choice(i: int, text: str, finish: str | None) -> dict[str, Any]:
        return {"text": text, "index": i, "logprobs": None, "finish_reason": finish}

    return Shape(
        piece=lambda i, text: sse({**head, "choices": [choice(i, text, None)]}),
        end=lambda i, a: sse({**head, "choices": [choice(i, "", FINISH[a.stop])], "dlmcode": a.extras()}),
        error=lambda message: sse({"error": {"message": message, "type": "server_error", "param": None, "code": None}}),
        last=DONE_SSE,
    )


def models(engine: Engine) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": engine.name, "object": "model", "created": 0, "owned_by": "dlmcode"}]}
