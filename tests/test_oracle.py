"""The syntax oracle: exact token <-> byte ranges (the splice's text), incremental parses equal to
fresh ones, which problems are the draft's, and how a job attaches one."""

from __future__ import annotations

import random

import pytest
import torch

from dlmcode.core.errors import UsageError
from dlmcode.core.vocab import Vocab
from dlmcode.decoders import build
from dlmcode.models import builtin_path
from dlmcode.models.builtin import BuiltinTokenizer
from dlmcode.text import oracle, spans, syntax

MASK = -7  # never a real id: the plans below only use it to lay out holes


@pytest.fixture(scope="module")
def tokenizer():
    return BuiltinTokenizer.from_file(builtin_path() / "tokenizer.json")


def plan_of(text: str, tokenizer) -> spans.Plan:
    """A plan whose holes are the file's ⟦fill:N⟧ markers (no BOS/EOS: the canvas is text and holes)."""
    return spans.plan_infill(text, Vocab(tokenizer, MASK, 10_000), None, None)


def drafted(plan: spans.Plan, fills: list[list[int]]) -> torch.Tensor:
    tokens = plan.canvas.tokens.clone()
    for positions, ids in zip(plan.positions, fills, strict=True):
        tokens[positions.start : positions.stop] = torch.tensor(ids)
    return tokens


def test_pieces_concatenate_to_the_splice_even_with_split_characters(tokenizer):
    text = "def f(x):\n    ⟦fill:9⟧\n    return y  # é\nz = '⟦fill:7⟧'\n"
    plan = plan_of(text, tokenizer)
    vocab = [tokenizer.encode(s)[0] for s in ("é", "😀", " y", "=", "\n", "    ", "x", "(", "'")]
    vocab += tokenizer.encode("😀")  # a character whose bytes span several tokens
    rng = random.Random(0)
    seen_split = False
    for _ in range(60):
        fills = [[rng.choice(vocab) for _ in r] for r in plan.positions]
        tokens = drafted(plan, fills)
        the_oracle = oracle.SyntaxOracle(plan, tokenizer, "python", text)
        layout = the_oracle.layout(tokens)
        spliced = spans.splice(plan, plan.canvas.__class__(tokens, MASK), tokenizer).text
        assert layout.data == spliced.encode("utf-8", "surrogatepass")
        for positions, ids in zip(plan.positions, fills, strict=True):
            starts, ends = (
                layout.starts[positions.start : positions.stop],
                layout.ends[positions.start : positions.stop],
            )
            assert torch.equal(starts[1:], ends[:-1]), "a hole's token ranges are contiguous"
            joined = layout.data[int(starts[0]) : int(ends[-1])]
            assert joined == tokenizer.decode(ids).encode("utf-8", "surrogatepass")
            seen_split |= any(
                len(tokenizer.decode([i]).encode()) != e - s
                for i, s, e in zip(ids, starts.tolist(), ends.tolist(), strict=True)
            )
    assert seen_split, "the draws never split a character, so the fallback went untested"


def test_dropped_and_trimmed_tokens_have_no_bytes(tokenizer):
    text = "x = ⟦fill:4⟧\n"
    plan = plan_of(text, tokenizer)
    one, two = tokenizer.encode("1")[0], tokenizer.encode("2")[0]
    pad, end = 5, 6
    the_oracle = oracle.SyntaxOracle(plan, tokenizer, "python", text, drop_ids=frozenset({pad}), trim_at=end)
    layout = the_oracle.layout(drafted(plan, [[one, pad, two, end]]))
    start = plan.positions[0].start
    assert layout.data == b"x = 12\n"
    assert layout.starts[start : start + 4].tolist() == [4, 5, 5, 6]
    assert layout.ends[start : start + 4].tolist() == [5, 5, 6, 6]


SOURCES = {
    "python": "def f(a, b):\n    x = [a, b]\n    ⟦fill:12⟧\n    return x\n\nclass C:\n    y = {1: 2}\n",
    "javascript": "function f(a) {\n  const x = [a];\n  ⟦fill:12⟧\n  return x;\n}\nlet y = {a: 1};\n",
    "rust": "fn f(a: i32) -> i32 {\n    let x = a;\n    ⟦fill:12⟧\n    x\n}\nstruct S { y: u8 }\n",
    "go": "package m\n\nfunc f(a int) int {\n\tx := a\n\t⟦fill:12⟧\n\treturn x\n}\n",
}
PIECES = [
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ";",
    ":",
    "x",
    " = ",
    "\n",
    "    ",
    "if",
    " a",
    ",",
    "1",
    "return",
    '"',
    "let",
    "é",
]


@pytest.mark.parametrize("lang", SOURCES)
def test_incremental_parse_equals_a_fresh_parse(lang, tokenizer):
    text = SOURCES[lang]
    plan = plan_of(text, tokenizer)
    vocab = [tokenizer.encode(p)[0] for p in PIECES]
    incremental = oracle.SyntaxOracle(plan, tokenizer, lang, text, incremental=0)
    fresh = oracle.SyntaxOracle(plan, tokenizer, lang, text, incremental=10**9)
    rng = random.Random(lang)
    tokens = drafted(plan, [[rng.choice(vocab) for _ in r] for r in plan.positions])
    holes = [p for r in plan.positions for p in r]
    for _ in range(40):  # random edits: one token, a run of tokens, or the whole fill
        kind = rng.random()
        at = rng.sample(holes, 1 if kind < 0.5 else rng.randint(2, len(holes)))
        tokens[at] = torch.tensor([rng.choice(vocab) for _ in at])
        a, b = incremental(tokens), fresh(tokens)
        assert str(incremental.reparser.tree.root_node) == str(fresh.reparser.tree.root_node)
        assert [(k, n.start_byte, n.end_byte) for k, n in syntax.issues(incremental.reparser.tree)] == [
            (k, n.start_byte, n.end_byte) for k, n in syntax.issues(fresh.reparser.tree)
        ]
        assert torch.equal(a.flagged, b.flagged) and a.broken == b.broken


def test_the_draft_is_blamed_for_its_errors_only(tokenizer):
    # The user's code is already broken on its last line; the hole is the middle line.
    text = "a = 1\n⟦fill:6⟧\nb = (2\n"
    before = "a = 1\nc = 3\nb = (2\n"
    plan = plan_of(text, tokenizer)
    the_oracle = oracle.SyntaxOracle(plan, tokenizer, "python", before)
    ids = tokenizer.encode("c = 3")
    pad = tokenizer.encode(" ")[0]
    good = drafted(plan, [ids + [pad] * (6 - len(ids))])
    verdict = the_oracle(good)
    assert not verdict.broken and not bool(verdict.flagged.any()), "the user's own error is not the draft's"
    bad_ids = tokenizer.encode("c = [3")
    bad = drafted(plan, [bad_ids + [pad] * (6 - len(bad_ids))])
    verdict = the_oracle(bad)
    hole = torch.zeros(len(bad), dtype=torch.bool)
    hole[plan.positions[0].start : plan.positions[0].stop] = True
    assert verdict.broken and bool(verdict.flagged.any())
    assert not bool((verdict.flagged & ~hole).any()), "only span positions are flagged"
    assert all(bool(hole[r].all()) for r in verdict.regions)


def test_markers_in_the_users_code_are_holes_not_errors(tokenizer):
    assert oracle.base_text("x = ⟦fill⟧\ny = ⟦fill:3⟧ + 1\n") == "x = \ny =  + 1\n"


def test_a_problem_outside_the_span_blames_the_token_before_it(tokenizer):
    text = "x = ⟦fill:3⟧\ny = 2\n"
    plan = plan_of(text, tokenizer)
    the_oracle = oracle.SyntaxOracle(plan, tokenizer, "python", "x = 1\ny = 2\n")
    layout = the_oracle.layout(drafted(plan, [tokenizer.encode("1") * 3]))
    far = oracle.syntax.Problem(2, 0, "MISSING", "", len(layout.data) - 2, len(layout.data) - 2, 2)
    assert the_oracle.blame(layout, far).tolist() == [plan.positions[0].stop - 1]


def test_attach_gives_only_decoders_that_take_an_oracle_one(tokenizer):
    text = "x = ⟦fill:3⟧\n"
    plan = plan_of(text, tokenizer)
    plain = build("factor")
    assert oracle.with_oracle(plain, plan, tokenizer, "python", text) is plain
    guarded = oracle.with_oracle(build("syntax-guard"), plan, tokenizer, "py", text)
    assert isinstance(guarded.oracle, oracle.SyntaxOracle) and guarded.oracle.lang == "python"
    with pytest.raises(UsageError, match="syntax-guard.*needs the code's language.*--lang"):
        oracle.with_oracle(build("syntax-guard"), plan, tokenizer, None, text, name="syntax-guard")


def test_byte_edit_keeps_the_common_head_and_tail():
    edit = syntax.byte_edit(b"ab\ncdef\ngh", b"ab\ncXYf\ngh")
    assert (edit["start_byte"], edit["old_end_byte"], edit["new_end_byte"]) == (4, 6, 6)
    assert edit["start_point"] == (1, 1) and edit["new_end_point"] == (1, 3)
    assert syntax.byte_edit(b"same", b"same") is None
    edit = syntax.byte_edit(b"aaa", b"aaaa")  # the tail may not reuse head bytes
    assert (edit["start_byte"], edit["old_end_byte"], edit["new_end_byte"]) == (3, 3, 4)


def test_the_speed_bench_hands_syntax_guard_an_oracle_of_its_canvas(tokenizer):
    from types import SimpleNamespace

    from dlmcode.bench import speed
    from dlmcode.core.canvas import Canvas

    bos, mask = 1, 9999
    prompt = tokenizer.encode("def f(x):\n    return x\n")
    start = Canvas(torch.tensor([bos, *prompt, mask, mask, mask]), mask)
    dlm = SimpleNamespace(tokenizer=tokenizer, bos_id=bos, eos_id=2, special_ids=frozenset({bos, 2, mask}))
    assert speed.guarded(build("factor"), dlm, start) == build("factor")
    guarded = speed.guarded(build("syntax-guard"), dlm, start)
    fill = tokenizer.encode("y = 1")[:3]
    fill += tokenizer.encode(" ") * (3 - len(fill))
    draft = start.tokens.clone()
    draft[-3:] = torch.tensor(fill)
    assert guarded.oracle.layout(draft).data == ("def f(x):\n    return x\n" + tokenizer.decode(fill)).encode()


def test_a_grammar_of_another_tree_sitter_is_one_line_under_the_oracle_too(monkeypatch, tokenizer):
    # the oracle had a copy of syntax's parser that lost the ValueError branch: a traceback under syntax-guard
    import tree_sitter

    from dlmcode.core.errors import DlmcodeError
    from dlmcode.text import syntax

    def built_for_another_abi(pointer):
        raise ValueError("Incompatible Language version 99")

    syntax.parser.cache_clear()
    monkeypatch.setattr(tree_sitter, "Language", built_for_another_abi)
    try:
        with pytest.raises(
            DlmcodeError, match=r"^the python grammar does not load \(Incompatible Language version 99\)"
        ):
            oracle.SyntaxOracle(plan_of("x = ⟦fill:2⟧\n", tokenizer), tokenizer, "python", "x = \n")
    finally:
        syntax.parser.cache_clear()
