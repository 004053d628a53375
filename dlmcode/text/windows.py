"""A window of a long file: which whole lines, nearest the holes, fit the model's context.

When the canvas would be longer than the model's context, whole lines are dropped from the far
ends of the text before the first hole and after the last, about as many tokens on each side
(spans.py keeps the holes, the text between them and what was cut)."""

from __future__ import annotations

import re

from ..core.vocab import Tokenizer

# The most characters one token stands for, in any tokenizer dlmcode loads (the longest are runs of
# spaces and repeated punctuation, well under 100); text longer than budget x this cannot fit a window
# of `budget` tokens, so it is never tokenised. A generous bound, ours.
MAX_TOKEN_CHARS = 1024
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")  # one line with its break; a last one without


def fit_window(head: str, tail: str, budget: int, tokenizer: Tokenizer) -> tuple[int, int]:
    """(chars cut from the start of head, chars kept from the start of tail) within budget tokens.

    Whole lines go from the far ends, each side first getting half the budget and then what
    the other side leaves. Per-line counts guide the choice; the joined text is re-tokenised
    to check it, because counts of separately tokenised lines do not add up exactly. Lines
    too far to fit even at MAX_TOKEN_CHARS a token are never tokenised: an 8 MiB file costs
    the window's tokens, not the file's (2.4 GB and 47 s to tokenise `x = 1 + 1 + ...`). Where the
    tokenizer's lines add up (`_lines_add_up`: the built-in one), the lines' counts are exact and the
    text is never tokenized whole.
    """
    most = budget * MAX_TOKEN_CHARS
    before, after = _nearest(_split_lines(head)[::-1], most), _nearest(_split_lines(tail), most)  # nearest first
    near_head, near_tail = "".join(before[::-1]), "".join(after)
    exact = _lines_add_up(tokenizer, near_head, near_tail)  # its lines' counts are the text's: no whole-text encode
    if not exact and _within(sorted((near_head, near_tail), key=len), budget, tokenizer):
        return len(head) - len(near_head), len(near_tail)
    cost_b, cost_a = _costs(before, budget, tokenizer), _costs(after, budget, tokenizer)
    if exact and len(cost_b) == len(before) and len(cost_a) == len(after) and sum(cost_b) + sum(cost_a) <= budget:
        return len(head) - len(near_head), len(near_tail)
    nb = _fits(cost_b, budget // 2)
    na = _fits(cost_a, budget - sum(cost_b[:nb]))
    nb = _fits(cost_b, budget - sum(cost_a[:na]))
    while True:
        kept_b, kept_a = "".join(before[:nb][::-1]), "".join(after[:na])
        used_b, used_a = len(tokenizer.encode(kept_b)), len(tokenizer.encode(kept_a))
        if used_b + used_a <= budget:
            return len(head) - len(kept_b), len(kept_a)
        if nb and (used_b >= used_a or not na):
            nb -= 1
        else:
            na -= 1


def _lines_add_up(tokenizer: Tokenizer, *texts: str) -> bool:
    """Whether `texts`' tokens are their lines' tokens: the tokenizer says no token crosses a newline
    (models/builtin_tokenizer.py), and no line of theirs ends in a lone carriage return."""
    return bool(getattr(tokenizer, "lines_add_up", False)) and all(t.count("\r") == t.count("\r\n") for t in texts)


def _within(texts: list[str], budget: int, tokenizer: Tokenizer) -> bool:
    """Whether `texts` together take at most `budget` tokens: tokenized in turn (the shortest first), and the rest
    left alone once the budget is passed (the file's larger side, when its other side alone is past it)."""
    used = 0
    for text in texts:
        used += len(tokenizer.encode(text))
        if used > budget:
            return False
    return True


def _costs(lines: list[str], budget: int, tokenizer: Tokenizer) -> list[int]:
    """Token counts of the leading `lines` until they add up to more than `budget` (or the lines run out): every
    `_fits` below asks for at most `budget`, and stops at the first line past it, so the lines after that one are
    never read. A 229 KB file's thousands of lines cost the window's few hundred tokens, not an encode each."""
    costs, total = [], 0
    for line in lines:
        costs.append(len(tokenizer.encode(line)))
        total += costs[-1]
        if total > budget:
            break
    return costs


def _nearest(lines: list[str], most: int) -> list[str]:
    """The leading `lines` (nearest the holes first) whose characters add up to at most `most`: text
    with more characters than that has more tokens than the budget, whatever the tokenizer."""
    total = 0
    for n, line in enumerate(lines):
        total += len(line)
        if total > most:
            return lines[:n]
    return lines


def _split_lines(text: str) -> list[str]:
    """Lines with their line break kept; a last line without one is kept too."""
    return _LINE.findall(text)


def _fits(costs: list[int], budget: int) -> int:
    """How many leading costs fit in budget."""
    total = 0
    for n, cost in enumerate(costs):
        total += cost
        if total > budget:
            return n
    return len(costs)
