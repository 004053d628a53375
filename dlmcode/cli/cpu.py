"""CPU threads for the command line: a default that holds up when the machine is busy.

torch starts one intra-op thread per core. On a 2-core machine that another process keeps
busy, those threads spin-wait on each other and an infill ran 7 to 10 times slower than on
one thread (issue 13; `python -m benchmarks.threads` measures it). The CLI owns its
process, so it sets torch's threads once, before loading a model; the library never does.

DLMCODE_THREADS=N sets the count, 1 to the machine's cores (more is refused with one line:
more intra-op threads than cores only oversubscribe them, which is what this module avoids,
and 100000 made torch fail to start threads and then crash; an error rather than a silent
clamp, since every other bad setting is refused and the number asked for is the number run);
OMP_NUM_THREADS (which torch reads itself) is respected
when set; otherwise the cores the last minute's load average leaves free, at least 1 and at
most torch's own default. Measured on 2 shared cores (docs/usage.md, "Threads"): torch's 2 threads
took 11.2 s (other jobs running) and 46.8 s (2 busy loops added) for an infill that 1 thread
did in 1.7 s and 6.3 s. Running one thread short of free cores costs far less than
oversubscribing them, so the load is rounded up.
"""

from __future__ import annotations

import math
import os
import re

ENV = "DLMCODE_THREADS"
INT = re.compile(r"[0-9]+")


def threads_wanted(
    env: dict[str, str] | None = None,
    cores: int | None = None,
    load: float | None = None,
    torch_default: int | None = None,
) -> int | None:
    """Threads to set: DLMCODE_THREADS, else free_cores() unless OMP_NUM_THREADS is set (None: leave torch's)."""
    env = os.environ if env is None else env
    cores = cores or os.cpu_count() or 1
    asked = threads_asked(env, cores)
    if asked is not None:
        return asked
    if env.get("OMP_NUM_THREADS", "").strip():
        return None
    return free_cores(cores, load_average() if load is None else load, torch_default or default_threads())


def threads_asked(env: dict[str, str] | None = None, cores: int | None = None) -> int | None:
    """DLMCODE_THREADS as a count from 1 to `cores` (None when unset), or a UsageError; needs no torch."""
    from ..core.errors import UsageError

    env = os.environ if env is None else env
    cores = cores or os.cpu_count() or 1
    raw = env.get(ENV, "").strip()
    if not raw:
        return None
    if not INT.fullmatch(raw) or int(raw) < 1:  # ASCII digits, as every number (settings.py)
        raise UsageError(f"{ENV}={raw!r}: give a number of threads, 1 or more")
    if int(raw) > cores:
        raise UsageError(f"{ENV}={raw}: this machine has {cores} CPU cores; give 1 to {cores}")
    return int(raw)


def free_cores(cores: int, load: float, most: int) -> int:
    """Cores not taken by other work (the load rounded up), at least 1, at most `most`."""
    return max(1, min(most, cores - math.ceil(load)))


def load_average() -> float:
    """The last minute's run-queue average; 0 where the platform has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def default_threads() -> int:
    import torch

    return torch.get_num_threads()


def configure_threads() -> int:
    """Set torch's intra-op threads as threads_wanted says; return the count in use."""
    import torch

    wanted = threads_wanted()
    if wanted is not None and wanted != torch.get_num_threads():
        torch.set_num_threads(wanted)
    return torch.get_num_threads()
