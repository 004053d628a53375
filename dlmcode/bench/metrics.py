"""Per-sample records and their aggregates: pass@1, exact match, syntax-valid rate, TPF, speed.

A Sample is one decode of one task by one decoder setting with one seed; a Tally folds
Samples into the summary row of that setting. Definitions (docs/research/field.md C):
- pass_at_1: share of tested samples whose tests passed (one sample per task and seed);
- exact_match: the fill equals the canonical middle after stripping surrounding whitespace
  (docs/research/field.md E);
- syntax_valid: share of checked samples with no new syntax error (1 - breakage rate);
- trivial: share of classified samples whose fill is only whitespace, comments and do-nothing
  tokens (dlmcode/text/trivial.py: `pass`, `...`, `;`, `{}`), the cheap way to stay syntax-valid;
- reopened: tokens the decoders took back in all (remasking decoders; TPF still counts holes);
- unguarded: samples that asked for the guard but decoded unguarded (no filling of their holes
  parses: the code around them has errors); guard_share: the guard's checks' share of decode time;
  turned_away: the decoder's proposals the guard rejected, in all (the breakage it prevented, so a
  guarded run still shows the decoder's own);
- tpf: holes filled / model calls, over all decoded samples (a ratio of totals);
- calls, seconds: means per decoded sample; tokens_per_s: completion tokens / decode
  seconds, where completion tokens leave out the prompt, end-of-text and padding.
A sample that could not be decoded (its hole does not fit the model) counts as failed for
pass@1 and exact match and is left out of the rest; `errors` counts them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

DIGITS = 4  # rounding of rates and means in summaries


@dataclass(frozen=True)
class Sample:
    """One decode, as one line of samples.jsonl."""

    task: str
    decoder: str
    settings: dict[str, Any]  # the decoder's full settings
    seed: int
    output: str  # the fill (infill) or the completion (generate)
    passed: bool | None  # None: the task has no test
    exact: bool | None  # None: the task has no canonical middle
    breakage: dict | None  # syntax.Breakage.to_dict(); None: not checked
    calls: int
    filled: int  # holes filled
    tokens: int  # completion tokens (no end-of-text, no padding)
    tpf: float
    seconds: float  # decode time
    status: str | None = None  # the sandbox's verdict (passed, failed, timeout, ...)
    error: str | None = None  # why the task could not be decoded
    trivial: bool | None = None  # the fill only whitespace, comments, pass/...; None: not classified
    reopened: int = 0  # committed tokens the decoder took back
    guarded: bool | None = (
        None  # guard asked: True when it held, False when it could not (dlmcode/text/guard.py); None: not asked
    )
    guard_seconds: float = 0.0  # of `seconds`, the guard's: its first witness search and every admission
    turned_away: int = 0  # proposals the guard rejected (replaced, or left for a later call)

    @property
    def key(self) -> tuple[str, str, str, int]:
        return sample_key(self.task, self.decoder, self.settings, self.seed)

    @property
    def syntax_valid(self) -> bool | None:
        return None if self.breakage is None else not self.breakage["broken"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Sample:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in row.items() if k in names})


def sample_key(task: str, decoder: str, settings: dict[str, Any], seed: int) -> tuple[str, str, str, int]:
    """What makes a sample the same sample again (for resume)."""
    return task, decoder, json.dumps(settings, sort_keys=True), seed


def exact_match(output: str, canonical: str) -> bool:
    return output.strip() == canonical.strip()


@dataclass
class Tally:
    """Running totals of one decoder setting's samples."""

    n: int = 0
    errors: int = 0
    tested: int = 0
    passed: int = 0
    compared: int = 0
    exact: int = 0
    checked: int = 0
    valid: int = 0
    classified: int = 0
    trivial: int = 0
    reopened: int = 0
    unguarded: int = 0
    guard_seconds: float = 0.0
    turned_away: int = 0
    decoded: int = 0
    calls: int = 0
    filled: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def add(self, s: Sample) -> None:
        self.n += 1
        self.errors += s.error is not None
        self.tested += s.passed is not None
        self.passed += bool(s.passed)
        self.compared += s.exact is not None
        self.exact += bool(s.exact)
        self.checked += s.syntax_valid is not None
        self.valid += bool(s.syntax_valid)
        self.classified += s.trivial is not None
        self.trivial += bool(s.trivial)
        self.reopened += s.reopened
        self.unguarded += s.guarded is False
        self.guard_seconds += s.guard_seconds
        self.turned_away += s.turned_away
        if s.error is None:
            self.decoded += 1
            self.calls += s.calls
            self.filled += s.filled
            self.tokens += s.tokens
            self.seconds += s.seconds

    def row(self) -> dict[str, Any]:
        """The summary fields (None where nothing was measured)."""
        return {
            "n": self.n,
            "errors": self.errors,
            "pass_at_1": _ratio(self.passed, self.tested),
            "exact_match": _ratio(self.exact, self.compared),
            "syntax_valid": _ratio(self.valid, self.checked),
            "breakage_rate": _ratio(self.checked - self.valid, self.checked),
            "trivial": _ratio(self.trivial, self.classified),
            "tpf": _ratio(self.filled, self.calls),
            "calls": _ratio(self.calls, self.decoded),
            "reopened": self.reopened,
            "unguarded": self.unguarded,
            "guard_share": _ratio(self.guard_seconds, self.seconds),
            "turned_away": self.turned_away,
            "tokens_per_s": _ratio(self.tokens, self.seconds, 1),
            "seconds": _ratio(self.seconds, self.decoded),
        }


def _ratio(a: float, b: float, digits: int = DIGITS) -> float | None:
    return round(a / b, digits) if b else None


TIMING = ("tokens_per_s", "seconds")  # summary fields that depend on the machine, not the decode


def tally(samples: list[Sample]) -> dict[str, Any]:
    """The summary row of a list of samples."""
    t = Tally()
    for s in samples:
        t.add(s)
    return t.row()
