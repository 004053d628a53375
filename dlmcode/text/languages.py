"""The languages dlmcode knows and their parsers: the table (grammars/languages.toml, read lazily), a
language from a path or a name, and the tree-sitter parser of each (imported on first use and cached,
so that importing this module stays cheap), whole or incremental (`Reparser`)."""

from __future__ import annotations

import functools
import importlib
import os.path
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..core.errors import DlmcodeError, UsageError

TABLE_PACKAGE = "dlmcode.grammars"
TABLE_FILE = "languages.toml"
# A source checkout that is not pip-installed has no `dlmcode.grammars` package: the
# directory it maps to (pyproject package-dir) sits next to dlmcode/.
# (os.path, not pathlib: pathlib costs ~6 ms of import time.)
SOURCE_TABLE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "grammars", TABLE_FILE
)


@dataclass(frozen=True)
class LanguageEntry:
    """One language of grammars/languages.toml (that file documents each field)."""

    name: str
    extensions: tuple[str, ...]
    module: str  # the grammar package to import
    function: str  # its function that returns the language pointer
    aliases: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()  # names in CHECKS

    @property
    def package(self) -> str:
        """The pip name of the grammar package (import name with dashes)."""
        return self.module.replace("_", "-")


def __getattr__(name: str) -> object:
    # LANGUAGES is read on first access: importlib.resources and tomllib cost ~10 ms that
    # `dlmcode --help` should not pay.
    if name == "LANGUAGES":
        return _languages()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _read_table() -> str:
    from importlib.resources import files

    try:
        return (files(TABLE_PACKAGE) / TABLE_FILE).read_text(encoding="utf-8")
    except ModuleNotFoundError:
        with open(SOURCE_TABLE, encoding="utf-8") as f:
            return f.read()


@functools.cache
def _languages() -> Mapping[str, LanguageEntry]:
    import tomllib

    table = tomllib.loads(_read_table())
    entries = {name: _entry(name, fields) for name, fields in table.items()}
    _check_unique(entries.values())
    return MappingProxyType(entries)


def _entry(name: str, fields: dict) -> LanguageEntry:
    lists = {key: tuple(value) for key, value in fields.items() if isinstance(value, list)}
    return LanguageEntry(name=name, **{**fields, **lists})


def _check_unique(entries: Collection[LanguageEntry]) -> None:
    # An extension or alias claimed twice would silently pick one language: refuse the table.
    names = Counter(n for e in entries for n in (e.name, *e.aliases))
    exts = Counter(x for e in entries for x in e.extensions)
    clashes = [k for k, n in (names + exts).items() if n > 1]
    if clashes:
        raise ValueError(f"{TABLE_FILE}: claimed by two languages: {', '.join(clashes)}")


@functools.cache
def _by_name() -> dict[str, str]:
    return {n: e.name for e in _languages().values() for n in (e.name, *e.aliases)}


@functools.cache
def _by_extension() -> dict[str, str]:
    return {x: e.name for e in _languages().values() for x in e.extensions}


def _supported() -> str:
    return "supported: " + ", ".join(_languages())


def language_for(path: str | None = None, lang: str | None = None) -> str:
    """The language name for an explicit `lang` (name or alias), else for `path`'s extension.

    `lang` wins when both are given. Raises UsageError, one line listing the supported
    languages, when neither names a known language ("-", stdin, has no extension).
    """
    if lang:
        name = _by_name().get(lang.strip().lower())
        if name is None:
            raise UsageError(f"unknown language {lang!r}; {_supported()}")
        return name
    if not path or path == "-":
        raise UsageError(f"cannot tell the language without a file name; name it ({_supported()})")
    suffix = os.path.splitext(path)[1].lower()
    name = _by_extension().get(suffix)
    if name is None:
        what = f"extension {suffix!r}" if suffix else "no extension"
        raise UsageError(f"cannot tell the language of {path} ({what}); name it ({_supported()})")
    return name


@functools.cache
def parser(name: str):  # -> tree_sitter.Parser; imported here so module import stays cheap
    """The one tree-sitter Parser of a language of the table (the checker, the oracle and the trivial-fill
    classifier share it); a missing grammar, or one built for another tree-sitter, is one line."""
    from tree_sitter import Language, Parser

    entry = _languages()[name]
    try:
        pointer = getattr(importlib.import_module(entry.module), entry.function)()
        return Parser(Language(pointer))
    except ImportError:
        raise DlmcodeError(f"the {name} grammar is not installed: pip install {entry.package}") from None
    except ValueError as e:  # a grammar built for another tree-sitter ABI
        raise DlmcodeError(f"the {name} grammar does not load ({e}): reinstall {entry.package}") from None


class Reparser:
    """Parses the texts of one evolving document, each from the last one's tree (`tree.edit`, then
    `parse(new, old_tree)`): tree-sitter re-reads only what the one changed run of bytes touches.
    The syntax oracle and the guard's judge each keep one per text they follow."""

    def __init__(self, name: str, incremental: int = 0) -> None:
        self.parser = parser(name)
        self.incremental = incremental  # bytes from which a text is re-parsed from the last tree (below: afresh)
        self.tree, self.last = None, b""

    def parse(self, data: bytes):  # -> tree_sitter.Tree
        """The tree of `data`."""
        if self.tree is None or len(data) < self.incremental:
            tree = self.parser.parse(data)
        else:
            tree, edit = self.tree, byte_edit(self.last, data)
            if edit is not None:
                tree.edit(**edit)
                tree = self.parser.parse(data, tree)
        self.tree, self.last = tree, data
        return tree


def byte_edit(old: bytes, new: bytes) -> dict | None:
    """The one edit (tree.edit arguments) that turns `old` into `new`: their common
    head and tail kept; None if equal."""
    if old == new:
        return None
    head = _common_bytes(min(len(old), len(new)), lambda n: (old[:n], new[:n]))
    room = min(len(old), len(new)) - head  # the tail may not reuse head bytes
    tail = _common_bytes(room, lambda n: (old[len(old) - n :], new[len(new) - n :]))
    start, old_end, new_end = head, len(old) - tail, len(new) - tail
    return {
        "start_byte": start,
        "old_end_byte": old_end,
        "new_end_byte": new_end,
        "start_point": _point(new, start),
        "old_end_point": _point(old, old_end),
        "new_end_point": _point(new, new_end),
    }


def _common_bytes(limit: int, cut: Callable[[int], tuple[bytes, bytes]]) -> int:
    """The largest n <= limit with cut(n) two equal slices, by bisection (slice compares run in C)."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        a, b = cut(mid)
        if a == b:
            low = mid
        else:
            high = mid - 1
    return low


def _point(data: bytes, offset: int) -> tuple[int, int]:
    """(row, column in bytes) of a byte offset, as tree-sitter counts them."""
    row = data.count(b"\n", 0, offset)
    return row, offset - (data.rfind(b"\n", 0, offset) + 1)
