"""Files a user owns: reading their text safely, and editing one in place.

An in-place edit opens the file once, before any decoding (open_for_edit: symlinks followed,
streams, FIFOs and devices refused, read-only modes refused without --force, the folder
probed), reads it through that open file and keeps it open. The new text goes to a hidden
temp file named with our pid and is renamed over the file with its mode, owner and group:
the file is either the old one or the new one, and a temp file left by a killed run is
removed by the next run. Just before the rename, the file is compared with what was read,
through the open file and the name's identity (device, inode, size, mtime, content): a user
who edited, saved over, or swapped the file meanwhile keeps their edit, and nothing is
written. (The rename itself cannot be made conditional: the window left is the few
microseconds between that last comparison and the rename.)

Reading is bounded: at most MAX_SOURCE bytes of a file or stdin are read, so `/dev/zero`, a
FIFO or a runaway pipe is one error line, not a process that grows until the system kills it.
Writing is reported: a full disk under `--in-place` is one error line and a non-zero exit, and the
file edited in place is left as it was (core/output.py reports stdout's, `> /dev/full`, the same way).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .errors import InputError, UsageError

STDIN = "-"
# The most a source file or stdin may hold: the server's body cap (serve/body.py MAX_BODY).
# Real source files are far smaller (CPython's largest .py file is under 1 MiB); past this,
# tokenizing alone takes tens of seconds, and the model sees a window of it at most.
MAX_SOURCE = 8 << 20


def read_source(path: str, allow_empty: bool = False) -> str:
    """The UTF-8 text of `path` ('-' reads stdin); one clear InputError for anything else.

    An empty (or blank) text is an error unless `allow_empty`: there is nothing to fill, but
    there is a file to check (an empty `__init__.py` is valid Python).
    """
    name = "stdin" if path == STDIN else path
    data = read_bounded(sys.stdin.buffer, name) if path == STDIN else read_bytes(Path(path))
    return decode_text(data, name, allow_empty)


def decode_text(data: bytes, name: str, allow_empty: bool = False) -> str:
    """`data` as UTF-8 text, or one InputError naming `name` (NUL bytes, bad UTF-8, empty)."""
    if b"\0" in data:
        raise InputError(f"{name} is not a text file (it contains NUL bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{name} is not UTF-8 text (bad byte at offset {err.start})") from None
    if not allow_empty and not text.strip():
        raise InputError(f"{name} is empty")
    return text


def read_bounded(stream: BinaryIO, name: str, limit: int | None = None) -> bytes:
    """At most `limit` (MAX_SOURCE) bytes of `stream`; one byte more is an InputError, so no stream is read forever."""
    limit = MAX_SOURCE if limit is None else limit
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{name} is larger than {limit >> 20} MiB, the most dlmcode reads")
    return data


def read_bytes(path: Path) -> bytes:
    if path.is_dir():
        raise InputError(f"{path} is a directory, not a file")
    with opening(path, "read"), path.open("rb") as handle:
        return read_bounded(handle, str(path))


@contextlib.contextmanager
def opening(path: str | Path, verb: str) -> Iterator[None]:
    """An OSError opening `path` as one InputError line (`verb`: what failed otherwise, "read" or "edit")."""
    try:
        yield
    except FileNotFoundError:
        raise InputError(f"no such file: {path}") from None
    except PermissionError:
        raise InputError(f"cannot read {path}: permission denied") from None
    except OSError as err:
        raise InputError(f"cannot {verb} {path}: {err.strerror}") from None


TEMP_SUFFIX = ".dlmcode"  # hidden temp files are .NAME.<pid>.<random>.dlmcode, beside the file they replace
# The most bytes of the file's name a temp name repeats: a name may hold 255 bytes, and the temp
# name adds up to 26 (dot, pid, random part, suffix), so a 240-byte name must be cut.
TEMP_NAME_ROOM = 200
# Names that stand for a stream (the shell's redirect, a pipe), not a file one can edit in place:
# /dev/stdin resolves to the file behind `< f.py`, which would be rewritten under the wrong name.
STREAM_FOLDERS = ("/dev/", "/proc/")


@dataclass
class Original:
    """A file opened for an in-place edit: what was read from it, and how to tell it is still that file."""

    name: str  # as the user gave it
    target: Path  # the file it named when read (a symlink's target)
    handle: int  # the file, open from the read until the write
    seen: tuple[int, int, int, int]  # its (st_dev, st_ino, st_size, st_mtime_ns) once read
    data: bytes  # every byte read
    text: str

    def close(self) -> None:
        with contextlib.suppress(OSError):  # closed already
            os.close(self.handle)


@contextlib.contextmanager
def editing(path: str, force: bool, in_place: bool) -> Iterator[Original | None]:
    """The file opened for an in-place edit (open_for_edit), closed when the command ends; None without --in-place."""
    if not in_place:
        yield None
        return
    original = open_for_edit(path, force)
    try:
        yield original
    finally:
        original.close()


def open_for_edit(path: str, force: bool = False) -> Original:
    """Open, check and read the file an in-place edit of `path` will replace, before any decoding.

    A symlink is followed (the link stays, its target is edited). A stream's name (/dev/stdin),
    a FIFO, a device or a folder is refused. A file without a write bit for us in its mode is
    refused unless `force` (root too: its mode says it is not to be edited). The folder must
    take a new file, since the edit is a rename of one. Stale temp files of this file left by
    killed runs are removed first. The file stays open: `replace_if_unchanged` compares it.
    """
    if path == STDIN or names_a_stream(path):
        raise UsageError(f"--in-place needs a file, not {'stdin' if path == STDIN else path}")
    target = Path(os.path.realpath(path))
    handle = open_regular(path, target)
    try:
        info = os.fstat(handle)
        if not force and not mode_allows_write(info):
            raise InputError(
                f"{path} is read-only (mode {stat.S_IMODE(info.st_mode):04o}); pass --force to edit it anyway"
            )
        remove_stale_temps(target)
        probe_folder(path, target)
        with os.fdopen(handle, "rb", closefd=False) as stream:
            data = read_bounded(stream, path)
        seen = identity(os.fstat(handle))  # after the read: an edit made before it is part of what was read
        if seen[2] != len(data):  # grown or cut while read; an edit mid-read that kept the size shows at the write
            raise InputError(f"{path} changed while it was read; nothing was written")
        return Original(path, target, handle, seen, data, decode_text(data, path))
    except BaseException:
        os.close(handle)
        raise


def names_a_stream(path: str) -> bool:
    """Whether `path`, or a symlink it leads through, is under /dev or /proc (/dev/stdin, /proc/self/fd/0)."""
    here = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        if here.startswith(STREAM_FOLDERS):
            return True
        if not os.path.islink(here):
            return False
        here = os.path.normpath(os.path.join(os.path.dirname(here), os.readlink(here)))
    return False


def open_regular(path: str, target: Path) -> int:
    """`target` opened for reading, refused unless a regular file; never blocks (a FIFO) nor follows a link
    swapped in after `realpath`."""
    with opening(path, "edit"):
        handle = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    kind = stat.S_IFMT(os.fstat(handle).st_mode)
    if kind != stat.S_IFREG:
        os.close(handle)
        what = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO"}.get(kind, "not a regular file")
        raise InputError(f"cannot edit {path} in place: it is {what}")
    return handle


def identity(info: os.stat_result) -> tuple[int, int, int, int]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


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
        fd, tmp = tempfile.mkstemp(
            prefix=temp_prefix(target), suffix=TEMP_SUFFIX, dir=folder
        )  # a kill here leaves a temp file the next run removes
    except OSError as err:
        raise InputError(f"cannot edit {path} in place: cannot create a file in {folder} ({err.strerror})") from None
    os.close(fd)
    os.unlink(tmp)


def output_folder(folder: Path, flag: str = "--out") -> None:
    """Make sure results can be written in `folder` before any work: /proc/x, a path under a
    file, a read-only place are one UsageError now, not a traceback after the first task.

    The only honest test is to write there. A folder that exists gets a probe file; one that
    does not is made, with the folders above it that are missing, inside a private temp folder
    in the deepest one that exists, and the temp folder is removed again. So a run that fails
    later leaves nothing behind, and ranks of one bench probing the same new --out at the same
    moment cannot remove each other's probe (each makes and removes only its own).
    """
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{flag} {folder} is an existing file; give a folder (a new one, or one to resume)")
    base = next(p for p in [folder, *folder.parents] if p.exists())
    try:
        if base == folder:
            fd, probe = tempfile.mkstemp(prefix=".dlmcode-probe.", dir=folder)
            os.close(fd)
            os.unlink(probe)
            return
        private = Path(tempfile.mkdtemp(prefix=".dlmcode-probe.", dir=base))
        try:
            (private / folder.relative_to(base)).mkdir(parents=True, exist_ok=True)  # exist_ok: a/../b
            (private / folder.relative_to(base) / "probe").touch()
        finally:
            shutil.rmtree(private, ignore_errors=True)
    except OSError as err:
        raise UsageError(f"{flag} {folder}: cannot write a file there ({err.strerror or err})") from None


def temp_prefix(target: Path) -> str:
    return f".{temp_stem(target.name)}.{os.getpid()}."


def temp_stem(name: str) -> str:
    """The part of a file's name its temp names repeat: all of it, or its first TEMP_NAME_ROOM bytes."""
    return os.fsdecode(os.fsencode(name)[:TEMP_NAME_ROOM])


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove this file's temp files whose writer (the pid in the name) is dead: what a kill -9 mid-write leaves."""
    removed = []
    stem = temp_stem(target.name)
    for tmp in target.parent.glob(f".{glob_escape(stem)}.*{TEMP_SUFFIX}"):
        pid = tmp.name[len(stem) + 2 :].split(".", 1)[0]
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


def replace_if_unchanged(original: Original, text: str) -> None:
    """Replace the file `original` was read from with `text` all at once, keeping its mode, owner and
    group, if it is still what was read; on any failure, or a change, it is left as it is and no temp
    file stays."""
    name = original.name
    try:
        info = os.fstat(original.handle)
        tmp = write_temp(original.target, text, info)
    except OSError as err:  # a full disk, a quota: the user's to fix, and nothing was changed
        raise InputError(f"cannot write {name}: {err.strerror or err}; it was left unchanged") from None
    try:
        why = changed(original)
        if why is not None:
            raise InputError(f"{name} {why} while dlmcode was filling it; nothing was written, your edit is kept")
        os.replace(tmp, original.target)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise InputError(f"cannot write {name}: {err.strerror or err}; it was left unchanged") from None
        raise
    finally:
        os.close(original.handle)


def write_temp(target: Path, text: str, info: os.stat_result) -> str:
    """`text` in a new hidden temp file beside `target`, synced, with `info`'s mode, owner and group."""
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(target), suffix=TEMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        keep_owner(tmp, info)
        os.chmod(tmp, stat.S_IMODE(info.st_mode))  # after chown, which may clear setuid/setgid bits
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def changed(original: Original) -> str | None:
    """How the file differs from what was read (its name now leads elsewhere, it was replaced, or
    edited), or None: compared through the open file and the name's identity, not the name alone."""
    if os.path.realpath(original.name) != str(original.target):
        return "now names another file"
    try:
        there = os.lstat(original.target)
    except OSError:
        return "was removed"
    if identity(there)[:2] != original.seen[:2]:
        return "was replaced"
    size = len(original.data)
    if identity(os.fstat(original.handle)) != original.seen or os.pread(original.handle, size + 1, 0) != original.data:
        return "was edited"
    return None


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


def new_file_mode() -> int:
    """The mode open() gives a new file: 0666 less the process umask (mkstemp gives 0600)."""
    mask = os.umask(0o022)  # reading the umask means setting it; set it straight back
    os.umask(mask)
    return 0o666 & ~mask


def read_jsonl(path: str | Path) -> Iterator[dict]:
    """The records of a gzipped JSON-lines file (the corpus's train.jsonl.gz and eval.jsonl.gz)."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            yield json.loads(line)
