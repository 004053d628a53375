"""The plan of the house (docs/design.md), checked on the code: layers, and no import circles.

Every import counts: at module level, inside functions (deferred) and under TYPE_CHECKING.
A layer imports only from itself and the layers below it; packages that share a layer do not
import each other (decoders load no model code; models know no decoder).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dlmcode"

# Bottom to top. A folder (or top-level module) per name; names in one tuple share a layer.
LAYERS = (
    ("core", "weights", "grammars"),  # the vocabulary: canvas, steps, settings, errors, files
    ("text",),  # spans, syntax, the syntax oracle, the guard, trivial fills
    ("models", "decoders"),  # model families; decoders (neither imports the other)
    ("jobs",),  # a fill or a generate: a model, a decoder, a plan; batching
    ("serve",),  # the editors' server
    ("bench",),  # measuring: suites, sandbox, the judge, speed, held-out tasks
    ("training",),  # the built-in model's and the assistant's training, the corpus, evaluation
    ("cli", "__init__", "__main__"),  # the faces a user runs
)
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_of(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(package: Path = PACKAGE) -> dict[str, set[str]]:
    """dlmcode module -> the dlmcode modules it imports, anywhere in its text."""
    paths = {module_of(p, package): p for p in package.rglob("*.py")}
    found = {}
    for name, path in paths.items():
        home = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = home[: len(home) - node.level + 1] if node.level else []
                origin = ".".join(base + ([node.module] if node.module else []))
                targets |= {f"{origin}.{a.name}" if f"{origin}.{a.name}" in paths else origin for a in node.names}
        found[name] = {t for t in targets if t in paths and t != name}
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_folder_has_a_layer():
    assert {layer(m) for m in imports()} <= set(RANK)


def test_no_import_points_up_or_sideways():
    wrong = [
        f"{m} -> {t}"
        for m, targets in imports().items()
        for t in targets
        if t != "dlmcode"  # the package root: its version, and lazily named exports
        and (
            RANK[layer(t)] > RANK[layer(m)]
            or (RANK[layer(t)] == RANK[layer(m)] and layer(t) != layer(m) and layer(m) not in LAYERS[-1])
        )
    ]
    assert wrong == []


def test_no_import_circle():
    graph = imports()
    circles, seen, done = [], [], set()

    def visit(m: str) -> None:  # depth-first; a module met again on the current path closes a circle
        seen.append(m)
        for t in sorted(graph[m]):
            if t in seen:
                circles.append(seen[seen.index(t) :] + [t])
            elif t not in done:
                visit(t)
        seen.pop()
        done.add(m)

    for m in sorted(graph):
        if m not in done:
            visit(m)
    assert circles == []


def test_the_checks_see_deferred_and_type_only_imports(tmp_path):
    """The walk counts an import inside a function and under TYPE_CHECKING, at any depth."""
    pkg = tmp_path / "dlmcode"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("def f():\n    from ..cli import b\n")
    (pkg / "cli").mkdir()
    (pkg / "cli" / "__init__.py").write_text("")
    (pkg / "cli" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..core.a import f\n"
    )
    assert imports(pkg) == {
        "dlmcode": set(),
        "dlmcode.core": set(),
        "dlmcode.cli": set(),
        "dlmcode.core.a": {"dlmcode.cli.b"},
        "dlmcode.cli.b": {"dlmcode.core.a"},
    }
