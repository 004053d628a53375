"""The replay of the lines after a hole, remembered per run of lines and shape (pyahead.replayed, issue 26's cost):
the same errors as a plain replay from the same shape, whatever was replayed before it, and with no id of a run of
lines reused for another once the thread starts over."""

from __future__ import annotations

import random
import sysconfig
from pathlib import Path

from dlmcode.text import pyahead, pylines, pyshape

DATA = Path(__file__).parent / "data" / "guard"
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def plain(lines: tuple[pylines.Line, ...], shape: pylines.Shape) -> tuple[int, int]:
    start = pylines.Shape(shape.copy().blocks, shape.base, 0, shape.inline, shape.top)
    end = pylines.replay(list(lines), start)
    return end.errors, end.end() - end.errors


def shapes(rnd: random.Random, lines: list[pylines.Line], n: int) -> list[pylines.Shape]:
    """Shapes a bridge may leave: a replay of some lines of the file, then some heads or bodies of its own."""
    out = []
    for _ in range(n):
        at = rnd.randrange(len(lines))
        shape = pylines.replay(lines[max(0, at - rnd.randrange(1, 30)) : at])
        shape.top = rnd.random() < 0.3
        for _ in range(rnd.randrange(4)):
            indent = rnd.choice(["", "    ", "        ", "            ", "\t"])
            shape.feed(pylines.Line(indent, rnd.choice(["if x:", "try:", "pass", "while x:", "else:", "return"])))
        out.append(shape)
    return out


def texts() -> list[str]:
    found = [(DATA / "sample.py").read_text()]
    return found + [(STDLIB / name).read_text() for name in ("queue.py", "textwrap.py") if (STDLIB / name).exists()]


def test_replays_remembered_give_the_plain_replays_errors():
    rnd = random.Random(26)
    pyshape.forget()
    cases = []
    for text in texts():
        lines = pylines.lines(text)
        for _ in range(30):
            at = rnd.randrange(len(lines))
            after = lines[at : at + pyshape.AHEAD]
            for first in range(3):  # the same code after, its first lines rewritten (a draft that changed)
                head = [pylines.Line(rnd.choice(["", "    ", "        "]), rnd.choice(["x", "if x:", "else:"]))]
                run = tuple(head[:first] + after[first:])
                cases += [(run, s) for s in shapes(rnd, lines, 4)]
    rnd.shuffle(cases)
    hits = 0
    for run, shape in cases:
        memo = len(pyahead.SUFFIXES.__dict__.get("memo", {}))
        kept = shape.copy()
        assert pyahead.replayed(run, shape.copy()) == plain(run, kept), run
        hits += len(pyahead.SUFFIXES.__dict__["memo"]) - memo < len(run)  # it met a remembered replay
    assert hits > len(cases) // 2  # the memo is read, not only written


def test_a_run_of_lines_keeps_no_id_of_another_after_starting_over(monkeypatch):
    pyshape.forget()
    monkeypatch.setattr(pyahead, "RUNS", 5)
    a = tuple(pylines.lines("if x:\n    y = 1\nz = 2\n"))
    b = tuple(pylines.lines("if x:\n    y = 1\nelse:\n"))
    open_if = pylines.replay(pylines.lines("def f():\n    if a:\n        pass\n"))
    assert pyahead.replayed(a, open_if.copy()) == plain(a, open_if)
    assert pyahead.replayed(b, open_if.copy()) == plain(b, open_if)  # past RUNS: the names start over
    assert pyahead.replayed(a, open_if.copy()) == plain(a, open_if)


def test_lines_read_downward_and_upward_are_the_splits_lines():
    from dlmcode.text.fillers import downward, upward

    for text in ("", "\n", "a", "a\n", "\na", "a\n\nb\n", "  x = 1\n\n    y\n"):
        assert list(downward(text)) == text.split("\n")
        assert list(upward(text)) == list(reversed(text.split("\n")))
        for stop in range(len(text) + 1):
            assert list(upward(text, stop)) == list(reversed(text[:stop].split("\n")))
    assert next(downward("x\n" + "y\n" * 10**6)) == "x"  # the first line, the rest never split


def test_an_ahead_names_its_lines_again_once_the_thread_starts_over(monkeypatch):
    pyshape.forget()
    a = tuple(pylines.lines("if x:\n    y = 1\nz = 2\n"))
    b = tuple(pylines.lines("if x:\n    y = 1\nelse:\n"))
    open_if = pylines.replay(pylines.lines("def f():\n    if a:\n        pass\n"))
    top = pylines.replay(pylines.lines("z = 0\n"))
    ahead = pyahead.Ahead(a)
    assert ahead.errors(top, True) == top.errors + sum(plain(a, top))  # a's lines named
    monkeypatch.setattr(pyahead, "RUNS", 5)
    pyahead.replayed(b, open_if.copy())  # the thread starts over: b's runs take the ids a's had
    assert ahead.errors(open_if, True) == open_if.errors + sum(plain(a, open_if))
    assert ahead.errors(open_if, True) != open_if.errors + sum(plain(b, open_if))  # what a stale name would read
