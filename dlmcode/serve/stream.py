"""Streams: the fill's text sent as the decode settles it, in each protocol's own shape.

The engine hands each new piece of final text to an `emit` callback in the decode's thread
(engine.settled: whole lines no later step or rule can change); `Live` carries those pieces
and then the answers onto the event loop, one request's fills (OpenAI's `n`) together. A
route awaits `Live.first()` before it answers, so a request refused in the queue (a mask
token in its text, a client already gone) still gets its 4xx; after that, each protocol's
`Shape` turns pieces and answers into server-sent events (llama.cpp, OpenAI) or JSON lines
(Ollama). A client that leaves mid-stream cancels its decodes (the others in the batch go on).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import DlmcodeError
from .engine import Answer, Emit
from .request import Fill

log = logging.getLogger("dlmcode.serve")
DONE_SSE = "data: [DONE]\n\n"  # OpenAI's last event


def sse(data: Mapping[str, Any]) -> str:
    """One server-sent event carrying a JSON object."""
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def ndjson(data: Mapping[str, Any]) -> str:
    """One line of newline-delimited JSON (Ollama's stream)."""
    return json.dumps(data, ensure_ascii=False) + "\n"


@dataclass(frozen=True)
class Shape:
    """How a protocol streams: a piece of fill i's text, fill i's closing event(s), the stream's last line, an error."""

    piece: Callable[[int, str], str]
    end: Callable[[int, Answer], str]
    error: Callable[[str], str]
    last: str = ""


Item = tuple[int, str | Answer | BaseException]  # (fill index, a piece of text, its answer, or its error)


class Live:
    """One request's fills decoding: their pieces as they come, then their answers, on the event loop."""

    def __init__(self, reqs: list[Fill], answer: Callable[[Fill, Emit], Awaitable[Answer]]) -> None:
        self.items: asyncio.Queue[Item] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def emitter(i: int) -> Emit:
            def emit(piece: str) -> None:
                with contextlib.suppress(RuntimeError):  # the loop has closed: the server is stopping
                    loop.call_soon_threadsafe(self.items.put_nowait, (i, piece))

            return emit

        self.tasks = [asyncio.create_task(self.follow(i, answer(req, emitter(i)))) for i, req in enumerate(reqs)]
        self.open = len(reqs)  # fills not answered yet
        self.head: Item | None = None

    async def follow(self, i: int, answering: Awaitable[Answer]) -> None:
        try:
            self.items.put_nowait((i, await answering))
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # handed to the route (before the stream starts) or ends the stream
            self.items.put_nowait((i, err))

    async def first(self) -> None:
        """Wait for the first piece or answer; its error (BadRequest, ClientGone, ...) is
        raised here, before any event."""
        self.head = await self.items.get()
        if isinstance(self.head[1], BaseException):
            self.cancel()
            raise self.head[1]

    async def events(self, shape: Shape) -> AsyncIterator[str]:
        """The protocol's events: pieces as they come, each fill's rest and end, then `shape.last`."""
        sent = [""] * len(self.tasks)
        item = self.head
        try:
            while item is not None:
                i, what = item
                if isinstance(what, BaseException):
                    yield shape.error(failure(what))
                    return
                if isinstance(what, str):
                    sent[i] += what
                    yield shape.piece(i, what)
                else:
                    yield closing(shape, i, what, sent[i])
                    self.open -= 1
                item = await self.items.get() if self.open else None
            yield shape.last
        finally:
            self.cancel()  # the client left mid-stream (Starlette cancels this generator): stop the decodes

    def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()


def closing(shape: Shape, i: int, answer: Answer, sent: str) -> str:
    """What was not sent of fill i (its text starts with what was: engine.settled), then its end."""
    if not answer.text.startswith(sent):  # a bug in engine.settled: say so rather than send a wrong join
        log.error("dlmcode serve: a stream sent %r, which the fill %r does not start with", sent, answer.text)
    rest = answer.text[len(sent) :] if answer.text.startswith(sent) else ""
    return (shape.piece(i, rest) if rest else "") + shape.end(i, answer)


def failure(err: BaseException) -> str:
    from .steps import ClientGone

    if isinstance(err, ClientGone):
        return "the decode was cancelled"
    if isinstance(err, DlmcodeError):  # the request's own (code too deeply nested to check): no bug to log
        return " ".join(str(err).split())[:200]
    log.error("dlmcode serve: a streamed decode failed", exc_info=err)
    return f"internal error: {' '.join(str(err).split())[:200]}"
