"""`dlmcode serve` over the scripted tiny model, its decode held in one call until the test says
so: for the tests that stop a real server process while a decode is known to be in flight.

    python tests/gated_serve.py EVENTS_FD GO_FD [serve options...]

It writes `held` to EVENTS_FD when the decode reaches its held call and `stopping` once the
server has stopped its queue (what Ctrl-C and SIGTERM call); the held call goes on when a byte
arrives on GO_FD. Nothing here waits on a clock.
"""

from __future__ import annotations

import os
import sys

from dlmcode.cli import commands, shared
from dlmcode.serve.queue import Queue

from serve_tiny import Script, char_dlm

PREFIX = "x = "
HELD_AT = 3  # the decode's 3rd model call waits for the test
CALLS = 32  # a decode of 32 calls at block=1: it could not end while held, and ends at once when let go


def main() -> None:
    events, go = int(sys.argv[1]), int(sys.argv[2])
    script = Script(PREFIX, "1" * CALLS)

    def predict(tokens):
        if script.calls + 1 == HELD_AT:
            os.write(events, b"held\n")
            os.read(go, 1)
        return script(tokens)

    stop = Queue.stop

    def stop_and_say(queue: Queue) -> None:
        stop(queue)
        os.write(events, b"stopping\n")

    Queue.stop = stop_and_say
    shared.load_model = lambda choice, quiet: char_dlm(predict)
    commands.app(["serve", *sys.argv[3:]], prog_name="dlmcode")


if __name__ == "__main__":
    main()
