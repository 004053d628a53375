"""Ports for the tests that start servers and bench ranks as separate processes."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path


def free_port() -> int:
    """A free port below the kernel's ephemeral range, for a server or MASTER_PORT that another
    process will listen on.

    Not one from bind(("", 0)): a client that connects to an ephemeral port before the server
    listens on it can be given that same port as its own and connect to itself (TCP simultaneous
    open): torch's store then waits on a peer that is itself, and the server finds its port taken.
    """
    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ranges.read_text().split()[0]) if ranges.exists() else 32768
    for port in random.sample(range(10000, max(low, 10001)), min(200, max(low - 10000, 1))):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def rank_env(rank: int, world: int, port: int, **more: str) -> dict[str, str]:
    """The environment torchrun gives worker `rank` of `world` on one machine."""
    return os.environ | {
        "WORLD_SIZE": str(world),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        **more,
    }
