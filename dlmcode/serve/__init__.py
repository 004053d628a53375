"""`dlmcode serve`: the editors' completion protocols over one loaded model.

llama.cpp (`/infill`, `/completion`, `/health`), OpenAI (`/v1/completions`, `/v1/models`)
and Ollama (`/api/generate`, `/api/tags`) are faces over the same job (fill.prepare_middle),
as the CLI and bench are. Modules: engine (a request -> an answer), length (the length
rule), steps (early end, time limit, cancellation around any decoder's Step stream), queue
(FIFO, one decode at a time), body (hostile-input parsing), fim (FIM templates), one module
per protocol, and app (the Starlette routes).
"""

from __future__ import annotations

import socket
import sys

from ..errors import DlmcodeError
from ..models.base import Dlm
from .app import make_app
from .engine import Engine

__all__ = ["LOCAL", "Engine", "default_lang", "make_app", "run", "warning"]

LOCAL = ("127.0.0.1", "localhost", "::1")


def default_lang(dlm: Dlm) -> str | None:
    """The built-in model knows only Python; other models' language is the user's to say (--lang)."""
    return "python" if dlm.family == "builtin" else None


def warning(host: str, api_key: str | None) -> str | None:
    """The line to print when the server is reachable beyond this machine without a key."""
    if host in LOCAL or api_key:
        return None
    return f"dlmcode: warning: serving on {host} without --api-key: anyone who can reach this port can use it"


def run(engine: Engine, host: str, port: int, api_key: str | None) -> None:
    """Serve until Ctrl-C (uvicorn stops cleanly on SIGINT/SIGTERM)."""
    import uvicorn

    config = uvicorn.Config(make_app(engine, api_key), host=host, port=port, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    sock = listen(host, port)
    note = warning(host, api_key)
    if note:
        print(note, file=sys.stderr)
    shown = f"[{host}]" if ":" in host else host
    print(f"dlmcode: serving {engine.name} ({engine.decoder}) at http://{shown}:{port} "
          "(llama.cpp /infill, OpenAI /v1/completions, Ollama /api/generate); Ctrl-C stops", file=sys.stderr, flush=True)
    server.run(sockets=[sock])
    if server.should_exit:  # stopped by SIGINT/SIGTERM: uvicorn re-raises the signal, but through asyncio's
        raise KeyboardInterrupt  # own SIGINT handler that can come back as a plain return (exit 0, seen once in CI)


def listen(host: str, port: int) -> socket.socket:
    """A bound socket, so that a port in use is one clear error before serving starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise DlmcodeError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.set_inheritable(True)
    return sock
