"""`dlmcode serve`: the editors' completion protocols over one loaded model.

llama.cpp (`/infill`, `/completion`, `/health`), OpenAI (`/v1/completions`, `/v1/models`)
and Ollama (`/api/generate`, `/api/tags`) are faces over the same job (fill.prepare_middle),
as the CLI and bench are. Modules: engine (a request -> an answer), length (the length
rule), steps (early end, time limit, cancellation around any decoder's Step stream), queue
(FIFO, up to --batch decodes sharing each forward), stream (text sent as the decode settles
it), body (hostile-input parsing), fim (FIM templates), one module per protocol, and app (the
Starlette routes).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading

from ..core.errors import DlmcodeError
from ..models.base import Dlm
from .app import make_app
from .engine import Engine

__all__ = ["LOCAL", "Engine", "default_lang", "make_app", "run", "warning"]

LOCAL = ("127.0.0.1", "localhost", "::1")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE = 2  # seconds open connections get to receive their answers once a stop is asked for
BACKLOG = 2048  # connections waiting to be accepted (uvicorn's default)


def default_lang(dlm: Dlm) -> str | None:
    """The built-in model knows only Python; other models' language is the user's to say (--lang)."""
    return "python" if dlm.family == "builtin" else None


def warning(host: str, api_key: str | None) -> str | None:
    """The line to print when the server is reachable beyond this machine without a key."""
    if host in LOCAL or api_key:
        return None
    return f"dlmcode: warning: serving on {host} without --api-key: anyone who can reach this port can use it"


def run(engine: Engine, host: str, port: int, api_key: str | None) -> int | None:
    """Serve until SIGINT (Ctrl-C) or SIGTERM; returns the signal that stopped it (None: it stopped by itself)."""
    import uvicorn

    app = make_app(engine, api_key)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=GRACE
    )
    server = stopping(uvicorn.Server)(config, app.state.server.queue)
    sock = listen(host, port, config.backlog)
    note = warning(host, api_key)
    if note:
        print(note, file=sys.stderr)
    shown = f"[{host}]" if ":" in host else host
    print(
        f"dlmcode: serving {engine.name} ({engine.decoder}) at http://{shown}:{port} "
        "(llama.cpp /infill, OpenAI /v1/completions, Ollama /api/generate); Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    server.run(sockets=[sock])
    return server.stopped_by


def stopping(base: type) -> type:
    """uvicorn's Server, changed in two ways: a signal is not raised again once the server has
    stopped (uvicorn does, so SIGTERM killed the process with no word, and SIGINT came back
    through asyncio's handler, once as a plain return), and it cancels the decodes at once, so
    that a long decode does not hold the shutdown for its GRACE seconds."""

    class Stopping(base):
        def __init__(self, config, queue) -> None:
            super().__init__(config)
            self.queue, self.stopped_by = queue, None

        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield  # only the main thread may take signals (tests run servers in threads)
                return
            before = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

        def handle_exit(self, sig, frame) -> None:
            self.stopped_by = self.stopped_by or sig
            self.queue.stop()  # thread-safe: it only sets Events
            super().handle_exit(sig, frame)  # a second Ctrl-C forces the exit, as in uvicorn

    return Stopping


def listen(host: str, port: int, backlog: int = BACKLOG) -> socket.socket:
    """A socket bound and listening, so that a port in use is one clear error before serving starts, and a client
    that connects once the address line is printed waits in the backlog until the server accepts it (bound but not
    yet listening, as the socket was until uvicorn's startup, it refused the connection)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as err:
        sock.close()
        raise DlmcodeError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.set_inheritable(True)
    return sock
