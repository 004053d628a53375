"""One Sample: a task decoded with one setting and seed (infill or generate, MODES), its output cut as
the face would cut it, its syntax checked and its tests run in the sandbox; and every task's, batched or not."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

from ..core.errors import DlmcodeError, InputError
from ..core.run import AUTO
from ..jobs import batch, fill, processors, wiring
from ..models.base import Dlm
from ..text import spans, syntax, trivial
from . import sandbox
from .configs import EDITOR, ORACLE, Config
from .metrics import Sample, exact_match, sample_key
from .suites import Task

GENERATE_LENGTH = 128  # tokens generated per HumanEval prompt unless --length says otherwise
STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")  # a completion ends at top-level code (Codex, arXiv 2107.03374)
EDITOR_CEILING = 128  # n_predict as llama.vim and llama.vscode send it (the rule's room is smaller for every family)


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
