"""The syntax oracle: which span positions of a drafted canvas lie in syntax errors the user's code did not have.

Owns turning a canvas (token ids) into the text the job will splice, with each token's exact
byte range in it; parsing that text with tree-sitter, incrementally from the previous draft
(`syntax.Reparser`: `tree.edit` then `parser.parse(new, old_tree)`), plus the language's extra checkers (Python's
compile()); and deciding which problems are the draft's (new) and which the user's code
already had (old), by the rule of `syntax.breakage`: problems are paired per checker by line
with the problems of the user's code, lines above the holes as they are and lines below them
moved by the fill's line shift; when a checker finds no more problems than the user's code
has, none of its problems is new.

The job builds an oracle from its plan (`with_oracle`) and hands it to a decoder that takes one
(syntax-guard), the way codila is handed its assistant: decoders import no parser.
Only `syntax`'s public API is used (the language table, `CHECKS`, `Problem`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..core.contracts import TakesOracle
from ..core.errors import UsageError
from . import spans, syntax

TREE_SITTER_KINDS = tuple(
    k for k, pool in syntax.POOL_OF_KIND.items() if pool == syntax.TREE_SITTER
)  # one parse's problems; other kinds are extra checkers'
EDITED = "edited"  # pairing key of every line inside the edited run of lines
# Re-parse from the previous tree (tree.edit + parse(new, old)) from this size up; below it a fresh
# parse is faster. Measured, median of 60 drafts with 1-6 changed tokens, on 2 busy cores:
# 586 B 0.35 ms incremental vs 0.32 fresh; 1546 B 0.44 vs 0.51; 5405 B 0.45 vs 0.80 (docs/decoders.md).
INCREMENTAL_FROM = 1024  # bytes


@dataclass(frozen=True)
class Verdict:
    """What the oracle says about one drafted canvas."""

    flagged: Tensor  # (L,) bool: span positions whose text meets a new problem (or is blamed for one)
    regions: tuple[Tensor, ...]  # per new problem, the span positions it covers (each (k,) long, k >= 1)
    broken: bool  # the draft has new problems (the splice of this canvas would count as broken)


@dataclass
class Layout:
    """The text of one canvas: its bytes, and each span position's [start, end) byte range in them."""

    data: bytes
    starts: Tensor  # (L,) long: byte offset of each position's text (context positions: -1)
    ends: Tensor  # (L,) long


class SyntaxOracle:
    """Maps a canvas to its spliced text, parses it incrementally, and names the span positions in new errors."""

    def __init__(
        self,
        plan: spans.Plan,
        tokenizer: Any,
        lang: str,
        before: str,
        drop_ids: frozenset[int] = frozenset(),
        trim_at: int | None = None,
        incremental: int = INCREMENTAL_FROM,
    ) -> None:
        self.plan, self.tokenizer, self.lang = plan, tokenizer, syntax.language_for(lang=lang)
        self.drop_ids, self.trim_at = drop_ids, trim_at
        self.parser = syntax.parser(self.lang)
        self.checks = [syntax.CHECKS[name] for name in syntax.LANGUAGES[self.lang].checks]
        self.base = pools(self.find(base_text(before).encode("utf-8", syntax.ENCODE_ERRORS), self.parser.parse))
        self.base_lines = base_text(before).split("\n")
        self.pieces: dict[int, bytes] = {}  # id -> its bytes when decoded alone (checked per hole)
        self.context = [plan.text[a:b].encode("utf-8", syntax.ENCODE_ERRORS) for a, b in gaps(plan)]
        self.span = plan.canvas.holes.clone()  # (L,) the positions a decoder may write
        self.reparser = syntax.Reparser(self.lang, incremental)  # each draft parsed from the last one's tree

    # ------------------------------------------------------------ text

    def layout(self, tokens: Tensor) -> Layout:
        """The spliced text of `tokens` as bytes and each span position's byte range (exact: spans.splice)."""
        ids = tokens.tolist()
        starts = [-1] * len(ids)
        ends = [-1] * len(ids)
        out = bytearray(self.context[0])
        for hole, positions in enumerate(self.plan.positions):
            fill, cuts = self.fill(ids[positions.start : positions.stop])
            for offset, (a, b) in enumerate(cuts):
                starts[positions.start + offset], ends[positions.start + offset] = len(out) + a, len(out) + b
            out += fill
            out += self.context[hole + 1]
        return Layout(bytes(out), torch.tensor(starts), torch.tensor(ends))

    def fill(self, run: list[int]) -> tuple[bytes, list[tuple[int, int]]]:
        """One hole's bytes as splice decodes them (cut at trim_at, drop_ids removed), and each token's range."""
        cut = run.index(self.trim_at) if self.trim_at is not None and self.trim_at in run else len(run)
        kept = [i for i in range(cut) if run[i] not in self.drop_ids]
        text = self.tokenizer.decode([run[i] for i in kept]).encode("utf-8", syntax.ENCODE_ERRORS) if kept else b""
        sizes = [len(self.piece(run[i])) for i in kept]
        if sum(sizes) != len(text) or b"".join(self.piece(run[i]) for i in kept) != text:
            sizes = prefix_sizes(
                self.tokenizer, [run[i] for i in kept], text
            )  # pieces do not concatenate (split characters)
        size = dict(zip(kept, sizes, strict=True))
        cuts, at = [], 0
        for i in range(len(run)):
            cuts.append((at, at + size.get(i, 0)))
            at += size.get(i, 0)
        return text, cuts

    def piece(self, token: int) -> bytes:
        found = self.pieces.get(token)
        if found is None:
            found = self.pieces[token] = self.tokenizer.decode([token]).encode("utf-8", syntax.ENCODE_ERRORS)
        return found

    # ------------------------------------------------------------ parsing

    def parse(self, layout: Layout) -> Any:
        """The tree of `layout.data`, re-parsed from the previous draft's tree from `incremental` bytes up."""
        return self.reparser.parse(layout.data)

    def problems(self, tokens: Tensor) -> tuple[Layout, list[syntax.Problem]]:
        """The draft's layout and every problem of its text (tree-sitter's, then the extra checkers')."""
        layout = self.layout(tokens)
        return layout, self.find(layout.data, lambda data: self.parse(layout))

    def find(self, data: bytes, parse: Any) -> list[syntax.Problem]:
        """Every problem of `data`: tree-sitter's (from `parse(data)`), then the extra checkers'.

        The user's code goes through this too (not syntax.check), so that old and new
        problems are found alike.
        """
        found = [problem(kind, node, data) for kind, node in syntax.issues(parse(data))]
        if self.checks:
            text = data.decode("utf-8", syntax.ENCODE_ERRORS)
            for check in self.checks:
                found.extend(check(text, data))
        return found

    # ------------------------------------------------------------ the verdict

    def __call__(self, tokens: Tensor) -> Verdict:
        """Which span positions of the fully drafted `tokens` (no holes) lie in new problems."""
        layout, found = self.problems(tokens.cpu())
        new = self.new_problems(layout.data, found)
        flagged = torch.zeros(len(tokens), dtype=torch.bool)
        regions = []
        for p in new:
            region = self.blame(layout, p)
            if region.numel():
                flagged[region] = True
                regions.append(region)
        return Verdict(flagged.to(tokens.device), tuple(r.to(tokens.device) for r in regions), bool(new))

    def new_problems(self, data: bytes, found: list[syntax.Problem]) -> list[syntax.Problem]:
        """The problems of the draft that the user's code did not have (module docstring)."""
        edit = LineEdit.between(self.base_lines, data.decode("utf-8", syntax.ENCODE_ERRORS).split("\n"))
        new = []
        for pool, problems in pools(found).items():
            old = self.base.get(pool, [])
            if pool == "tree-sitter":
                if len(problems) > len(old):
                    new += unpaired(old, problems, edit)
            elif (
                not old or edit.to_after(old[0].line) > problems[0].line
            ):  # first-error checkers: above the old one is new
                new.append(problems[0])
        return new

    def blame(self, layout: Layout, p: syntax.Problem) -> Tensor:
        """The span positions a problem covers; one that covers none blames the span token
        just before it (else after)."""
        start, end = p.start_byte, p.end_byte
        if p.kind not in TREE_SITTER_KINDS:  # a compiler error is a point: take its whole line
            start = layout.data.rfind(b"\n", 0, start) + 1
            stop = layout.data.find(b"\n", end)
            end = len(layout.data) if stop < 0 else stop
        inside = self.span & (layout.ends > layout.starts)  # (L,) span positions with text
        meets = inside & (layout.starts < max(end, start + 1)) & (layout.ends > start)  # (L,)
        if bool(meets.any()):
            return meets.nonzero().squeeze(-1)
        before = (inside & (layout.ends <= start)).nonzero().squeeze(-1)
        if before.numel():
            return before[-1:]
        after = inside.nonzero().squeeze(-1)
        return after[:1]


# ---------------------------------------------------------------- building one for a job


def with_oracle(
    decoder: Any,
    plan: spans.Plan,
    tokenizer: Any,
    lang: str | None,
    before: str,
    drop_ids: frozenset[int] = frozenset(),
    trim_at: int | None = None,
    name: str = "",
) -> Any:
    """Give a decoder that takes a syntax oracle (syntax-guard) one for this plan; others pass through.

    An unknown language is a UsageError: a syntax-guided decode without a syntax to guide it
    would silently be a plain parallel decode.
    """
    if not wants(decoder):
        return decoder
    if lang is None:
        raise UsageError(
            f"decoder {name or type(decoder).__name__!r} needs the code's language: name it with --lang ({supported()})"
        )
    return dataclasses.replace(decoder, oracle=SyntaxOracle(plan, tokenizer, lang, before, drop_ids, trim_at))


def wants(decoder: object) -> bool:
    """Whether a decoder takes a syntax oracle (core/contracts.TakesOracle; set with dataclasses.replace)."""
    return isinstance(decoder, TakesOracle) and dataclasses.is_dataclass(decoder)


def supported() -> str:
    return "supported: " + ", ".join(syntax.LANGUAGES)


def base_text(before: str) -> str:
    """The user's code: `before` with any ⟦fill⟧ markers removed (a marker is a hole, not code)."""
    found = spans.find_markers(before)
    if not found:
        return before
    parts, cursor = [], 0
    for start, end, _ in found:
        parts.append(before[cursor:start])
        cursor = end
    return "".join(parts) + before[cursor:]


def gaps(plan: spans.Plan) -> list[tuple[int, int]]:
    """[start, end) chars of the text before, between and after the holes."""
    edges = [0] + [x for h in plan.holes for x in (h.start_char, h.end_char)] + [len(plan.text)]
    return list(zip(edges[::2], edges[1::2], strict=True))


def prefix_sizes(tokenizer: Any, ids: list[int], text: bytes) -> list[int]:
    """Byte sizes of tokens whose pieces do not concatenate: each token ends where the decode of the ids up to it does.

    A character split over tokens belongs to the token that completes it.
    """
    sizes, at = [], 0
    for n in range(1, len(ids) + 1):
        end = len(tokenizer.decode(ids[:n]).encode("utf-8", syntax.ENCODE_ERRORS).rstrip("\ufffd".encode()))
        end = min(max(end, at), len(text)) if n < len(ids) else len(text)
        sizes.append(end - at)
        at = end
    return sizes


def problem(kind: str, node: Any, data: bytes) -> syntax.Problem:
    """A tree-sitter node as a Problem (only the fields the oracle reads carry meaning: kind, line, bytes)."""
    start, end = node.start_point, node.end_point
    return syntax.Problem(start.row + 1, start.column, kind, kind, node.start_byte, node.end_byte, end.row + 1)


def pools(problems: Sequence[syntax.Problem]) -> dict[str, list[syntax.Problem]]:
    """Problems by checker: tree-sitter's ERROR and MISSING together, each other kind alone."""
    out: dict[str, list[syntax.Problem]] = {}
    for p in problems:
        out.setdefault("tree-sitter" if p.kind in TREE_SITTER_KINDS else p.kind, []).append(p)
    return out


@dataclass(frozen=True)
class LineEdit:
    """The one changed run of lines between the user's code and a draft (common leading and trailing lines)."""

    prefix: int
    before_below: int  # first line of the equal tail in the user's code (1-based)
    after_below: int  # the same line in the draft

    @classmethod
    def between(cls, old: list[str], new: list[str]) -> LineEdit:
        prefix = common(old, new)
        room = min(len(old), len(new)) - prefix
        suffix = common(old[::-1][:room], new[::-1][:room])
        return cls(prefix, len(old) - suffix + 1, len(new) - suffix + 1)

    def to_after(self, line: int) -> int:
        if line <= self.prefix:
            return line
        if line >= self.before_below:
            return line + self.after_below - self.before_below
        return self.prefix + 1

    def before_key(self, line: int) -> int | str:
        return EDITED if self.prefix < line < self.before_below else self.to_after(line)

    def after_key(self, line: int) -> int | str:
        return EDITED if self.prefix < line < self.after_below else line


def common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def unpaired(old: list[syntax.Problem], new: list[syntax.Problem], edit: LineEdit) -> list[syntax.Problem]:
    """The draft's problems left after pairing each with one of the user's code on the same line key."""
    unused = Counter(edit.before_key(p.line) for p in old)
    left = []
    for p in new:
        key = edit.after_key(p.line)
        if unused[key] > 0:
            unused[key] -= 1
        else:
            left.append(p)
    return left
