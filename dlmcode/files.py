"""Reading the user's text safely and replacing a file atomically."""

from __future__ import annotations

import difflib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .errors import InputError, UsageError

STDIN = "-"


def read_source(path: str) -> str:
    """The UTF-8 text of `path` ('-' reads stdin); one clear InputError for anything else."""
    name = "stdin" if path == STDIN else path
    data = sys.stdin.buffer.read() if path == STDIN else read_bytes(Path(path))
    if b"\0" in data:
        raise InputError(f"{name} is not a text file (it contains NUL bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{name} is not UTF-8 text (bad byte at offset {err.start})") from None
    if not text.strip():
        raise InputError(f"{name} is empty")
    return text


def read_bytes(path: Path) -> bytes:
    if path.is_dir():
        raise InputError(f"{path} is a directory, not a file")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"no such file: {path}") from None
    except PermissionError:
        raise InputError(f"cannot read {path}: permission denied") from None
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror}") from None


def write_atomic(path: str, text: str) -> None:
    """Replace `path` with `text` all at once, keeping its permissions; on any failure it is untouched."""
    if path == STDIN:
        raise UsageError("--in-place needs a file, not stdin")
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".dlmcode", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        shutil.copymode(target, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def unified_diff(before: str, after: str, name: str) -> str:
    label = "stdin" if name == STDIN else name
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"a/{label}", tofile=f"b/{label}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
