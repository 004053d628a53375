"""What a job hands a decoder besides `predict`, as named contracts: the guard (a Completer whose
`begin` opens a Gate for one decode), the syntax oracle, and the decoders that take them.

The things themselves are built above: the guard in dlmcode/text/guard.py, the oracle in
dlmcode/text/oracle.py, an assistant in dlmcode/models/assistant_lm.py (its contract is
core/assistant.Assistant). A decoder says what it takes by its fields (`guard` and `completer`,
`oracle`, `assistant`); the wiring (dlmcode/jobs/wiring.py) checks these protocols, never field names,
and decoders/base.py's loops call only what is written here.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from torch import Tensor


class Gate(Protocol):
    """One guarded decode's session: every commit of the shared loops goes through `admit`."""

    def admit(
        self, tokens: Tensor, logits: Tensor, pos: Tensor, ids: Tensor, scores: Tensor, own: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The commits (positions, ids, scores) to make of the proposals `pos`/`ids`/`scores` (k,) on the
        canvas `tokens` (L,) with the call's `logits` (L, V): after each, the holes left can still be filled
        so that the file parses. At least one commit when any is offered. `own`: commit the proposals' own
        tokens or none (no less likely stand-in), but for the one commit that a call must make."""
        ...

    def holds(self, pos: Tensor, ids: Tensor) -> Tensor:
        """(k,) bool: whether `ids` at `pos` keep the holes left completable with no check (the guard's witness has
        them): a token a decoder reopened may be given back where it does."""
        ...


class Completer(Protocol):
    """The guard the job built for its plan (text/guard.Guard)."""

    def begin(self, canvas: Tensor) -> Gate:
        """A Gate for a fresh decode from `canvas` (L,)."""
        ...


class Verdict(Protocol):
    """What the oracle says about one drafted canvas (text/oracle.Verdict)."""

    flagged: Tensor  # (L,) bool: span positions in, or blamed for, a new syntax problem
    regions: tuple[Tensor, ...]  # per new problem, the span positions it covers
    broken: bool  # the draft has new problems


class Oracle(Protocol):
    """The syntax oracle the job built for its plan (text/oracle.SyntaxOracle)."""

    def __call__(self, tokens: Tensor) -> Verdict: ...


@runtime_checkable
class Guarded(Protocol):
    """A decoder the guard can sit in (every BaseDecoder): `guard` asks for it, `completer` is the job's."""

    guard: bool
    completer: Completer | None


@runtime_checkable
class TakesOracle(Protocol):
    """A decoder that steers with a syntax oracle (syntax-guard); the job sets `oracle`."""

    oracle: Oracle | None


@runtime_checkable
class TakesAssistant(Protocol):
    """A decoder that decodes blocks with an assistant (codila): None or a folder until the job loads
    one (jobs/wiring.with_assistant), then a core/assistant.Assistant."""

    assistant: Any


def guarded(decoder: object) -> bool:
    """Whether `decoder` asks for the guard (custom decoders without the fields run unguarded)."""
    return isinstance(decoder, Guarded) and bool(decoder.guard)


def completer_of(decoder: object) -> Completer | None:
    """The guard a job handed `decoder`, or None."""
    return decoder.completer if isinstance(decoder, Guarded) else None


def gate_for(decoder: object, canvas: Tensor) -> Gate | None:
    """The guard's Gate for one decode from `canvas`, or None when the decoder runs unguarded (or no
    job handed it a guard)."""
    completer = completer_of(decoder)
    return completer.begin(canvas) if guarded(decoder) and completer is not None else None
