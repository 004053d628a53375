"""Python's line structure for the guard's fillers (dlmcode/text/pyshape.py): the replay counts what CPython
refuses, and every bridge it proposes makes the file compile."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from dlmcode.text import pyahead, pylines, pyshape


def errors(text: str) -> int:
    return pyshape.replay(pyshape.lines(text), pylines.Shape(top=True)).end()


@pytest.mark.parametrize(
    "text, bad",
    [
        ("if a:\n    b = 1\nelse:\n    c = 2\n", 0),
        ("try:\n    a = 1\nexcept E:\n    pass\nelse:\n    b\nfinally:\n    c\n", 0),
        ("x = (1,\n  2)\nif x:\n  y = '''\nz\n'''\n", 0),
        ("try:\n    a = 1\nb = 2\n", 1),  # a try without its except
        ("if a:\n    b = 1\n  c = 2\n", 1),  # a dedent to no level seen
        ("x = 1\nelse:\n    y = 2\n", 1),  # a continuation after a plain statement
        ("def f():\nx = 1\n", 1),  # a head without its body
        ("for x in y:\n    pass\nexcept E:\n    pass\n", 1),  # except after a loop
        ("def f(x):\n    if x: a = 1\n    else: a = 2\n    return a\n", 0),  # a compound statement on one line
        ("try: a = 1\nexcept E: pass\n", 0),
        ("x = 1\nif x:\n    return x\n", 1),  # return outside a function, the replay seeing the top level
        ("def f(a):\n    if a:\n        break\n", 1),  # break outside a loop
        ("def f(a):\n    while a:\n        if a:\n            continue\n        break\n", 0),
        ("for a in b:\n    def f():\n        break\n", 1),  # a function's body is outside the loop around it
    ],
)
def test_the_replay_counts_what_cpython_refuses(text, bad):
    assert errors(text) == bad
    assert (bad == 0) == _compiles(text)


def _compiles(text: str) -> bool:
    try:
        compile(text, "<t>", "exec")
    except SyntaxError:
        return False
    return True


CUTS = [  # (before, after): every bridge proposed for them compiles once filled in
    ("def f():\n    try:\n", "\n\ndef g():\n    pass\n"),
    ("class E(Exception):\n    pass\n", "\n    from a import b\nexcept ImportError:\n    b = None\n"),
    ("if a:\n    member_list =", " sorted(m):\n        x = 1\n"),
    ("def f(self):\n    i = self.pos\n    self.pos = j", "i:j]\n    return data\n"),
    ("def f():\n\tif a:\n", "\n\t\tb = 1\n\telse:\n\t\tb = 2\n"),
]


@pytest.mark.parametrize("before, after", CUTS)
def test_every_bridge_compiles(before, after):
    found = pyshape.bridges(before, after)
    assert found, "no bridge"
    for start, end in found:
        assert _compiles(before + start + "  " + end + after), (start, end)


def test_an_item_cut_inside_brackets_gets_an_expression_that_parses():
    before, after = "d = {\n    'a': 1,\n    'b':", "\n    'c': 3,\n}\n"
    found = pyshape.inline(before, after)
    assert found and all(_compiles(before + s + " " + e + after) for s, e in found)


def _stdlib(*names: str) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return [(root / name).read_text() for name in names if (root / name).exists()]


def test_a_line_feeds_as_its_skeleton_from_every_shape():
    """What the lines after a hole share (pyahead's `_ahead`, `read_tail`): every logical line of real files, and
    every line a tail's starts make, fed to shapes from all over those files (at their top and not), leaves the
    shape its skeleton leaves, so one Ahead per skeleton replays as the lines themselves would."""
    texts = _stdlib("queue.py", "textwrap.py", "contextlib.py") + [
        "def f(a):\n    while a:\n        try:\n            break\n        except E:\n            continue\n"
        "        else:\n            return a\n    for b in a: pass\n    else: yield b\n"
    ]
    assert len(texts) >= 2
    found = [line for text in texts for line in pyshape.lines(text)]
    found += [line for code in ("x)", "y] = 1", "a, b):", "") for _, line in pyahead._starts(code)]
    shapes = []
    for text in texts:
        for top in (True, False):
            shape = pylines.Shape(top=top)
            for k, line in enumerate(pyshape.lines(text)):
                if k % 7 == 0:
                    shapes.append(shape.copy())
                shape.feed(line)
    words = {line.word for line in found}
    assert {"return", "break", "continue", "else", "except", "finally", "elif", "try", "def"} <= words
    changed = 0
    for line in found[::3]:
        bare = pylines.skeleton(line)
        changed += bare != line
        read = lambda x: (x.indent, x.word if x.word in pylines.READ else bool(x.word), x.head)  # noqa: E731
        assert read(bare) == read(line)
        for shape in shapes[::5]:
            a, b = shape.copy().feed(line), shape.copy().feed(bare)
            assert (a.key(), a.errors, a.end()) == (b.key(), b.errors, b.end()), (line, bare)
    assert changed > len(found[::3]) // 2  # most lines are read as less than they say


def test_tails_that_read_the_same_share_their_endings():
    """Two holes' last lines that differ only inside their expression read as one tail, and `_endings` of it are
    those of each tail's own starts."""
    a, b = pylines.Line("", "foo(bar, 1)"), pylines.Line("", "baz(qux, 22)")
    assert pyahead.read_tail(a) == pyahead.read_tail(b)
    assert pyahead.read_tail(pylines.Line("", "x):")) != pyahead.read_tail(a)
    assert pyahead.read_tail(None) is None
    rest = pyahead._ahead(tuple(pyshape.lines("    y = 2\n    return y\n")))
    shape = pylines.replay(pyshape.lines("def f(x):\n    if x:\n        z = 1\n"), pylines.Shape(top=True))
    assert list(rest.endings(shape, pyahead.read_tail(a), "    ", False)) == list(
        rest.endings(shape, pyahead.read_tail(b), "    ", False)
    )
    assert list(rest.endings(shape, pyahead.read_tail(a), "    ", False))  # some start fits


def test_a_line_cut_after_a_keyword_is_finished_as_that_statement_before_the_keyword_becomes_a_name():
    # `        if` cut before a line of the same block: the bridges finished it as `ifx` (a name: the `if` gone) and
    # those filled every slot; the statement itself (`if():` then the code below as its body, or a body of its own)
    # comes first now, the glued name last
    before = "for c in s:\n    if c:\n        d = 1\n        if"
    after = "\n    elif c:\n        d = 2\n"
    found = pyshape.bridges(before, after)
    assert found and not found[0][0].startswith("x")
    assert _compiles(before + found[0][0] + found[0][1] + after)
