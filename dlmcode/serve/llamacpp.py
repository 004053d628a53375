"""The llama.cpp server protocol: POST /infill and /completion, GET /health, /props, /models.

Fields as llama.vim (autoload/llama.vim) and llama.vscode (src/llama-server.ts) send them:
`input_prefix`, `input_suffix`, `input_extra` [{filename, text}], `prompt` (the cursor line
up to the cursor, placed after the prefix), `n_predict`, `n_indent`, `stop`, `stream`,
`t_max_predict_ms`, `response_fields`, `n_cmpl`; sampler fields (`top_k`, `samplers`, ...)
and `cache_prompt`, `t_max_prompt_ms`, `id_slot` are accepted and have no use here.
`/completion` takes a `prompt` with a FIM template in it (fim.py), or plain text to continue.
Answers carry the fields llama.vim and llama.vscode read (`content`, `timings`,
`tokens_cached`, `truncated`, `generation_settings.n_ctx`) and ours under `dlmcode`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

from . import body, fim
from .engine import Answer, Engine
from .request import BadRequest, Fill
from .stream import Shape, sse

MAX_CMPL = 4  # llama.cpp's own limit on n_cmpl
STOP_TYPES = {"end": "eos", "stop": "word", "length": "limit", "time": "limit", "syntax": "eos", "warmup": "limit"}


def error(message: str, status: int) -> JSONResponse:
    kind = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error"}.get(
        status, "invalid_request_error"
    )
    return JSONResponse({"error": {"code": status, "message": message, "type": kind}}, status)


def common(data: Mapping[str, Any], prefix: str, suffix: str, extra: str = "") -> Fill:
    """The fields /infill and /completion share."""
    return Fill(
        prefix=prefix,
        suffix=suffix,
        extra=extra,
        ceiling=body.integer(data, "n_predict"),
        options=body.mapping(data, "options"),
        time_ms=body.number(data, "t_max_predict_ms"),
        min_indent=max(0, body.integer(data, "n_indent", 0) or 0),
        **body.sampling(data),
        **body.extensions(data),
    )


def infill(data: Mapping[str, Any]) -> Fill:
    prefix = body.string(data, "input_prefix") + body.string(data, "prompt")
    return common(data, prefix, body.string(data, "input_suffix"), extra_context(data.get("input_extra")))


def extra_context(chunks: Any) -> str:
    """input_extra's chunks of other files, as context before the prefix (each ends with a newline)."""
    if chunks is None:
        return ""
    if not isinstance(chunks, list) or not all(isinstance(c, dict) for c in chunks):
        raise BadRequest("input_extra must be a list of {filename, text} objects")
    texts = [body.string(c, "text") for c in chunks]
    [body.string(c, "filename") for c in chunks]  # type-checked, not used: the model sees code, not names
    return "".join(t if t.endswith("\n") else t + "\n" for t in texts if t)


def completion(data: Mapping[str, Any]) -> Fill:
    prompt = data.get("prompt", data.get("content"))
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string (token lists are not taken)")
    found = fim.parse(prompt)
    prefix, suffix = (found[0], found[1]) if found else (prompt, "")
    return common(data, prefix, suffix)


def n_cmpl(data: Mapping[str, Any]) -> int:
    n = body.integer(data, "n_cmpl", 1)
    if not 1 <= n <= MAX_CMPL:
        raise BadRequest(f"n_cmpl {n}: give 1 to {MAX_CMPL}")
    return n


def render(
    answer: Answer, engine: Engine, fields: list[str] | None, index: int = 0, asked: int | None = None
) -> dict[str, Any]:
    """A /completion-shaped answer; with `response_fields`, only those (nested paths flattened with '/').
    `asked`: the request's n_predict, echoed in generation_settings as llama.cpp does (-1 when not given)."""
    seconds_ms = answer.seconds * 1000
    full = {
        "index": index,
        "content": answer.text,
        "tokens": [],
        "id_slot": 0,
        "stop": True,
        "model": engine.name,
        "tokens_predicted": answer.tokens,
        "tokens_evaluated": answer.prompt_tokens,
        "generation_settings": {
            "n_ctx": engine.dlm.context,
            "n_predict": -1 if asked is None else asked,  # what the client asked for; the holes are in `dlmcode`
            "model": engine.name,
            "temperature": answer.settings.get("temperature", 0.0),
        },
        "prompt": "",
        "has_new_line": "\n" in answer.text,
        "truncated": answer.truncated,
        "stop_type": STOP_TYPES[answer.stop],
        "stopping_word": "",
        "tokens_cached": 0,  # no cross-request cache here (docs/serve.md)
        "timings": {
            "prompt_n": answer.prompt_tokens,
            "prompt_ms": 0.0,  # a dLLM has no separate prompt phase: every call runs the whole canvas
            "prompt_per_token_ms": 0.0,
            "prompt_per_second": 0.0,
            "predicted_n": answer.tokens,
            "predicted_ms": round(seconds_ms, 3),
            "predicted_per_token_ms": round(seconds_ms / answer.tokens, 3) if answer.tokens else 0.0,
            "predicted_per_second": round(answer.tokens / answer.seconds, 3) if answer.seconds else 0.0,
        },
        "dlmcode": answer.extras(),
    }
    return full if fields is None else pick(full, fields)


def pick(full: Mapping[str, Any], fields: list[str]) -> dict[str, Any]:
    out = {}
    for path in fields:
        value: Any = full
        for key in path.split("/"):
            value = value.get(key, KeyError) if isinstance(value, Mapping) else KeyError
        if value is not KeyError:
            out[path] = value
    return out


def response_fields(data: Mapping[str, Any]) -> list[str] | None:
    fields = data.get("response_fields")
    if fields is None:
        return None
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise BadRequest("response_fields must be a list of strings")
    return fields


def shape(engine: Engine, asked: int | None = None) -> Shape:
    """llama.cpp's stream: server-sent events `{content, stop: false}` as the fill settles, then
    the whole answer with `stop: true` and empty content."""
    return Shape(
        piece=lambda i, text: sse({"index": i, "content": text, "stop": False, "id_slot": 0}),
        end=lambda i, answer: sse({**render(answer, engine, None, i, asked), "content": ""}),
        error=lambda message: sse({"error": {"code": 500, "message": message, "type": "server_error"}}),
    )


def health() -> dict[str, str]:
    return {"status": "ok"}


def props(engine: Engine) -> dict[str, Any]:
    return {
        "default_generation_settings": {"n_ctx": engine.dlm.context, "model": engine.name},
        "total_slots": 1,
        "model_path": engine.dlm.name,
        "n_ctx": engine.dlm.context,
    }


def models(engine: Engine) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": engine.name,
                "object": "model",
                "created": 0,
                "owned_by": "dlmcode",
                "meta": {"n_ctx_train": engine.dlm.context},
            }
        ],
    }
