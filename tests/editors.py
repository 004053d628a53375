"""What editors and their clients send to a completion server, as their own code builds it
(docs/editors.md says where): the server tests post these bodies unchanged."""

from __future__ import annotations


# llama.vim autoload/llama.vim (ggml-org/llama.vim a1c8e6e, s:fim_... l:request), with its defaults:
# n_predict 128, stop_strings [], t_max_prompt_ms 500, t_max_predict_ms 250 for the first request.
def llama_vim_body(prefix: str, middle: str, suffix: str) -> dict:
    return {
        "id_slot": 0,
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": [],
        "prompt": middle,
        "n_predict": 128,
        "stop": [],
        "n_indent": 4,
        "top_k": 40,
        "top_p": 0.90,
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 250,
        "response_fields": [
            "content",
            "timings/prompt_n",
            "timings/prompt_ms",
            "timings/prompt_per_token_ms",
            "timings/prompt_per_second",
            "timings/predicted_n",
            "timings/predicted_ms",
            "timings/predicted_per_token_ms",
            "timings/predicted_per_second",
            "truncated",
            "tokens_cached",
        ],
    }


# llama.vim autoload/llama.vim, the ring-buffer warm-up (s:ring_update): n_predict 0, 1 ms limits, response_fields [""]
LLAMA_VIM_WARMUP = {
    "id_slot": 0,
    "input_prefix": "",
    "input_suffix": "",
    "input_extra": [{"text": "import os\n", "time": 1700000000, "filename": "util.py"}],
    "prompt": "",
    "n_predict": 0,
    "temperature": 0.0,
    "samplers": [],
    "stream": False,
    "cache_prompt": True,
    "t_max_prompt_ms": 1,
    "t_max_predict_ms": 1,
    "response_fields": [""],
}


# llama.vscode src/llama-server.ts createRequestPayload(false, ...) (ggml-org/llama.vscode 3938fb3) with its
# defaults: n_predict 128, max_parallel_completions 3 (n_cmpl), defaultRequestParams, t_max_* 500/2500, nindent
def llama_vscode_body(prefix: str, suffix: str) -> dict:
    return {
        "id_slot": 0,
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": [{"text": "x = 1\n", "time": 1700000000, "filename": "/home/u/other.py"}],
        "prompt": "",
        "n_predict": 128,
        "n_cmpl": 3,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "n_indent": 4,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 2500,
    }


# llama.vscode src/llama-server.ts createRequestPayload(true, "", "", chunks, "", model): its warm-up
LLAMA_VSCODE_WARMUP = {
    "id_slot": 0,
    "input_prefix": "",
    "input_suffix": "",
    "input_extra": [],
    "prompt": "",
    "n_predict": 0,
    "samplers": [],
    "cache_prompt": True,
    "t_max_prompt_ms": 500,
    "t_max_predict_ms": 1,
}


# ollama-python ollama/_client.py Client.generate: GenerateRequest(...).model_dump(exclude_none=True)
def ollama_body(prompt: str, suffix: str, stream: bool | None = False) -> dict:
    body = {"model": "dlmcode", "prompt": prompt, "suffix": suffix, "options": {"num_predict": 128, "temperature": 0}}
    if stream is not None:
        body["stream"] = stream
    return body
