"""The held-out code: which files no built-in model trains on, and the infilling tasks cut from them.

Two sources, both held out by rule, never by hand:
  stdlib   - the standard library's *.py files (outside tests and vendored folders) that
             parse, split by path: sha1(path) % HELDOUT_MOD == 0 is held out (~5 %);
  packages - the corpus's held-out packages (`python -m dlmcode.training.corpus build`'s
             eval.jsonl.gz: boltons, toolz, more-itertools, sortedcontainers, attrs, cachetools).

Tasks (known span length; deterministic for the same files and seed):
  line  - one non-blank line;
  lines - 2 to 5 lines starting at a non-blank line;
  span  - a random run of 1-32 tokens inside 1-3 lines (ASCII lines; a ⟦fill:N⟧ marker).

The evaluation owns this split and training obeys it: dlmcode.training imports it from here
(train.py leaves these files out; dlmcode.training.evaluate scores a model on the tasks), and
the bench's heldout-* suites are these tasks as whole files. Nothing here imports training.
"""

from __future__ import annotations

import ast
import hashlib
import random
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError
from ..core.files import read_jsonl
from ..text import spans

EXCLUDED_DIRS = frozenset({"test", "tests", "idle_test", "idlelib", "site-packages", "__pycache__", "pydoc_data"})


HELDOUT_MOD = 20  # sha1(relpath) % 20 == 0 -> held-out (~5 %)


def stdlib_root(folder: str | Path = "") -> Path:
    """The standard library's folder: `folder` when given (a training setting), else this Python's."""
    return Path(folder or sysconfig.get_paths()["stdlib"])


def is_heldout(relpath: str) -> bool:
    return int(hashlib.sha1(relpath.encode()).hexdigest(), 16) % HELDOUT_MOD == 0


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def corpus_files(root: Path) -> dict[str, str]:
    """relative path -> text, for every stdlib *.py file outside excluded dirs that parses."""
    files = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if EXCLUDED_DIRS & set(rel.split("/")[:-1]):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if parses(text):
            files[rel] = text
    return files


def split(files: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    train = {k: v for k, v in files.items() if not is_heldout(k)}
    heldout = {k: v for k, v in files.items() if is_heldout(k)}
    return train, heldout


def file_list_hash(files: dict[str, str]) -> str:
    """sha256 over the sorted relative paths and their contents' sha1."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\t{hashlib.sha1(files[rel].encode()).hexdigest()}\n".encode())
    return h.hexdigest()


KINDS = ("line", "lines", "span")


MARKER = "⟦fill:{}⟧"


@dataclass(frozen=True)
class Task:
    kind: str  # one of KINDS
    path: str  # held-out file, relative to the stdlib
    start: int  # hole is text[start:end] of the file
    end: int
    lines: tuple[int, int]  # 1-based inclusive lines the hole touches


def heldout_files() -> dict[str, str]:
    """relative path -> text of this Python's held-out stdlib files."""
    return split(corpus_files(stdlib_root()))[1]


def package_files(path: str | Path) -> dict[str, str]:
    """path -> text of the corpus's held-out packages (eval.jsonl.gz, or the corpus folder)."""
    path = Path(path)
    path = path / "eval.jsonl.gz" if path.is_dir() else path
    if not path.exists():
        raise UsageError(
            f"no held-out packages at {path}: build them with `python -m dlmcode.training.corpus build DIR`"
        )
    return {r["path"]: r["text"] for r in read_jsonl(path)}


def sources(packages: str | Path | None) -> dict[str, Mapping[str, str]]:
    """The evaluation sources: the stdlib's held-out files, and the held-out packages when given."""
    found: dict[str, Mapping[str, str]] = {"stdlib": heldout_files()}
    if packages:
        found["packages"] = package_files(packages)
    return found


def line_offsets(text: str) -> list[int]:
    """Char offset where each line starts (index 0 = line 1), plus len(text) at the end."""
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    return starts if starts[-1] == len(text) else starts + [len(text)]


def make_tasks(files: Mapping[str, str], kind: str, n: int, seed: int = 0, tokenizer=None) -> list[Task]:
    """`n` tasks of `kind`, the same for the same files and seed ("span" needs a tokenizer)."""
    rng = random.Random(f"{kind}:{seed}")
    candidates = [(path, i) for path in sorted(files) for i, line in enumerate(files[path].split("\n")) if line.strip()]
    tasks, seen = [], set()
    for path, i in rng.sample(candidates, len(candidates)):
        task = _task(kind, path, files[path], i, rng, tokenizer)
        if task and (task.path, task.start, task.end) not in seen:
            seen.add((task.path, task.start, task.end))
            tasks.append(task)
        if len(tasks) == n:
            break
    return tasks


def _task(kind: str, path: str, text: str, i: int, rng: random.Random, tokenizer) -> Task | None:
    offsets = line_offsets(text)
    n_lines = len(offsets) - 1
    if kind in ("line", "lines"):
        k = 1 if kind == "line" else rng.randint(2, 5)
        if i + k > n_lines:
            return None
        return Task(kind, path, *spans.line_span(text, (i + 1, i + k)), (i + 1, i + k))
    return _span_task(path, text, offsets, i, rng, tokenizer)


def _span_task(path: str, text: str, offsets: list[int], i: int, rng: random.Random, tokenizer) -> Task | None:
    k = rng.randint(1, 3)
    if i + k >= len(offsets):
        return None
    a, b = offsets[i], offsets[i + k] - 1
    piece = text[a:b]
    ids = tokenizer.encode(piece)
    if not piece.isascii() or len(ids) < 2:
        return None
    length = rng.randint(1, min(32, len(ids) - 1))
    j = rng.randint(0, len(ids) - length)
    s, e = len(tokenizer.decode(ids[:j])), len(tokenizer.decode(ids[: j + length]))
    if not piece[s:e].strip():
        return None
    return Task("span", path, a + s, a + e, (i + 1, i + k))


DEFAULT_SUITE = {"line": 200, "lines": 100, "span": 100}  # tasks per kind (the trial used 200 / 100)
