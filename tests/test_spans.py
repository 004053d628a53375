"""spans: --span parsing, ⟦fill⟧ markers, canvas layout, windows, and the splice round trip."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from dlmcode.core.canvas import Canvas
from dlmcode.core.errors import InputError, UsageError
from dlmcode.core.vocab import Vocab
from dlmcode.text.spans import (
    DEFAULT_MARKER_LENGTH,
    Hole,
    find_markers,
    joined,
    parse_span,
    plan_generate,
    plan_infill,
    splice,
)

PAD, MASK, BOS, EOS = 0, 1, 2, 3  # both tokenizers below put their special ids here


class Chars:
    """One token per character, ids above the four special ids."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) + 4 for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i - 4) for i in ids)


class Bpe:
    """A byte-level BPE (GPT-2 style) trained here on a few hundred lines of Python."""

    def __init__(self) -> None:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=["[PAD]", "[MASK]", "[BOS]", "[EOS]"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(_corpus(), trainer)
        self.tok = tok

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False)


def _corpus() -> list[str]:
    lines = []
    for i in range(30):
        lines += [
            f"def function_{i}(value, count={i}):",
            f'    """Return the value scaled by {i}."""',
            "    if value is None:",
            "        return []",
            f"    result = [value * {i} for _ in range(count)]",
            "    for item in result:",
            "        print(item, end=' ')",
            "    return result",
            "",
            f"class Thing{i}(object):",
        ]
    return lines


@pytest.fixture(scope="module")
def bpe() -> Bpe:
    return Bpe()


@pytest.fixture(params=["chars", "bpe"])
def tok(request, bpe):
    return Chars() if request.param == "chars" else bpe


SOURCE = "import os\n\ndef f(x):\n    y = x + 1\n    return y * 2\n\nprint(f(3))\n"
UNICODE = "name = 'Zoë'\n# naïve café — 日本語 ⟶ ok\nemoji = '🐍'\nend = True"


def put_back(plan, tokenizer, originals: list[str]) -> Canvas:
    """The plan's canvas with each hole filled by the tokens of the given string.

    An empty original (a blank line) still has a one-token hole: PAD fills it, for drop_ids.
    """
    canvas = plan.canvas
    for pos, original in zip(plan.positions, originals, strict=True):
        ids = tokenizer.encode(original) or [PAD]
        assert len(ids) == len(pos), (original, len(ids), len(pos))
        canvas = canvas.fill(torch.tensor(list(pos)), torch.tensor(ids))
    return canvas


def fill_ids(plan, ids_per_hole: list[list[int]]) -> Canvas:
    canvas = plan.canvas
    for pos, ids in zip(plan.positions, ids_per_hole, strict=True):
        canvas = canvas.fill(torch.tensor(list(pos)), torch.tensor(ids))
    return canvas


def original(plan) -> list[str]:
    return [plan.text[h.start_char : h.end_char] for h in plan.holes]


# ---------------------------------------------------------------- parse_span


@pytest.mark.parametrize("value, span", [("10:20", (10, 20)), ("7", (7, 7)), ("3:3", (3, 3)), (" 2:5 ", (2, 5))])
def test_parse_span_good(value, span):
    assert parse_span(value) == span


FORMAT = "expected A:B or A (1-based line numbers, A ≤ B)"


@pytest.mark.parametrize(
    "value, message",
    [
        ("a:b", f"bad --span 'a:b': {FORMAT}"),
        ("10-20", f"bad --span '10-20': {FORMAT}"),
        ("", f"bad --span '': {FORMAT}"),
        ("3:", f"bad --span '3:': {FORMAT}"),
        (":4", f"bad --span ':4': {FORMAT}"),
        ("1:2:3", f"bad --span '1:2:3': {FORMAT}"),
        ("+3", f"bad --span '+3': {FORMAT}"),
        ("-1", f"bad --span '-1': {FORMAT}"),
        ("1_0", f"bad --span '1_0': {FORMAT}"),
        ("0", "bad --span '0': line numbers start at 1"),
        ("0:3", "bad --span '0:3': line numbers start at 1"),
        ("5:3", "bad --span '5:3': line 5 comes after line 3"),
    ],
)
def test_parse_span_bad(value, message):
    with pytest.raises(UsageError) as err:
        parse_span(value)
    assert str(err.value) == message


def test_span_past_the_end_says_how_many_lines():
    with pytest.raises(UsageError) as err:
        plan_infill(SOURCE, Vocab(Chars(), MASK, 1000), (7, 8), None)
    assert str(err.value) == "--span 7:8 is past the end of the file, which has 7 lines"
    with pytest.raises(UsageError) as err:
        plan_infill("x = 1", Vocab(Chars(), MASK, 1000), (2, 2), None)
    assert str(err.value) == "--span 2:2 is past the end of the file, which has 1 line"


def test_parse_span_checks_the_text_when_given():
    assert parse_span("6:7", SOURCE) == (6, 7)
    with pytest.raises(UsageError) as err:
        parse_span("8", SOURCE)
    assert str(err.value) == "--span 8:8 is past the end of the file, which has 7 lines"


def test_last_line_is_in_range():
    plan = plan_infill(SOURCE, Vocab(Chars(), MASK, 1000), (7, 7), None)
    assert original(plan) == ["print(f(3))"]


# ---------------------------------------------------------------- line spans: layout


def test_line_span_keeps_its_last_newline_out_of_the_hole():
    plan = plan_infill(SOURCE, Vocab(Chars(), MASK, 1000), (3, 4), None)
    assert plan.holes == (Hole(11, 34, 23, user_text=True),)
    assert original(plan) == ["def f(x):\n    y = x + 1"]
    assert SOURCE[34] == "\n"


def test_crlf_line_break_stays_out_of_the_hole():
    text = "a = 1\r\nb = 2\r\nc = 3\r\n"
    plan = plan_infill(text, Vocab(Chars(), MASK, 1000), (2, 2), None)
    assert original(plan) == ["b = 2"]


def test_canvas_layout_exact():
    c = Chars()
    text = "ab\ncd\nef\n"
    plan = plan_infill(text, Vocab(c, MASK, 1000, bos_id=BOS, eos_id=EOS), (2, 2), None)
    assert plan.canvas.tokens.tolist() == [BOS, *c.encode("ab\n"), MASK, MASK, *c.encode("\nef\n"), EOS]
    assert plan.positions == (range(4, 6),)
    assert plan.canvas.mask_id == MASK
    assert plan.window == (0, len(text))


def test_positions_are_exactly_the_canvas_holes(bpe):
    text = "x = ⟦fill:3⟧\ny = 2\n    ⟦fill⟧\nz = ⟦fill:1⟧ + 1\n"
    plan = plan_infill(text, Vocab(bpe, MASK, 1000, bos_id=BOS), None, None)
    holes = [p for p, h in enumerate(plan.canvas.holes.tolist()) if h]
    assert holes == [p for r in plan.positions for p in r]
    assert [len(r) for r in plan.positions] == [3, DEFAULT_MARKER_LENGTH, 1]
    assert plan.positions[0].start == 1 + len(bpe.encode("x = "))


def test_default_length_is_the_span_token_count(bpe):
    plan = plan_infill(SOURCE, Vocab(bpe, MASK, 1000), (3, 5), None)
    expected = len(bpe.encode("def f(x):\n    y = x + 1\n    return y * 2"))
    assert plan.holes[0].length == expected
    assert len(plan.positions[0]) == expected
    assert plan.canvas.n_holes == expected


def test_empty_line_span_gets_one_token():
    plan = plan_infill(SOURCE, Vocab(Chars(), MASK, 1000), (2, 2), None)
    assert plan.holes == (Hole(10, 10, 1, user_text=True),)


def test_given_length_sizes_the_span():
    plan = plan_infill(SOURCE, Vocab(Chars(), MASK, 1000), (3, 3), 40)
    assert plan.holes == (Hole(11, 20, 40, user_text=True),)
    assert plan.canvas.n_holes == 40


# ---------------------------------------------------------------- line spans: round trip


@pytest.mark.parametrize("span", [(1, 1), (7, 7), (3, 5), (1, 7), (2, 2), (4, 4)])
def test_unchanged_fill_round_trip(tok, span):
    plan = plan_infill(SOURCE, Vocab(tok, MASK, 1000, bos_id=BOS, eos_id=EOS), span, None)
    filled = splice(plan, put_back(plan, tok, original(plan)), tok, drop_ids=frozenset({PAD}))
    assert filled.text == SOURCE
    assert filled.fills == original(plan)
    assert filled.span_lines == [span]


@pytest.mark.parametrize("span", [(1, 1), (2, 2), (3, 3), (4, 4), (1, 4), (2, 3)])
def test_unchanged_fill_round_trip_unicode_last_line_without_newline(tok, span):
    plan = plan_infill(UNICODE, Vocab(tok, MASK, 1000, bos_id=BOS), span, None)
    filled = splice(plan, put_back(plan, tok, original(plan)), tok)
    assert filled.text == UNICODE


def test_split_multibyte_char_decodes_whole_in_one_run(bpe):
    ids = bpe.encode("é")
    assert len(ids) == 2 and "\ufffd" in bpe.decode(ids[:1])  # é is two byte tokens here
    plan = plan_infill("a = '⟦fill:2⟧'\n", Vocab(bpe, MASK, 1000), None, None)
    assert splice(plan, fill_ids(plan, [ids]), bpe).text == "a = 'é'\n"


def test_new_fill_span_lines_follow_the_new_text():
    c = Chars()
    plan = plan_infill(SOURCE, Vocab(c, MASK, 1000), (4, 4), 17)
    filled = splice(plan, fill_ids(plan, [c.encode("    a = 1\n    b=2")]), c)
    assert filled.text == "import os\n\ndef f(x):\n    a = 1\n    b=2\n    return y * 2\n\nprint(f(3))\n"
    assert filled.span_lines == [(4, 5)]


# ---------------------------------------------------------------- markers


def test_find_markers():
    text = "a = ⟦fill⟧\n⟦fill:32⟧\nb = ⟦fill:7⟧⟦fill⟧\n"
    assert find_markers(text) == [(4, 10, None), (11, 20, 32), (25, 33, 7), (33, 39, None)]


@pytest.mark.parametrize(
    "marker",
    ["⟦fill:0⟧", "⟦fill:⟧", "⟦fill:x⟧", "⟦fill: 3⟧", "⟦fill:03⟧", "⟦ fill⟧", "⟦fill 3⟧", "⟦fill"],
)
def test_malformed_marker_is_an_error(marker):
    with pytest.raises(UsageError) as err:
        plan_infill(f"x = 1\ny = {marker}\n", Vocab(Chars(), MASK, 1000), None, None)
    assert str(err.value) == f"line 2: bad marker {marker!r}; write ⟦fill⟧ or ⟦fill:N⟧ with N tokens, N ≥ 1"


def test_brackets_without_fill_are_text():
    plan = plan_infill("s = '⟦a⟧ ⟦filler⟧'\nx = ⟦fill:2⟧\n", Vocab(Chars(), MASK, 1000), None, None)
    assert len(plan.holes) == 1


def test_bare_marker_lengths():
    c = Chars()
    text = "a = ⟦fill⟧\nb = ⟦fill:3⟧\n"
    assert [h.length for h in plan_infill(text, Vocab(c, MASK, 1000), None, None).holes] == [DEFAULT_MARKER_LENGTH, 3]
    assert [h.length for h in plan_infill(text, Vocab(c, MASK, 1000), None, 5).holes] == [5, 3]


def test_markers_round_trip(tok):
    regions = ["value + 1", "if x:\n        return 'ï'", "[]", 'print("日本")']
    template = "def g(x):\n    y = {}\n    {}\n    return {}\n{}\n"
    text = template.format(*regions)
    marked = template.format(*(f"⟦fill:{len(tok.encode(r))}⟧" for r in regions))
    plan = plan_infill(marked, Vocab(tok, MASK, 1000, bos_id=BOS, eos_id=EOS), None, None)
    assert [h.length for h in plan.holes] == [len(tok.encode(r)) for r in regions]
    assert [len(r) for r in plan.positions] == [h.length for h in plan.holes]
    assert plan.canvas.n_holes == sum(h.length for h in plan.holes)
    filled = splice(plan, put_back(plan, tok, regions), tok)
    assert filled.text == text
    assert filled.fills == regions
    assert filled.span_lines == [(2, 2), (3, 4), (5, 5), (6, 6)]


def test_markers_canvas_layout_exact():
    c = Chars()
    plan = plan_infill("a⟦fill:2⟧b\n⟦fill:1⟧\n", Vocab(c, MASK, 1000, bos_id=BOS, eos_id=EOS), None, None)
    assert plan.canvas.tokens.tolist() == [
        BOS,
        *c.encode("a"),
        MASK,
        MASK,
        *c.encode("b\n"),
        MASK,
        *c.encode("\n"),
        EOS,
    ]
    assert plan.positions == (range(2, 4), range(6, 7))
    assert plan.holes == (Hole(1, 9, 2), Hole(11, 19, 1))


def test_span_and_markers_together_is_an_error():
    with pytest.raises(UsageError) as err:
        plan_infill("x = ⟦fill⟧\n", Vocab(Chars(), MASK, 1000), (1, 1), None)
    assert str(err.value) == "the file has ⟦fill⟧ markers: give --span or markers, not both"


def test_no_span_no_markers():
    with pytest.raises(UsageError) as err:
        plan_infill(SOURCE, Vocab(Chars(), MASK, 1000), None, None)
    assert str(err.value) == "give --span A:B or put ⟦fill⟧ markers in the file"


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("text", ["", "  \n\n"])
def test_empty_text(text):
    with pytest.raises(InputError) as err:
        plan_infill(text, Vocab(Chars(), MASK, 1000), (1, 1), None)
    assert str(err.value) == "the input is empty"
    with pytest.raises(InputError):
        plan_generate(text, Vocab(Chars(), MASK, 1000), 8)


@pytest.mark.parametrize("length", [0, -3])
def test_length_must_be_positive(length):
    with pytest.raises(UsageError) as err:
        plan_infill(SOURCE, Vocab(Chars(), MASK, 1000), (1, 1), length)
    assert str(err.value) == f"--length must be at least 1, got {length}"
    with pytest.raises(UsageError):
        plan_generate("x", Vocab(Chars(), MASK, 1000), length)


def test_length_longer_than_context():
    with pytest.raises(UsageError) as err:
        plan_infill(SOURCE, Vocab(Chars(), MASK, 100), (2, 3), 200)
    assert str(err.value) == "--length 200 is longer than the model's context (100 tokens)"
    with pytest.raises(UsageError) as err:
        plan_generate("x = ", Vocab(Chars(), MASK, 100, bos_id=BOS), 100)  # BOS takes a slot
    assert str(err.value) == "--length 100 is longer than the model's context (100 tokens)"


def test_holes_and_middles_longer_than_context():
    text = "⟦fill:4⟧\n" + "x" * 20 + "\n⟦fill:4⟧\n"
    with pytest.raises(UsageError) as err:
        plan_infill(text, Vocab(Chars(), MASK, 20), None, None)
    assert (
        str(err.value)
        == "the holes and the text between them need 30 tokens, more than the model's context (20 tokens)"
    )


def test_mask_token_in_text_is_refused(bpe):
    with pytest.raises(InputError) as err:
        plan_infill("x = '[MASK]'\ny = 1\n", Vocab(bpe, MASK, 1000), (2, 2), None)
    assert str(err.value) == f"the text contains the model's mask token (id {MASK}); remove it first"


def test_unfinished_canvas_is_refused():
    plan = plan_infill(SOURCE, Vocab(Chars(), MASK, 1000), (1, 1), None)
    with pytest.raises(ValueError):
        splice(plan, plan.canvas, Chars())


# ---------------------------------------------------------------- windows

LONG = "".join(f"line {i:03d}\n" for i in range(1, 101))  # 100 lines of 9 chars


def test_window_exact_with_chars():
    c = Chars()
    # fixed: BOS + EOS + hole of 8 = 10; budget 40: head gets 2 lines (18), tail "\n" + 2 lines (19).
    plan = plan_infill(LONG, Vocab(c, MASK, 50, bos_id=BOS, eos_id=EOS), (50, 50), None)
    start, end = LONG.index("line 048"), LONG.index("line 053")
    assert plan.window == (start, end)
    hole = LONG.index("line 050")
    head, tail = c.encode(LONG[start:hole]), c.encode(LONG[hole + 8 : end])
    assert plan.canvas.tokens.tolist() == [BOS, *head, *[MASK] * 8, *tail]
    assert len(plan.canvas.tokens) == 46  # no EOS: the window does not reach the end
    assert plan.positions == (range(19, 27),)
    filled = splice(plan, put_back(plan, c, original(plan)), c)
    assert filled.text == LONG
    assert filled.span_lines == [(50, 50)]


def test_window_reaching_the_end_keeps_eos():
    c = Chars()
    plan = plan_infill(LONG, Vocab(c, MASK, 50, bos_id=BOS, eos_id=EOS), (100, 100), None)
    assert plan.window[1] == len(LONG)
    assert plan.canvas.tokens.tolist()[-2:] == [c.encode("\n")[0], EOS]
    assert len(plan.canvas.tokens) <= 50


@pytest.mark.parametrize("context", [30, 64, 100, 257])
def test_window_respects_context_and_splices_the_whole_file(bpe, context):
    plan = plan_infill(LONG, Vocab(bpe, MASK, context, bos_id=BOS, eos_id=EOS), (40, 42), None)
    assert len(plan.canvas.tokens) <= context
    start, end = plan.window
    assert start == 0 or LONG[start - 1] == "\n"  # whole lines only
    assert end == len(LONG) or LONG[end - 1] == "\n"
    if context >= 64:  # room for lines on both sides
        assert start < plan.holes[0].start_char and end > plan.holes[0].end_char + 1
    filled = splice(plan, put_back(plan, bpe, original(plan)), bpe)
    assert filled.text == LONG
    assert filled.span_lines == [(40, 42)]


@pytest.mark.parametrize("budget", [1, 17, 60, 200, 5000])
def test_window_tokenizes_lines_only_as_far_as_the_budget_reaches(bpe, budget):
    """fit_window counts the lines nearest the holes only until they pass the budget, and tokenizes the larger side
    whole only when the smaller fits: the same window as when every line of the file is counted, and a few hundred
    encodes where the file has thousands of lines."""
    from dlmcode.text import windows

    class Counting:
        def __init__(self) -> None:
            self.calls = self.chars = 0

        def encode(self, text: str) -> list[int]:
            self.calls, self.chars = self.calls + 1, self.chars + len(text)
            return bpe.encode(text)

    def every_line(head: str, tail: str) -> tuple[int, int]:  # the lines counted before: every one of them
        full = lambda lines, b, t: [len(t.encode(x)) for x in lines]  # noqa: E731
        real = windows._costs
        windows._costs = full
        try:
            return windows.fit_window(head, tail, budget, bpe)
        finally:
            windows._costs = real

    text = "\n".join(_corpus() * 8) + "\n"  # 2,400 lines
    for cut in (0, 301, len(text) // 2, len(text) - 7, len(text)):
        head, tail = text[:cut], text[cut:]
        counting = Counting()
        assert windows.fit_window(head, tail, budget, counting) == every_line(head, tail)
        if budget < 5000:  # the file does not fit: lines are counted, as far as the budget reaches
            assert counting.calls <= 2 * budget + 40, counting.calls
            # and the larger side is never tokenized whole when the smaller is already past the budget
            if cut == len(text) // 2:
                assert counting.chars < len(text), counting.chars


def test_a_tokenizer_whose_lines_add_up_is_never_run_on_the_whole_file():
    """The built-in tokenizer ends a token at every newline, so a window's tokens are its lines': fit_window counts
    lines only, and gives the windows the generic path (whole-text encodes) gives; a lone carriage return, or a
    tokenizer that does not say so, takes the generic path."""
    import random
    import sysconfig
    from pathlib import Path

    from dlmcode import models
    from dlmcode.text import windows

    shipped = models.load().tokenizer
    assert shipped.lines_add_up

    class Generic:  # the same tokenizer, without the claim
        encode = staticmethod(shipped.encode)

    class Counting:
        lines_add_up = True

        def __init__(self) -> None:
            self.longest = 0

        def encode(self, text: str) -> list[int]:
            self.longest = max(self.longest, len(text))
            return shipped.encode(text)

    rnd = random.Random(5)
    for name in ("queue.py", "pathlib.py"):
        text = (Path(sysconfig.get_paths()["stdlib"]) / name).read_text(encoding="utf-8")
        for _ in range(6):
            cut, budget = rnd.randrange(len(text)), rnd.choice([40, 200, 448, 4000])
            head, tail = text[:cut], text[cut + rnd.randrange(30) :]
            counting = Counting()
            assert windows.fit_window(head, tail, budget, counting) == windows.fit_window(head, tail, budget, Generic())
            assert counting.longest < max(len(head), len(tail)) or len(shipped.encode(text)) <= budget
    assert not windows._lines_add_up(Counting(), "a = 1\rb = 2\n") and windows._lines_add_up(Counting(), "a\r\nb\n")
    assert not windows._lines_add_up(Generic(), "a = 1\n")


def test_window_is_about_symmetric(bpe):
    plan = plan_infill(LONG, Vocab(bpe, MASK, 120), (50, 50), None)
    start, end = plan.window
    before = len(bpe.encode(LONG[start : plan.holes[0].start_char]))
    after = len(bpe.encode(LONG[plan.holes[0].end_char : end]))
    line = len(bpe.encode("line 050\n"))
    assert abs(before - after) <= 2 * line


def test_markers_window_keeps_text_between_holes(bpe):
    text = LONG[:450] + "a = ⟦fill:3⟧\n" + LONG[450:500] + "b = ⟦fill:3⟧\n" + LONG[500:]
    plan = plan_infill(text, Vocab(bpe, MASK, 80), None, None)
    assert len(plan.canvas.tokens) <= 80
    assert plan.window[0] <= 450 and plan.window[1] >= plan.holes[1].end_char
    fills = [bpe.decode(bpe.encode("return result")[:3]), bpe.decode(bpe.encode("print(item")[:3])]
    filled = splice(plan, put_back(plan, bpe, fills), bpe)
    assert filled.text == text.replace("⟦fill:3⟧", fills[0], 1).replace("⟦fill:3⟧", fills[1], 1)


# ---------------------------------------------------------------- generate, drop_ids, trim_at


def test_generate_canvas_and_trim_at():
    c = Chars()
    plan = plan_generate("def f():\n", Vocab(c, MASK, 100, bos_id=BOS), 8)
    assert plan.canvas.tokens.tolist() == [BOS, *c.encode("def f():\n"), *[MASK] * 8]
    assert plan.positions == (range(10, 18),)
    ids = [*c.encode("  ok"), EOS, *c.encode("zz"), PAD]
    filled = splice(plan, fill_ids(plan, [ids]), c, trim_at=EOS)
    assert filled.text == "def f():\n  ok"
    assert filled.fills == ["  ok"]
    assert filled.ids == ids  # before trimming
    assert filled.span_lines == [(2, 2)]


def test_generate_window_drops_prompt_lines_from_the_start():
    c = Chars()
    plan = plan_generate(LONG, Vocab(c, MASK, 30, bos_id=BOS), 10)
    assert plan.window == (LONG.index("line 099"), len(LONG))
    assert len(plan.canvas.tokens) == 1 + 18 + 10
    filled = splice(plan, fill_ids(plan, [c.encode("line 101\n!")]), c)
    assert filled.text == LONG + "line 101\n!"
    assert filled.span_lines == [(101, 102)]


def test_drop_ids_strip_pad_from_an_overlong_hole(bpe):
    plan = plan_infill(SOURCE, Vocab(bpe, MASK, 1000), (4, 4), 12)
    body = bpe.encode("    y = 0")
    ids = [body[0], PAD, *body[1:], *[PAD] * (10 - len(body)), EOS]
    filled = splice(plan, fill_ids(plan, [ids]), bpe, drop_ids=frozenset({PAD, EOS}))
    assert filled.text == SOURCE.replace("y = x + 1", "y = 0")
    assert filled.fills == ["    y = 0"]
    assert filled.ids == ids


def test_trim_then_drop_per_hole():
    c = Chars()
    plan = plan_infill("a⟦fill:3⟧b⟦fill:3⟧c", Vocab(c, MASK, 100), None, None)
    runs = [[PAD, *c.encode("x"), EOS], [*c.encode("y"), EOS, *c.encode("q")]]
    filled = splice(plan, fill_ids(plan, runs), c, drop_ids=frozenset({PAD}), trim_at=EOS)
    assert filled.text == "axbyc"
    assert filled.ids == [i for run in runs for i in run]


def test_round_trip_sweep_of_spans_and_windows(bpe):
    text = SOURCE + UNICODE + "\n" + LONG
    n = text.count("\n") + 1
    checked = 0
    for first in range(1, n + 1, 7):
        for last in range(first, n + 1, 11):
            for context in (20, 60, 300):
                try:
                    plan = plan_infill(text, Vocab(bpe, MASK, context, bos_id=BOS, eos_id=EOS), (first, last), None)
                except UsageError:
                    continue  # the span alone does not fit this context
                assert len(plan.canvas.tokens) <= context
                filled = splice(plan, put_back(plan, bpe, original(plan)), bpe, drop_ids=frozenset({PAD}))
                assert filled.text == text
                assert filled.span_lines == [(first, last)]
                checked += 1
    assert checked > 50


def test_joined_is_the_splice_s_text_and_fill_regions_without_its_line_ranges(bpe):
    # the guard's escape check reads only the text and where each fill stands (jobs/guarding.py)
    text = LONG[:450] + "a = ⟦fill:3⟧\n" + LONG[450:500] + "b = ⟦fill:4⟧\n" + LONG[500:]
    plan = plan_infill(text, Vocab(bpe, MASK, 80), None, None)
    ids = [bpe.encode("return result")[:3], [*bpe.encode("x")[:1], PAD, EOS, *bpe.encode("y")[:1]]]
    canvas = fill_ids(plan, ids)
    for trim in (None, EOS):
        whole = splice(plan, canvas, bpe, drop_ids=frozenset({PAD}), trim_at=trim)
        got = joined(plan, canvas.tokens, bpe, frozenset({PAD}), trim)
        assert got == (whole.text, whole.regions)
    assert joined(plan, canvas.tokens, bpe, frozenset({PAD}), EOS)[0].count("b = x\n") == 1
