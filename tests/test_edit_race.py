"""A user's file that changes while `dlmcode infill --in-place` fills it: the user's edit is never lost.

Each edit is made at one moment of the fill by a hook on the real code path (no sleeps): before
the read, during the decode (after the first model call) and between the temp file's write and
the rename. Whatever the edit (an append, a same-size change with the old mtime put back, an
editor's save by rename, the file swapped for a symlink to another file, the file removed), the
fill writes nothing, says so in one line and exits 1, and the file is what the user left.
Also the names that are not a file to edit: a FIFO, /dev/stdin, and a 240-byte name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from dlmcode.cli import view
from dlmcode.core import files

from cli_run import SOURCE, one_line_error, run

EDIT = "# the user's own line\n"


def append(path):
    with open(path, "a") as f:
        f.write(EDIT)


def same_size(path):
    """An edit that keeps the size and puts the old mtime back: only the content tells."""
    before = os.stat(path)
    text = path.read_text()
    path.write_text(text.replace("add", "sum", 1))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def saved_by_rename(path):
    """What an editor's save does: a new file renamed over the old one."""
    new = path.with_name(".point.py.swp")
    new.write_text(path.read_text() + EDIT)
    os.replace(new, path)


def swapped_for_symlink(path):
    other = path.with_name("other.py")
    other.write_text("OTHER = 1\n")
    path.unlink()
    path.symlink_to(other.name)


def removed(path):
    path.unlink()


EDITS = [append, same_size, saved_by_rename, swapped_for_symlink, removed]


def state(folder) -> dict:
    """Every entry of the folder: its kind and content (a link: where it points)."""
    entries = sorted(folder.iterdir())
    return {p.name: ("link", os.readlink(p)) if p.is_symlink() else ("file", p.read_text()) for p in entries}


def during_decode(monkeypatch, edit, path):
    real = view.CanvasView.follow

    def follow(self, steps):
        def edited():
            for i, step in enumerate(steps):
                yield step
                if i == 0:  # after the first model call, while the decode goes on
                    edit(path)

        return real(self, edited())

    monkeypatch.setattr(view.CanvasView, "follow", follow)


def between_write_and_rename(monkeypatch, edit, path):
    real = files.write_temp

    def write_temp(*args):
        tmp = real(*args)
        edit(path)
        return tmp

    monkeypatch.setattr(files, "write_temp", write_temp)


@pytest.mark.parametrize("moment", [during_decode, between_write_and_rename])
@pytest.mark.parametrize("edit", EDITS)
def test_an_edit_during_the_fill_is_kept_and_nothing_is_written(model, tmp_path, monkeypatch, moment, edit):
    mine, copy = tmp_path / "mine", tmp_path / "copy"
    for folder in (mine, copy):
        folder.mkdir()
        (folder / "point.py").write_text(SOURCE)
    path = mine / "point.py"
    moment(monkeypatch, edit, path)
    result = run("infill", path, "--span", "2", "-m", model, "--in-place", "-q")
    monkeypatch.undo()
    line = one_line_error(result, 1)
    assert str(path) in line and "while dlmcode was filling it; nothing was written" in line
    edit(copy / "point.py")  # the same edit on a copy: what the user left
    assert state(mine) == state(copy)  # and no temp file


def test_an_edit_before_the_read_is_filled_with_the_file(model, source, tmp_path, monkeypatch):
    """Edited before dlmcode reads it: the fill is of the edited file, and the edit is in what is written."""
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "point.py").write_text(SOURCE + EDIT)
    want = run("infill", copy / "point.py", "--span", "2", "-m", model, "-q").stdout
    real = files.read_bounded

    def read_bounded(stream, name, limit=None):
        append(source)
        return real(stream, name, limit)

    monkeypatch.setattr(files, "read_bounded", read_bounded)
    result = run("infill", source, "--span", "2", "-m", model, "--in-place", "-q")
    assert result.exit_code == 0, result.stderr
    assert source.read_text() == want and want.endswith(EDIT) and want != SOURCE + EDIT


def test_a_fifo_is_refused_and_stays_a_fifo(model, tmp_path):
    """`sed -i` refuses a FIFO too; dlmcode neither waits for a writer nor replaces it with a file."""
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: feed(fifo), daemon=True)
    writer.start()  # a writer ready, as `mkfifo p; cat f > p &`: the old code read it and replaced it
    try:
        line = one_line_error(run("infill", fifo, "--span", "2", "-m", model, "--in-place", "-q"), 1)
    finally:
        release(fifo)
        writer.join()
    assert line == f"dlmcode: error: cannot edit {fifo} in place: it is a FIFO"
    assert fifo.is_fifo() and os.listdir(tmp_path) == ["pipe.py"]


def feed(fifo):
    try:
        with open(fifo, "w") as f:
            f.write(SOURCE)
    except BrokenPipeError:  # the reader closed without reading: what the fix does
        pass


def release(fifo):
    """Open the FIFO for reading (without blocking) and drain it, so a writer still waiting ends."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                if not os.read(fd, 1 << 16):
                    break
            except BlockingIOError:
                continue
    finally:
        os.close(fd)


def test_dev_stdin_in_place_is_refused_and_the_redirected_file_untouched(model, source):
    """`infill /dev/stdin --in-place < point.py` rewrote point.py under the name /dev/stdin, with no
    language for the syntax check; the shell's redirect is not a file to edit."""
    with open(source) as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "dlmcode", "infill", "/dev/stdin", "--span", "2", "-m", model, "--in-place", "-q"],
            stdin=stdin,
            capture_output=True,
            text=True,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr == "dlmcode: error: --in-place needs a file, not /dev/stdin\n"
    assert source.read_text() == SOURCE and os.listdir(source.parent) == ["point.py"]


def test_a_240_byte_name_is_edited_in_place(model, tmp_path):
    """The temp file's name repeats the file's: cut, so that it stays under the 255-byte limit."""
    path = tmp_path / ("n" * 237 + ".py")
    path.write_text(SOURCE)
    want = run("infill", path, "--span", "2", "-m", model, "-q").stdout
    result = run("infill", path, "--span", "2", "-m", model, "--in-place", "-q")
    assert result.exit_code == 0, result.stderr
    assert path.read_text() == want != SOURCE and os.listdir(tmp_path) == [path.name]


def test_the_temp_stem_keeps_a_long_name_within_the_limit():
    name = "é" * 120  # 240 bytes of UTF-8
    stem = files.temp_stem(name)
    assert len(os.fsencode(stem)) == files.TEMP_NAME_ROOM and name.encode().startswith(os.fsencode(stem))
