"""One decode timed: the canvas it decodes (a real Python prompt, then holes), the decoder and the
predict behind each cache mode, every model call and the whole decode timed (Timed, measure), and
the grid's stream of Rows with their ratios to the baseline.

On a CPU the calls and the decode are also timed in the decoding thread's CPU time
(`time.thread_time`): the time a process waits for a core, which on a shared machine can be
most of a wall-clock second and lands on whichever row is running, is not in it, so the
decoder's CPU share of the baseline's forward (`overhead_of_forward_cpu`) is the steadier
figure, and report.targets judges the overhead targets on it where it was measured (with one
thread: another thread's work is not in a thread's time). On a GPU a call's cost is not the CPU
time of its thread, so only wall time is taken."""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ... import decoders
from ...core import contracts
from ...core.canvas import Canvas, Predict, last, logits_at
from ...core.errors import DlmcodeError
from ...jobs.job import counting
from ...models import cache as kvcache
from ...models.base import Dlm
from ...models.blocks import BlockPredict, full_canvas_flops
from .config import EXACT, SpeedConfig


class Next(NamedTuple):
    """Said before each decode is timed, so a long run shows where it is: item `number` of `total`."""

    number: int
    total: int
    prompt: int
    decoder: str
    cache: str

    def __str__(self) -> str:
        return f"speed {self.number}/{self.total}: {self.prompt}-token prompt · {self.decoder} · cache {self.cache}"


@dataclass
class Row:
    """One decode: prompt length, decoder, cache mode, and what it cost."""

    prompt: int
    decoder: str
    cache: str
    calls: int
    holes: int
    seconds: float  # the whole decode
    call_s: float  # median wall time of one predict call
    overhead_s: float  # per call: time outside predict (the decoder's own work)
    full_calls: int | None = None  # calls that ran every position (cached predicts only)
    flops: int | None = None  # a block family's FLOPs, counted from the forwards it made (models/blocks.py)
    canvas_flops: int | None = None  # what recomputing the whole canvas at each of its calls would cost
    guard_s: float | None = None  # per call: the guard's checks (part of overhead_s); None: unguarded
    call_cpu_s: float | None = None  # as call_s, in the decoding thread's CPU time (None on a GPU)
    overhead_cpu_s: float | None = None  # as overhead_s, in the decoding thread's CPU time (None on a GPU)
    guard_cpu_s: float | None = None  # per call: the guard's gates in CPU time (in overhead_cpu_s); None: unguarded
    reopened: int = 0  # tokens the decoder took back (remasking decoders): each cost a commit again
    ratios: dict[str, float] = field(default_factory=dict)  # against the baseline at this prompt length

    @property
    def tpf(self) -> float:
        return self.holes / self.calls

    @property
    def tokens_s(self) -> float:
        return self.holes / self.seconds

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d |= {"tpf": self.tpf, "tokens_s": self.tokens_s}
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in d.items()}


class Timed:
    """A predict that records how long each call takes, in wall time (synchronizing CUDA so the time is
    the forward's) and in the calling thread's CPU time; it passes on the rows a decoder asks for, so a
    call costs what it costs in a decode."""

    takes_rows = True

    def __init__(self, predict: Predict, device: torch.device) -> None:
        self.predict, self.device = predict, device
        self.times: list[float] = []
        self.cpu: list[float] = []

    def __call__(self, tokens: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        start, cpu = time.perf_counter(), time.thread_time()
        logits = logits_at(self.predict, tokens, rows)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.times.append(time.perf_counter() - start)
        self.cpu.append(time.thread_time() - cpu)
        return logits


def prompt_ids(dlm: Dlm, length: int) -> list[int]:
    """`length` tokens of real Python: dlmcode's own source, repeated as needed."""
    ids = first_tokens(dlm.tokenizer.encode, source(), length)
    ids = (ids * (length // max(len(ids), 1) + 1))[:length]
    return ([dlm.bos_id] if dlm.bos_id is not None else []) + ids[: length - (dlm.bos_id is not None)]


@functools.lru_cache(maxsize=1)
def source() -> str:
    """dlmcode's own source, every file joined (1.2 MB)."""
    root = Path(__file__).resolve().parents[2]  # dlmcode/
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py")))


MARGIN = 64  # tokens read past those taken: the last tokens of a cut text may differ from the whole text's (ours)


def first_tokens(encode: Callable[[str], list[int]], text: str, count: int) -> list[int]:
    """encode(text)[:count], from a prefix of `text` (doubled until it holds `count` tokens and MARGIN more): only
    the tokens at a cut can differ from the whole text's. The whole 1.2 MB source took 2 s to tokenize, once for
    every canvas `speed` builds (each decoder's warm-up too)."""
    size = 8 * (count + MARGIN)  # characters: a code token is 2 to 4 of them
    while True:
        ids = encode(text[:size])
        if size >= len(text):
            return ids[:count]
        if len(ids) >= count + MARGIN:
            return ids[:count]
        size *= 2


def canvas(dlm: Dlm, length: int, gen: int) -> Canvas:
    ids = prompt_ids(dlm, length) + [dlm.mask_id] * gen
    return Canvas(torch.tensor(ids, dtype=torch.long), dlm.mask_id)


def options_for(name: str, block: int) -> dict[str, int]:
    """Settings that give `name` `block` holes to choose from per call, the rest at their defaults.

    A block decoder gets block = `block`: dus takes it as its B (committed in log2 B calls);
    wino, saber and prophet commit in it, and wino and saber reopen only in it and the blocks
    before. codila's `block` is CoDiLA's B, the holes its assistant decodes one after another,
    so it keeps the paper's B (4) and gets a window of block // B candidate blocks: the same
    holes per call, decoded B steps deep (B = 32 would be 32 sequential assistant steps per
    call, a different decoder than the paper's).
    """
    cls = decoders.DECODERS[name]
    fields = {f.name for f in dataclasses.fields(cls)}
    if "window" in fields:
        return {"window": max(1, block // cls().block)}
    return {"block": block} if "block" in fields else {}


def make_decoder(name: str, block: int, dlm: Dlm, guard: bool = False) -> decoders.Decoder:
    """The decoder with `options_for` settings (guarded if asked); codila gets its assistant (dlmcode.jobs.attach)."""
    from ...jobs.wiring import with_assistant

    return with_assistant(decoders.build(name, options_for(name, block) | ({"guard": True} if guard else {})), dlm)


def predict_for(
    dlm: Dlm, mode: str, decoder: decoders.Decoder, start: Canvas, rng: torch.Generator
) -> tuple[Predict, Canvas]:
    """The predict a decode of `start` runs behind `mode`, and the canvas it decodes (a block family's: its starts)."""
    if dlm.blocks is None:
        return kvcache.with_cache(dlm, mode, block=getattr(decoder, "block", 0)).predict, start
    inner = BlockPredict(dlm.blocks, start.tokens, dlm.mask_id, rng, recompute=mode != EXACT)
    return inner, dataclasses.replace(start, blocks=inner.starts)


def modes_for(dlm: Dlm, cfg: SpeedConfig) -> list[str]:
    """The cache modes timed: a block family's are none and its exact cache."""
    return ["none", EXACT] if dlm.blocks is not None else cfg.modes


def measure(dlm: Dlm, name: str, decoder: decoders.Decoder, start: Canvas, prompt: int, mode: str, seed: int) -> Row:
    """Decode `start` once with `decoder` behind a `mode` cache, timing every model call and the whole decode."""
    rng = torch.Generator().manual_seed(seed)
    inner, start = predict_for(dlm, mode, decoder, start, rng)
    decoder = guarded(decoder, dlm, start)  # syntax-guard: its parses are timed as its own work
    clock = GuardClock.around(decoder)  # the guard's share of that work, in CPU time
    decoder = clock.decoder if clock else decoder
    timed = Timed(inner, dlm.device)
    taken: list[int] = []
    began, began_cpu = time.perf_counter(), time.thread_time()
    final = last(counting(decoder(start, timed, rng), taken))
    seconds, cpu = time.perf_counter() - began, time.thread_time() - began_cpu
    counted = isinstance(inner, BlockPredict) and dlm.blocks.cost is not None
    on_cpu = dlm.device.type == "cpu"  # a GPU call's cost is not the CPU time of its thread
    return Row(
        prompt=prompt,
        decoder=name,
        cache=mode,
        calls=final.calls,
        holes=start.n_holes,
        seconds=seconds,
        call_s=statistics.median(timed.times),
        overhead_s=(seconds - sum(timed.times)) / final.calls,
        call_cpu_s=statistics.median(timed.cpu) if on_cpu else None,
        overhead_cpu_s=(cpu - sum(timed.cpu)) / final.calls if on_cpu else None,
        full_calls=getattr(inner, "full_calls", None),
        reopened=sum(taken),
        guard_s=guard_time(decoder, final.calls),
        guard_cpu_s=clock.cpu / final.calls if clock and on_cpu else None,
        flops=inner.flops if counted else None,
        canvas_flops=full_canvas_flops(dlm.blocks.cost, len(start.tokens), final.calls) if counted else None,
    )


def guard_time(decoder: decoders.Decoder, calls: int) -> float | None:
    """The guard's seconds per call in the decode just made, or None when it ran unguarded."""
    from ...text.guard import Guard

    completer = contracts.completer_of(decoder)
    completer = completer.guard if isinstance(completer, GuardClock) else completer
    if not isinstance(completer, Guard) or completer.last is None or completer.last.gave_up:
        return None
    return completer.last.seconds / calls


class GuardClock:
    """The job's guard (core/contracts.Completer) with the thread's CPU time in its gates counted (`cpu`), so that a
    guarded row says how much of the decoder's own CPU time was the guard's."""

    def __init__(self, guard: contracts.Completer, decoder: decoders.Decoder) -> None:
        self.guard, self.cpu = guard, 0.0
        self.decoder = dataclasses.replace(decoder, completer=self)  # the decoder with this clock as its guard

    @classmethod
    def around(cls, decoder: decoders.Decoder) -> GuardClock | None:
        """A clock on `decoder`'s guard, or None when it runs unguarded."""
        guard = contracts.completer_of(decoder)
        if guard is None or not contracts.guarded(decoder) or not dataclasses.is_dataclass(decoder):
            return None
        return cls(guard, decoder)

    def begin(self, canvas: torch.Tensor) -> contracts.Gate:
        began = time.thread_time()
        gate = self.guard.begin(canvas)
        self.cpu += time.thread_time() - began
        return TimedGate(gate, self)


class TimedGate:
    """A gate whose admits add their CPU time to the clock's."""

    def __init__(self, gate: contracts.Gate, clock: GuardClock) -> None:
        self.gate, self.clock = gate, clock

    def admit(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        began = time.thread_time()
        try:
            return self.gate.admit(*args, **kwargs)
        finally:
            self.clock.cpu += time.thread_time() - began

    def holds(self, pos: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.gate.holds(pos, ids)


def guarded(decoder: decoders.Decoder, dlm: Dlm, start: Canvas) -> decoders.Decoder:
    """A decoder that takes a syntax oracle (syntax-guard) or runs guarded gets them for `start` (Python
    prompt, then holes) as a job gives them: a generate job's, the completion cut at end-of-text."""
    from ...jobs import job, wiring
    from ...text import oracle, spans

    if not (oracle.wants(decoder) or contracts.guarded(decoder)):
        return decoder
    n = start.n_holes
    prompt = len(start.tokens) - n
    text = dlm.tokenizer.decode([i for i in start.tokens[:prompt].tolist() if i != dlm.bos_id])
    plan = spans.Plan(text, start, (spans.Hole(len(text), len(text), n),), (range(prompt, prompt + n),), (0, len(text)))
    return wiring.wired(job.Job(plan, dlm, decoder, 0, "python", trim_at=dlm.eos_id)).decoder


def fastest(
    dlm: Dlm, name: str, decoder: decoders.Decoder, start: Canvas, prompt: int, mode: str, cfg: SpeedConfig
) -> Row:
    """The quickest of cfg.repeats decodes (each commits the same tokens: same seed)."""
    return min(
        (measure(dlm, name, decoder, start, prompt, mode, cfg.seed) for _ in range(cfg.repeats)),
        key=lambda r: r.seconds,
    )


def with_ratios(r: Row, base: Row) -> Row:
    """Ratios to the baseline: >1 means better for speedups, and calls/overhead are plain shares."""
    r.ratios = {
        "call_speedup": base.call_s / r.call_s,  # how many times faster one model call is
        "calls": r.calls / base.calls,
        "tokens_s": r.tokens_s / base.tokens_s,  # completion throughput, x the baseline
        "overhead_of_forward": r.overhead_s
        / base.call_s,  # the decoder's own time per call, as a share of one full forward
    }
    if r.overhead_cpu_s is not None and base.call_cpu_s:
        r.ratios["overhead_of_forward_cpu"] = r.overhead_cpu_s / base.call_cpu_s  # the same, in CPU time
    if r.guard_cpu_s is not None and base.call_cpu_s:
        r.ratios["guard_of_forward_cpu"] = r.guard_cpu_s / base.call_cpu_s  # the guard's part of it
    return r


def warm_up(dlm: Dlm, start: Canvas) -> None:
    """Untimed calls before a length's baseline: the first calls pay for allocation and kernel selection."""
    for _ in range(2):
        dlm.predict(start.tokens)


def warm_decoder(dlm: Dlm, decoder: decoders.Decoder, modes: list[str]) -> None:
    """One untimed decode of a short canvas per cache mode: a GPU loads each kernel at its first
    use (milliseconds each), which would otherwise be charged to the decoder's first timed row."""
    short = canvas(dlm, 16, 8)
    for mode in modes:
        rng = torch.Generator().manual_seed(0)
        predict, start = predict_for(dlm, mode, decoder, short, rng)
        last(guarded(decoder, dlm, start)(start, predict, rng))


def stream(dlm: Dlm, cfg: SpeedConfig) -> Iterator[Row | Next | str]:
    """Rows as they are measured, each announced by a Next (and a note for each decoder that
    cannot run); the baseline leads each length."""
    warmed: set[str] = set()
    built: dict[str, decoders.Decoder | DlmcodeError] = {}  # each decoder built once, for every length
    number, modes = 0, modes_for(dlm, cfg)
    total = len(cfg.lengths) * len(cfg.decoder_names) * len(modes)
    for length in cfg.lengths:
        start, base = canvas(dlm, length, cfg.gen), None
        warm_up(dlm, start)
        for name in cfg.decoder_names:
            if name not in built:
                try:
                    built[name] = make_decoder(name, cfg.block, dlm, cfg.guard)
                except DlmcodeError as err:
                    built[name] = err
            decoder = built[name]
            if isinstance(decoder, DlmcodeError):
                number += len(modes)  # its items are skipped, not left to do
                yield f"skipping {name}: {decoder}"
                continue
            for mode in modes:
                number += 1
                yield Next(number, total, length, name, mode)
                if name not in warmed:  # untimed, inside the first item: a long wait still names what runs
                    warm_decoder(dlm, decoder, modes)
                    warmed.add(name)
                r = fastest(dlm, name, decoder, start, length, mode, cfg)
                base = base or r  # the first row of a length: low-confidence, no cache
                yield with_ratios(r, base)


def run(dlm: Dlm, cfg: SpeedConfig) -> list[Row]:
    return [r for r in stream(dlm, cfg) if isinstance(r, Row)]
