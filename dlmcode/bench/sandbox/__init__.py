"""Running generated code against its test: two jailed processes, a verdict the code cannot forge.

`run(program, test, entry_point)` starts two processes of harness.py (see its docstring):
the sample runs the program, the judge runs the test's check() with proxies that call the
sample's functions over pipes and get back plain data only. The sample passes only when
the judge reports that check() returned, on a pipe that only the judge and this process
hold. An exit status, anything printed, or an object with a rigged __eq__ counts for nothing.

Isolation (the rules; docs/benchmarks.md, "The sandbox", says the same to users): each process
jails itself before any untrusted code runs, in Linux namespaces set up through ctypes
(user, mount, network, PID, IPC, UTS, cgroup): nobody (65534) when dlmcode runs as root;
no network; a read-only root holding only the system folders and the Python installation,
with a size-capped, writable /tmp that disappears with it; a PID namespace whose init
takes every process left behind with it; a scrubbed environment; no capabilities and
no_new_privs; the installation's site-packages hidden; limits on wall-clock time, CPU
seconds, memory (the run's processes together in a cgroup where one can be made, see
cgroup.py; without one, no process or thread may be started), file size and process
count; and an audit hook as a second layer. Where the jail cannot be built (probed once
per process), `run` refuses with one line saying why (`SandboxUnavailable`), unless the
limits say `isolated=False` (the CLI's --unsafe-no-sandbox): then the same two processes
run with the limits and the audit hook only, which does not stop code written to escape.
"""

from __future__ import annotations

import contextlib
import functools
import marshal
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

from ...core.errors import DlmcodeError
from . import cgroup, harness
from .given import free_names, harness_code, interpreter, package_folders, python_folders, scrubbed_env
from .homes import remove_stale_homes as remove_stale_homes  # handed on: what sandbox.scratch runs first
from .homes import scratch

GRACE = 1.0  # seconds a failed run's sample gets to end by itself, so that we can say how it ended
REPORT_BYTES = 1 << 16  # the most we read of a report pipe
PROBE_TIMEOUT = 20.0  # seconds the one-time check of the jail may take
UNSAFE_OPTION = "--unsafe-no-sandbox"
# What each harness process runs: our compiled harness module and its header, read from stdin.
BOOT = (
    "import marshal,sys\n"
    "code,header=marshal.loads(sys.stdin.buffer.read())\n"
    "space={'__name__':'harness'}\n"
    "exec(code,space)\n"
    "space['main'](header)"
)


class SandboxUnavailable(DlmcodeError):
    """Generated code cannot be isolated on this machine (and the user did not opt out)."""


class SandboxError(DlmcodeError):
    """The jail failed to build for one run although the probe had built it."""


@dataclass(frozen=True)
class Limits:
    """How far one test run may go, and whether it is isolated."""

    timeout: float = 10.0  # wall-clock seconds before both processes are killed
    cpu: int = 5  # CPU seconds per process (RLIMIT_CPU: SIGXCPU, then SIGKILL a second later)
    # MiB: the run's processes together (a cgroup: the kernel kills one past it), and each one's address space
    # (RLIMIT_AS: MemoryError)
    memory_mb: int = 1024
    output_mb: int = 4  # largest file (stdout/stderr included) a process may write (RLIMIT_FSIZE)
    scratch_mb: int = 64  # size of the writable /tmp inside the jail
    processes: int = (
        16  # processes and threads at once in a jail (RLIMIT_NPROC, per user namespace); 1 without a cgroup
    )
    isolated: bool = True  # False: no jail, only limits and the audit hook (--unsafe-no-sandbox)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "isolated" and getattr(self, f.name) <= 0:
                raise ValueError(f"sandbox {f.name} must be positive, got {getattr(self, f.name)}")
            most = LIMITS_MOST.get(f.name)
            if most is not None and getattr(self, f.name) > most:  # 1e308 s overflowed the timer to a traceback
                raise ValueError(f"sandbox {f.name} must be at most {most}, got {getattr(self, f.name)}")


# The most a test run may be given, our bounds: an hour of wall clock or CPU for one task's tests is
# already no benchmark, and RLIMIT_AS in bytes must fit 64 bits (a TiB is far past any test).
LIMITS_MOST = {"timeout": 3600.0, "cpu": 3600, "memory_mb": 1 << 20, "output_mb": 1 << 20, "scratch_mb": 1 << 20}


@dataclass(frozen=True)
class Outcome:
    """How a test run ended."""

    status: str  # passed, failed, timeout, cpu-limit, memory, output-limit, killed
    returncode: int | None  # the sample's exit status (-N: signal N); None when it did not end by itself
    seconds: float
    detail: str  # why the judge failed it (the assertion or exception), or why it was stopped

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def run(program: str, test: str, entry_point: str, limits: Limits = Limits(), audit: bool = True) -> Outcome:
    """Judge `program` (the code, without its test) by `test`'s check(entry_point).

    `audit=False` leaves out the in-process audit hook, so that tests can show what the jail
    alone holds.
    """
    if limits.isolated:
        require()
    with scratch() as home, run_group(limits) as group:
        start = time.perf_counter()
        judge, sample = _Pair(Path(home), program, test, entry_point, limits, audit, group).wait(start + limits.timeout)
        seconds = time.perf_counter() - start
        oom = group is not None and group.oom_killed()
    return _outcome(judge, sample, seconds, oom)


@contextlib.contextmanager
def run_group(limits: Limits) -> Iterator[cgroup.RunGroup | None]:
    """The run's cgroup (its memory limit counts all its processes together), or None where none can
    be made: then a jailed run may start no process or thread (see `nproc`)."""
    found = cgroup.place()
    try:
        group = cgroup.RunGroup(found, limits.memory_mb << 20) if found else None
    except OSError:
        group = None
    try:
        yield group
    finally:
        if group is not None:
            group.close()


def nproc(limits: Limits, group: cgroup.RunGroup | None) -> int:
    """RLIMIT_NPROC for a run: its limit with a cgroup; without one, 1 (no new process or thread, the three
    of the jail are already past it), since a child would get --memory MiB of its own."""
    return limits.processes if group is not None else 1


# ---------------------------------------------------------------- isolation: available or refused


def require() -> None:
    """Refuse (one line: why, and how to opt out) where the jail cannot be built."""
    reason = unavailable()
    if reason:
        raise SandboxUnavailable(
            f"cannot isolate generated code on this machine: {reason}; to run it anyway "
            f"without isolation, only on a machine you can throw away, pass {UNSAFE_OPTION}"
        )


@functools.cache
def unavailable() -> str | None:
    """Why the jail cannot be built here, or None when it can (tried once per process)."""
    if sys.platform != "linux":
        return f"it needs Linux namespaces ({sys.platform} has none)"
    if os.uname().machine not in harness.PIVOT_ROOT:
        return f"dlmcode does not know pivot_root's system call number on {os.uname().machine}"
    with scratch() as home:
        try:
            proc, report_r = _spawn(Path(home), "probe", {}, Limits(), audit=False)
        except OSError as err:
            return f"Python could not be started ({err})"
        lines, _ = _read_report(report_r, time.perf_counter() + PROBE_TIMEOUT, stop=lambda line: "verdict" in line)
        _kill(proc)
    for line in lines:
        if "error" in line:
            return f"the jail could not be built ({line['error']})"
        if "verdict" in line:
            return None if line["verdict"] == "passed" else f"the jail leaks ({line.get('detail')})"
    return "the jail did not start"


# ---------------------------------------------------------------- one run: the judge and the sample


class _Pair:
    """The judge and the sample of one run, joined by two pipes; this process keeps the report pipes."""

    def __init__(
        self,
        home: Path,
        program: str,
        test: str,
        entry_point: str,
        limits: Limits,
        audit: bool,
        group: cgroup.RunGroup | None = None,
    ):
        calls_r, calls_w = os.pipe()
        answers_r, answers_w = os.pipe()
        names = sorted(free_names(test) | {entry_point})
        judged = {"code": test, "entry": entry_point, "names": names}
        try:
            self.judge, self.judge_report = _spawn(
                home, "judge", {"calls": calls_w, "answers": answers_r}, limits, audit, judged, group
            )
            try:
                self.sample, self.sample_report = _spawn(
                    home, "sample", {"calls": calls_r, "answers": answers_w}, limits, audit, {"code": program}, group
                )
            except BaseException:
                _kill(self.judge)
                os.close(self.judge_report)
                raise
        finally:
            for fd in (calls_r, calls_w, answers_r, answers_w):
                os.close(fd)

    def wait(self, deadline: float) -> tuple[list[dict], list[dict]]:
        """The judge's report lines, then the sample's (read until it ends, or GRACE, on a failure)."""
        try:
            judge, _ = _read_report(self.judge_report, deadline, stop=lambda line: line.get("verdict") == "passed")
            passed = any(line.get("verdict") == "passed" for line in judge)
            sample_by = deadline if not passed else time.perf_counter()
            sample, _ = _read_report(self.sample_report, min(sample_by, time.perf_counter() + GRACE))
        finally:
            _kill(self.judge)
            _kill(self.sample)
        return judge, sample


# (one typed parameter a line is ruff's layout for a long signature: the shape `duplicates` pairs with
# renoise.Renoise.commit's, with nothing shared)
def _spawn(
    home: Path,
    role: str,
    fds: dict[str, int],
    limits: Limits,
    audit: bool,
    extra: dict | None = None,
    group: cgroup.RunGroup | None = None,
) -> tuple[subprocess.Popen, int]:
    """Start one harness process; returns it and the read end of its report pipe."""
    report_r, report_w = os.pipe()
    fds = {**fds, "report": report_w}
    folder = home / role
    folder.mkdir()
    header = {
        "role": role,
        "fds": fds,
        "audit": audit,
        "python": python_folders(everything=True),
        "bench": os.getpid(),
        **(extra or {}),
        "limits": {
            "cpu": limits.cpu,
            "memory": limits.memory_mb << 20,
            "fsize": limits.output_mb << 20,
            "nproc": nproc(limits, group),
        },
        "jail": _jail_spec(limits) if limits.isolated else None,
    }
    try:
        with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
            proc = subprocess.Popen(
                [interpreter(), "-I", "-S", "-B", "-c", BOOT],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                pass_fds=tuple(fds.values()),
                cwd=folder,
                env=scrubbed_env(folder, limits.isolated),
                start_new_session=True,  # its own process group, killed as one; no signal of ours reaches it
            )
    finally:
        os.close(report_w)
    _join(proc, report_r, group)
    try:
        proc.stdin.write(marshal.dumps((harness_code(), header)))
        proc.stdin.close()
    except OSError:
        pass  # it died before reading: its report says nothing, which reads as a failure
    return proc, report_r


def _join(proc: subprocess.Popen, report_r: int, group: cgroup.RunGroup | None) -> None:
    """Put a harness process in the run's cgroup while it still waits for its header on stdin:
    nothing of the run has started yet, and all it starts will be counted there."""
    if group is None:
        return
    try:
        group.add(proc.pid)
    except OSError as err:
        _kill(proc)
        os.close(report_r)
        raise SandboxError(f"the test run could not be put in its cgroup ({err.strerror or err})") from None


def _jail_spec(limits: Limits) -> dict:
    return {
        "uid": harness.NOBODY,
        "gid": harness.NOBODY,
        "python": python_folders(),
        "scratch_mb": limits.scratch_mb,
        "hide": package_folders(),
    }


def _read_report(fd: int, deadline: float, stop=lambda line: False) -> tuple[list[dict], bool]:
    """The messages (dicts) of a report pipe until end of file (True), `stop` or the deadline (False); closes it."""
    data, ended = b"", False
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while len(data) < REPORT_BYTES:
            left = deadline - time.perf_counter()
            if left <= 0 or not sel.select(left):
                break
            chunk = os.read(fd, REPORT_BYTES)
            if not chunk:
                ended = True
                break
            data += chunk
            if any(stop(line) for line in _lines(data)):
                break
    os.close(fd)
    return _lines(data), ended


def _lines(data: bytes) -> list[dict]:
    return [line for line in harness.frames(data) if type(line) is dict]


def _kill(proc: subprocess.Popen) -> None:
    """Kill a harness process's group; in a jail its PID namespace goes with it (its init dies too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


# ---------------------------------------------------------------- the verdict


def _outcome(judge: list[dict], sample: list[dict], seconds: float, oom: bool = False) -> Outcome:
    for line in judge + sample:
        if "error" in line:
            raise SandboxError(f"the sandbox could not start a test run: {line['error']}")
    verdict = next((line for line in judge if "verdict" in line), None)
    ended = _end(sample)
    if verdict and verdict["verdict"] == "passed":
        return Outcome("passed", ended, seconds, "")
    if verdict is None and _end(judge) is None:
        return Outcome("timeout", ended, seconds, "stopped at the wall-clock timeout")
    detail = str(verdict.get("detail", "")) if verdict else _why(_end(judge))
    if oom:  # killed by the kernel (SIGKILL) for the run's memory as a whole: say so rather than "killed"
        return Outcome(
            "memory", ended, seconds, f"the run passed its memory limit and the kernel killed a process ({detail})"
        )
    return Outcome(_status(detail, ended, _end(judge)), ended, seconds, detail)


def _end(lines: list[dict]) -> int | None:
    """A process's worker's exit status (-N: killed by signal N), from its reaper; None if unknown."""
    for line in lines:
        if "end" in line:
            return -int(line["code"]) if line["end"] == "signal" else int(line["code"])
    return None


def _status(detail: str, sample: int | None, judge: int | None) -> str:
    for code in (sample, judge):
        if code is not None and code < 0:
            return "cpu-limit" if -code == signal.SIGXCPU else "output-limit" if -code == signal.SIGXFSZ else "killed"
    if "MemoryError" in detail:
        return "memory"
    if "File too large" in detail:
        return "output-limit"
    return "failed"


def _why(code: int | None) -> str:
    if code is None:
        return "the judge ended without a verdict"
    if code < 0:
        return f"the judge was killed by {signal.Signals(-code).name}"
    return f"the judge ended with exit status {code} and no verdict"
