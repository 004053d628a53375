"""Files a user owns, through the real `dlmcode infill --in-place`: symlinks, read-only files and
folders, owner and group, kill -9 during the write, CRLF line endings."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys

import pytest

from dlmcode.core import files, output

from cli_run import SOURCE, run

ROOT = os.geteuid() == 0


def printed(model, path, *extra) -> str:
    """What infill prints for `path` (the text --in-place must write)."""
    result = run("infill", path, "--span", "2", "-m", model, "-q", *extra)
    assert result.exit_code == 0, result.stderr
    assert result.stdout != SOURCE  # the fill changed something, so a missed write would show
    return result.stdout


def one_line(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlmcode: error: "), result.stderr
    return lines[0]


def test_in_place_on_a_symlink_edits_the_target_and_keeps_the_link(model, source, tmp_path):
    want = printed(model, source)
    link = tmp_path / "link.py"
    link.symlink_to(source.name)  # relative, as `ln -s point.py link.py` makes it
    result = run("infill", link, "--span", "2", "-m", model, "--in-place", "-q")
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == source.name
    assert source.read_text() == want
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.py", "point.py"]


def test_a_read_only_file_is_refused_in_one_line_unless_forced(model, source):
    want = printed(model, source)
    source.chmod(0o444)  # refused as root too: the mode says it is not to be edited
    line = one_line(run("infill", source, "--span", "2", "-m", model, "--in-place", "-q"), 1)
    assert str(source) in line and "read-only (mode 0444)" in line and "--force" in line
    assert source.read_text() == SOURCE
    forced = run("infill", source, "--span", "2", "-m", model, "--in-place", "--force", "-q")
    assert forced.exit_code == 0, forced.stderr
    assert source.read_text() == want and stat.S_IMODE(source.stat().st_mode) == 0o444


@pytest.mark.skipif(not ROOT, reason="only root can give a file to another user")
def test_root_editing_another_users_file_keeps_its_owner_and_group(model, source):
    want = printed(model, source)
    os.chown(source, 4321, 8765)
    source.chmod(0o640)
    result = run("infill", source, "--span", "2", "-m", model, "--in-place", "-q")
    assert result.exit_code == 0, result.stderr
    info = source.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (4321, 8765, 0o640)
    assert source.read_text() == want


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder holding point.py that this process cannot create files in: mode 0555, or for root
    (who may write anywhere) a tmpfs mounted read-only; skipped where root may not mount."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if not ROOT:
        (folder / "point.py").write_text(SOURCE)
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("root here may not mount a read-only filesystem to test with")
    try:
        (folder / "point.py").write_text(SOURCE)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_read_only_folder_is_refused_before_anything_loads(read_only_folder, tmp_path):
    """The model named does not exist: the folder error coming first shows the check
    runs before loading and decoding."""
    path = read_only_folder / "point.py"
    result = run("infill", path, "--span", "2", "-m", tmp_path / "no-model", "--in-place")
    line = one_line(result, 1)
    assert line.startswith(f"dlmcode: error: cannot edit {path} in place: cannot create a file in {read_only_folder} (")
    assert path.read_text() == SOURCE and sorted(os.listdir(read_only_folder)) == ["point.py"]


KILL_AT_WRITE = """
import os, signal, sys
os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)  # die the moment the new text would land
from dlmcode.cli.commands import main
sys.argv = ["dlmcode", *sys.argv[1:]]
main()
"""


def test_kill_9_at_the_write_leaves_the_file_and_the_next_run_removes_its_temp_file(model, source):
    want = printed(model, source)
    args = ["infill", str(source), "--span", "2", "-m", model, "--in-place", "-q"]
    done = subprocess.run([sys.executable, "-c", KILL_AT_WRITE, *args], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert source.read_text() == SOURCE  # the file is the old one, whole
    left = [p.name for p in source.parent.iterdir() if p != source]
    assert len(left) == 1 and left[0].startswith(".point.py.") and left[0].endswith(".dlmcode")  # what kill -9 leaves
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    assert source.read_text() == want
    assert [p.name for p in source.parent.iterdir()] == [source.name]  # the dead run's temp file is gone


def test_a_live_process_temp_file_is_left_alone(source):
    mine = source.parent / f".{source.name}.{os.getpid()}.abc.dlmcode"  # this process is alive
    dead = source.parent / f".{source.name}.999999999.abc.dlmcode"  # beyond any pid_max
    other = source.parent / ".other.py.999999999.abc.dlmcode"  # another file's: not ours to judge
    for p in (mine, dead, other):
        p.write_text("x")
    assert files.remove_stale_temps(source) == [dead]
    assert mine.exists() and other.exists() and not dead.exists()


CRLF = SOURCE.replace("\n", "\r\n")


def test_a_crlf_file_keeps_crlf_inside_the_fill(source):
    """The built-in model writes LF; a multi-line fill of a CRLF file must come out CRLF throughout."""
    source.write_bytes(CRLF.encode())
    args = ["infill", source, "--span", "6:8", "--length", "auto", "-q"]
    out = run(*args).stdout_bytes
    fill = out[len(b"".join(CRLF.encode().splitlines(keepends=True)[:5])) :]
    assert fill.count(b"\n") >= 2  # the fill itself spans lines, so this tests something
    assert out.count(b"\n") == out.count(b"\r\n")
    assert run(*args, "--in-place").exit_code == 0
    assert source.read_bytes() == out


def test_line_endings_are_matched_only_for_all_crlf_sources():
    assert output.keep_line_endings("a\r\nb\r\n", "a\nx\r\ny\n") == "a\r\nx\r\ny\r\n"
    assert output.keep_line_endings("a\nb\r\n", "a\nx\n") == "a\nx\n"  # mixed: left as written
    assert output.keep_line_endings("a\nb\n", "a\nx\n") == "a\nx\n"
    assert output.keep_line_endings("one line", "a\nb") == "a\nb"


def test_bench_summaries_get_the_umask_mode_like_the_plots(tmp_path):
    from dlmcode.bench import report

    old = os.umask(0o027)
    try:
        report.write_atomic(tmp_path / "summary.json", "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "summary.json").stat().st_mode) == 0o640
