"""Windows on statement boundaries (dlmcode/text/statements.py): what the server keeps of a large file parses
as the file does, wherever the cursor is; never a window that starts inside a string."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from dlmcode.text import statements, syntax

STDLIB = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
LARGE = [
    "_pydecimal.py",
    "turtle.py",
    "typing.py",
    "argparse.py",
    "zipfile/__init__.py",
    "zipfile.py",
    "pickletools.py",
]
KEEP = 16_384  # the server's budget for a 512-token context (serve/trim.py)


def large_files() -> list[Path]:
    return [STDLIB / name for name in LARGE if (STDLIB / name).is_file()][:5]


def compiles(text: str) -> bool:
    try:
        compile(text, "<window>", "exec")
    except SyntaxError:
        return False
    return True


@pytest.mark.parametrize("path", large_files(), ids=lambda p: p.name)
def test_windows_of_standard_library_files_compile_wherever_the_cursor_is(path):
    source = path.read_text()
    assert len(source) > 3 * KEEP and compiles(source)
    rng = random.Random(path.name)
    for _ in range(12):
        cursor = rng.randrange(KEEP + 1000, len(source) - 100)  # at any character, 16 KB+ into the file
        start = statements.window_start(source[:cursor], KEEP, "python")
        end = statements.window_end(start, source[cursor:], KEEP, "python")
        assert len(end) <= KEEP + 8 and source[cursor:].startswith(end.rstrip(")]}\n"))
        assert compiles(start + end), (path.name, cursor, start[:200])


def test_a_window_never_starts_inside_a_docstring():
    doc = '    """' + "text that looks like code: x = (1,\n" * 1000 + '    """\n'
    prefix = "class A:\n    def f(self):\n" + doc + "        return 1\n\n    def g(self):\n        "
    kept = statements.window_start(prefix, 2000, "python")
    assert kept == "class A:\n    def g(self):\n        "  # the class's head, then the method at the cursor
    assert compiles(kept + "pass\n")


def test_a_clause_brings_its_partner_with_a_pass_body():
    body = "".join(f"        x{i} = {i}\n" for i in range(400))
    prefix = "def f(a):\n    if a:\n" + body + "    else:\n" + body + "        "
    kept = statements.window_start(prefix, 2000, "python")
    assert kept.startswith("def f(a):\n    if a:\n        pass\n    else:\n        x")
    assert compiles(kept + "y = 1\n")


def test_the_suffix_is_never_cut_inside_a_try_block_or_after_a_head():
    body = "".join(f"        x{i} = {i}\n" for i in range(400))
    suffix = "\n    try:\n" + body + "    except ValueError:\n        pass\n"
    kept = statements.window_end("def f():\n    y = 1", suffix, 2000, "python")
    assert compiles("def f():\n    y = 1" + kept) and "try:" not in kept


def test_a_prefix_of_one_statement_longer_than_the_window_is_cut_outside_strings():
    prefix = "TABLE = [\n" + "".join(f'    ("name{i}", """doc\n{i}"""),\n' for i in range(2000)) + "]\nx = "
    kept = statements.window_start(prefix, 2000, "python")
    assert kept == "x = "  # the statement after the table
    inside = statements.window_start(prefix[:-7], 2000, "python")  # the cursor in the table: at a line outside strings
    assert inside.startswith('    ("name') and compiles("[\n" + inside + "]\n")


def test_c_windows_start_outside_comments_with_the_braces_around_them():
    body = "".join(f"    int v{i} = {i}; /* a comment with a brace {{ in it */\n" for i in range(300))
    prefix = "/* a file\n" + "   long comment\n" * 400 + "*/\nnamespace n {\nint f(void) {\n" + body + "    return "
    kept = statements.window_start(prefix, 2000, "cpp")
    assert kept.startswith("namespace n {\nint f(void) {\n    int v")
    end = statements.window_end(kept, "0;\n" + body + "}\n}\n", 2000, "cpp")
    assert syntax.tree_errors(kept + end, "cpp") == 0
