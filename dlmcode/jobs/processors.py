"""What happens to the logits between the model and the decoder: a list of processors, applied in order in one place.

A model's `predict(tokens) -> logits` says what the model thinks; a KV cache or a batched
forward may stand behind it, and they change how the logits are computed, never what they
are (models/cache.py, jobs/batch.py). Policies on top of it (a token the holes must never
hold, a penalty on end-of-text) are processors: a Job carries them as a tuple, `processed`
applies them after each forward, and each has a name that results and summaries print, so a
reader sees in one line what happened to the logits (as mlx-lm keeps its logits processors).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from torch import Tensor

from ..core.canvas import Predict


class Processor(Protocol):
    name: str  # what it does, in a few words ("ban pad")

    def __call__(self, logits: Tensor) -> Tensor: ...  # (L, V) -> (L, V)


@dataclass(frozen=True)
class Ban:
    """Tokens the holes may never hold: their logits become -inf (a penalty of infinity)."""

    ids: tuple[int, ...]
    what: str  # the tokens, for the name: "pad", "end-of-text", "line breaks"

    @property
    def name(self) -> str:
        return f"ban {self.what}"

    def __call__(self, logits: Tensor) -> Tensor:
        out = logits.clone()  # (L, V)
        out[:, list(self.ids)] = float("-inf")
        return out


@dataclass(frozen=True)
class Penalty:
    """`amount` subtracted from one token's logit at every position (Dream-Coder's end-of-text penalty)."""

    token: int
    amount: float
    what: str

    @property
    def name(self) -> str:
        return f"{self.what} -{self.amount:g}"

    def __call__(self, logits: Tensor) -> Tensor:
        out = logits.clone()  # (L, V)
        out[:, self.token] -= self.amount
        return out


@dataclass
class Remember:
    """Changes nothing; keeps the last logits it saw (the server's early end and time limit read them)."""

    name: str = "remember"
    logits: Tensor | None = field(default=None, repr=False)

    def __call__(self, logits: Tensor) -> Tensor:
        self.logits = logits  # (L, V)
        return logits


def processed(predict: Predict, processors: Iterable[Processor]) -> Predict:
    """`predict` followed by each processor in order; `predict` itself when there are none."""
    chain = tuple(processors)
    if not chain:
        return predict

    def run(tokens: Tensor) -> Tensor:
        logits = predict(tokens)  # (L, V)
        for processor in chain:
            logits = processor(logits)
        return logits

    return run


def names(processors: Iterable[Processor]) -> tuple[str, ...]:
    """The policies' names, for results and summaries (an observer like Remember is not a policy)."""
    return tuple(p.name for p in processors if not isinstance(p, Remember))
