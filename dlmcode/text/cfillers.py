"""The C family's fillers (C, C++, Java, JavaScript, TypeScript, Go, Rust): the block comment and statement bodies,
and what the attack classes' cuts need (text/fillers.py has the rest): preprocessor lines cut anywhere, a
template literal's `${` and backslashes, a comment the code after starts inside of, a struct's head and `};`,
a block head the code after the hole finishes, the keyword a hole cut in two."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from .literals import CLOSE, CONTEXT, OPEN, STRINGS, openers_of
from .witness import Filler

C_LIKE = {"c", "cpp", "java", "javascript", "typescript", "tsx", "go", "rust"}


C_BODIES = (
    Filler("/*", "x", "*/"),
    Filler("x", " ", ";"),
    Filler(" x", " ", ";"),
    Filler(";/*", "x", "*/"),
    Filler("x;/*", "x", "*/"),
    Filler("x/*", "x", "*/"),
    Filler("{/*", "x", "*/}"),
)


WORDS = ("include", "define", "ifndef", "ifdef", "endif", "elif", "else", "if", "undef", "pragma", "error")


AFTER_BLOCK = {"catch": "try {", "finally": "try {", "else": "if (x) {", "while": "do {"}  # `}` then this word


def c_more(
    lang: str,
    before: str,
    after: str,
    inside: str,
    close: str,
    opens: str,
    quote: str,
    rare: bool,
    again: Callable[[str, str, str, bool], Iterable[Filler]],
) -> list[Filler]:
    """The C family's fillers for what the others miss (the attack classes' give-ups): the code after the hole
    starting inside a block comment (any filler of the code after it, the comment opened at its end), a
    directive whose word the hole cut (`#inc` | `lude`), a macro's line the hole must continue with a
    backslash, a template literal's `${` to close, a block whose `}` is followed by `catch`/`else` (its head),
    and a string the code after starts inside of within a call that the hole must open."""
    out = []
    line = before[before.rfind("\n") + 1 :]
    end, start = after.find("*/", 0, CONTEXT), after.find("/*", 0, CONTEXT)
    if rare and inside != "*/" and end >= 0 and (start < 0 or start > end):
        out += [Filler(f.pre, f.unit, f.post + "/*", f.least) for f in again(lang, before, after[end + 2 :], False)]
    if lang in ("c", "cpp") and inside in ("", "*/"):  # a directive's line the hole begins (a comment ended first)
        lead = inside + ("\n" if inside or line.strip() else "")
        for word in WORDS:
            cut = next((k for k in range(1, len(word)) if re.match(re.escape(word[k:]) + r"\b", after)), None)
            if cut is not None:
                out.append(Filler(lead, " ", "#" + word[:cut]))
        path = re.match(r"[\w./+-]*([>\"])", after)
        if path:  # an `#include`'s path the hole cut
            out.append(Filler(lead, " ", "#include " + ("<" if path.group(1) == ">" else '"') + "x"))
        if not inside and (line.rstrip().endswith("\\") or before[: len(before) - len(line)].rstrip().endswith("\\")):
            out += [Filler("", " ", "\\"), Filler(" x", " ", " \\")] if after.startswith("\n") else []
        if after.split("\n", 1)[0].strip() and re.search(r"^[ \t]*#[ \t]*\w", after[:400], re.M):
            out.append(Filler(lead, " ", "#define x"))  # a macro's name the hole cut, among other macros
    if inside == "`":
        template = before[before.rfind("`") + 1 :]
        if template.rfind("${") > template.rfind("}"):  # inside a `${...}`: close it, then the literal
            out += [Filler("", "x", "}`" + close), Filler("", "x", "}`"), Filler("", "x", "}`;")]
    masked = STRINGS.sub("", after[:CONTEXT])
    depth = 0
    for i, ch in enumerate(masked):
        depth += (ch in OPEN) - (ch in CLOSE)
        if depth < 0:
            if ch == "}":
                word = re.match(r"\s*(\w+)", masked[i + 1 :])
                head = AFTER_BLOCK.get(word.group(1)) if word else None
                if head:
                    out += [Filler(inside + close + head, " ", ""), Filler(inside + close + head + "/*", "x", "*/")]
            break
    if quote and not inside and opens:
        out += [Filler(i, " ", "x" + opens + q) for i in (" ", "") for q in openers_of(quote, after, lang)[:1]]
    if not inside and not line.strip() and re.match(r"[ \t]*\([^\n]*\)[ \t]*\{", after):  # `(x) {`: a head's
        out += [Filler("", " ", "if"), Filler("", " ", "while")]
    for stem in stems(after, C_WORDS):  # the hole ends in a word the code after goes on with
        out += [Filler("", "x", inside + close + "\n" + stem)] if inside in ("`", "'", '"') else []
        out += [Filler("", " ", stem)] if not inside and not line.strip() else []
    return out


C_WORDS = (
    "const", "let", "var", "return", "if", "else", "for", "while", "function", "this", "await", "async", "try",
    "catch", "throw", "new", "typeof", "static", "struct", "enum", "union", "unsigned", "int", "char", "void",
)  # fmt: skip


def stems(after: str, words: Sequence[str]) -> list[str]:
    """The starts of a keyword whose rest begins `after` (`cons` for `t x = 1`), then `x` before a word's rest."""
    found = [w[:k] for w in words for k in range(1, len(w)) if re.match(re.escape(w[k:]) + r"\b", after)]
    return found[:2] + (["x"] if re.match(r"\w", after) else [])


DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b", re.M)


def directives(before: str, after: str) -> list[Filler]:
    """C preprocessor fillers: the `#` of a directive the hole cut at its start, an `#if` for an `#endif` (or
    `#else`) after the hole that lost its `#if`, an `#endif` for an `#if` before it that lost its own. A
    directive holds a whole line, so each stands on lines of its own."""
    out = []
    line = before[before.rfind("\n") + 1 :]
    if not line.strip() and re.match(r"(include|define|if|ifdef|ifndef|elif|else|endif|pragma|undef)\b", after):
        out.append(Filler("#", " ", ""))
    depth, need = 0, 0
    for m in DIRECTIVE.finditer(after[:CONTEXT]):
        depth += m.group(1).startswith("if") - (m.group(1) == "endif")
        if depth < 0 or (depth == 0 and m.group(1) in ("else", "elif")):
            need = 1
            break
    opened = sum((m.group(1).startswith("if")) - (m.group(1) == "endif") for m in DIRECTIVE.finditer(before))
    head = "" if not line.strip() else "\n"
    if need:
        out.append(Filler(head + "#if x\n", " ", ""))
    if opened > 0 and not need:
        out.append(Filler(head + "\n#endif\n", " ", ""))
    return out
