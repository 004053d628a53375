"""The shared vocabulary: Canvas (tokens with holes), Step (one decoder iteration), Predict.

A decoder takes a Canvas, a Predict function and a seeded torch.Generator, and yields one
Step per iteration. Nothing here knows about models, files or terminals.

Two kinds of canvas reach a decoder, with one contract. On a masked canvas the model sees a
hole as the mask token. On a noise canvas (a family whose model was trained on uniform noise,
DiffusionGemma) the model sees each hole as a fresh uniform draw from the vocabulary at every
call, drawn from the decode's own generator behind `predict` (models/blocks.py): to a decoder
a hole is still a hole (`holes`, `fill`, `reopen`), a reopened position is renoised at the next
call, and the generator it is handed is the one the noise comes from, so a seed fixes both.
A block family's canvas also says where its blocks start (`blocks`): a decoder's
semi-autoregressive blocks are then the family's blocks (decoders/base.blocks), since the model
only ever sees one block past the finished ones.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

Predict = Callable[..., Tensor]
"""(L,) token ids -> (L, V) logits, aligned to positions (row i scores position i).

A predict that `takes_rows` (models' own, the job's wrappers) also takes `rows`, an (R,) long
tensor of positions, and returns (R, V): row j scores position rows[j], and only those rows
go through the output head and the float conversion. `rows` None is every position. Read
logits through `logits_at`, which cuts the rows out of a predict that does not take them.
"""


def rowwise(predict: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Marks `predict(tokens, rows=None)` as one that computes only the rows asked for."""
    predict.takes_rows = True  # type: ignore[attr-defined]
    return predict


def takes_rows(predict: Callable[..., Tensor]) -> bool:
    return bool(getattr(predict, "takes_rows", False))


def logits_at(predict: Callable[..., Tensor], tokens: Tensor, rows: Tensor | None) -> Tensor:
    """(R, V) logits of positions `rows` ((L, V) for None): computed for those rows only where
    `predict` takes rows, else cut from its (L, V)."""
    if rows is None:
        return predict(tokens)
    if takes_rows(predict):
        return predict(tokens, rows)
    logits = predict(tokens)  # (L, V)
    return logits[rows.to(logits.device)]


class At:
    """Logits of some canvas positions, indexed by position as an (L, V) tensor would be."""

    def __init__(self, logits: Tensor, rows: Tensor, length: int) -> None:
        self.logits = logits  # (R, V)
        self.rows, self.length = rows, length

    @functools.cached_property
    def index(self) -> Tensor:
        """(L,) the row of each position, -1 where none: made at the first read by position (codila reads its rows
        as they are)."""
        index = torch.full((self.length,), -1, dtype=torch.long, device=self.rows.device)
        index[self.rows] = torch.arange(len(self.rows), device=self.rows.device)
        return index

    def __getitem__(self, pos: Tensor) -> Tensor:
        return self.logits[self.index[pos].to(self.logits.device)]

    @property
    def device(self) -> torch.device:
        return self.logits.device


@dataclass(frozen=True)
class Canvas:
    """Token sequence being decoded; `mask_id` marks a hole."""

    tokens: Tensor  # (L,) int64
    mask_id: int
    late_ids: tuple[
        int, ...
    ] = ()  # tokens committed last: their commit confidence is zeroed (LLaDA confidence_eos_eot_inf)
    span: Tensor | None = (
        None  # (L,) bool: the positions a decoder may write (the holes it started from); None = the holes now
    )
    blocks: tuple[int, ...] = ()  # where a block family's blocks start (models/blocks.py); () = the decoder's own

    def __post_init__(self) -> None:
        assert self.tokens.dim() == 1 and self.tokens.dtype == torch.long, (self.tokens.shape, self.tokens.dtype)
        assert self.span is None or self.span.shape == self.tokens.shape, "span must be (L,) like tokens"

    @property
    def writable(self) -> Tensor:
        """(L,) bool: holes and the positions committed since the decode began; never the user's code."""
        return self.holes if self.span is None else self.span

    @property
    def holes(self) -> Tensor:
        return self.tokens == self.mask_id  # (L,) bool

    @property
    def n_holes(self) -> int:
        return int(self.holes.sum())

    def fill(self, pos: Tensor, ids: Tensor) -> Canvas:
        """A new canvas with `ids` committed at `pos`; only holes may be committed.

        The first commit pins `span` to the holes before it, so that a later `reopen` knows
        which positions were holes (decoder output) and which are the user's code.
        """
        assert bool(self.holes[pos].all()), "commit outside a hole"
        assert not bool((ids == self.mask_id).any()), "commit of the mask token"
        tokens = self.tokens.clone()
        tokens[pos] = ids.to(tokens.dtype)
        return Canvas(tokens, self.mask_id, self.late_ids, self.writable.clone(), self.blocks)

    def reopen(self, pos: Tensor) -> Canvas:
        """A new canvas with the committed positions `pos` turned back into holes (remasking).

        Only positions a decoder committed may be reopened: the user's code never is.
        """
        assert bool(self.writable[pos].all()), "reopen outside the span"
        assert not bool(self.holes[pos].any()), "reopen of a hole"
        span = self.writable.clone()
        tokens = self.tokens.clone()
        tokens[pos] = self.mask_id
        return Canvas(tokens, self.mask_id, self.late_ids, span, self.blocks)


@dataclass(frozen=True)
class Step:
    """One decoder iteration: what it committed and the canvas after it."""

    index: int  # 0-based
    canvas: Canvas  # state after this step
    filled: Tensor  # (k,) positions committed in this step (k may be 0)
    scores: Tensor  # (k,) the score each commit was chosen by
    calls: int  # model forward passes so far (NFE)
    info: Mapping[str, float] = field(default_factory=dict)  # decoder-specific counters
    reopened: Tensor = field(
        default_factory=lambda: torch.empty(0, dtype=torch.long)
    )  # (r,) committed positions turned back into holes in this step (before `filled` was committed)


class Decoder(Protocol):
    """Yields one Step per iteration; a step may reopen positions it committed earlier (never
    the user's code), and `max_calls(n_holes)` bounds the calls of every decode, reopening
    included, so that every decode is finite."""

    def __call__(self, canvas: Canvas, predict: Predict, rng: torch.Generator) -> Iterator[Step]: ...

    def max_calls(self, n_holes: int) -> int: ...


def last(steps: Iterator[Step]) -> Step | None:
    """Drain a Step stream and return its final Step (None when there was nothing to do)."""
    final = deque(steps, maxlen=1)  # consumes the stream, keeping only its last Step
    return final[0] if final else None
