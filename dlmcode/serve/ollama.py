"""The Ollama protocol: POST /api/generate, GET /api/tags and /api/version.

`prompt`, `suffix`, `stream` (default true: one JSON object per line), `raw`, and `options`
(`num_predict`, `temperature`, `seed`, `stop`; Ollama's other options are accepted and
unused; any other key is a decoder setting). `decoder` picks the decoder. Without `suffix`,
a FIM template in the prompt (twinny) is parsed back into prefix and suffix. An empty
prompt is Ollama's "load the model" request: answered at once with done_reason "load".
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.responses import JSONResponse

from . import body, fim
from .engine import Answer, Engine
from .request import Fill
from .stream import Shape, ndjson

# Ollama's own options (api/types.go Options and Runner): taken, and meaningless for a dLLM
OLLAMA_OPTIONS = frozenset(
    "num_keep num_predict top_k top_p min_p tfs_z typical_p repeat_last_n temperature repeat_penalty presence_penalty "
    "frequency_penalty mirostat mirostat_tau mirostat_eta penalize_newline stop seed numa num_ctx num_batch num_gpu "
    "main_gpu low_vram f16_kv logits_all vocab_only use_mmap use_mlock num_thread".split()
)
DONE = {"end": "stop", "stop": "stop", "syntax": "stop", "length": "length", "time": "length", "warmup": "load"}


def error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status)


def generate(data: Mapping[str, Any]) -> Fill:
    prompt, suffix = body.string(data, "prompt"), body.string(data, "suffix")
    body.boolean(data, "raw", False)
    found = None if suffix else fim.parse(prompt)
    prefix, suffix = (found[0], found[1]) if found else (prompt, suffix)
    options = body.mapping(data, "options")
    ceiling = body.integer(options, "num_predict")
    return Fill(
        prefix=prefix,
        suffix=suffix,
        ceiling=0 if not prompt and not suffix else ceiling,  # Ollama: an empty prompt only loads the model
        ceiling_name="options.num_predict",
        options={k: v for k, v in options.items() if k not in OLLAMA_OPTIONS},
        **body.sampling(options),
        **body.extensions(data),
    )


def now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def render(answer: Answer, engine: Engine) -> dict[str, Any]:
    ns = int(answer.seconds * 1e9)
    return {
        "model": engine.name,
        "created_at": now(),
        "response": answer.text,
        "done": True,
        "done_reason": DONE[answer.stop],
        "context": [],
        "total_duration": ns,
        "load_duration": 0,
        "prompt_eval_count": answer.prompt_tokens,
        "prompt_eval_duration": 0,
        "eval_count": answer.tokens,
        "eval_duration": ns,
        "dlmcode": answer.extras(),
    }


def shape(engine: Engine) -> Shape:
    """Ollama's stream: JSON lines `{response, done: false}` as the fill settles, then the whole
    answer with `done: true` and an empty response."""
    return Shape(
        piece=lambda i, text: ndjson({"model": engine.name, "created_at": now(), "response": text, "done": False}),
        end=lambda i, answer: ndjson({**render(answer, engine), "response": ""}),
        error=lambda message: ndjson({"error": message}),
    )


def tags(engine: Engine) -> dict[str, Any]:
    family = engine.dlm.family
    return {
        "models": [
            {
                "name": engine.name,
                "model": engine.name,
                "modified_at": now(),
                "size": 0,
                "digest": "",
                "details": {
                    "parent_model": "",
                    "format": "safetensors",
                    "family": family,
                    "families": [family],
                    "parameter_size": "",
                    "quantization_level": "",
                },
            }
        ]
    }


def version() -> dict[str, str]:
    from importlib.metadata import version as installed

    return {"version": installed("dlmcode")}
