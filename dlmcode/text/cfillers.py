"""The C family's fillers (C, C++, Java, JavaScript, TypeScript, Go, Rust): the block comment and statement bodies,
and what the attack classes' cuts need (text/fillers.py has the rest): preprocessor lines cut anywhere, a
template literal's `${` and backslashes, a comment the code after starts inside of, a struct's head and `};`,
a block head the code after the hole finishes, the keyword a hole cut in two."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from .literals import CLOSE, CONTEXT, OPEN, STRINGS, _open_stack, _unopened, balance, openers_of
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
    Filler("{", " ", "}"),
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
    word = re.match(r"\w", after) is not None  # the code after starts inside a word
    # `balance` makes up the difference in count; where code after the hole miscounts (a regex literal, a template
    # in a template), the brackets innermost at the hole may be the ones to close: one or two of them
    stack = _open_stack(before + inside) if inside in ("`", "'", '"') else []
    closes = dict.fromkeys([close] + ["".join(CLOSE[OPEN.index(b)] for b in reversed(stack[-k:])) for k in (1, 2)])
    if inside == "`":
        template = before[before.rfind("`") + 1 :]
        if template.rfind("${") > template.rfind("}"):  # inside a `${...}`: close it, then the literal
            ends = ["}`" + close, "}`", "}`;", "}"] + [e for c in closes for e in ("}`" + c + ",", "}`" + c + "\n")]
            ends += ["}`" + close + ",\nx", "}`" + close + "\nx"] if word else []  # then a name the code after ends
            out += [Filler("", "x", e) for e in dict.fromkeys(ends)]
    if inside in ("`", "'", '"'):  # the literal, then what closes the line: the code after starts a new one
        out += [Filler("", "x", inside + c + "\n") for c in closes]
    if lang in ("c", "cpp"):  # a member's struct: its head, its `};`, a declaration around the brackets it opens
        out += [Filler("", " ", "struct {")] if opens == "{" and not inside else []
        out += [Filler("", " ", close + ";"), Filler("", " ", close + " x;")] if close.endswith("}") else []
        out += [Filler("", " ", "x x" + opens + "x")] if opens and word and not inside else []
    if not inside and not line.strip() and re.match(r"[ \t]*\{", after):  # the head of the block after
        out += [Filler("", " ", head) for head in (["struct", "if (x)"] if lang in ("c", "cpp") else ["if (x)"])]
    if not inside and not line.strip() and _unopened(after)[:1] == [")"] and re.match(r"[^\n]*\)[ \t]*\{", after):
        out += [Filler("", " ", h + "(" + ("x" if word else "")) for h in ("if ", "while ")]  # `if (x` | `y) {`
    if rare and not inside and after.split("\n", 1)[0].strip():  # the code after starts inside a line comment
        out += [Filler("", " ", "//")]
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
        out += [Filler("", " ", sep + opens + "x: " + quote) for sep in (",", "")]  # an object's key and value
    if not inside and not line.strip() and re.match(r"[ \t]*\([^\n]*\)[ \t]*\{", after):  # `(x) {`: a head's
        out += [Filler("", " ", "if"), Filler("", " ", "while")]
    for stem in stems(after, C_WORDS):  # the hole ends in a word the code after goes on with
        out += [Filler("", "x", inside + close + "\n" + stem)] if inside in ("`", "'", '"') else []
        out += [Filler("", "x", "\n" + stem)] if inside == "\n" else []  # after a line comment
        out += [Filler("", " ", stem)] if not inside and not line.strip() else []
    if lang == "cpp" and not inside:
        out += cpp_more(before, after, line, close, rare)
    return out


CPP_WORDS = (
    "template", "typename", "typedef", "namespace", "class", "private", "protected", "public", "inline", "virtual",
    "friend", "operator", "explicit", "static", "const", "struct",
)  # fmt: skip


def cpp_more(before: str, after: str, line: str, close: str, rare: bool) -> list[Filler]:
    """C++'s fillers: the `>` or `<` of a template's brackets the hole cut (`template<class A,` | `class B>`), a
    declaration's head the hole cut (`templ` | `ate<`, `struct x` | `<T> {`, `namespace ` | `x {`, an access
    specifier before `:`, a constructor's `x()` before its body), a class body with its `;`, and a `}` followed
    by a line comment the code after ends."""
    out = []
    word = re.match(r"\w", after) is not None
    shut, opens = angles(before, after)
    out += [Filler(pre, " ", ">" * shut) for pre in (" x", " typename x")] if shut else []
    for head in ("x", "template", "struct x") if opens else ():
        out.append(Filler("", " ", head + "<" * opens + ("x" if word else "")))
        out += [Filler("", " ", head + "<" * opens + "typename x")] if word and head == "template" else []
    if not line.strip():
        out += [Filler("", " ", stem) for stem in stems(after, CPP_WORDS)[:2] if stem != "x"]
        out += [Filler("", " ", "struct x"), Filler("", " ", "namespace ")] if word else []
        out += [Filler("", " ", "public")] if re.match(r":(?!:)", after) else []
        out += [Filler("", " ", "x()")] if re.match(r"\s*[{:]", after) else []
        out += [Filler("{", " ", "};")]
    if rare and close and after.split("\n", 1)[0].strip():  # `}` then a line comment the code after goes on with
        out += [Filler("", " ", close + " //")]
    return out


def angles(before: str, after: str) -> tuple[int, int]:
    """(`>` to write, `<` to write): the angle brackets a hole must close of those its statement opened before it,
    or open for those the statement closes after it (roughly: comparisons and shifts miscount)."""
    head = re.split(r"[;{}]", STRINGS.sub(" ", before[-CONTEXT:]))[-1]
    tail = re.split(r"[;{}]", STRINGS.sub(" ", after[:CONTEXT]))[0]
    head, tail = (re.sub(r"->|<<|<=|>=", " ", x) for x in (head, tail))
    depth = need = inner = 0
    for ch in head:
        depth += (ch == "<") - (ch == ">" and depth > 0)
    for ch in tail:
        if ch == "<":
            inner += 1
        elif ch == ">":
            inner, need = (inner - 1, need) if inner else (0, need + 1)
    return min(max(depth - need, 0), 3), min(max(need - depth, 0), 3)


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


def directive_ends(before: str, after: str, close: str) -> list[Filler]:
    """C preprocessor fillers for a hole that ends in a directive line the code after finishes: an `#endif` (for an
    `#if` before it) or a `#define x` whose name, comment or value the code after goes on with (`#define NFT_MA` |
    `X 1`, `#endif /* _X` | `_H */`, `#endif /` | `*_H*/`, a macro's line continued with a backslash), after what
    finishes the hole's own line first (the brackets it closes and the `;` a declaration's `}` needs)."""
    line = before[before.rfind("\n") + 1 :]
    first, _, rest = after.partition("\n")
    opened = sum(m.group(1).startswith("if") - (m.group(1) == "endif") for m in DIRECTIVE.finditer(before))
    words = (["#endif"] if opened > 0 else []) + ["#define x"]
    end, start = after.find("*/", 0, CONTEXT), after.find("/*", 0, CONTEXT)
    if end >= 0 and (start < 0 or start > end) and "\n" not in after[:end]:  # the line goes on inside a comment
        ends = [w + (" /" if after.startswith("*") else " /*") for w in words]
    elif after.startswith("/") and not after.startswith(("//", "/*")):  # the comment's `*/` the hole cut
        ends = [w + " /*x*" for w in words]
    elif re.match(r"\w", after):  # a macro's name, a line comment's word or a directive's word the hole cut
        cut = [w[:k] for w in WORDS for k in range(len(w)) if re.match(re.escape(w[k:]) + r"\b", after)]
        ends = ["#define x"] + [w + " //x" for w in words[:-1]] + ["#" + c for c in cut]
    elif not first.strip() or re.match(r"[ \t]+(/[*/]|\w)", first):  # nothing more on the line, or a comment
        ends = words + ([w + " //" for w in words[:-1]] if re.match(r"[ \t]+\w", first) else [])  # `#endif //` | ` X`
    else:
        return []
    _, opens = balance(before, after)
    if not first.strip() and (rest.split("\n", 1)[0].rstrip().endswith("\\") or opens):  # the macro goes on below
        ends.append("#define x " + opens + "x \\")
    elif not first.strip() and rest.strip():  # the line below is a macro's last: its `#define` line the hole ends
        ends.append("#define x \\")
    pres = [close + "\n", close + ";\n", "x x;\n"] if line.strip() or close else [""]
    path = re.match(r"[ \t]*#[ \t]*include[ \t]*([<\"])[^>\"]*$", line)
    if path:  # an `#include`'s path the hole cut: close it first
        pres = ["x" + (">" if path.group(1) == "<" else '"') + "\n"]
    return [Filler(pre, " ", e) for e in ends for pre in dict.fromkeys(pres)]
