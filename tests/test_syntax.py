"""Tests for dlmcode.text.syntax: the language table, check() per grammar, Python's compile()
check, and the breakage rule between an input and a filled output."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from dlmcode.core.errors import UsageError
from dlmcode.text.syntax import (
    LANGUAGES,
    Breakage,
    Problem,
    breakage,
    check,
    language_for,
)

REPO = Path(__file__).resolve().parent.parent

# A valid program per language, with the constructs a fill usually touches.
VALID = {
    "python": "import os\n\n\nclass A:\n    def f(self, x: int) -> int:\n        if x:\n            return [i for i in "
    "range(x)][0]\n        return os.getpid()\n",
    "javascript": "import fs from 'fs';\n\nfunction f(x) {\n  const ys = [1, 2].map((y) => y + x);\n  return "
    "<div>{ys}</div>;\n}\n\nexport default f;\n",
    "typescript": "interface P { x: number }\n\nfunction f<T>(p: P, t: T): T {\n  const y = <number>p.x;\n  return "
    "t;\n}\n",
    "tsx": 'type P = { x: number };\n\nexport const A = (p: P) => {\n  return <div className="a">{p.x}</div>;\n};\n',
    "go": 'package main\n\nimport "fmt"\n\nfunc f(xs []int) int {\n\tfor _, x := range xs '
    "{\n\t\tfmt.Println(x)\n\t}\n\treturn len(xs)\n}\n",
    "rust": "use std::collections::HashMap;\n\nfn f(xs: &[i32]) -> HashMap<i32, usize> {\n    let mut m = "
    "HashMap::new();\n    for (i, x) in xs.iter().enumerate() {\n        m.insert(*x, i);\n    }\n    m\n}\n",
    "java": "import java.util.List;\n\nclass A {\n  int f(List<Integer> xs) {\n    int s = 0;\n    for (int x : xs) { "
    "s += x; }\n    return s;\n  }\n}\n",
    "c": "#include <stdio.h>\n\nstatic int f(const int *xs, int n) {\n  int s = 0;\n  for (int i = 0; i < n; i++) s += "
    "xs[i];\n  return s;\n}\n",
    "cpp": "#include <vector>\n\ntemplate <typename T>\nT f(const std::vector<T>& xs) {\n  T s{};\n  for (auto& x : "
    "xs) s += x;\n  return s;\n}\n",
}

# A broken program per language and the line of its first problem.
BROKEN = {
    "python": ("def f(x):\n    return x\n\ny = f(1\nz = 2\n", 4),
    "javascript": ("function f(x) {\n  return x;\n}\nconst y = f(1;\n", 4),
    "typescript": ("function f(x: number): number {\n  return x;\n}\nconst y: number = f(1;\n", 4),
    "tsx": ("const A = () => <div>hi</div>;\nconst b = f(1;\n", 2),
    "go": ("package main\n\nfunc f(x int) int {\n\treturn x\n}\n\nvar y = f(1\n", 7),
    "rust": ("fn f(x: i32) -> i32 {\n    x\n}\n\nfn main() {\n    let y = f(1;\n}\n", 6),
    "java": ("class A {\n  int f(int x) {\n    return x;\n  }\n  int g() { return f(1; }\n}\n", 5),
    "c": ("int f(int x) {\n  return x;\n}\nint g(void) { return f(1; }\n", 4),
    "cpp": ("#include <vector>\nint f(int x) {\n  return x;\n}\nint g() { return f(1; }\n", 5),
}


def test_every_language_has_cases():
    assert list(LANGUAGES) == ["python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp"]
    assert set(VALID) == set(BROKEN) == set(LANGUAGES)


@pytest.mark.parametrize("lang", list(VALID))
def test_valid_snippet_is_ok(lang):
    report = check(VALID[lang], lang)
    assert report.lang == lang
    assert report.problems == ()
    assert report.ok and report.errors == 0


@pytest.mark.parametrize("lang", list(BROKEN))
def test_broken_snippet_reports_its_first_line(lang):
    text, line = BROKEN[lang]
    report = check(text, lang)
    assert not report.ok
    assert report.errors >= 1
    assert report.problems[0].line == line


def test_missing_token_is_named_with_byte_positions():
    # "é" is two bytes, so the missing ')' sits at byte column 14, character column 13.
    report = check('const s = "é";\nconst y = f(s;\n', "js")
    line_start = len('const s = "é";\n'.encode())
    assert report.problems == (
        Problem(
            line=2,
            column=13,
            kind="MISSING",
            message="missing ')'",
            start_byte=line_start + 13,
            end_byte=line_start + 13,
            end_line=2,
        ),
    )
    report = check('const s = "é"; const y = f(s;\n', "js")
    assert report.problems[0].column == len('const s = "é"; const y = f(s'.encode())


def test_error_subtree_is_reported_once_with_its_extent():
    # tree-sitter swallows lines 4-5 into one ERROR node; compile() names the bracket.
    report = check(BROKEN["python"][0], "python", raw=True)
    assert [(p.kind, p.line, p.end_line, p.message) for p in report.problems] == [
        ("ERROR", 4, 5, "unexpected 'y = f(1'"),
        ("compile", 4, 4, "'(' was never closed"),
    ]
    assert report.errors == 1  # both checkers saw the same mistake
    # Narrowed (what `dlmcode check` prints), the compiler's place stands for both.
    assert [(p.kind, p.line) for p in check(BROKEN["python"][0], "python").problems] == [("compile", 4)]


def test_long_error_excerpt_is_cut():
    report = check("values = compute(alpha, beta, gamma\nprint(values)\n", "python", raw=True)
    assert report.problems[0].message == "unexpected 'values = compute(alpha,…'"


def test_error_node_ending_at_a_line_start_ends_on_the_line_before():
    # This ERROR node runs to column 0 of line 6: its last character is on line 5.
    text = VALID["javascript"].replace("</div>", "<div>")
    (problem,) = check(text, "javascript").problems
    assert (problem.kind, problem.line, problem.end_line) == ("ERROR", 5, 5)
    assert text.encode()[problem.end_byte - 1 : problem.end_byte] == b"\n"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("x = 1\n    y = 2\n", 2, "unexpected indent"),
        ("if x:\n\ty = 1\n        z = 2\n", 3, "inconsistent use of tabs and spaces in indentation"),
        ("def f():\n    pass\nreturn 1\n", 3, "'return' outside function"),
        ("await x\n", 1, "'await' outside function"),  # no top-level await: a .py file cannot run it
    ],
)
def test_python_compile_catches_what_tree_sitter_accepts(text, line, message):
    report = check(text, "python")
    assert [(p.kind, p.line, p.message) for p in report.problems] == [("compile", line, message)]


def test_python_compile_column_counts_bytes():
    (problem,) = check('s = "éé" + (1,\n', "python").problems
    assert problem.message == "'(' was never closed"
    assert problem.column == len('s = "éé" + '.encode())
    assert problem.start_byte == problem.column


def test_python_compile_warnings_are_not_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check('x = "\\d"\nassert (x, "y")\n', "python").ok


def test_null_byte_is_a_python_error_without_a_position():
    # compile() gives no line for a null byte: the problem is put at the start of the text.
    problems = check("x = 1\x00\n", "python").problems
    assert [(p.line, p.column, p.start_byte) for p in problems if p.kind == "compile"] == [(1, 0, 0)]


def test_check_accepts_aliases_and_rejects_unknown():
    assert check("x = 1\n", "py").lang == "python"
    with pytest.raises(UsageError):
        check("x = 1\n", "cobol")


def test_report_to_dict():
    assert check("x = 1\n    y = 2\n", "python").to_dict() == {
        "lang": "python",
        "ok": False,
        "errors": 1,
        "problems": [
            {
                "line": 2,
                "column": 4,
                "kind": "compile",
                "message": "unexpected indent",
                "start_byte": 9,
                "end_byte": 9,
                "end_line": 2,
            }
        ],
    }


# ---------------------------------------------------------------- breakage

PY = "import os\n\nx = [1, 2]\ny = 3\n\ndef f(a):\n    return a\n"
JS = "let a = 1;\nlet b = [2, 3];\nlet c = 4;\n"


def replace_line(text, line, new):
    lines = text.split("\n")
    lines[line - 1 : line] = new.split("\n")
    return "\n".join(lines)


@pytest.mark.parametrize(("text", "lang"), [(PY, "python"), (JS, "javascript"), (BROKEN["go"][0], "go")])
def test_unchanged_file_is_not_broken(text, lang):
    assert breakage(text, text, lang, (2, 2)) == Breakage(0, None, False)


def test_not_broken_to_dict():
    assert breakage(PY, PY, "python").to_dict() == {
        "broken": False,
        "new_errors": 0,
        "first_line": None,
        "touches_span": False,
    }


@pytest.mark.parametrize(
    ("before", "lang", "line", "fill"),
    [
        # an error on line 4; the fill rewrites line 1 and adds two lines above it
        ("import os\n\ndef f(a):\ny = f(1\n", "python", 1, "import os\nimport re\nimport io"),
        ("let a = 1;\nlet b = [2, 3;\nlet c = 4;\n", "javascript", 3, "let c = 4;\nfunction g() {\n  return 5;\n}"),
        ("int f(void) { return g(1; }\nint x = 1;\n", "c", 2, "int x = 2;"),
    ],
)
def test_equally_broken_file_is_not_broken(before, lang, line, fill):
    after = replace_line(before, line, fill)
    assert not check(before, lang).ok
    result = breakage(before, after, lang, (line, line + fill.count("\n")))
    assert result == Breakage(0, None, False)
    assert not result.broken


def test_old_python_error_moved_up_by_the_fill_is_not_new():
    # compile()'s old error on line 5 is on line 3 after the fill deletes two lines above it.
    before = "import os\nimport re\nimport io\n\ny = f(1\n"
    after = replace_line(before, 1, "import os").replace("import re\nimport io\n", "")
    assert after == "import os\n\ny = f(1\n"
    assert breakage(before, after, "python", (1, 1)) == Breakage(0, None, False)


def test_refill_of_a_broken_line_that_stays_broken_is_broken():
    # The fill's lines are the model's text: an error there is new even where the user's
    # original lines had one (docs/usage.md, breakage).
    before = "x = 1\ny = [1, 2\nz = 3\n"
    assert breakage(before, replace_line(before, 2, "y = [3, 4"), "python", (2, 2)) == Breakage(1, 2, True)


@pytest.mark.parametrize(
    ("before", "lang", "line", "fill"),
    [
        (PY, "python", 3, "x = [1, 2"),
        (JS, "javascript", 2, "let b = f(2, 3;"),
        (VALID["rust"], "rust", 5, "    for (i, x) in xs.iter(.enumerate() {"),
        (VALID["cpp"], "cpp", 6, "  for (auto& x : xs s += x;"),
    ],
)
def test_fill_with_unclosed_bracket_is_broken_in_the_span(before, lang, line, fill):
    result = breakage(before, replace_line(before, line, fill), lang, (line, line))
    assert result.broken
    assert result.new_errors >= 1
    assert result.first_line == line
    assert result.touches_span is True
    assert result.to_dict() == {
        "broken": True,
        "new_errors": result.new_errors,
        "first_line": line,
        "touches_span": True,
    }


@pytest.mark.parametrize(
    ("before", "after", "lang", "first_line"),
    [
        # the opened '[' swallows the next line: tree-sitter's errors are all on line 2
        (JS, "let a = [1,\nlet b = [2, 3];\nlet c = 4;\n", "javascript", 2),
        # the new `if` needs the (unchanged) next line indented: only compile() sees it, on line 2
        ("x = 0\ny = 1\n", "if x:\ny = 1\n", "python", 2),
    ],
)
def test_new_error_outside_the_span_does_not_touch_it(before, after, lang, first_line):
    result = breakage(before, after, lang, (1, 1))
    assert result.broken
    assert result.first_line == first_line
    assert result.touches_span is False


def test_python_break_above_an_old_error_is_found_by_compile():
    before = PY + "\nz = f(1\n"  # already broken on line 9
    after = replace_line(before, 3, "x = [1, 2")
    assert breakage(before, after, "python", (3, 3)) == Breakage(1, 3, True)


def test_fixing_an_error_that_reveals_a_later_one_is_not_broken():
    # compile() stopped at line 3 before; after the fix it reports the old line-9 error.
    broken_twice = replace_line(PY + "\nz = f(1\n", 3, "x = [1, 2")
    fixed = PY + "\nz = f(1\n"
    assert breakage(broken_twice, fixed, "python", (3, 3)) == Breakage(0, None, False)


def test_breakage_without_span_still_counts():
    result = breakage(PY, replace_line(PY, 3, "x = [1, 2"), "python")
    assert (result.broken, result.first_line, result.touches_span) == (True, 3, False)


def test_breakage_rejects_a_bad_span():
    with pytest.raises(ValueError):
        breakage(PY, PY, "python", (3, 2))


# ---------------------------------------------------------------- language_for and the table


@pytest.mark.parametrize(
    ("path", "lang"),
    [
        ("a/b.py", "python"),
        ("x.PY", "python"),
        ("x.pyi", "python"),
        ("x.mjs", "javascript"),
        ("x.jsx", "javascript"),
        ("x.ts", "typescript"),
        ("x.tsx", "tsx"),
        ("x.go", "go"),
        ("x.rs", "rust"),
        ("X.java", "java"),
        ("x.c", "c"),
        ("x.h", "c"),
        ("x.cc", "cpp"),
        ("x.hpp", "cpp"),
    ],
)
def test_language_for_extension(path, lang):
    assert language_for(path) == lang


@pytest.mark.parametrize(
    ("alias", "lang"),
    [
        ("py", "python"),
        ("Python", "python"),
        ("js", "javascript"),
        ("ts", "typescript"),
        ("tsx", "tsx"),
        ("golang", "go"),
        ("rs", "rust"),
        ("c++", "cpp"),
        ("cxx", "cpp"),
        ("c", "c"),
    ],
)
def test_language_for_alias(alias, lang):
    assert language_for(lang=alias) == lang


def test_explicit_language_wins_over_extension():
    assert language_for("x.py", "rust") == "rust"


ALL_NAMES = "python, javascript, typescript, tsx, go, rust, java, c, cpp"


@pytest.mark.parametrize(
    ("path", "lang", "start"),
    [
        (None, "cobol", "unknown language 'cobol'"),
        ("notes.txt", None, "cannot tell the language of notes.txt (extension '.txt')"),
        ("Makefile", None, "cannot tell the language of Makefile (no extension)"),
        ("-", None, "cannot tell the language without a file name"),
        (None, None, "cannot tell the language without a file name"),
    ],
)
def test_unknown_language_is_one_line_listing_all(path, lang, start):
    with pytest.raises(UsageError) as info:
        language_for(path, lang)
    message = str(info.value)
    assert message.startswith(start)
    assert ALL_NAMES in message
    assert "\n" not in message
    assert info.value.exit_code == 2


def test_table_entries_come_from_the_toml():
    tsx = LANGUAGES["tsx"]
    assert (tsx.module, tsx.function, tsx.extensions) == ("tree_sitter_typescript", "language_tsx", (".tsx",))
    assert LANGUAGES["python"].checks == ("python-compile",)
    with pytest.raises(TypeError):
        LANGUAGES["go"] = tsx  # read-only for callers


def test_a_clash_in_the_table_is_refused():
    from dlmcode.text.languages import LanguageEntry, _check_unique

    a = LanguageEntry("a", (".x",), "m", "f", aliases=("aa",))
    with pytest.raises(ValueError, match="claimed by two languages: aa"):
        _check_unique([a, LanguageEntry("b", (".y",), "m", "f", aliases=("aa",))])
    with pytest.raises(ValueError, match="claimed by two languages: .x"):
        _check_unique([a, LanguageEntry("b", (".x",), "m", "f")])
    _check_unique(list(LANGUAGES.values()))


def test_import_loads_neither_tree_sitter_nor_the_table():
    code = (
        "import sys, dlmcode.text.syntax; "
        "print(sorted(m for m in ('tree_sitter', 'tomllib', 'importlib.resources') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"
