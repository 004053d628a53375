"""Breakage, one rule in every mode: the output's syntax errors that the user's code did not have.

Texts are built by hand in every language dlmcode knows and go through the real path:
spans.plan_infill / plan_generate, a hand-made canvas, spans.splice, and fill.Job.breakage
(which hands syntax.breakage the user's code and the holes). The results are exact.
"""

from __future__ import annotations

import re

import pytest
import torch
from typer.testing import CliRunner

from dlmcode.bench import metrics, runner
from dlmcode.bench.sandbox import Limits
from dlmcode.bench.suites import Task
from dlmcode.cli.commands import app
from dlmcode.core.run import RunSettings
from dlmcode.core.vocab import Vocab
from dlmcode.decoders import build
from dlmcode.jobs.fill import Job
from dlmcode.models.base import Dlm
from dlmcode.text import spans, syntax
from dlmcode.text.syntax import Breakage, Region, breakage, check

PAD, MASK = 0, 1
NONE = Breakage(0, None, False)


class Chars:
    """One token per character (ids above PAD and MASK)."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) + 2 for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i - 2) for i in ids)


CHARS = Chars()


def fill(text: str, fills: list[str], lang: str, span: tuple[int, int] | None = None) -> tuple[str, Breakage]:
    """Fill `text`'s markers (or its span) with `fills` through the plan/splice path; the output and its breakage."""
    room = max(1, *(len(f) for f in fills))
    plan = spans.plan_infill(text, Vocab(CHARS, MASK, 1_000_000), span, room)
    canvas = plan.canvas
    for positions, piece in zip(plan.positions, fills, strict=True):
        ids = CHARS.encode(piece) + [PAD] * (len(positions) - len(piece))  # pad is dropped by splice
        canvas = canvas.fill(torch.tensor(list(positions)), torch.tensor(ids))
    return finish(plan, canvas, lang)


def finish(plan: spans.Plan, canvas, lang: str, **job) -> tuple[str, Breakage]:
    filled = spans.splice(plan, canvas, CHARS, drop_ids=frozenset({PAD}))
    run = Job(plan, None, build("low-confidence"), 0, lang, **job)  # breakage needs no model
    text = run.finish(filled) if run.finish else filled.text
    return text, run.breakage(filled, text)


# ---------------------------------------------------------------- per language
# Each file is valid once its two markers hold code. The first marker stands after `return`,
# the second alone on a line of another function's body. BAD is invalid in every language.

FILES = {
    "python": (
        "import os\n\n\ndef first(a, b):\n    total = a + b\n    return ⟦fill⟧\n\n\n"
        "def second(xs):\n    out = []\n    ⟦fill⟧\n    return out\n"
    ),
    "javascript": (
        "const base = 1;\n\nfunction first(a, b) {\n  const total = a + b;\n  return ⟦fill⟧;\n}\n\n"
        "function second(xs) {\n  const out = [];\n  ⟦fill⟧\n  return out;\n}\n"
    ),
    "typescript": (
        "const base: number = 1;\n\nfunction first(a: number, b: number): number {\n  const total = a + b;\n"
        "  return ⟦fill⟧;\n}\n\nfunction second(xs: number[]): number[] {\n  const out: number[] = [];\n"
        "  ⟦fill⟧\n  return out;\n}\n"
    ),
    "tsx": (
        "const base: number = 1;\n\nfunction first(a: number, b: number) {\n  const total = a + b;\n"
        "  return ⟦fill⟧;\n}\n\nfunction second(xs: number[]): number[] {\n  const out: number[] = [];\n"
        "  ⟦fill⟧\n  return out;\n}\n"
    ),
    "go": (
        "package main\n\nvar base = 1\n\nfunc first(a int, b int) int {\n\ttotal := a + b\n\treturn ⟦fill⟧\n}\n\n"
        "func second(xs []int) []int {\n\tout := []int{}\n\t⟦fill⟧\n\treturn out\n}\n"
    ),
    "rust": (
        "const BASE: i32 = 1;\n\nfn first(a: i32, b: i32) -> i32 {\n    let total = a + b;\n    return ⟦fill⟧;\n}\n\n"
        "fn second(xs: &[i32]) -> Vec<usize> {\n    let mut out = Vec::new();\n    ⟦fill⟧\n    out\n}\n"
    ),
    "java": (
        "class A {\n  int base = 1;\n\n  int first(int a, int b) {\n    int total = a + b;\n    return ⟦fill⟧;\n  }\n\n"
        "  int second(int[] xs) {\n    int out = 0;\n    ⟦fill⟧\n    return out;\n  }\n}\n"
    ),
    "c": (
        "int base = 1;\n\nint first(int a, int b) {\n  int total = a + b;\n  return ⟦fill⟧;\n}\n\n"
        "int second(int *xs, int n) {\n  int out = 0;\n  ⟦fill⟧\n  return out;\n}\n"
    ),
    "cpp": (
        "int base = 1;\n\nint first(int a, int b) {\n  auto total = a + b;\n  return ⟦fill⟧;\n}\n\n"
        "int second(const int *xs, int n) {\n  int out = 0;\n  ⟦fill⟧\n  return out;\n}\n"
    ),
}
# Valid fills for the two markers; the second runs over two lines (it shifts nothing below it
# that a test looks at, but the first one's does in test_a_long_first_fill_moves_the_second).
GOOD = {
    "python": ("total * 2", "for x in xs:\n        out.append(x)"),
    "javascript": ("total * 2", "for (const x of xs) {\n    out.push(x); }"),
    "typescript": ("total * 2", "for (const x of xs) {\n    out.push(x); }"),
    "tsx": ("<b>{total}</b>", "for (const x of xs) {\n    out.push(x); }"),
    "go": ("total * 2", "for _, x := range xs {\n\t\tout = append(out, x) }"),
    "rust": ("total * 2", "for x in xs {\n        out.push(*x as usize); }"),
    "java": ("total * 2", "for (int x : xs) {\n      out += x; }"),
    "c": ("total * 2", "for (int i = 0; i < n; i++) {\n    out += xs[i]; }"),
    "cpp": ("total * 2", "for (int i = 0; i < n; i++) {\n    out += xs[i]; }"),
}
BAD = "total + )"  # a bracket closed that was never opened
MARKER_LINES = {
    "python": (6, 11),
    "javascript": (5, 10),
    "typescript": (5, 10),
    "tsx": (5, 10),
    "go": (7, 12),
    "rust": (5, 10),
    "java": (6, 11),
    "c": (5, 10),
    "cpp": (5, 10),
}
# The user's own mistake, on the file's first code line, far from both markers.
USER_ERROR = {
    "python": ("import os", "import = os"),
    "javascript": ("const base = 1;", "const base = = 1;"),
    "typescript": ("const base: number = 1;", "const base: number = = 1;"),
    "tsx": ("const base: number = 1;", "const base: number = = 1;"),
    "go": ("var base = 1", "var base = = 1"),
    "rust": ("const BASE: i32 = 1;", "const BASE: i32 = = 1;"),
    "java": ("  int base = 1;", "  int base = = 1;"),
    "c": ("int base = 1;", "int base = = 1;"),
    "cpp": ("int base = 1;", "int base = = 1;"),
}
LANGS = list(FILES)


def test_every_language_is_covered():
    assert LANGS == list(syntax.LANGUAGES)


@pytest.mark.parametrize("lang", LANGS)
def test_the_cases_are_what_they_claim(lang):
    # Valid apart from the markers: the good fills give a valid file, and so does the
    # reference's own text once the markers hold code; the user's error is one broken file.
    good, _ = fill(FILES[lang], list(GOOD[lang]), lang)
    assert check(good, lang).ok
    assert not check(FILES[lang].replace(*USER_ERROR[lang]), lang).ok
    assert [FILES[lang].split("\n")[n - 1].count("⟦fill⟧") for n in MARKER_LINES[lang]] == [1, 1]


@pytest.mark.parametrize("lang", LANGS)
def test_good_fills_of_markers_are_not_broken(lang):
    assert fill(FILES[lang], list(GOOD[lang]), lang)[1] == NONE


@pytest.mark.parametrize("lang", LANGS)
def test_a_bad_fill_after_return_is_broken_on_its_line(lang):
    first, _ = MARKER_LINES[lang]
    _, found = fill(FILES[lang], [BAD, GOOD[lang][1]], lang)
    assert (found.broken, found.first_line, found.touches_span) == (True, first, True)
    assert found.new_errors == 1


@pytest.mark.parametrize("lang", LANGS)
def test_a_bad_fill_of_the_second_marker_is_found_below_a_longer_first_fill(lang):
    # The first fill runs over three lines: the second marker's line moves down by two.
    longer = GOOD[lang][0] if lang == "tsx" else f"(\n{GOOD[lang][0]}\n)"
    _, second = MARKER_LINES[lang]
    _, found = fill(FILES[lang], [longer, BAD], lang)
    assert found.broken and found.touches_span
    assert found.first_line == second + (0 if lang == "tsx" else 2)


@pytest.mark.parametrize("lang", LANGS)
def test_several_markers_all_bad_count_each(lang):
    _, found = fill(FILES[lang], [BAD, BAD], lang)
    assert found.broken and found.touches_span
    assert found.first_line == MARKER_LINES[lang][0]
    assert found.new_errors >= 2


@pytest.mark.parametrize("lang", LANGS)
def test_file_broken_elsewhere_good_fills_are_not_broken(lang):
    text = FILES[lang].replace(*USER_ERROR[lang])
    assert fill(text, list(GOOD[lang]), lang)[1] == NONE


@pytest.mark.parametrize("lang", LANGS)
def test_file_broken_elsewhere_bad_fill_is_broken(lang):
    text = FILES[lang].replace(*USER_ERROR[lang])
    first, second = MARKER_LINES[lang]
    _, found = fill(text, [BAD, GOOD[lang][1]], lang)
    assert (found.broken, found.first_line, found.touches_span) == (True, first, True)
    _, found = fill(text, [GOOD[lang][0], BAD], lang)
    assert (found.broken, found.first_line, found.touches_span) == (True, second + 0, True)


@pytest.mark.parametrize("lang", LANGS)
def test_the_same_line_as_a_span_agrees_with_the_marker(lang):
    # The marker's line written out with valid code and given as --span: same verdicts.
    first, _ = MARKER_LINES[lang]
    text = FILES[lang].replace("⟦fill⟧", GOOD[lang][0], 1).replace("⟦fill⟧", GOOD[lang][1])
    line = text.split("\n")[first - 1]
    head = line[: len(line) - len(line.lstrip())]
    keep = line.strip().endswith(";") and lang not in ("python", "go")
    bad_line = head + "return " + BAD + (";" if keep else "")
    assert fill(text, [line], lang, span=(first, first))[1] == NONE
    _, found = fill(text, [bad_line], lang, span=(first, first))
    assert (found.broken, found.first_line, found.touches_span) == (True, first, True)


# ---------------------------------------------------------------- the case


# Six invalid fills of `return ⟦fill:6⟧`: the marker's own line used to hide each of them.
INVALID_SIX = ["x +)(2", "[x, )]", "x x x:", "x = = ", "(((x))", "x ** *"]


@pytest.mark.parametrize("middle", INVALID_SIX)
def test_return_marker_filled_with_invalid_code_is_broken_every_time(middle):
    text = "def f(x):\n    return ⟦fill:6⟧\n\n\nprint(f(2))\n"
    out, found = fill(text, [middle], "python")
    assert out == f"def f(x):\n    return {middle}\n\n\nprint(f(2))\n"
    assert not check(out, "python").ok
    assert (found.broken, found.first_line, found.touches_span) == (True, 2, True)
    assert found.new_errors == 1


def test_a_marker_whose_empty_hole_breaks_the_line_does_not_hide_a_bad_fill():
    # `x = ` (marker removed) is itself an error; it is the hole's, not the user's.
    text = "a = 1\nx = ⟦fill⟧\nb = 2\n"
    assert fill(text, ["a + 1"], "python")[1] == NONE
    assert fill(text, ["a +"], "python")[1] == Breakage(1, 2, True)


def test_an_empty_body_reported_on_the_next_statement_is_the_holes():
    # compile() reports the missing body two lines below the marker, on the next code line.
    text = "def f(x):\n    ⟦fill⟧\n\nprint(1)\n"
    assert fill(text, ["return x"], "python")[1] == NONE
    assert fill(text, [""], "python")[1] == Breakage(1, 4, False)  # an empty fill leaves the body missing


def test_an_error_next_to_the_hole_is_the_holes_one_further_is_the_users():
    near = "x = = 1\ny = ⟦fill⟧\n"  # the user's mistake is on the hole's neighbour line
    assert fill(near, ["2"], "python")[1] == Breakage(1, 1, False)
    far = "x = = 1\n\nz = 3\ny = ⟦fill⟧\n"  # two code lines away: the user's
    assert fill(far, ["2"], "python")[1] == NONE


# ---------------------------------------------------------------- generate and chat


def generated(prompt: str, continuation: str, lang: str = "python") -> tuple[str, Breakage]:
    plan = spans.plan_generate(prompt, Vocab(CHARS, MASK, 1_000_000), max(1, len(continuation)))
    (positions,) = plan.positions
    ids = CHARS.encode(continuation) + [PAD] * (len(positions) - len(continuation))
    return finish(plan, plan.canvas.fill(torch.tensor(list(positions)), torch.tensor(ids)), lang)


def test_a_continuation_is_the_hole():
    prompt = "import os\n\n\ndef f(x):\n"
    assert generated(prompt, "    return x\n")[1] == NONE
    assert generated(prompt, "    return x +)\n")[1] == Breakage(1, 5, True)
    # The prompt's open block is the hole's to close: leaving it empty is breakage.
    assert generated(prompt, "")[1] == Breakage(1, 4, False)


def test_a_broken_prompt_keeps_its_own_error():
    prompt = "x = = 1\n\nimport os\n\n\ndef f(x):\n"
    assert generated(prompt, "    return x\n")[1] == NONE
    assert generated(prompt, "    return )\n")[1].first_line == 7


def test_a_chat_reply_is_all_the_models():
    plan = spans.plan_generate("write f", Vocab(CHARS, MASK, 1_000_000), 12)
    (positions,) = plan.positions
    reply = "def f(:\n  1\n"
    canvas = plan.canvas.fill(torch.tensor(list(positions)), torch.tensor(CHARS.encode(reply)))
    text, found = finish(plan, canvas, "python", finish=lambda filled: filled.fills[0])
    assert text == reply and found.broken and found.touches_span and found.first_line == 1


# ---------------------------------------------------------------- syntax.breakage directly


def test_holes_in_both_texts_decide_the_pairing():
    # Two markers on one line; the user's error below them moves down with the two-line fill.
    before = "f(, )\nx = 1\n\n\ny = = 2\n"  # markers removed: `f(, )`
    after = "f(a,\nb, c)\nx = 1\n\n\ny = = 2\n"
    holes = [Region((2, 2), (2, 5)), Region((4, 4), (7, 8))]
    assert breakage(before, after, "python", holes=holes) == NONE
    bad = "f(a,\nb, c))\nx = 1\n\n\ny = = 2\n"
    assert breakage(before, bad, "python", holes=[Region((2, 2), (2, 5)), Region((4, 4), (7, 9))]) == Breakage(
        1, 2, True
    )


def test_without_holes_the_changed_run_is_the_hole():
    # The legacy call: no holes, one rewritten run found by the texts' common ends.
    before = "x = 1\ny = 2\nz = = 3\n"
    assert breakage(before, before.replace("y = 2", "y = [2]"), "python") == NONE
    assert breakage(before, before.replace("y = 2", "y = [2"), "python").first_line == 2


# ---------------------------------------------------------------- compare and bench use the same rule


def closing_brackets() -> Dlm:
    """A model whose every hole becomes ')'."""

    def predict(tokens: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(len(tokens), 130)  # (L, V)
        logits[:, CHARS.encode(")")[0]] = 5.0
        return logits

    return Dlm(
        "closing",
        "test",
        CHARS,
        MASK,
        None,
        PAD,
        512,
        predict,
        torch.device("cpu"),
        torch.float32,
        special_ids=frozenset({PAD, MASK}),
    )


def test_compare_and_bench_count_a_bad_marker_fill_as_broken():
    dlm = closing_brackets()
    (config,) = runner.configs(["low-confidence"], [], [])
    # compare: the marker's own text must not hide the fill's error
    sample = runner.compare_one(
        "def f(x):\n    return ⟦fill:2⟧\n", None, "f.py", dlm, config, 0, RunSettings(lang="python")
    )
    assert sample.output == "def f(x):\n    return ))\n"
    assert sample.breakage == {"broken": True, "new_errors": 1, "first_line": 2, "touches_span": True}
    assert metrics.tally([sample])["breakage_rate"] == 1.0
    # bench: an infilling task goes through a marker plan; its hidden middle is the user's text
    task = Task("t/f", "def f(x):\n    return ", "\n", canonical="x + 1")
    found = runner.run_one(task, config, dlm, 0, 8, Limits())
    assert found.output == ")))))" and found.breakage["broken"] and found.breakage["first_line"] == 2
    assert metrics.tally([found])["breakage_rate"] == 1.0


# ---------------------------------------------------------------- the command line: summary and check

FUNS = "".join(
    f"def f{i}(x):\n    y = x + {i}\n    if y > 2:\n        return y\n    return [y, {i}]\n\n" for i in range(8)
)
SUMMARY = re.compile(
    r"breakage: (\d+) new syntax error\(s\), first at line (\d+) \((inside|outside) the filled lines? (\d+)\)"
)


@pytest.mark.parametrize(("span", "length"), [("21", "1"), ("22", "1"), ("21", "2")])
def test_infill_summary_names_the_real_line_and_agrees_with_itself(tmp_path, span, length):
    # A token or two cannot stand for an `if` line above its block, or for the block's only
    # line: the shipped model's fill breaks the file, and the summary must say where.
    path = tmp_path / "funs.py"
    path.write_text(FUNS)
    result = CliRunner().invoke(app, ["infill", str(path), "--span", span, "--length", length])
    assert result.exit_code == 0, result.stderr
    found = SUMMARY.search(result.stderr)
    assert found, result.stderr
    first, where, filled = int(found[2]), found[3], int(found[4])
    line, out = int(span), result.stdout
    extra = out.count("\n") - FUNS.count("\n")  # line breaks the model wrote into the fill (a token can be one)
    assert filled == line and extra >= 0  # the fill starts on the span's line
    assert out.split("\n")[: line - 1] == FUNS.split("\n")[: line - 1]
    assert out.split("\n")[line + extra :] == FUNS.split("\n")[line:]
    assert (where == "inside") == (first == filled)
    # The line named is where the compiler (the precise checker) places the new mistake;
    # tree-sitter's ERROR node for it may start lines above, at the function or the file's top.
    (problem,) = [p for p in check(out, "python", raw=True).problems if p.kind == "compile"]
    assert first == problem.line and line <= first <= line + extra + 1


BOX = (
    '"""Boxes of text."""\n\nimport os\n\n\nclass Box:\n    """A box that holds lines."""\n\n    sep = os.linesep\n\n'
    '    def __init__(self,\n                 width=70,\n                 indent=""):\n        self.width = width\n'
    "        self.indent = indent\n\n    def render(self, text):\n        return self.sep.join(text.split())\n\n\n"
    'def main():\n    print(Box().render("a b c"))\n'
)


def test_infill_summary_is_not_fooled_by_an_error_node_from_the_files_top(tmp_path):
    # The case: one token for a `def` header that continues on the next lines.
    # tree-sitter's ERROR node for the result starts at line 1 and covers the fill, which
    # the summary used to report as "first at line 1 (inside the filled span)".
    path = tmp_path / "box.py"
    path.write_text(BOX)
    result = CliRunner().invoke(app, ["infill", str(path), "--span", "11", "--length", "1"])
    assert result.exit_code == 0, result.stderr
    found = SUMMARY.search(result.stderr)
    assert found, result.stderr
    first, where, filled = int(found[2]), found[3], int(found[4])
    problems = check(result.stdout, "python", raw=True).problems
    (compiled,) = [p for p in problems if p.kind == "compile"]
    assert first == compiled.line != 1 and filled == 11
    assert (where == "inside") == (first == 11)
    assert [p.line for p in problems if p.kind == "ERROR"][:1] == [1]  # what the old summary named


BROKEN_LINE = {  # a line that breaks an otherwise valid file, and where `check` must place it
    "python": (
        "".join(
            f"def f{i}(x):\n    y = x + {i}\n    if y > 2:\n        return y\n    return [y, {i}]\n\n" for i in range(8)
        ),
        "    ]]",
        "21:5: unmatched ']'",
    ),
    "rust": (
        "".join(
            f"fn f{i}(x: i32) -> i32 "
            f"{{\n    let y = x + {i};\n    if y > 2 {{\n        return y;\n    }}\n    y * {i}\n}}\n\n"
            for i in range(8)
        ),
        "    y = ) (",
        "21:9: unexpected ')'",
    ),
}


@pytest.mark.parametrize("lang", list(BROKEN_LINE))
def test_check_reports_one_broken_line_once_at_its_place(tmp_path, lang):
    # tree-sitter wraps everything from the file's top to the bad line in one ERROR node:
    # it used to be printed as a second problem at 1:1 (python) or as the only one (rust).
    text, bad, place = BROKEN_LINE[lang]
    lines = text.split("\n")
    lines[20] = bad
    path = tmp_path / ("f.py" if lang == "python" else "f.rs")
    path.write_text("\n".join(lines))
    if lang == "python":  # the raw tree-sitter report still has the file-top node
        assert [(p.line, p.column) for p in check("\n".join(lines), lang, raw=True).problems][0] == (1, 0)
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [f"{path}:{place}"]
    report = check("\n".join(lines), lang)
    assert report.errors == 1 and len(report.problems) == 1


def test_a_file_top_error_that_is_the_broken_construct_keeps_its_place():
    # The first function's own header is broken: the ERROR node from 1:1 is the real place.
    text = "function f( {\n  return 1;\n}\n\nfunction g() {\n  return 2;\n}\n"
    assert [p.line for p in check(text, "javascript").problems] == [1]


def test_an_unclosed_brace_is_placed_on_the_brace_not_the_file_top(tmp_path):
    # tree-sitter-rust wraps the whole file in one ERROR that nests no other problem: it used
    # to be reported at 1:1 as "unexpected 'fn main() {'". The brace nothing closes is the place.
    path = tmp_path / "a.rs"
    path.write_text('fn main() {\n    let x = 1;\n    if x > 0 {\n        println!("hi");\n\n}\n')
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 1 and result.stdout.splitlines() == [f"{path}:1:11: '{{' is never closed"]
    two = "fn a() -> i32 {\n    1\n}\n\nfn b() {\n    let v = vec![1];\n    for x in v {\n        a();\n"
    assert [(p.line, p.column, p.kind) for p in check(two, "rust").problems] == [(7, 15, "unclosed")]
