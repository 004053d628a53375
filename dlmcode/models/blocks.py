"""Block diffusion behind `predict`: the family's blocks, its exact KV cache of finished blocks, its noise.

A block-diffusion model (SDAR, LLaDA2, DiffusionGemma) decodes a canvas block by block:
attention is causal between blocks and bidirectional inside one, so a finished block never
changes what came before it, and the keys and values of everything before the active block
can be kept exactly (not approximately, as models/cache.py keeps them for full-attention
models). A family says how it does that with a `Blocks`: its block size, where its blocks
start on a canvas, whether its holes are mask tokens or noise, and `open()`, a fresh `Session`
(the model with an empty cache) for one decode.

`BlockPredict` is the `predict` a decoder gets for one decode (the job makes it, jobs/job.py):
the active block is the one holding the first hole; everything before it goes into the
session's cache (only what is not there yet; a changed token earlier drops the cache from
there on, so the logits stay exact whatever a decoder does); only the block's positions run.
Rows outside the active block are zeros: the model has not seen those positions yet (later
blocks) or no longer scores them (finished ones). A last block that the canvas's end cuts
short is shown whole, its missing positions as holes, as the families' own generate pads it.
On a noise canvas the block's holes are shown as uniform draws from the vocabulary, drawn at
every call from the decode's generator (core/canvas.py says what that offers a decoder).

Every forward is counted (queries run, keys attended) so that `flops` can say what a decode
cost against recomputing the whole canvas at every call (bench/speed/ shows both).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor


class Session(Protocol):
    """One decode's model with its exact cache: `length` tokens are in it."""

    length: int
    forwards: list[tuple[int, int]]  # (queries run, keys attended) of every forward so far

    def extend(self, ids: Tensor) -> None: ...  # (n,) finished tokens at positions length.. join the cache

    def truncate(self, n: int) -> None: ...  # keep the cache of the first n tokens only

    def run(self, ids: Tensor) -> Tensor: ...  # (n,) a block at positions length.. -> (n, V) logits; cache unchanged


class PendingSession:
    """The exact cache's bookkeeping that SDAR's and LLaDA2's sessions share (a Session without its model).

    Finished tokens wait (`pending`) and run with the next block, in one forward under the
    block-causal mask; that block's own keys are then dropped again, so the cache holds only
    finished tokens. A family whose own generate stores them by a forward of their own (`apart`:
    SDAR's prefill and store_kv forwards) runs them so, for its logits to be that generate's bit
    for bit: a float32 attention row rounds by how many keys it sees, masked ones included. A
    family writes `forward` (the model on those tokens) and `crop` (its cache cut to the first n
    tokens)."""

    apart = False  # finished tokens in a forward of their own, before the block's

    def __init__(self, device: torch.device, size: int) -> None:
        self.device, self.size = device, size
        self.stored = 0  # tokens whose keys and values are in the cache
        self.pending = torch.empty(0, dtype=torch.long)
        self.forwards: list[tuple[int, int]] = []

    @property
    def length(self) -> int:
        return self.stored + len(self.pending)

    def extend(self, ids: Tensor) -> None:
        self.pending = torch.cat([self.pending, ids.cpu()])

    def truncate(self, n: int) -> None:
        if n >= self.stored:
            self.pending = self.pending[: n - self.stored]
            return
        self.crop(n)
        self.stored, self.pending = n, self.pending[:0]

    def run(self, ids: Tensor) -> Tensor:
        """(n,) the active block after everything cached -> (n, V) logits; the block leaves no keys behind."""
        if self.apart and len(self.pending):
            self.store()
        x = torch.cat([self.pending, ids.cpu()]).to(self.device)  # (m,)
        pos = torch.arange(self.stored, self.stored + len(x), device=self.device)  # (m,)
        logits = self.forward(x, pos, self.seen(pos))  # (m, V)
        self.forwards.append((len(x), self.stored + len(x)))
        kept = self.stored + len(self.pending)
        self.crop(kept)
        self.stored, self.pending = kept, self.pending[:0]
        return logits[-len(ids) :].float()  # (n, V)

    def seen(self, pos: Tensor) -> Tensor:
        """(m, K) block-causal: which keys, the cached ones and the queries' own, each query at `pos` sees."""
        keys = torch.arange(0, self.stored + len(pos), device=self.device)  # (K,)
        return keys[None, :] // self.size <= pos[:, None] // self.size

    def store(self) -> Tensor:
        """The finished tokens waiting, in a forward of their own: their keys and values join the cache; their
        (m, V) logits."""
        x = self.pending.to(self.device)  # (m,)
        pos = torch.arange(self.stored, self.stored + len(x), device=self.device)
        logits = self.forward(x, pos, self.seen(pos))
        self.forwards.append((len(x), self.stored + len(x)))
        self.stored, self.pending = self.stored + len(x), self.pending[:0]
        return logits

    pads = False  # the family runs several sessions' blocks in one forward (`forward_padded`)

    @classmethod
    def run_many(cls, sessions: list[PendingSession], ids: list[Tensor]) -> list[Tensor]:
        """Several decodes' active blocks (each (n,), one length) in one forward, each against its own cache:
        the caches padded to the longest, the padding never attended; each -> (n, V) logits, no keys left behind.

        One decode runs as `run` runs it (the same logits bit for bit); several round as padded rows do
        (the keys a row's attention sums over, masked ones included, change its last bits)."""
        with torch.inference_mode():  # in the batch's scheduler thread, not the decodes' own
            if len(sessions) == 1 or not cls.pads or len({len(i) for i in ids}) > 1:
                return [s.run(i) for s, i in zip(sessions, ids, strict=True)]
            return cls.padded_run(sessions, ids)

    @classmethod
    def padded_run(cls, sessions: list[PendingSession], ids: list[Tensor]) -> list[Tensor]:
        """run_many's one forward over several sessions (see there)."""
        for s in sessions:
            if len(s.pending):
                s.store()  # finished tokens on their own first, as `apart` families always do
        device, n = sessions[0].device, len(ids[0])
        longest = max(s.stored for s in sessions)
        pos = torch.stack([torch.arange(s.stored, s.stored + n) for s in sessions]).to(device)  # (B, n)
        seen = torch.zeros(len(sessions), longest + n, dtype=torch.bool, device=device)  # (B, K)
        for row, s in enumerate(sessions):
            seen[row, : s.stored] = True
        seen[:, longest:] = True  # a block sees all of itself
        past = padded([s.kv() for s in sessions], [s.stored for s in sessions], longest)
        logits = cls.forward_padded(sessions[0], torch.stack(ids).to(device), pos, seen, past)  # (B, n, V)
        for s in sessions:
            s.forwards.append((n, s.stored + n))
        return [row.float() for row in logits]

    def kv(self) -> list[tuple[Tensor | None, Tensor | None]]:
        """Each layer's cached keys and values, (1, H, stored, hd) each (None before the first forward)."""
        raise NotImplementedError

    def forward_padded(self, x: Tensor, pos: Tensor, seen: Tensor, past: list[tuple[Tensor, Tensor] | None]) -> Tensor:
        """(B, n) blocks at positions `pos` (B, n) after `past` (per layer (B, H, K', hd) keys and values, or None
        when no session has any), each row seeing the keys `seen` (B, K' + n) marks -> (B, n, V) logits; nothing
        of this model's own cache changes."""
        raise NotImplementedError

    def forward(self, x: Tensor, pos: Tensor, seen: Tensor) -> Tensor:
        """(m,) tokens at positions `pos`, after the cache, each query seeing the keys `seen` marks -> (m, V)
        logits; their keys and values join the cache."""
        raise NotImplementedError

    def crop(self, n: int) -> None:
        """Keep the cache of the first n tokens only."""
        raise NotImplementedError


def padded(
    caches: list[list[tuple[Tensor | None, Tensor | None]]], stored: list[int], longest: int
) -> list[tuple[Tensor, Tensor] | None]:
    """Several sessions' caches (per session, per layer (1, H, K_i, hd) keys and values) stacked per layer into
    (B, H, longest, hd), zeros after each K_i; None for a layer no session has cached yet."""
    out: list[tuple[Tensor, Tensor] | None] = []
    for layer in zip(*caches, strict=True):
        some = [kv for kv, k in zip(layer, stored, strict=True) if k]
        if not some:
            out.append(None)
            continue
        keys, values = some[0]
        stacks = tuple(t.new_zeros((len(layer), t.shape[1], longest, t.shape[3])) for t in (keys, values))
        for row, (kv, k) in enumerate(zip(layer, stored, strict=True)):
            for stack, t in zip(stacks, kv, strict=True):
                if k:
                    stack[row, :, :k] = t[0, :, :k]
        out.append(stacks)
    return out


class Ended(Exception):
    """Raised by a block family's predict instead of running a block after the end of text (jobs/job.py ends the
    decode there)."""


@dataclass(frozen=True)
class Cost:
    """A forward's multiply-adds as a function of its queries and keys (2 FLOPs each), from the config."""

    per_token: int  # weights a token passes through: attention projections, MLP or routed experts, head
    per_key: int  # per query and key: q.k and the weighted sum of v over every layer's heads

    def flops(self, queries: int, keys: int) -> int:
        return 2 * queries * (self.per_token + self.per_key * keys)


@dataclass(frozen=True)
class Blocks:
    """How a family decodes block by block (the Dlm's `blocks`)."""

    size: int  # positions per block (SDAR 4, LLaDA2 32, DiffusionGemma its canvas_length)
    aligned: bool  # blocks at multiples of `size` from position 0 (SDAR, LLaDA2); False: from the first hole (Gemma)
    noise: int  # 0: holes are shown as the mask token; > 0: as uniform draws from range(noise)
    open: Callable[[], Session]  # a fresh session (empty cache) for one decode
    cost: Cost | None = None  # FLOPs of a forward; None: not counted

    def starts(self, tokens: Tensor, mask_id: int) -> tuple[int, ...]:
        """Where the blocks of a canvas start: from the block holding the first hole to the end."""
        holes = (tokens == mask_id).nonzero()
        if holes.numel() == 0:
            return ()
        first = int(holes[0])
        begin = first - first % self.size if self.aligned else first
        return tuple(range(begin, len(tokens), self.size))


@dataclass
class BlockPredict:
    """A decode's predict over a block family (see the module docstring), made from the decode's first canvas;
    `rng` draws a noise canvas's holes.

    A canvas with code after its last hole (an infill) cannot show that code to the holes in
    place: attention is causal between blocks, and it would come after them. It goes first
    instead (`preamble`), into the cache before anything else: the family fills a span through
    its prompt, the code after the span read before the code before it (`Dlm.infill`).
    """

    blocks: Blocks
    tokens: Tensor  # (L,) the decode's first canvas
    mask_id: int
    rng: torch.Generator | None = None
    recompute: bool = False  # no cache kept between calls: everything before the block runs again (speed's baseline)
    end_id: int | None = None  # generate's end of text: a decode ends after the block that holds it (Ended)
    starts: tuple[int, ...] = field(init=False)  # where its blocks start (Canvas.blocks)
    stop: int = field(init=False)  # one past the last hole: the blocks end there
    preamble: Tensor = field(init=False)  # the tokens after the last hole, cached first
    session: Session = field(init=False)
    cached: Tensor = field(init=False)  # the tokens in the session's cache
    carried: Any = field(init=False, default=None)  # recompute: what the model kept of the block's calls

    def __post_init__(self) -> None:
        tokens = self.tokens.cpu()
        holes = (tokens == self.mask_id).nonzero()
        self.stop = int(holes[-1]) + 1 if holes.numel() else len(tokens)
        self.starts = self.blocks.starts(tokens[: self.stop], self.mask_id)
        self.preamble = tokens[self.stop :].clone()
        self.session = self.blocks.open()
        self.cached = torch.empty(0, dtype=torch.long)

    takes_rows = True  # core/canvas.Predict: `rows` asks for some positions' logits only

    def __call__(self, tokens: Tensor, rows: Tensor | None = None) -> Tensor:
        """(L,) canvas -> (L, V) logits, or (R, V) of positions `rows`: the active block's, zeros elsewhere."""
        tokens = tokens.cpu()
        a, b = self.active(tokens)
        self.check_end(tokens, a)
        if self.recompute:
            self.forget()
        self.settle(torch.cat([self.preamble, tokens[:a]]))
        short = max(self.blocks.size - (b - a), 0)  # a last block cut short by the canvas's end
        block = torch.cat([tokens[a:b], torch.full((short,), self.mask_id)])  # shown whole, as the model was trained
        with torch.inference_mode():
            scored = self.session.run(self.shown(block))[: b - a].float().cpu()  # (b - a, V)
        wanted = torch.arange(len(tokens)) if rows is None else rows.cpu()  # (R,)
        inside = (wanted >= a) & (wanted < b)
        out = torch.zeros((len(wanted), scored.shape[-1]), dtype=torch.float32)  # (R, V)
        out[inside] = scored[wanted[inside] - a]
        return out

    def active(self, tokens: Tensor) -> tuple[int, int]:
        """[start, stop) of the block holding the first hole (the last block when none is left)."""
        holes = (tokens[: self.stop] == self.mask_id).nonzero()
        first = int(holes[0]) if holes.numel() else self.stop - 1
        a = max([s for s in self.starts if s <= first], default=0)
        return a, min([s for s in self.starts if s > a], default=self.stop)

    def check_end(self, tokens: Tensor, a: int) -> None:
        """Ended when a block before the active one holds the end of text in what the decode wrote: the
        families' own generate stops there, and everything after it would be cut off anyway."""
        if self.end_id is None or a == 0:
            return
        wrote = self.tokens.cpu()[:a] == self.mask_id  # (a,) the positions this decode filled
        if bool((wrote & (tokens[:a] == self.end_id)).any()):
            raise Ended

    def forget(self) -> None:
        """A fresh session (its forwards still counted here), carrying what the model keeps of the block's calls
        (DiffusionGemma's self-conditioning) when the block is the same: only the cache is dropped."""
        old = self.session
        carried = old.carry() if hasattr(old, "carry") else None
        self.session, self.cached = self.blocks.open(), self.cached[:0]
        self.session.forwards = old.forwards
        self.carried = carried

    def settle(self, before: Tensor) -> None:
        """Make the cache hold exactly `before`: drop it from the first token that differs, add what is missing."""
        n = min(len(self.cached), len(before))
        same = int((self.cached[:n] == before[:n]).long().cumprod(0).sum()) if n else 0
        if same < len(self.cached):
            self.session.truncate(same)
            self.cached = self.cached[:same]
        if len(before) > same:
            with torch.inference_mode():
                self.session.extend(before[same:])
            self.cached = before.clone()
        carried, self.carried = self.carried, None
        if carried is not None and hasattr(self.session, "restore"):
            self.session.restore(carried)

    def shown(self, block: Tensor) -> Tensor:
        """The block as the model sees it: on a noise canvas, every hole a fresh uniform draw (one per position)."""
        if not self.blocks.noise or not bool((block == self.mask_id).any()):
            return block
        assert self.rng is not None, "a noise canvas draws its holes from the decode's generator"
        draw = torch.randint(0, self.blocks.noise, (len(block),), generator=self.rng)  # (n,) the whole block, as drawn
        return torch.where(block == self.mask_id, draw, block)

    @property
    def flops(self) -> int:
        """FLOPs of every forward so far (0 when the family does not count them)."""
        cost = self.blocks.cost
        return sum(cost.flops(q, k) for q, k in self.session.forwards) if cost else 0


def full_canvas_flops(cost: Cost, length: int, calls: int) -> int:
    """FLOPs of `calls` forwards that each recompute the whole canvas of `length` positions (no cache)."""
    return calls * cost.flops(length, length)


def predict_once(blocks: Blocks, mask_id: int, seed: int = 0) -> Callable[[Tensor], Tensor]:
    """A stateless predict (the Dlm's `predict`): each call a fresh session from the canvas it is given.

    For what reads one call's logits outside a decode (the length rule's probe): the block
    holding the first hole is scored after everything before it (noise drawn from `seed`).
    """

    def predict(tokens: Tensor, rows: Tensor | None = None) -> Tensor:
        return BlockPredict(blocks, tokens, mask_id, torch.Generator().manual_seed(seed))(tokens, rows)

    predict.takes_rows = True  # type: ignore[attr-defined]
    return predict
