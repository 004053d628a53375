"""Running generated code: one fresh `python -I` process per test, fenced in.

The fences: a wall-clock timeout (the whole process group is killed), RLIMIT_CPU,
RLIMIT_AS (memory), RLIMIT_FSIZE (output), no core dumps, a fresh temporary working
directory (also HOME and TMPDIR) that is deleted afterwards, a scrubbed environment, stdin
closed, and an audit hook (PEP 578) that refuses to open, list or change paths outside
that directory and the Python installation, and refuses subprocesses, sockets and ctypes.
An infinite loop, a crash or a memory bomb ends as a failed Outcome, never an exception
here. This keeps honest mistakes of generated code away from the user's files; it is not
a security boundary against code written to escape (use a container for that).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PROGRAM = "program.py"
STDERR_TAIL = 400  # characters of the program's stderr kept in Outcome.detail

# Runs in the child before the program: limits, then the audit hook, then the program.
LAUNCHER = r"""
import os, resource, sys, sysconfig
memory, cpu, fsize = (int(v) for v in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
home = (os.path.realpath(os.getcwd()),)
python = (sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values())
reads = home + tuple({os.path.realpath(p) for p in python if p})
DENIED = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
          "pty.spawn", "socket.", "ctypes.", "os.kill", "os.chdir", "os.symlink", "os.link", "os.chmod",
          "os.chown", "shutil.")
LOOKS = {"os.listdir", "os.scandir"}
CHANGES = {"os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.truncate", "os.utime"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

def inside(path, roots):
    if isinstance(path, int):
        return True
    path = os.path.realpath(os.fsdecode(path) or ".")
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)

def writes(args):
    mode, flags = (list(args[1:3]) + [None, None])[:2]
    return bool(set(mode or "") & set("wax+")) or bool((flags or 0) & WRITE_FLAGS)

def hook(event, args):
    if event.startswith(DENIED):
        raise PermissionError(f"sandbox: {event} is not allowed")
    roots = home if event in CHANGES or (event == "open" and writes(args)) else reads
    if (event == "open" or event in LOOKS or event in CHANGES) and args and not inside(args[0], roots):
        raise PermissionError(f"sandbox: {event} {args[0]!r} is outside the sandbox")

code = compile(open(%(program)r, encoding="utf-8").read(), %(program)r, "exec")
sys.argv = [%(program)r]
sys.addaudithook(hook)
exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
""" % {"program": PROGRAM}


@dataclass(frozen=True)
class Limits:
    """How far one test may go."""

    timeout: float = 10.0  # wall-clock seconds before the process group is killed
    cpu: int = 5  # CPU seconds (RLIMIT_CPU: SIGXCPU, then SIGKILL a second later)
    memory_mb: int = 1024  # address space in MiB (RLIMIT_AS): allocations past it raise MemoryError
    output_mb: int = 4  # largest file (stdout/stderr included) the program may write (RLIMIT_FSIZE)

    def __post_init__(self) -> None:
        for name in ("timeout", "cpu", "memory_mb", "output_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox {name} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True)
class Outcome:
    """How a test run ended."""

    status: str  # passed, failed, timeout, cpu-limit, memory, output-limit, killed
    returncode: int | None  # None when it was killed on the timeout
    seconds: float
    detail: str  # the end of its stderr (the assertion or exception), or why it was stopped

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def run(program: str, limits: Limits = Limits()) -> Outcome:
    """Run `program` (Python source) in a fresh sandboxed process; exit status 0 means passed."""
    with tempfile.TemporaryDirectory(prefix="dlmcode-sandbox-") as home:
        Path(home, PROGRAM).write_text(program, encoding="utf-8")
        start = time.perf_counter()
        returncode = _spawn(Path(home), limits)
        seconds = time.perf_counter() - start
        stderr = _tail(Path(home, "stderr"))
    return Outcome(_status(returncode, stderr), returncode, seconds, stderr or _why(returncode))


def _spawn(home: Path, limits: Limits) -> int | None:
    limits_args = [str(limits.memory_mb << 20), str(limits.cpu), str(limits.output_mb << 20)]
    with open(home / "stdout", "wb") as out, open(home / "stderr", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-c", LAUNCHER, *limits_args],
            cwd=home, env=scrubbed_env(home), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            start_new_session=True,  # its own process group: the timeout kills any children too
        )
        try:
            return proc.wait(timeout=limits.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def scrubbed_env(home: Path) -> dict[str, str]:
    """Nothing of the user's environment: no tokens, no proxies, no PYTHONPATH."""
    return {"PATH": os.defpath, "HOME": str(home), "TMPDIR": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}


def _tail(path: Path) -> str:
    text = path.read_bytes()[-4 * STDERR_TAIL :].decode("utf-8", "replace").strip()
    return text[-STDERR_TAIL:]


SIGNALS = {-signal.SIGXCPU: "cpu-limit", -signal.SIGKILL: "cpu-limit", -signal.SIGXFSZ: "output-limit"}


def _status(returncode: int | None, stderr: str) -> str:
    if returncode is None:
        return "timeout"
    if returncode == 0:
        return "passed"
    if returncode in SIGNALS:
        return SIGNALS[returncode]
    if returncode < 0:
        return "killed"
    return "memory" if "MemoryError" in stderr else "failed"


def _why(returncode: int | None) -> str:
    if returncode is None:
        return "stopped at the wall-clock timeout"
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"
