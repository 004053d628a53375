"""`dlmcode serve`: the editors' server; Ctrl-C and SIGTERM stop it with one line."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import Annotated, NoReturn

import typer

from ..core import settings
from ..core.entry import Command, reported
from ..core.errors import UsageError
from ..core.run import ModelChoice, check_batch
from . import shared
from .app import app
from .flags import MODEL, CacheRefresh, DecoderName, model_flags

Option = Annotated[
    list[str] | None,
    typer.Option(
        "--option",
        "-o",
        help="decoder setting key=value (repeatable); none given: block=8 (left to right, so a fill's end stops "
        "the decode); every request decodes guarded unless guard=false (here or in the request)",
    ),
]
Cache = Annotated[
    str,
    typer.Option(
        help="KV cache: none, prefix or dual (Fast-dLLM; approximate; dual measured as good as prefix for serving, "
        "twice as fast)"
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        envvar="DLMCODE_API_KEY", help="require Authorization: Bearer KEY on every request [env DLMCODE_API_KEY]"
    ),
]
Lang = Annotated[
    str | None,
    typer.Option(
        help="language of the syntax rule and breakage [default: python for the built-in model, none otherwise]"
    ),
]
Batch = Annotated[
    int,
    typer.Option(help="decodes sharing each model forward (requests waiting, and OpenAI's n); 1 = one at a time"),
]


@app.command(cls=Command)
@model_flags
def serve(
    choice: ModelChoice = MODEL,  # --model, --device, ... (flags.model_flags)
    host: Annotated[str, typer.Option(help="address to listen on; beyond localhost, set --api-key")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port (8012: llama.vim's and llama.vscode's default)")] = 8012,
    decoder: DecoderName = None,
    option: Option = None,
    cache: Cache = "dual",
    cache_refresh: CacheRefresh = 0,
    api_key: ApiKey = None,
    lang: Lang = None,
    lines: Annotated[int, typer.Option(help="a fill ends after this many non-blank lines; 0 = no limit")] = 1,
    batch: Batch = 4,
) -> None:
    """Serve completions to editors: llama.cpp /infill, OpenAI /v1/completions, Ollama /api/generate."""
    with reported("the server stopped"), terminated_stops():
        from ..core.run import CacheSettings
        from ..text import syntax

        options = settings.parse_options(option if option is not None else ["block=8"])
        own = None if decoder is None else served_decoder(decoder, options)  # a bad one fails before the model loads
        CacheSettings(cache, refresh=cache_refresh)
        lang_name = syntax.language_for(lang=lang) if lang else None
        if not 0 < port < 65536:
            raise UsageError(f"--port {port}: give 1 to 65535")
        if lines < 0:
            raise UsageError(f"--lines {lines}: give a number of lines, or 0 for no limit")
        check_batch(batch)
        from .. import serve as server

        dlm = shared.load_model(choice, quiet=False)
        if decoder is None:  # the family's own decoder (DiffusionGemma's renoise): its published settings
            given = settings.parse_options(option)  # win over the default block=8, and -o over both
            decoder, options = dlm.decoder, {**options, **dlm.decoder_options, **given}
            own = served_decoder(decoder, options)
        if dlm.blocks is not None:  # a block family's exact cache stands behind every decode (models/blocks.py)
            cache, cache_refresh = "none", 0
        engine = server.Engine(
            dlm,
            decoder,
            options,
            cache,
            cache_refresh,
            lang_name or server.default_lang(dlm),
            choice.name or "dlmcode",
            lines,
            batch,
            own,
        )
        stopped_by = server.run(engine, host, port, api_key or None)
    if stopped_by is not None:
        stopped(stopped_by)


def served_decoder(decoder: str, options: dict):
    """The decoder a request that names no settings decodes with, built once: the server's check at start and its
    requests share it (serve/engine.Engine.own)."""
    from ..jobs.wiring import make_decoder
    from ..serve.engine import served

    name, texts = served(decoder, options)
    return make_decoder(name, dict(texts), None)


@contextlib.contextmanager
def terminated_stops() -> Iterator[None]:
    """SIGTERM while torch imports and the model loads stops as it does while serving (uvicorn's own
    handler takes over then); the handler before is back afterwards (tests run commands in-process)."""
    before = signal.signal(signal.SIGTERM, lambda sig, frame: stopped(sig))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def stopped(sig: int) -> NoReturn:
    """The server's last line, then exit at once: 130 for Ctrl-C, 0 for SIGTERM. Its work is done and
    answered; the interpreter's teardown would only add torch's half second (os._exit skips it)."""
    if sig == signal.SIGTERM:
        typer.echo("dlmcode: stopped by SIGTERM; the server stopped", err=True)
    else:
        typer.echo("dlmcode: interrupted; the server stopped", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if sig == signal.SIGTERM else 130)
