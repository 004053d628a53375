"""What happens to the logits between the model and the decoder: a list of processors, applied in order in one place.

A model's `predict(tokens) -> logits` says what the model thinks; a KV cache or a batched
forward may stand behind it, and they change how the logits are computed, never what they
are (models/cache.py, jobs/batch.py). A call computes the rows the decoder reads
(core/canvas.Predict), and the processors see those rows only; one that reads more (Remember
reads every hole, for the server's early end) says which with `reads`, and the call computes
those rows too. Policies on top of it (a token the holes must never hold, a penalty on
end-of-text) are processors: a Job carries them as a tuple, `processed` applies them after
each forward, and each has a name that results and summaries print, so a reader sees in one
line what happened to the logits (as mlx-lm keeps its logits processors).
The rules that choose a job's processors live here too: end-of-text (`EndOfText`), a hole of
given length (`exact_length`), a growing hole (`growth_bans`). Sampling noise (core/sampling)
is the decoder's, not a policy on the logits, and stays there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from ..core.canvas import Predict, logits_at, rowwise
from ..models.base import Dlm


class Processor(Protocol):
    """(R, V) -> (R, V). One that treats positions differently has `select(rows)`: itself for the logits of
    positions `rows` only (expanding.Limits); the others do the same to every row."""

    name: str  # what it does, in a few words ("ban pad")

    def __call__(self, logits: Tensor) -> Tensor: ...


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


# ---------------------------------------------------------------- the jobs' policies


@dataclass(frozen=True)
class EndOfText:
    """Ways to stop instruct dLLMs flooding the canvas with end-of-text (docs/research/field.md D.4)."""

    logits_eos_inf: bool = False  # LLaDA: end-of-text can never be proposed
    confidence_eos_eot_inf: bool = False  # LLaDA: end-of-text/turn proposals are committed last
    eos_penalty: float = 0.0  # Dream-Coder: subtracted from the end-of-text logit

    def late_ids(self, model: Dlm) -> tuple[int, ...]:
        ids = (model.eos_id, model.eot_id) if self.confidence_eos_eot_inf else ()
        return tuple(i for i in ids if i is not None)

    def processors(self, model: Dlm) -> tuple[Processor, ...]:
        if model.eos_id is None:
            return ()
        if self.logits_eos_inf:
            return (Ban((model.eos_id,), "end-of-text"),)
        return (Penalty(model.eos_id, self.eos_penalty, "end-of-text"),) if self.eos_penalty else ()


def exact_length(model: Dlm) -> tuple[Processor, ...]:
    """Holes of a fixed length hold code, so the pad token is never proposed.

    Only --length auto over-allocates and leaves room for pads (which splicing strips). A model that
    can expand a hole never does it in a hole of given length either.
    """
    pad = () if model.pad_id is None else (Ban((model.pad_id,), "pad"),)
    return pad + ((Ban((model.expand_id,), "expand"),) if model.expand_id is not None else ())


def growth_bans(dlm: Dlm) -> tuple[Processor, ...]:
    """A growing job's fixed bans: the pad, unless it is the model's delete (expanding.Limits places that one)."""
    return () if dlm.pad_id is None or dlm.pad_id == dlm.delete_id else (Ban((dlm.pad_id,), "pad"),)


@dataclass
class Remember:
    """Changes nothing; keeps the last logits it saw (the server's early end and time limit read them
    at every hole: `holes` asks the call for those rows)."""

    name: str = "remember"
    mask_id: int | None = None  # the holes' token; None: every call computes every row for it
    logits: Tensor | None = field(default=None, repr=False)  # (R, V) of positions `rows`; (L, V) when None
    rows: Tensor | None = field(default=None, repr=False)
    length: int | None = None  # the length of the canvas they were computed for

    def __call__(self, logits: Tensor) -> Tensor:
        self.logits = logits
        return logits

    def reads(self, tokens: Tensor) -> Tensor | None:
        """The positions it reads: every hole (None: every position)."""
        return None if self.mask_id is None else (tokens == self.mask_id).nonzero().squeeze(-1)

    def at(self, positions: Tensor) -> Tensor:
        """(k, V) the last logits of canvas `positions` (each among the rows that call computed)."""
        assert self.logits is not None
        if self.rows is None:
            return self.logits[positions.to(self.logits.device)]
        index = torch.searchsorted(self.rows, positions.to(self.rows.device))  # rows are sorted
        return self.logits[index.to(self.logits.device)]


def processed(predict: Predict, processors: Iterable[Processor]) -> Predict:
    """`predict` followed by each processor in order; `predict` itself when there are none.

    It takes rows (core/canvas.Predict); a processor that reads more rows (`reads`) widens the
    call to them, and the caller still gets its own rows back."""
    chain = tuple(processors)
    if not chain:
        return predict
    readers = [p for p in chain if hasattr(p, "reads")]

    def run(tokens: Tensor, rows: Tensor | None = None) -> Tensor:
        need = widened(tokens, rows, readers)
        logits = logits_at(predict, tokens, need)  # (R, V)
        for processor in chain:
            logits = (processor.select(need) if need is not None and hasattr(processor, "select") else processor)(
                logits
            )
        for reader in readers:
            reader.rows, reader.length = need, len(tokens)
        if need is rows:
            return logits
        where = torch.arange(len(tokens), device=tokens.device) if need is None else need
        return logits[torch.searchsorted(where, rows.to(where.device)).to(logits.device)]  # (R, V) the caller's rows

    return rowwise(run)


def widened(tokens: Tensor, rows: Tensor | None, readers: list) -> Tensor | None:
    """The sorted union of `rows` and what each reader reads (None: every row)."""
    if rows is None or not readers:
        return rows
    parts = [rows.to(tokens.device)]
    for reader in readers:
        extra = reader.reads(tokens)
        if extra is None:
            return None
        parts.append(extra)
    return torch.unique(torch.cat(parts))  # sorted


def names(processors: Iterable[Processor]) -> tuple[str, ...]:
    """The policies' names, for results and summaries (an observer like Remember is not a policy)."""
    return tuple(p.name for p in processors if not isinstance(p, Remember))
