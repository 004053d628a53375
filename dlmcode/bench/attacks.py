"""The guard's attack classes: holes cut where a guard that searches for a witness used to give up.

`dlmcode bench -s guard-attacks` cuts the held-out standard-library files (bench/heldout.py) of
this Python; `-s guard-attacks:FOLDER` cuts the source files under FOLDER in any language dlmcode
knows (C headers, JavaScript, C++, Rust, ...). Each class is a function of one file's text that
returns the holes it cuts, as (start, end) character offsets; every hole is a Task of the whole
file, so that the judge sees what a user's file holds:
- docstring: from inside a docstring's last line to the end of the next block's head (close the
  string, then open a block);
- try: a `try:` line;
- indent: from inside a line's leading indentation to the middle or end of that line;
- tabs: the file re-indented with tabs, then two to four lines;
- dict: inside a long line (80+ characters) that holds a dict literal, between two random characters;
- directive: a C preprocessor line, or from the middle of the line above it into it;
- template: inside or across a JavaScript/TypeScript template literal;
- raw: inside or across a raw string (Python r"", Rust r#""#, C++ R"()").
The cuts are drawn by a generator seeded with the file's name and the class: the same on every run.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

from ..core.errors import InputError, UsageError
from ..text import syntax

PER_CLASS = 3  # holes of each class drawn from one file (ours)
Cut = tuple[int, int]
TRY = re.compile(r"^[ \t]*try:[ \t]*$", re.M)
HEAD = re.compile(r"^[ \t]*(if|for|while|with|try|def|class)\b[^\n]*:[ \t]*$", re.M)
DOCSTRING = re.compile(r'^[ \t]*"""(?:(?!""").)*"""[ \t]*$', re.M | re.S)
DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*\w+[^\n]*$", re.M)
TEMPLATE = re.compile(r"`(?:\\.|[^`\\])*`", re.S)
RAW = {
    "python": re.compile(r"""\b[rR][bB]?('[^'\n]*'|"[^"\n]*")"""),
    "rust": re.compile(r'\br#*"[^"]*"#*'),
    "cpp": re.compile(r'\bR"\((?:(?!\)").)*\)"', re.S),
}


def _docstring(text: str, rng: random.Random) -> list[Cut]:
    out = []
    for m in DOCSTRING.finditer(text):
        head = HEAD.search(text, m.end())
        if head is None or text.count("\n", m.end(), head.start()) > 3:
            continue
        last = text.rfind("\n", m.start(), m.end() - 3) + 1
        start = rng.randrange(max(last, m.end() - 12), m.end() - 3) if m.end() - 3 > last else m.end() - 3
        out.append((start, head.end()))
    return out


def _try(text: str, rng: random.Random) -> list[Cut]:
    return [(m.start(), m.end()) for m in TRY.finditer(text)]


def _indent(text: str, rng: random.Random) -> list[Cut]:
    out, at = [], 0
    for line in text.split("\n"):
        lead = len(line) - len(line.lstrip(" \t"))
        if lead >= 2 and line.strip():
            start = at + rng.randrange(1, lead)
            out.append((start, rng.choice([at + len(line), rng.randrange(at + lead, at + len(line) + 1)])))
        at += len(line) + 1
    return out


def _lines(text: str, rng: random.Random) -> list[Cut]:
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    out = []
    for i in range(len(starts) - 4):
        if text[starts[i] : starts[i + 1]].strip():
            j = i + rng.randint(2, 4)
            out.append((starts[i], starts[j] - 1))
    return out


def _dict(text: str, rng: random.Random) -> list[Cut]:
    out, at = [], 0
    for line in text.split("\n"):
        if len(line) >= 80 and "{" in line and ":" in line:
            a, b = sorted(rng.sample(range(len(line) + 1), 2))
            out.append((at + a, at + b))
        at += len(line) + 1
    return out


def _directive(text: str, rng: random.Random) -> list[Cut]:
    out = []
    for m in DIRECTIVE.finditer(text):
        above = text.rfind("\n", 0, max(0, m.start() - 1)) + 1
        mid = rng.randrange(above, m.start()) if m.start() > above else m.start()
        out.append(rng.choice([(m.start(), m.end()), (mid, rng.randrange(m.start(), m.end() + 1))]))
    return out


def _template(text: str, rng: random.Random) -> list[Cut]:
    out = []
    for m in TEMPLATE.finditer(text):
        a = rng.randrange(m.start(), m.end())
        out.append((a, min(len(text), rng.randrange(a + 1, m.end() + 20))))
    return out


def _raw(lang: str) -> Callable[[str, random.Random], list[Cut]]:
    def cut(text: str, rng: random.Random) -> list[Cut]:
        pattern = RAW.get(lang)
        out = []
        for m in pattern.finditer(text) if pattern else ():
            a = rng.randrange(m.start(), m.end())
            out.append((a, min(len(text), rng.randrange(a + 1, m.end() + 12))))
        return out

    return cut


def _tabs(text: str, rng: random.Random) -> list[Cut]:
    return _lines(text, rng)


def classes(lang: str) -> dict[str, Callable[[str, random.Random], list[Cut]]]:
    """The attack classes that apply to a language."""
    found: dict[str, Callable[[str, random.Random], list[Cut]]] = {"indent": _indent, "raw": _raw(lang)}
    if lang == "python":
        found |= {"docstring": _docstring, "try": _try, "tabs": _tabs, "dict": _dict}
    if lang in ("c", "cpp"):
        found["directive"] = _directive
    if lang in ("javascript", "typescript", "tsx"):
        found["template"] = _template
    return found


def tabbed(text: str) -> str | None:
    """`text` with every leading run of four spaces a tab; None when it no longer compiles (continuation lines
    aligned by spaces) or has no indentation to turn."""
    out = re.sub(r"^(?: {4})+", lambda m: "\t" * (len(m.group()) // 4), text, flags=re.M)
    if out == text:
        return None
    try:
        compile(out, "<tabs>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    return out


Hole = tuple[str, str, str, str, str]  # (task id, text before, text after, the cut text, language)


def file_tasks(name: str, text: str, lang: str, per_class: int = PER_CLASS) -> list[Hole]:
    """Up to `per_class` holes of every class that applies to the file, each in the whole file."""
    out = []
    for kind, cut in classes(lang).items():
        body = tabbed(text) if kind == "tabs" else text
        if body is None:
            continue
        rng = random.Random(f"{kind}:{name}")
        holes = [(a, b) for a, b in cut(body, rng) if 0 <= a < b <= len(body)]
        for a, b in sorted(rng.sample(holes, min(per_class, len(holes)))):
            out.append((f"{kind}/{name}:{a}-{b}", body[:a], body[b:], body[a:b], lang))
    return out


def stdlib(files: dict[str, str]) -> list[Hole]:
    """The attack classes on the held-out standard-library files, interleaved by class."""
    return _interleaved([t for name, text in sorted(files.items()) for t in file_tasks(name, text, "python")])


def folder(root: Path) -> list[Hole]:
    """The attack classes on every file under `root` in a language dlmcode knows and whose code parses."""
    tasks = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            lang = syntax.language_for(path=path.name)
            text = path.read_text(encoding="utf-8")
        except (UsageError, UnicodeDecodeError, OSError):  # no language dlmcode knows, or not text
            continue
        if text.strip() and syntax.check(text, lang).ok:
            tasks += file_tasks(path.relative_to(root).as_posix(), text, lang)
    if not tasks:
        raise InputError(f"{root}: no source files that parse, in a language dlmcode supports")
    return _interleaved(tasks)


def _interleaved(tasks: list[Hole]) -> list[Hole]:
    """Tasks ordered class by class in turn, so that `--limit` keeps every class."""
    by_kind: dict[str, list[Hole]] = {}
    for t in tasks:
        by_kind.setdefault(t[0].split("/", 1)[0], []).append(t)
    out = []
    queues = list(by_kind.values())
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out
