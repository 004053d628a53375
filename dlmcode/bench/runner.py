"""Running decoders over tasks: decoder settings (with sweeps), one Sample per decode, resume, ranks.

Stream first: `BenchRun.stream()` and `compare()` yield Samples as they finish (the live
view draws them); `BenchRun.finish()` gathers them and writes the outputs.

Infill tasks get an oracle length: each hole has exactly the canonical middle's token
count, the upper-bound protocol of docs/research/field.md E (Open-dLLM's "oracle length").
Under torchrun (env RANK/WORLD_SIZE) each rank decodes every WORLD_SIZE-th task and rank 0
gathers the Samples and writes the same outputs one process would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from .. import decoders
from ..core import contracts, settings
from ..core.canvas import Decoder
from ..core.errors import DlmcodeError, InputError, UsageError
from ..core.run import AUTO, CacheSettings, RunSettings
from ..jobs import batch, fill, processors, wiring
from ..models import cache as kvcache
from ..models.base import Dlm
from ..text import spans, syntax, trivial
from . import report, sandbox
from .metrics import Sample, Tally, exact_match, sample_key
from .suites import Suite, Task

GENERATE_LENGTH = 128  # tokens generated per HumanEval prompt unless --length says otherwise
STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")  # a completion ends at top-level code (Codex, arXiv 2107.03374)
ORACLE_NOTE = "oracle length: each hole has exactly the canonical middle's token count"
ORACLE, UNKNOWN, EDITOR = "oracle", "unknown", "editor"  # --fill-length: how an infill hole's length is set
FILL_LENGTHS = {
    ORACLE: ORACLE_NOTE,
    UNKNOWN: "unknown length: the length rule sizes each hole (dlmcode/jobs/sizing.py; its probe call counts), or a "
    "model trained to expand and delete grows it from 4 holes (jobs/expanding.py)",
    EDITOR: "editor's length: the length rule sizes each hole (or the model grows it), then the fill is cut after its "
    "first non-blank line (dlmcode serve's --lines 1)",
}
EDITOR_CEILING = 128  # n_predict as llama.vim and llama.vscode send it (the rule's room is smaller for every family)
SAMPLES_FILE = "samples.jsonl"
PART_FILE = "samples.rank{}.jsonl"  # a rank's samples while a sharded run is going
GATHER_TIMEOUT = timedelta(hours=12)  # ranks that finish early wait this long for the others
JOIN_TIMEOUT = timedelta(minutes=3)  # ranks wait about this long for each other at the start (before the model)
FAILED_KEY = "dlmcode/bench/failed"  # set in the process group's store by a rank that fails, read by the others
RUN_SETTINGS = (
    "cache",
    "cache_refresh",
)  # settings of how a decoder is run, not of the decoder: every decoder has them


# ---------------------------------------------------------------- decoder settings and sweeps


@dataclass(frozen=True)
class Config:
    """One decoder setting: a row of the summary and a point of its decoder's Pareto curve."""

    name: str
    decoder: Decoder
    sweep: dict[str, str] = field(default_factory=dict)  # this point's swept values
    cache: CacheSettings = field(default_factory=CacheSettings)  # block: the decoder's
    fill_length: str = ORACLE  # how infill holes are sized (FILL_LENGTHS)

    @property
    def settings(self) -> dict[str, Any]:
        """The decoder's settings, the cache's when there is one, and the fill length when it is not the
        oracle's (so rows and resume keys tell them apart)."""
        length = {} if self.fill_length == ORACLE else {"length": self.fill_length}
        if self.cache.mode == "none":
            return decoders.settings_of(self.decoder) | length  # refresh means nothing without a cache
        refresh = {"cache_refresh": self.cache.refresh} if self.cache.refresh else {}
        return decoders.settings_of(self.decoder) | {"cache": self.cache.mode} | refresh | length

    def model(self, dlm: Dlm) -> Dlm:
        """`dlm` behind a fresh cache for one decode (itself without one)."""
        return kvcache.with_cache(dlm, self.cache.mode, self.cache.refresh, self.cache.block)

    @property
    def label(self) -> str:
        """The row's name: the decoder, its swept values, and `(guarded)` when the guard is on but not swept."""
        marked = ["(guarded)"] if contracts.guarded(self.decoder) and "guard" not in self.sweep else []
        length = [] if self.fill_length == ORACLE else [f"length={self.fill_length}"]
        return " ".join([self.name, *(f"{k}={v}" for k, v in self.sweep.items()), *marked, *length])

    def key(self) -> tuple[str, str]:
        return self.name, json.dumps(self.settings, sort_keys=True)


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """'tau=0.7,0.9' -> ('tau', ['0.7', '0.9'])."""
    key, sep, values = text.partition("=")
    points = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not key.strip() or not points:
        raise UsageError(f"bad --sweep {text!r}: write --sweep key=v1,v2,...")
    return key.strip(), points


def configs(
    names: list[str], options: list[str], sweeps: list[str], temperature: float | None = None, fill_length: str = ORACLE
) -> list[Config]:
    """Every decoder (none named: all of them) with -o settings and the cartesian product of its sweeps.

    A setting or sweep applies to the decoders that have it; one that no decoder has is an error.
    `cache` and `cache_refresh` (RUN_SETTINGS) apply to every decoder: `--sweep cache=none,prefix`.
    """
    names = names or list(decoders.DECODERS)
    for name in names:
        decoders.build(name)  # an unknown name fails here, listing the decoders
    given = settings.parse_options(options)
    axes = dict(parse_sweep(s) for s in sweeps)
    for key in [*given, *axes]:
        if not any(key in _fields(name) for name in names):
            raise UsageError(f"no chosen decoder has the setting {key!r} ({', '.join(names)})")
    found: dict[tuple[str, str], Config] = {}
    for name in dict.fromkeys(names):
        for config in _points(name, given, axes, temperature):
            config = dataclasses.replace(config, fill_length=fill_length)
            found.setdefault(config.key(), config)
    return list(found.values())


def _points(
    name: str, given: dict[str, str], axes: dict[str, list[str]], temperature: float | None
) -> Iterator[Config]:
    own = {k: v for k, v in axes.items() if k in _fields(name)}
    for values in itertools.product(*own.values()):
        point = dict(zip(own, values, strict=True))
        options = {k: v for k, v in given.items() if k in _fields(name)} | point
        run = {k: options.pop(k) for k in RUN_SETTINGS if k in options}
        decoder = wiring.make_decoder(name, options, temperature)
        yield Config(name, decoder, point, cache_settings(run, getattr(decoder, "block", 0)))


def cache_settings(run: dict[str, str], block: int) -> CacheSettings:
    """-o/--sweep cache=... and cache_refresh=... as CacheSettings (a UsageError for bad values)."""
    try:
        refresh = int(run.get("cache_refresh", 0))
    except ValueError:
        raise UsageError(f"cache_refresh={run['cache_refresh']!r}: give a whole number of calls") from None
    return CacheSettings(run.get("cache", "none"), block, refresh)


def _fields(name: str) -> set[str]:
    """The settings a sweep or a shared -o sets for decoder `name`: not one it fixes (syntax-guard's guard)."""
    own = {f.name for f in dataclasses.fields(decoders.DECODERS[name]) if f.init and not f.metadata.get("fixed")}
    return own | set(RUN_SETTINGS)


# ---------------------------------------------------------------- one decode


class Infill:
    """Fill the hole between prompt and suffix; oracle length when the middle is known and the
    config asks for it, else the length rule's (as a user meets the task)."""

    def job(self, task: Task, config: Config, dlm: Dlm, seed: int, length: int) -> fill.Job:
        if config.fill_length != ORACLE:
            return self.unknown(task, config, dlm, seed)
        n = max(1, len(dlm.tokenizer.encode(task.canonical))) if task.canonical is not None else length
        marked = f"{task.prompt}⟦fill:{n}⟧{task.suffix}"
        plan = spans.plan_infill(marked, dlm.vocab, None, None)
        if len(plan.holes) != 1:
            raise InputError(f"task {task.task_id}: its text contains ⟦fill⟧ markers")
        model = config.model(dlm)
        # The hidden middle is the user's text for the hole, as a --span's lines are.
        return wiring.wired(
            fill.Job(
                plan,
                model,
                config.decoder,
                seed,
                task.lang,
                originals=(task.canonical or "",),
                processors=processors.exact_length(model),
            )
        )

    def unknown(self, task: Task, config: Config, dlm: Dlm, seed: int) -> fill.Job:
        """The hole sized by the length rule within EDITOR_CEILING, as `dlmcode serve` sizes it."""
        job = fill.prepare_middle(
            task.prompt,
            task.suffix,
            EDITOR_CEILING,
            dlm=dlm,
            decoder=config.decoder,
            seed=seed,
            lang=task.lang,
            cache=config.cache.mode,
            cache_refresh=config.cache.refresh,
            unknown=True,
        )
        job.originals = (task.canonical or "",)  # the hidden middle is the user's text for the hole
        return job

    def output(self, task: Task, result: fill.Result) -> str:
        return result.text[len(task.prompt) : len(result.text) - len(task.suffix)]

    def breakage(self, task: Task, result: fill.Result, output: str) -> syntax.Breakage | None:
        return result.breakage


class Generate:
    """Continue the prompt (no chat template) and cut the completion at top-level code."""

    def job(self, task: Task, config: Config, dlm: Dlm, seed: int, length: int) -> fill.Job:
        length = length if config.fill_length == ORACLE else AUTO  # unknown: the length rule reads it
        return fill.prepare_generate(
            task.prompt,
            dlm=dlm,
            decoder=config.decoder,
            length=length,
            seed=seed,
            lang=task.lang,
            chat=False,
            cache=config.cache.mode,
            cache_refresh=config.cache.refresh,
        )

    def output(self, task: Task, result: fill.Result) -> str:
        return truncate(result.text[len(task.prompt) :], STOP)

    def breakage(self, task: Task, result: fill.Result, output: str) -> syntax.Breakage | None:
        # The completion (cut at top-level code) is the hole, after the prompt (fill.Job's rule).
        end = len(task.prompt)
        hole = syntax.Region((end, end), (end, end + len(output)))
        return syntax.breakage(task.prompt, task.prompt + output, task.lang, holes=[hole])


MODES: dict[str, Infill | Generate] = {"infill": Infill(), "generate": Generate()}


def editor_cut(task: Task, output: str, breakage: syntax.Breakage | None) -> tuple[str, syntax.Breakage | None]:
    """The fill cut after its first non-blank line, as `dlmcode serve` cuts it (serve/length.py rule 3),
    and the syntax it breaks then (the breakage rule of benchmarks/serve_length.py: against the task's own code)."""
    from ..serve import length as served

    cut, was_cut = served.cut_lines(output, 1, served.whole_lines(task.prompt, task.suffix))
    if not was_cut or breakage is None:
        return cut, breakage
    return cut, syntax.breakage(task.original, task.prompt + cut + task.suffix, task.lang)


def truncate(text: str, stops: Iterable[str]) -> str:
    """`text` up to the first of `stops`."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut]


def completion_tokens(ids: list[int], dlm: Dlm) -> int:
    """Tokens the model wrote: the hole ids up to end-of-text, without padding or special ids."""
    if dlm.eos_id is not None and dlm.eos_id in ids:
        ids = ids[: ids.index(dlm.eos_id)]
    return sum(i not in dlm.special_ids for i in ids)


def run_one(task: Task, config: Config, dlm: Dlm, seed: int, length: int, limits: sandbox.Limits) -> Sample:
    """Decode one task with one decoder setting and seed, check its syntax and run its tests."""
    return scored(task, config, dlm, seed, limits, decode(task, config, dlm, seed, length))


def decode(task: Task, config: Config, dlm: Dlm, seed: int, length: int) -> fill.Result | DlmcodeError:
    """The task's decode (in a batched run, one of its works), or the error that stopped it."""
    try:
        return batch.run_job(MODES[task.mode].job(task, config, dlm, seed, length))
    except DlmcodeError as err:
        return err


def scored(
    task: Task, config: Config, dlm: Dlm, seed: int, limits: sandbox.Limits, result: fill.Result | DlmcodeError
) -> Sample:
    """The Sample of a decode: its output, syntax, exact match and tests."""
    if isinstance(result, DlmcodeError):
        return failed(task, config, seed, str(result))
    mode = MODES[task.mode]
    output = mode.output(task, result)
    breakage = mode.breakage(task, result, output)
    if config.fill_length == EDITOR and task.mode == "infill":
        output, breakage = editor_cut(task, output, breakage)
    outcome = sandbox.run(task.code(output), task.test, task.entry_point, limits) if task.test else None
    return Sample(
        task=task.task_id,
        decoder=config.name,
        settings=config.settings,
        seed=seed,
        output=output,
        passed=outcome.passed if outcome else None,
        exact=exact_match(output, task.canonical) if task.canonical is not None else None,
        breakage=breakage.to_dict() if breakage else None,
        calls=result.calls,
        filled=result.filled,
        tokens=completion_tokens(result.ids, dlm),
        tpf=round(result.tpf, 4),
        seconds=round(result.seconds, 4),
        status=outcome.status if outcome else None,
        trivial=trivial.is_trivial(output, task.lang),
        reopened=result.reopened,
        **guard_fields(config.settings, result),
    )


def guard_fields(settings: dict[str, Any], result: fill.Result) -> dict[str, Any]:
    """Whether a decode that asked for the guard had it, and the guard's time."""
    if not settings.get("guard"):
        return {}
    stats = result.guard or {}
    return {
        "guarded": result.guard is not None,
        "guard_seconds": round(stats.get("guard_seconds", 0.0), 4),
        "turned_away": int(stats.get("guard_rejected", 0)),
    }


def failed(task: Task, config: Config, seed: int, error: str) -> Sample:
    """A task that could not be decoded: it fails its test and its match, and is not timed."""
    return Sample(
        task.task_id,
        config.name,
        config.settings,
        seed,
        "",
        False if task.test else None,
        False if task.canonical is not None else None,
        None,
        0,
        0,
        0,
        0.0,
        0.0,
        error=error,
    )


def samples(
    tasks: list[Task],
    configs: list[Config],
    dlm: Dlm,
    seed: int,
    length: int,
    limits: sandbox.Limits,
    done: Iterable[tuple] = (),
    batch_size: int = 1,
) -> Iterator[Sample]:
    """One Sample per task and setting not in `done`, task by task (every row advances together).

    batch_size > 1: that many decodes share each model forward (dlmcode/jobs/batch.py), same Samples.
    """
    skip = set(done)
    todo = [(t, c) for t in tasks for c in configs if sample_key(t.task_id, c.name, c.settings, seed) not in skip]
    if batch_size == 1:
        yield from (run_one(task, config, dlm, seed, length, limits) for task, config in todo)
        return
    shared = batch.batched(dlm)
    works = [functools.partial(decode, task, config, shared, seed, length) for task, config in todo]
    for (task, config), result in zip(todo, batch.Batcher(batch_size).map(works), strict=True):
        yield scored(task, config, dlm, seed, limits, result)


# ---------------------------------------------------------------- compare


# compare's runs per decoder: a breakage rate from 1000 samples is within 3 points; more is a bench, not a look
MAX_SAMPLES = 1000


def compare_temperature(n: int, temperature: float | None) -> tuple[float | None, str | None]:
    """The temperature for n samples per decoder, and a note when it was chosen for the user."""
    if not 1 <= n <= MAX_SAMPLES:
        raise UsageError(f"--samples {n}: give 1 to {MAX_SAMPLES}")
    if n > 1 and temperature is None:
        return (
            1.0,
            f"--samples {n}: sampling at temperature 1.0 so that samples differ (set --temperature to change it)",
        )
    if n > 1 and temperature == 0:
        raise UsageError(f"--samples {n} with --temperature 0 gives {n} identical samples; use a temperature above 0")
    return temperature, None


def compare(
    source: str, span: tuple[int, int] | None, name: str, dlm: Dlm, configs: list[Config], n: int, run: RunSettings
) -> Iterator[Sample]:
    """Each setting n times on the same input, seeds 0..n-1, round-robin so that rows advance together.

    `run` gives the length and language; each config its decoder and cache, each round its seed."""
    for seed in range(n):
        for config in configs:
            yield compare_one(source, span, name, dlm, config, seed, run)


def compare_one(
    source: str, span: tuple[int, int] | None, name: str, dlm: Dlm, config: Config, seed: int, run: RunSettings
) -> Sample:
    run = dataclasses.replace(
        run,
        decoder=config.decoder,
        options=None,
        seed=seed,
        cache=config.cache.mode,
        cache_refresh=config.cache.refresh,
    )
    job = fill.infill_job(source, span, dlm, run)
    result = job.run()
    output, exact, plain = result.text, None, None
    if span is not None:
        a, b = spans.line_span(source, span)
        output = result.text[a : len(result.text) - (len(source) - b)]
        exact = exact_match(output, source[a:b])
        plain = trivial.is_trivial(output, job.lang) if job.lang else None  # markers: several fills, not classified
    return Sample(
        name,
        config.name,
        config.settings,
        seed,
        output,
        None,
        exact,
        result.breakage.to_dict() if result.breakage else None,
        result.calls,
        result.filled,
        completion_tokens(result.ids, dlm),
        round(result.tpf, 4),
        round(result.seconds, 4),
        trivial=plain,
        reopened=result.reopened,
        **guard_fields(config.settings, result),
    )


# ---------------------------------------------------------------- ranks


@dataclass(frozen=True)
class Ranks:
    """This process's place in a torchrun launch (one process: rank 0 of 1)."""

    rank: int = 0
    world: int = 1
    local: int = 0  # rank on this machine
    local_world: int = 1  # processes on this machine

    @classmethod
    def from_env(cls) -> Ranks:
        env = os.environ
        world = int(env.get("WORLD_SIZE", 1))
        return cls(
            int(env.get("RANK", 0)), world, int(env.get("LOCAL_RANK", 0)), int(env.get("LOCAL_WORLD_SIZE", world))
        )

    @property
    def lead(self) -> bool:
        return self.rank == 0

    def device(self, device: str) -> str:
        """Each rank on its own GPU where there are several (ranks share them round-robin otherwise)."""
        import torch

        if self.world > 1 and device in ("auto", "cuda") and torch.cuda.is_available():
            return f"cuda:{self.local % torch.cuda.device_count()}"
        return device

    def share(self, items: list) -> list:
        return items[self.rank :: self.world]

    def start(self, device_type: str) -> None:
        """Join the process group: nccl when every rank has a GPU of its own, gloo otherwise.

        The only collective is one gather of Python objects, so gloo serves CUDA runs too;
        NCCL refuses two ranks on one GPU.
        """
        import torch
        import torch.distributed as dist

        if self.world == 1 or dist.is_initialized():
            return
        own_gpu = device_type == "cuda" and self.local_world <= torch.cuda.device_count()
        if own_gpu:
            torch.cuda.set_device(self.local)
        store = self.meet()
        dist.init_process_group(
            "nccl" if own_gpu else "gloo", store=store, rank=self.rank, world_size=self.world, timeout=GATHER_TIMEOUT
        )

    def meet(self) -> Any:
        """The ranks' store (env://, as torchrun sets it up), reached within JOIN_TIMEOUT.

        init_process_group alone would wait its collective timeout (GATHER_TIMEOUT, hours) for a
        rank that failed before joining (a bad flag, a missing file): every rank starts together,
        so one that has not come within minutes is not coming.
        """
        import torch.distributed as dist

        start = time.monotonic()
        try:
            with native_stderr_silenced():  # torch's C++ logs each retry and the timeout, frames and all
                store, _, _ = next(dist.rendezvous("env://", self.rank, self.world, timeout=JOIN_TIMEOUT))
        except (RuntimeError, ValueError) as err:  # DistNetworkError, DistStoreError: RuntimeErrors
            # (a client rank tries twice, so it waits up to twice JOIN_TIMEOUT: say what it waited)
            where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
            raise DlmcodeError(
                f"rank {self.rank} of {self.world}: the other ranks did not join at {where} in "
                f"{time.monotonic() - start:.0f} s ({str(err).strip().splitlines()[0][:200]})"
            ) from None
        store.set_timeout(JOIN_TIMEOUT)
        return store

    def join(self, device: str) -> None:
        """start() for the device `device` names (before the model loads): CUDA when it resolves to CUDA."""
        import torch

        name = self.device(device)
        cuda = name.startswith("cuda") or (name == "auto" and torch.cuda.is_available())
        self.start("cuda" if cuda else "cpu")

    def gather(self, rows: list[dict]) -> list[dict] | None:
        """Every rank's rows on rank 0 (None elsewhere); then leave the process group."""
        if self.world == 1:
            return rows
        import torch.distributed as dist

        parts: list | None = [None] * self.world if self.lead else None
        try:
            dist.gather_object(rows, parts, dst=0)
        except RuntimeError as err:  # a rank died after joining: gloo/nccl notice the closed connection
            raise DlmcodeError(
                f"rank {self.rank}: {self.failed() or 'another rank stopped'} "
                f"({str(err).strip().splitlines()[0][:200]})"
            ) from None
        dist.destroy_process_group()
        return [row for part in parts for row in part] if parts is not None else None

    def store(self) -> Any:
        """The process group's key-value store, or None outside a joined multi-rank run."""
        import torch.distributed as dist

        if self.world == 1 or not dist.is_initialized():
            return None
        return dist.distributed_c10d._get_default_store()

    def failed(self) -> str | None:
        """What a rank that failed reported ('rank N failed: why'), or None."""
        store = self.store()
        if store is None:
            return None
        try:
            return store.get(FAILED_KEY).decode() if store.check([FAILED_KEY]) else None
        except RuntimeError:  # rank 0, which holds the store, is gone
            return "rank 0 stopped"

    @contextlib.contextmanager
    def failing_fast(self) -> Iterator[None]:
        """On an error in this rank, tell the others through the store before leaving, so that they
        stop at their next sample instead of waiting at the gather (GATHER_TIMEOUT) for this one."""
        try:
            yield
        except BaseException as err:
            store = self.store()
            if store is not None and not isinstance(err, GeneratorExit):
                with contextlib.suppress(Exception):
                    if not store.check([FAILED_KEY]):
                        why = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
                        store.set(FAILED_KEY, f"rank {self.rank} failed: {why}")
            raise


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """File descriptor 2 to /dev/null for a while: what C++ code writes there (Python's own
    errors are raised, and reported in one line by the command)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# ---------------------------------------------------------------- a whole bench


@dataclass
class BenchRun:
    """A bench ready to go: the suite, the settings, this rank's tasks and what is already done."""

    suite_name: str
    configs: list[Config]
    limit: int | None = None
    seed: int = 0
    length: int = GENERATE_LENGTH
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)
    out: Path | None = None
    ranks: Ranks = field(default_factory=Ranks)
    strict: bool = True  # decoders were named: one that cannot run here is an error, not skipped
    batch_size: int = 1  # decodes sharing each model forward (dlmcode/jobs/batch.py)
    suite: Suite = field(default_factory=lambda: Suite("", []))  # set by load()
    previous: dict[tuple, Sample] = field(default_factory=dict)  # samples found in --out, by key
    notes: list[str] = field(default_factory=list)  # what the user should know (printed on stderr)
    written: list[Path] = field(default_factory=list)  # the files finish() wrote

    def load(self, dlm: Dlm) -> None:
        """The tasks (heldout-span cuts at dlm's token boundaries), assistants, and --out's samples."""
        from . import suites

        self.suite = suites.load(self.suite_name, self.limit, dlm.tokenizer)
        if self.suite.has_tests and self.limits.isolated:
            sandbox.require()  # refuse now, in one line, rather than at the first test
        if not self.suite.tasks:
            raise InputError(f"suite {self.suite_name!r} has no tasks: nothing to run")
        if any(t.mode == "generate" for t in self.suite.tasks) and self.length >= dlm.context:
            raise UsageError(
                f"--length {self.length} leaves no room for the prompt in the model's context ({dlm.context} tokens)"
            )
        self.configs, skipped = attach_all(self.configs, dlm, self.strict)
        self.notes = [f"{self.suite_name}: {self.length_note}", *skipped]
        if self.out is not None:
            self.previous = report.read_samples(self.out, SAMPLES_FILE, PART_FILE.format("*"))

    @property
    def tasks(self) -> list[Task]:
        """This rank's share of the suite."""
        return self.ranks.share(self.suite.tasks)

    @property
    def length_note(self) -> str:
        generate = any(t.mode == "generate" for t in self.suite.tasks)
        mode = self.configs[0].fill_length if self.configs else ORACLE
        if generate:
            return f"{self.length} tokens generated per prompt" if mode == ORACLE else FILL_LENGTHS[UNKNOWN]
        return FILL_LENGTHS[mode]

    def wanted(self, tasks: list[Task]) -> list[tuple]:
        return [sample_key(t.task_id, c.name, c.settings, self.seed) for t in tasks for c in self.configs]

    def done(self) -> list[Sample]:
        """This rank's samples already in --out (resume)."""
        return [self.previous[k] for k in self.wanted(self.tasks) if k in self.previous]

    def stream(self, dlm: Dlm) -> Iterator[Sample]:
        """Join the ranks, then decode this rank's missing samples, appending each to --out."""
        self.ranks.start(dlm.device.type)
        stream = watched(
            samples(self.tasks, self.configs, dlm, self.seed, self.length, self.limits, self.previous, self.batch_size),
            self.ranks,
        )
        if self.out is None:
            return stream
        name = SAMPLES_FILE if self.ranks.world == 1 else PART_FILE.format(self.ranks.rank)
        return report.appended(stream, self.out / name)

    def finish(self, new: list[Sample], model: str) -> dict | None:
        """Gather every rank's new samples; rank 0 writes the outputs and returns the summary."""
        gathered = self.ranks.gather([s.to_dict() for s in new])
        if gathered is None:
            return None
        merged = dict(self.previous) | {s.key: s for s in map(Sample.from_dict, gathered)}
        current = [merged[k] for k in self.wanted(self.suite.tasks) if k in merged]
        summary = self.summary(current, model)
        if self.out is not None:
            found = current + self.others(merged)
            self.written = report.write_outputs(self.out, SAMPLES_FILE, PART_FILE.format("*"), found, summary)
        return summary

    def others(self, merged: dict[tuple, Sample]) -> list[Sample]:
        """Samples in --out from other settings or tasks: kept in the file, left out of the summary."""
        wanted = set(self.wanted(self.suite.tasks))
        return [s for k, s in merged.items() if k not in wanted]

    def summary(self, current: list[Sample], model: str) -> dict:
        return {
            "suite": self.suite.name,
            "model": model,
            "tasks": len(self.suite.tasks),
            "seed": self.seed,
            "length": self.length_note,
            "fill_length": self.configs[0].fill_length if self.configs else ORACLE,
            "quality": "pass_at_1" if self.suite.has_tests else "exact_match",
            "rows": rows(current, self.configs),
        }


def watched(stream: Iterator[Sample], ranks: Ranks) -> Iterator[Sample]:
    """`stream`, stopping with one clear error as soon as another rank reports that it failed."""
    for sample in stream:
        yield sample
        why = ranks.failed() if ranks.world > 1 else None
        if why:
            raise DlmcodeError(f"stopping rank {ranks.rank}: {why}; run the same command again to resume")


def attach_all(configs: list[Config], dlm: Dlm, strict: bool) -> tuple[list[Config], list[str]]:
    """Give decoders that take an assistant (codila) theirs, once; not strict: skip one that has none."""
    kept, skipped = [], []
    for config in configs:
        try:
            kept.append(dataclasses.replace(config, decoder=wiring.with_assistant(config.decoder, dlm)))
        except DlmcodeError as err:
            if strict:
                raise
            skipped.append(f"skipping {config.label}: {err}")
    return kept, skipped


def rows(found: list[Sample], configs: list[Config]) -> list[dict]:
    """One summary row per setting, in the order the settings were given."""
    tallies = {c.key(): Tally() for c in configs}
    for s in found:
        tallies[s.decoder, json.dumps(s.settings, sort_keys=True)].add(s)
    return [
        {"decoder": c.name, "label": c.label, "sweep": c.sweep, "settings": c.settings, **tallies[c.key()].row()}
        for c in configs
    ]


def prepare_bench(
    suite: str,
    names: list[str],
    options: list[str],
    sweeps: list[str],
    limit: int | None,
    seed: int,
    length: int,
    out: Path | None,
    limits: dict[str, float],
    batch_size: int = 1,
    fill_length: str = ORACLE,
) -> BenchRun:
    """A BenchRun from command-line values, all checked before any model loads; then call load()."""
    from . import suites

    suites.loader_for(suite)
    suites.check_limit(limit)
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is an existing file; give a folder (a new one, or one to resume)")
    if length < 1:
        raise UsageError(f"--length {length}: give a positive number of tokens")
    batch.Batcher(batch_size)  # a UsageError for a batch size below 1
    try:
        fence = sandbox.Limits(**limits)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if fill_length not in FILL_LENGTHS:
        raise UsageError(f"--fill-length {fill_length!r}: give one of {', '.join(FILL_LENGTHS)}")
    chosen = configs(names, options, sweeps, fill_length=fill_length)
    return BenchRun(
        suite, chosen, limit, seed, length, fence, out, Ranks.from_env(), strict=bool(names), batch_size=batch_size
    )


def written_note(paths: list[Path]) -> str:
    plotted = any(p.suffix == ".png" for p in paths)
    return f"wrote {', '.join(map(str, paths))}" + ("" if plotted else f"; no plot: {report.PLOT_HELP}")


def compare_summary(found: list[Sample], configs: list[Config], meta: dict) -> dict:
    """compare --json: the input, then per setting its summary row and every run."""
    runs = {c.key(): [] for c in configs}
    for s in found:
        runs[s.decoder, json.dumps(s.settings, sort_keys=True)].append(_run(s))
    table = rows(found, configs)
    return meta | {"decoders": [row | {"runs": runs[c.key()]} for row, c in zip(table, configs, strict=True)]}


def _run(s: Sample) -> dict:
    return {
        "seed": s.seed,
        "output": s.output,
        "exact": s.exact,
        "breakage": s.breakage,
        "calls": s.calls,
        "filled": s.filled,
        "tokens": s.tokens,
        "tpf": s.tpf,
        "seconds": s.seconds,
        "trivial": s.trivial,
        "reopened": s.reopened,
        "turned_away": s.turned_away,
    }
