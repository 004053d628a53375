"""Files a user owns: reading their text safely, and editing one in place.

An in-place edit is checked before any decoding (edit_target: symlinks followed, read-only
modes refused without --force, the folder probed), then written to a hidden temp file named
with our pid and renamed over the target with its mode, owner and group: the file is either
the old one or the new one, and a temp file left by a killed run is removed by the next run.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import stat
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


TEMP_SUFFIX = ".dlmcode"  # hidden temp files are .NAME.<pid>.<random>.dlmcode, beside the file they replace


def edit_target(path: str, force: bool = False) -> Path:
    """The file an in-place edit of `path` will replace, checked before any decoding.

    A symlink is followed (the link stays, its target is edited). A file without a write bit
    for us in its mode is refused unless `force` (root too: its mode says it is not to be
    edited). The folder must take a new file, since the edit is a rename of one. Stale temp
    files of this file left by killed runs are removed first.
    """
    if path == STDIN:
        raise UsageError("--in-place needs a file, not stdin")
    target = Path(os.path.realpath(path))
    try:
        info = target.stat()
    except OSError as err:
        raise InputError(f"cannot edit {path}: {err.strerror}") from None
    if not force and not mode_allows_write(info):
        raise InputError(f"{path} is read-only (mode {stat.S_IMODE(info.st_mode):04o}); pass --force to edit it anyway")
    remove_stale_temps(target)
    probe_folder(path, target)
    return target


def mode_allows_write(info: os.stat_result) -> bool:
    """Whether the mode bits let us write: the owner/group/other bit that applies; for root, any write bit."""
    if os.geteuid() == 0:
        return bool(info.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    if info.st_uid == os.geteuid():
        return bool(info.st_mode & stat.S_IWUSR)
    if info.st_gid in os.getgroups() or info.st_gid == os.getegid():
        return bool(info.st_mode & stat.S_IWGRP)
    return bool(info.st_mode & stat.S_IWOTH)


def probe_folder(path: str, target: Path) -> None:
    """Create and remove one temp file beside `target`: the only honest test that the edit can be written there."""
    folder = target.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(target), suffix=TEMP_SUFFIX, dir=folder)  # a kill here leaves a temp file the next run removes
    except OSError as err:
        raise InputError(f"cannot edit {path} in place: cannot create a file in {folder} ({err.strerror})") from None
    os.close(fd)
    os.unlink(tmp)


def temp_prefix(target: Path) -> str:
    return f".{target.name}.{os.getpid()}."


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove this file's temp files whose writer (the pid in the name) is dead: what a kill -9 mid-write leaves."""
    removed = []
    for tmp in target.parent.glob(f".{glob_escape(target.name)}.*{TEMP_SUFFIX}"):
        pid = tmp.name[len(target.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and not alive(int(pid)):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def write_atomic(path: str, text: str, force: bool = False) -> None:
    """Replace `path` (its target, for a symlink) with `text` all at once, keeping its mode, owner
    and group; on any failure it is untouched and no temp file stays."""
    target = edit_target(path, force)
    info = target.stat()
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(target), suffix=TEMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        keep_owner(tmp, info)
        os.chmod(tmp, stat.S_IMODE(info.st_mode))  # after chown, which may clear setuid/setgid bits
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def keep_owner(tmp: str, info: os.stat_result) -> None:
    """Give the new file the old one's owner and group (root editing another user's file);
    a user who may not keeps what the system allows (the group, when they belong to it)."""
    if (info.st_uid, info.st_gid) == (os.geteuid(), os.getegid()):
        return
    try:
        os.chown(tmp, info.st_uid, info.st_gid)
    except PermissionError:
        with contextlib.suppress(PermissionError):
            os.chown(tmp, -1, info.st_gid)


def keep_line_endings(source: str, text: str) -> str:
    """`text` with CRLF line breaks when every line break of `source` is CRLF (the model writes LF)."""
    crlf = source.count("\r\n")
    if not crlf or crlf != source.count("\n"):
        return text
    return LONE_LF.sub("\r\n", text)


LONE_LF = re.compile(r"(?<!\r)\n")


def unified_diff(before: str, after: str, name: str) -> str:
    label = "stdin" if name == STDIN else name
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"a/{label}", tofile=f"b/{label}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def new_file_mode() -> int:
    """The mode open() gives a new file: 0666 less the process umask (mkstemp gives 0600)."""
    mask = os.umask(0o022)  # reading the umask means setting it; set it straight back
    os.umask(mask)
    return 0o666 & ~mask
