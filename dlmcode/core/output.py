"""What a command writes out: data on stdout, flushed and reported (a full disk or a closed pipe is one
InputError, not a traceback at exit), in UTF-8 whatever the locale; an edit's text in the line endings of
the file it replaces; and its unified diff as patch and git apply read it."""

from __future__ import annotations

import codecs
import contextlib
import difflib
import os
import re
import sys

from .errors import InputError
from .files import STDIN


def write_stdout(text: str) -> None:
    """Write `text` to stdout and flush it now, so that a full disk or a closed pipe is one InputError
    here rather than a traceback (or an "Exception ignored" at exit). Data is UTF-8, the encoding
    dlmcode reads, whatever PYTHONIOENCODING says: non-Latin text in a fill is no UnicodeEncodeError."""
    try:
        if utf8(sys.stdout) or not hasattr(sys.stdout, "buffer"):
            sys.stdout.write(text)
        else:  # cp1252 (Windows with stdout redirected), latin-1: the code goes out as UTF-8, as it was read
            sys.stdout.flush()
            sys.stdout.buffer.write(text.encode("utf-8", "surrogatepass"))
        sys.stdout.flush()
    except OSError as err:
        discard_stdout()
        raise InputError(f"cannot write to stdout: {err.strerror or err}") from None


def utf8(stream: object) -> bool:
    return codecs.lookup(getattr(stream, "encoding", None) or "ascii").name == "utf-8"


def discard_stdout() -> None:
    """Point stdout at /dev/null: what could not be written would fail again when Python flushes it at exit."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no real file descriptor (a test runner's stdout)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


def keep_line_endings(source: str, text: str) -> str:
    """`text` with CRLF (or bare CR) line breaks when every line break of `source` is one (the model writes LF)."""
    crlf = source.count("\r\n")
    lf, cr = source.count("\n") - crlf, source.count("\r") - crlf
    if crlf and not lf and not cr:
        return LONE_LF.sub("\r\n", text)
    if cr and not lf and not crlf:
        return text.replace("\r\n", "\r").replace("\n", "\r")
    return text


LONE_LF = re.compile(r"(?<!\r)\n")


def unified_diff(before: str, after: str, name: str) -> str:
    """A unified diff `patch` and `git apply` take: lines end at "\n" only, as they count them (a bare
    "\r" is a character of its line, so "\\ No newline" marks only a file's last line), and a name
    with a line break, a tab, a quote or a backslash is quoted C-style, as git quotes it."""
    label = "stdin" if name == STDIN else name
    lines = difflib.unified_diff(
        diff_lines(before), diff_lines(after), fromfile=quoted(f"a/{label}"), tofile=quoted(f"b/{label}")
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def diff_lines(text: str) -> list[str]:
    """`text` cut after each "\n" (str.splitlines also cuts at "\r", "\x0c", "\u2028"... which diff does not)."""
    return NEWLINE_KEPT.findall(text)


NEWLINE_KEPT = re.compile(r"[^\n]*\n|[^\n]+\Z")
C_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def quoted(name: str) -> str:
    """`name` as a diff header holds it: as it is, or in double quotes with C escapes where it must be."""
    if not any(c in C_ESCAPES or ord(c) < 32 for c in name):
        return name
    return '"' + "".join(C_ESCAPES.get(c, f"\\{ord(c):03o}" if ord(c) < 32 else c) for c in name) + '"'
