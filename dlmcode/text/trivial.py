"""Trivial fills: code that parses and does nothing (the cheap way to stay syntax-valid).

A fill is trivial when, parsed on its own with the language's tree-sitter grammar, every token
in it is a comment or one of the language's do-nothing tokens below; whitespace and an empty
fill are trivial too. A pure function of text and language, like `syntax`.

Per language (our choice; docs/benchmarks.md shows this table):

| language | trivial besides whitespace and comments | not trivial (they do or say something) |
|---|---|---|
| python | `pass`, `...`, `;` | `return`, `raise NotImplementedError`, a bare string (docstring) |
| javascript, typescript, tsx, java, c, cpp, go | `;`, `{`, `}` | `return;`, `throw ...`, `panic(...)` |
| rust | `;`, `{`, `}` | `todo!()`, `unimplemented!()`, `return;`, `()` |

A fill is judged alone, without the code around it: a fill inside a string literal of the
file is read as code. Languages outside the table get None (not classified).
"""

from __future__ import annotations

from collections.abc import Iterator

from . import syntax

C_FAMILY = frozenset({";", "{", "}"})  # an empty statement or block
TRIVIAL: dict[str, frozenset[str]] = {
    "python": frozenset({"pass", "...", ";"}),
    "javascript": C_FAMILY,
    "typescript": C_FAMILY,
    "tsx": C_FAMILY,
    "java": C_FAMILY,
    "c": C_FAMILY,
    "cpp": C_FAMILY,
    "go": C_FAMILY,
    "rust": C_FAMILY,
}
COMMENTS = frozenset({"comment", "line_comment", "block_comment"})  # comment node types of the grammars above


def is_trivial(fill: str, lang: str) -> bool | None:
    """Whether `fill` is only whitespace, comments and `lang`'s do-nothing tokens; None
    for a language not in TRIVIAL."""
    allowed = TRIVIAL.get(lang)
    if allowed is None:
        return None
    if not fill.strip():
        return True
    tree = syntax.parser(lang).parse(fill.encode("utf-8", "surrogatepass"))  # lone surrogates get bytes, as in syntax
    return all(leaf.text.decode("utf-8", "replace") in allowed for leaf in _tokens(tree.root_node))


def _tokens(node) -> Iterator:
    """The leaves under `node` that are not inside a comment and are not zero-width (MISSING)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if node.type in COMMENTS:
            continue
        if node.child_count == 0:
            if node.end_byte > node.start_byte:
                yield node
            continue
        stack.extend(node.children)
