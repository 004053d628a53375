"""The runs' folders in the temp folder, named with the bench's pid, and the clean-up of those a killed
bench left behind (only our own real folders, whose pid is dead)."""

from __future__ import annotations

import functools
import os
import shutil
import stat
import tempfile
from pathlib import Path

from ...core.files import alive

HOME_PREFIX = "dlmcode-sandbox-"  # a run's folder in the temp folder: dlmcode-sandbox-<pid>-<random>


def scratch() -> tempfile.TemporaryDirectory:
    """A run's folder (the processes' stdout and stderr), named with our pid so that a later bench
    can tell it from a live one's when a kill -9 left it behind."""
    remove_stale_homes()
    return tempfile.TemporaryDirectory(prefix=f"{HOME_PREFIX}{os.getpid()}-")


@functools.cache
def remove_stale_homes() -> list[Path]:
    """Remove the run folders of benches that are gone (once per process, as files.py does for
    --in-place's temp files): only our own real folders, whose pid in the name is dead."""
    removed = []
    for home in Path(tempfile.gettempdir()).glob(f"{HOME_PREFIX}*-*"):
        pid = home.name[len(HOME_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)) and _ours(home):
            shutil.rmtree(home, ignore_errors=True)  # rmtree does not follow links inside it
            removed.append(home)
    return removed


def _ours(path: Path) -> bool:
    """A folder, not a link to one, that we own: another user's look-alike in a shared /tmp is left alone."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
