"""A bench under torchrun: this process's rank, its share of the tasks, joining the others (within
JOIN_TIMEOUT), gathering every rank's samples on rank 0, and failing fast when one rank fails."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..core.errors import DlmcodeError
from .metrics import Sample

GATHER_TIMEOUT = timedelta(hours=12)  # ranks that finish early wait this long for the others
JOIN_TIMEOUT = timedelta(minutes=3)  # ranks wait about this long for each other at the start (before the model)
FAILED_KEY = "dlmcode/bench/failed"  # set in the process group's store by a rank that fails, read by the others


@dataclass(frozen=True)
class Ranks:
    """This process's place in a torchrun launch (one process: rank 0 of 1)."""

    rank: int = 0
    world: int = 1
    local: int = 0  # rank on this machine
    local_world: int = 1  # processes on this machine

    @classmethod
    def from_env(cls) -> Ranks:
        env = os.environ
        world = int(env.get("WORLD_SIZE", 1))
        return cls(
            int(env.get("RANK", 0)), world, int(env.get("LOCAL_RANK", 0)), int(env.get("LOCAL_WORLD_SIZE", world))
        )

    @property
    def lead(self) -> bool:
        return self.rank == 0

    def device(self, device: str) -> str:
        """Each rank on its own GPU where there are several (ranks share them round-robin otherwise)."""
        import torch

        if self.world > 1 and device in ("auto", "cuda") and torch.cuda.is_available():
            return f"cuda:{self.local % torch.cuda.device_count()}"
        return device

    def share(self, items: list) -> list:
        return items[self.rank :: self.world]

    def start(self, device_type: str) -> None:
        """Join the process group: nccl when every rank has a GPU of its own, gloo otherwise.

        The only collective is one gather of Python objects, so gloo serves CUDA runs too;
        NCCL refuses two ranks on one GPU.
        """
        import torch
        import torch.distributed as dist

        if self.world == 1 or dist.is_initialized():
            return
        own_gpu = device_type == "cuda" and self.local_world <= torch.cuda.device_count()
        if own_gpu:
            torch.cuda.set_device(self.local)
        store = self.meet()
        dist.init_process_group(
            "nccl" if own_gpu else "gloo", store=store, rank=self.rank, world_size=self.world, timeout=GATHER_TIMEOUT
        )

    def meet(self) -> Any:
        """The ranks' store (env://, as torchrun sets it up), reached within JOIN_TIMEOUT.

        init_process_group alone would wait its collective timeout (GATHER_TIMEOUT, hours) for a
        rank that failed before joining (a bad flag, a missing file): every rank starts together,
        so one that has not come within minutes is not coming.
        """
        import torch.distributed as dist

        start = time.monotonic()
        try:
            with native_stderr_silenced():  # torch's C++ logs each retry and the timeout, frames and all
                store, _, _ = next(dist.rendezvous("env://", self.rank, self.world, timeout=JOIN_TIMEOUT))
        except (RuntimeError, ValueError) as err:  # DistNetworkError, DistStoreError: RuntimeErrors
            # (a client rank tries twice, so it waits up to twice JOIN_TIMEOUT: say what it waited)
            where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
            raise DlmcodeError(
                f"rank {self.rank} of {self.world}: the other ranks did not join at {where} in "
                f"{time.monotonic() - start:.0f} s ({str(err).strip().splitlines()[0][:200]})"
            ) from None
        store.set_timeout(JOIN_TIMEOUT)
        return store

    def join(self, device: str) -> None:
        """start() for the device `device` names (before the model loads): CUDA when it resolves to CUDA."""
        import torch

        name = self.device(device)
        cuda = name.startswith("cuda") or (name == "auto" and torch.cuda.is_available())
        self.start("cuda" if cuda else "cpu")

    def gather(self, rows: list[dict]) -> list[dict] | None:
        """Every rank's rows on rank 0 (None elsewhere); then leave the process group."""
        if self.world == 1:
            return rows
        import torch.distributed as dist

        parts: list | None = [None] * self.world if self.lead else None
        try:
            dist.gather_object(rows, parts, dst=0)
        except RuntimeError as err:  # a rank died after joining: gloo/nccl notice the closed connection
            raise DlmcodeError(
                f"rank {self.rank}: {self.failed() or 'another rank stopped'} "
                f"({str(err).strip().splitlines()[0][:200]})"
            ) from None
        dist.destroy_process_group()
        return [row for part in parts for row in part] if parts is not None else None

    def store(self) -> Any:
        """The process group's key-value store, or None outside a joined multi-rank run."""
        import torch.distributed as dist

        if self.world == 1 or not dist.is_initialized():
            return None
        return dist.distributed_c10d._get_default_store()

    def failed(self) -> str | None:
        """What a rank that failed reported ('rank N failed: why'), or None."""
        store = self.store()
        if store is None:
            return None
        try:
            return store.get(FAILED_KEY).decode() if store.check([FAILED_KEY]) else None
        except RuntimeError:  # rank 0, which holds the store, is gone
            return "rank 0 stopped"

    @contextlib.contextmanager
    def failing_fast(self) -> Iterator[None]:
        """On an error in this rank, tell the others through the store before leaving, so that they
        stop at their next sample instead of waiting at the gather (GATHER_TIMEOUT) for this one."""
        try:
            yield
        except BaseException as err:
            store = self.store()
            if store is not None and not isinstance(err, GeneratorExit):
                with contextlib.suppress(Exception):
                    if not store.check([FAILED_KEY]):
                        why = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
                        store.set(FAILED_KEY, f"rank {self.rank} failed: {why}")
            raise


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """File descriptor 2 to /dev/null for a while: what C++ code writes there (Python's own
    errors are raised, and reported in one line by the command)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def watched(stream: Iterator[Sample], ranks: Ranks) -> Iterator[Sample]:
    """`stream`, stopping with one clear error as soon as another rank reports that it failed."""
    for sample in stream:
        yield sample
        why = ranks.failed() if ranks.world > 1 else None
        if why:
            raise DlmcodeError(f"stopping rank {ranks.rank}: {why}; run the same command again to resume")
