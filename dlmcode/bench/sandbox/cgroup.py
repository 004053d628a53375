"""A memory limit on a whole test run: one cgroup holds its processes and all they start.

RLIMIT_AS (harness.limit) bounds each process's address space, so a program that forked six
children of 900 MB took 3.1 GB under --memory 1024. A cgroup counts the run's processes
together; past its limit the kernel's OOM killer ends the run's largest process. Where one
can be made (probed once per process, as the jail is):

- cgroup v2: a child of the nearest folder, from our own cgroup up, that we may write and whose
  cgroup.subtree_control lists memory (root on a systemd host: the root cgroup; a user: a
  delegated subtree); memory.max, and memory.swap.max 0 so that the run cannot swap past it.
- cgroup v1 (the memory hierarchy): a child of our own memory cgroup, or of the nearest folder
  above it that we may write (root); memory.limit_in_bytes, and memory.memsw.limit_in_bytes.

Where neither can (not root and nothing delegated, no memory controller, not Linux), `place()`
is None and the sandbox forbids a jailed run to start any process or thread (RLIMIT_NPROC 1,
__init__.py), so its memory is at most two processes of --memory MiB each. A run's cgroup is
named dlmcode-<pid>-<random>; one a killed bench left is removed by the next bench.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "dlmcode-"
EMPTY_WAIT = 2.0  # seconds a finished run's processes get to leave its cgroup (its PID namespace is torn down)


@dataclass(frozen=True)
class Place:
    """Where runs' cgroups are made, and which cgroup version's files they have."""

    parent: Path
    version: int  # 1 or 2

    def limit_files(self, limit: int) -> list[tuple[str, str]]:
        if self.version == 2:
            return [("memory.max", str(limit)), ("memory.swap.max", "0")]
        return [
            ("memory.limit_in_bytes", str(limit)),
            ("memory.memsw.limit_in_bytes", str(limit)),
        ]  # memsw after: it may not be below

    @property
    def events(self) -> str:
        return "memory.events" if self.version == 2 else "memory.oom_control"


class RunGroup:
    """One run's cgroup: processes are added as they start; closing waits for them to be gone and removes it."""

    def __init__(self, place: Place, limit: int) -> None:
        remove_pending()
        self.place = place
        self.path = place.parent / f"{PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
        self.path.mkdir()
        try:
            for name, value in place.limit_files(limit):
                if (self.path / name).exists():  # memory.swap.max without swap accounting, memsw without swap
                    (self.path / name).write_text(value)
        except OSError:
            self.close()
            raise

    def add(self, pid: int) -> None:
        """Move `pid` in before it runs anything of the run's: what it and its children allocate is counted."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def oom_killed(self) -> bool:
        """Whether the kernel killed one of the run's processes for passing the limit."""
        try:
            lines = (self.path / self.place.events).read_text().splitlines()
        except OSError:
            return False
        return any(line.split()[:1] == ["oom_kill"] and line.split()[1:2] != ["0"] for line in lines)

    def close(self) -> None:
        """Remove the cgroup, or, while its processes are still leaving (a few ms after the run), later:
        at the next run's start or at exit, so that no run waits for the one before."""
        if not remove(self.path, 0):
            with PENDING_LOCK:
                PENDING.append(self.path)
            remove_at_exit()


PENDING: list[Path] = []  # closed runs' cgroups not yet empty
PENDING_LOCK = threading.Lock()  # runs may be judged from several threads


@functools.cache
def remove_at_exit() -> None:
    atexit.register(remove_pending, EMPTY_WAIT)  # once per process


def remove_pending(wait: float = 0) -> None:
    with PENDING_LOCK:
        PENDING[:] = [path for path in PENDING if not remove(path, wait)]


def remove(path: Path, wait: float) -> bool:
    """rmdir a run's cgroup, waiting up to `wait` seconds for its processes to end (cgroup v2 kills them)."""
    kill = path / "cgroup.kill"  # v2 (Linux 5.14): every process in it, atomically; v1: they die with their namespace
    deadline = time.monotonic() + wait
    while True:
        try:
            if kill.exists() and _procs(path):
                kill.write_text("1")
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:  # EBUSY: processes still in it
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)  # the namespace is torn down in a few ms: poll closely


def _procs(path: Path) -> list[str]:
    try:
        return (path / "cgroup.procs").read_text().split()
    except OSError:
        return []


# ---------------------------------------------------------------- where: probed once per process


@functools.cache
def place() -> Place | None:
    """Where this process can make runs' cgroups with a memory limit, or None (tried for real, once)."""
    for version in (2, 1):
        for folder in candidates(version):
            found = Place(folder, version)
            try:
                RunGroup(found, 64 << 20).close()
            except OSError:
                continue
            remove_stale(found)
            return found
    return None


def candidates(version: int) -> list[Path]:
    """Folders that could take a run's cgroup: our own cgroup, then each above it, nearest first."""
    own = own_folder(version)
    if own is None:
        return []
    chain = [own, *own.parents]
    mount = mount_point(version)
    chain = [f for f in chain if mount is not None and (f == mount or mount in f.parents)]
    return [f for f in chain if usable(f, version)]


def usable(folder: Path, version: int) -> bool:
    if not os.access(folder, os.W_OK):
        return False
    if version == 1:
        return (folder / "memory.limit_in_bytes").exists()
    try:
        return "memory" in (folder / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


def own_folder(version: int) -> Path | None:
    """Our cgroup's folder in the version's hierarchy (the memory controller's, for v1)."""
    mount = mount_point(version)
    if mount is None:
        return None
    for line in proc_lines("/proc/self/cgroup"):
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (version == 2 and number == "0" and not controllers) or (
            version == 1 and "memory" in controllers.split(",")
        ):
            return mount / path.lstrip("/")
    return None


def proc_lines(path: str) -> list[str]:
    """The lines of a /proc file; none where it cannot be read (no cgroup can be found then)."""
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


@functools.cache
def mount_point(version: int) -> Path | None:
    """Where the hierarchy is mounted (cgroup2; v1's with the memory controller), from mountinfo."""
    for line in proc_lines("/proc/self/mountinfo"):
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if fields[3] != "/":
            # a bind of part of the hierarchy (a container's view): paths in /proc/self/cgroup do not start there
            continue
        if (version == 2 and tail[0] == "cgroup2") or (
            version == 1 and tail[0] == "cgroup" and "memory" in tail[2].split(",")
        ):
            return Path(fields[4])
    return None


def remove_stale(found: Place) -> list[Path]:
    """The cgroups of benches that are gone (pid in the name dead), removed when empty."""
    from ...core.files import alive

    removed = []
    for path in found.parent.glob(f"{PREFIX}*-*"):
        pid = path.name[len(PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)) and remove(path, 0):
            removed.append(path)
    return removed
