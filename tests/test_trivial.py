"""The trivial-fill classifier: exact verdicts per language (dlmcode/text/trivial.py's table)."""

from __future__ import annotations

import pytest

from dlmcode.text.trivial import TRIVIAL, is_trivial

CASES = {
    "python": (
        ["", "  \n\t\n", "pass", "    pass\n", "...", "# TODO\n", "    # a\n    pass  # b\n    ...\n", "pass; pass"],
        [
            "return",
            "x = 1",
            "raise NotImplementedError",
            '"""doc"""',
            "passed",
            "print(...)",
            "pass\nx",
            "# c\nreturn None\n",
            "None",
            '    """\n',
        ],
    ),
    "javascript": (
        ["", ";", "{}", "  {\n  }\n", "// todo\n", "/* a */ ;", "{ /* nothing */ }"],
        ["return;", "x++;", "throw e;", "{ f(); }", "null"],
    ),
    "typescript": (["// x", ";;", "{}"], ["let x: number = 1;", "return;"]),
    "tsx": (["{}", "// x"], ["<div/>", "return;"]),
    "java": (["// x\n", "/** doc */", ";", "{}"], ["return;", "throw new RuntimeException();", "i++;"]),
    "c": (["/* x */", "// y\n;", "{ }"], ["return;", "x = 1;", "abort();"]),
    "cpp": (["// x", "{};"], ["throw 1;", "return 0;"]),
    "go": (["// x\n", "{}", ";"], ["return", 'panic("x")', "x := 1"]),
    "rust": (["// x\n", "/// doc\n", "/* a */", "{}", ";"], ["todo!()", "unimplemented!()", "return;", "()", "x"]),
}


@pytest.mark.parametrize("lang", CASES)
def test_trivial_fills(lang):
    trivial, useful = CASES[lang]
    assert [text for text in trivial if not is_trivial(text, lang)] == []
    assert [text for text in useful if is_trivial(text, lang)] == []


def test_every_language_of_the_table_is_tested_and_others_are_not_classified():
    assert set(CASES) == set(TRIVIAL)
    assert is_trivial("pass", "cobol") is None
