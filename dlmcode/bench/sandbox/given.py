"""What the jailed processes are given: harness.py compiled once, the real interpreter, the installation's
folders (its site-packages hidden), a scrubbed environment, and the names a test reads from the program."""

from __future__ import annotations

import ast
import builtins
import functools
import glob
import os
import sys
from pathlib import Path

from . import harness


@functools.cache
def harness_code():
    """harness.py compiled once: a start then costs no compile (marshal is safe here: we wrote it)."""
    return compile(Path(harness.__file__).read_text(encoding="utf-8"), harness.__file__, "exec")


@functools.cache
def interpreter() -> str:
    """The real Python binary (a virtualenv's python is a link): jailed, it finds only its own stdlib."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


@functools.cache
def python_folders(everything: bool = False) -> list[str]:
    """The folders of the Python installation (stdlib, binary); without `everything`, those outside the
    system folders (the jail binds those anyway)."""
    found = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(interpreter()))}
    system = tuple(s + "/" for s in harness.SYSTEM)
    return sorted(p for p in found if everything or not (p + "/").startswith(system))


PACKAGE_GLOBS = ("lib*/python3*/site-packages", "lib*/python3*/dist-packages", "lib*/python3/dist-packages")


@functools.cache
def package_folders() -> list[str]:
    """Where third-party packages live in what the jail binds: the installation's site-packages and
    the system's dist-packages (Debian), hidden inside it so that only the standard library imports."""
    roots = {*python_folders(everything=True), *(p for p in harness.SYSTEM if os.path.isdir(p)), "/usr/local"}
    found = {
        os.path.realpath(f)
        for root in roots
        for pattern in PACKAGE_GLOBS
        for f in glob.glob(os.path.join(root, pattern))
    }
    return sorted(f for f in found if os.path.isdir(f))


def scrubbed_env(home: Path, isolated: bool) -> dict[str, str]:
    """Nothing of the user's environment: no tokens, no proxies, no PYTHONPATH."""
    folder = "/tmp" if isolated else str(home)
    return {
        "PATH": os.defpath,
        "HOME": folder,
        "TMPDIR": folder,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


@functools.lru_cache(maxsize=1024)
def free_names(test: str) -> frozenset[str]:
    """Names the test reads but neither binds nor gets from builtins: the program's (HumanEval/32's poly)."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return frozenset()
    loads, bound = set(), set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(loads - bound)
