"""CPU threads for the command line: a default that holds up when the machine is busy.

torch starts one intra-op thread per core. On a 2-core machine that another process keeps
busy, those threads spin-wait on each other and an infill ran 7 to 10 times slower than on
one thread (issue 13; `python -m dlmcode.bench.threads` measures it). The CLI owns its
process, so it sets torch's threads once, before loading a model; the library never does.

DLMCODE_THREADS=N sets the count; OMP_NUM_THREADS (which torch reads itself) is respected
when set; otherwise the cores the last minute's load average leaves free, at least 1 and at
most torch's own default. Measured on 2 shared cores (docs/usage.md, "Threads"): torch's 2 threads
took 11.2 s (other jobs running) and 46.8 s (2 busy loops added) for an infill that 1 thread
did in 1.7 s and 6.3 s. Running one thread short of free cores costs far less than
oversubscribing them, so the load is rounded up.
"""

from __future__ import annotations

import math
import os

ENV = "DLMCODE_THREADS"


def threads_wanted(env: dict[str, str] | None = None, cores: int | None = None, load: float | None = None,
                   torch_default: int | None = None) -> int | None:
    """Threads to set: DLMCODE_THREADS, else free_cores() unless OMP_NUM_THREADS is set (None: leave torch's)."""
    from .errors import UsageError

    env = os.environ if env is None else env
    raw = env.get(ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise UsageError(f"{ENV}={raw!r}: give a number of threads, 1 or more")
        return int(raw)
    if env.get("OMP_NUM_THREADS", "").strip():
        return None
    return free_cores(cores or os.cpu_count() or 1, load_average() if load is None else load, torch_default or default_threads())


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
