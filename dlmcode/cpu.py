"""CPU threads for the command line: a default that holds up when the machine is busy.

torch starts one intra-op thread per core. On a 2-core machine that another process keeps
busy, those threads spin-wait on each other and an infill ran 7 to 10 times slower than on
one thread (issue 13; `python -m dlmcode.bench.threads` measures it). The CLI owns its
process, so it sets torch's threads once, before loading a model; the library never does.

DLMCODE_THREADS=N sets the count; OMP_NUM_THREADS (which torch reads itself) is respected
when set; otherwise DEFAULT_THREADS.
"""

from __future__ import annotations

import os

ENV = "DLMCODE_THREADS"
DEFAULT_THREADS = 1  # measured choice: see README "Threads"; `python -m dlmcode.bench.threads` re-measures


def threads_wanted(env: dict[str, str] | None = None) -> int | None:
    """Threads to set: DLMCODE_THREADS, else DEFAULT_THREADS unless OMP_NUM_THREADS is set (None: leave torch's)."""
    from .errors import UsageError

    env = os.environ if env is None else env
    raw = env.get(ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise UsageError(f"{ENV}={raw!r}: give a number of threads, 1 or more")
        return int(raw)
    if env.get("OMP_NUM_THREADS", "").strip():
        return None
    return min(DEFAULT_THREADS, os.cpu_count() or 1)


def configure_threads() -> int:
    """Set torch's intra-op threads as threads_wanted says; return the count in use."""
    import torch

    wanted = threads_wanted()
    if wanted is not None and wanted != torch.get_num_threads():
        torch.set_num_threads(wanted)
    return torch.get_num_threads()
