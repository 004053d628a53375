"""The Starlette app: routes of the three protocols over one Engine and one Queue.

Every route goes through `route`: the API key, the body (body.py), the protocol's parser,
the Engine's checks, then the queue (warm-ups and errors never wait in it), then the
protocol's answer, or its stream as the decode settles the text (stream.py). Any refusal is
one line in the protocol's error shape; an unexpected failure is a 500 in that shape, logged
once, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from ..core.errors import DlmcodeError
from . import body, llamacpp, ollama, openai
from .engine import Answer, Emit, Engine
from .queue import Queue
from .request import BadRequest, Fill
from .steps import ClientGone
from .stream import Live, Shape

log = logging.getLogger("dlmcode.serve")
Error = Callable[[str, int], JSONResponse]
SSE = "text/event-stream"
PUBLIC = ("/health", "/")  # answered without the API key, as llama.cpp answers /health


@dataclass
class Server:
    engine: Engine
    queue: Queue
    api_key: str | None = None

    def allowed(self, request: Request) -> bool:
        if self.api_key is None or request.url.path in PUBLIC:
            return True
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key.encode())

    async def fills(self, request: Request, reqs: list[Fill]) -> list[Answer]:
        """Answers for `reqs` (n_cmpl / n > 1: seeds seed, seed+1, ...), queued together in order,
        so that they share forwards; one that fails cancels the others."""
        for req in reqs:
            self.engine.check(req)  # a bad decoder or ceiling is answered before queueing
        tasks = [asyncio.create_task(self.answer(request, r)) for r in reqs]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()  # done ones ignore it; the others stop (an error, or the client left)

    async def answer(self, request: Request, req: Fill, emit: Emit | None = None) -> Answer:
        if self.engine.warmup(req):
            return self.engine.run(req)
        return await self.queue.answer(req, request.is_disconnected, emit)

    async def stream(self, request: Request, reqs: list[Fill], shape: Shape, media: str) -> Response:
        """The fills streamed as they settle; a refusal before the first piece is still a 4xx."""
        for req in reqs:
            self.engine.check(req)
        live = Live(reqs, lambda req, emit: self.answer(request, req, emit))
        try:
            await live.first()
        except BaseException:  # refused, the client left, or the server is stopping: no decode goes on
            live.cancel()
            raise
        return StreamingResponse(live.events(shape), media_type=media, headers={"Cache-Control": "no-cache"})


def shape_of(path: str) -> Error:
    """The error shape of the protocol a path belongs to."""
    if path.startswith("/v1/"):
        return openai.error
    if path.startswith("/api/"):
        return ollama.error
    return llamacpp.error


def route(
    server: Server, error: Error, handler: Callable[[Request, dict[str, Any]], Awaitable[Response]], post: bool = True
):
    async def endpoint(request: Request) -> Response:
        try:
            if not server.allowed(request):
                return error("invalid or missing API key: send Authorization: Bearer KEY", 401)
            data = await body.read_json(request) if post else {}
            return await handler(request, data)
        except BadRequest as err:
            return error(str(err), err.status)
        except ClientGone:
            return error("the client went away", 499)
        except DlmcodeError as err:  # the request's own code, past a checker (too deeply nested to check)
            return error(str(err), 400)
        except Exception as err:  # a bug: one logged line, a 500, and the server goes on
            log.exception("dlmcode serve: %s %s failed", request.method, request.url.path)
            return error(f"internal error: {body.one_line(err)}", 500)

    return endpoint


def with_seeds(req: Fill, n: int) -> list[Fill]:
    return [replace(req, seed=req.seed + i) for i in range(n)]


def make_app(engine: Engine, api_key: str | None = None) -> Starlette:
    """The app of one Engine: the routes of the three protocols, and the queue closed when the server stops."""
    server = Server(engine, Queue(engine), api_key)

    async def not_found(request: Request, exc: Exception) -> Response:
        return shape_of(request.url.path)(f"no route {request.method} {request.url.path}", 404)

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return shape_of(request.url.path)(f"{request.method} is not allowed on {request.url.path}", 405)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        server.queue.close()  # Ctrl-C: requests still waiting are dropped, those decoding stop at their next call

    routes = llamacpp_routes(server) + openai_routes(server) + ollama_routes(server)
    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed}, lifespan=lifespan)
    app.state.server = server
    return app


def get(payload: Callable[[], Any]) -> Callable[[Request, dict[str, Any]], Awaitable[Response]]:
    """A GET route's handler that answers `payload()` as JSON."""

    async def handler(request: Request, data: dict[str, Any]) -> Response:
        return JSONResponse(payload())

    return handler


def llamacpp_routes(server: Server) -> list[Route]:
    """llama.cpp's: /infill (llama.vim, llama.vscode), /completion(s), /health, /props, /models, and `/`."""
    engine = server.engine

    async def infill(request: Request, data: dict[str, Any]) -> Response:
        return await answer(request, data, llamacpp.infill(data))

    async def completion(request: Request, data: dict[str, Any]) -> Response:
        return await answer(request, data, llamacpp.completion(data))

    async def answer(request: Request, data: dict[str, Any], req: Fill) -> Response:
        fields, n = llamacpp.response_fields(data), llamacpp.n_cmpl(data)
        if body.boolean(data, "stream", False):  # llama.cpp streams the first completion
            return await server.stream(request, [req], llamacpp.shape(engine, req.ceiling), SSE)
        answers = await server.fills(request, with_seeds(req, n))
        shaped = [llamacpp.render(a, engine, fields, i, req.ceiling) for i, a in enumerate(answers)]
        return JSONResponse(shaped[0] if n == 1 else shaped)

    async def root(request: Request, data: dict[str, Any]) -> Response:
        return PlainTextResponse("dlmcode is running")

    error = llamacpp.error
    return [
        Route("/infill", route(server, error, infill), methods=["POST"]),
        Route("/completion", route(server, error, completion), methods=["POST"]),
        Route("/completions", route(server, error, completion), methods=["POST"]),
        Route("/health", route(server, error, get(llamacpp.health), post=False), methods=["GET"]),
        Route("/props", route(server, error, get(lambda: llamacpp.props(engine)), post=False), methods=["GET"]),
        Route("/models", route(server, error, get(lambda: llamacpp.models(engine)), post=False), methods=["GET"]),
        Route("/", route(server, error, root, post=False), methods=["GET", "HEAD"]),
    ]


def openai_routes(server: Server) -> list[Route]:
    """OpenAI's: /v1/completions and /v1/models."""
    engine = server.engine

    async def v1_completions(request: Request, data: dict[str, Any]) -> Response:
        req, n = openai.completion(data), openai.count(data)
        if body.boolean(data, "stream", False):
            return await server.stream(request, with_seeds(req, n), openai.shape(engine), SSE)
        answers = await server.fills(request, with_seeds(req, n))
        return JSONResponse(openai.render(answers, engine))

    return [
        Route("/v1/completions", route(server, openai.error, v1_completions), methods=["POST"]),
        Route(
            "/v1/models", route(server, openai.error, get(lambda: openai.models(engine)), post=False), methods=["GET"]
        ),
    ]


def ollama_routes(server: Server) -> list[Route]:
    """Ollama's: /api/generate, /api/tags and /api/version."""
    engine = server.engine

    async def api_generate(request: Request, data: dict[str, Any]) -> Response:
        req = ollama.generate(data)
        if body.boolean(data, "stream", True):  # Ollama streams unless told not to
            return await server.stream(request, [req], ollama.shape(engine), "application/x-ndjson")
        answer = (await server.fills(request, [req]))[0]
        return JSONResponse(ollama.render(answer, engine))

    return [
        Route("/api/generate", route(server, ollama.error, api_generate), methods=["POST"]),
        Route("/api/tags", route(server, ollama.error, get(lambda: ollama.tags(engine)), post=False), methods=["GET"]),
        Route("/api/version", route(server, ollama.error, get(ollama.version), post=False), methods=["GET"]),
    ]
