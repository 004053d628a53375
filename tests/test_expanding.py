"""Holes that expand and delete inside the decode (dlmcode/jobs/expanding.py): a hand-made model whose logits
propose expand and delete exactly, through every face without a given length and every decoder."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dlmcode import decoders
from dlmcode.jobs import expanding, fill

from serve_tiny import BOS, EOS, MASK, PAD, VOCAB, CharTokenizer, char_dlm

EXPAND = VOCAB  # one id past the char vocabulary, as the built-in model's [EXPAND]


class Knows:
    """A model that knows the fill: in the run of positions between `prefix` and `suffix` it proposes the fill's
    k-th token at the k-th position while the run is short of the fill, [EXPAND] at the run's last position
    (the run is too short), and delete ([PAD]) at every position past the fill's end (too long). Expand and
    delete are its surest proposals, content falls in k, so a confidence-ordered decoder settles the length first.
    `expand_also` gives, at the last position, the fill's own token as the second choice (for a budget)."""

    def __init__(self, prefix: str, suffix: str, middle: str) -> None:
        tok = CharTokenizer()
        self.prefix, self.suffix, self.middle = tok.encode(prefix), tok.encode(suffix), tok.encode(middle)
        self.calls = 0

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        ids = tokens.tolist()
        start = 1 + len(self.prefix)  # [BOS] first
        stop = self.run_end(ids, start)
        logits = torch.full((len(ids), VOCAB + 1), -20.0)  # (L, V + 1)
        logits[torch.arange(len(ids)), torch.tensor(ids).clamp(max=VOCAB)] = 0.0
        run = stop - start
        for k in range(run):
            pos = start + k
            if k >= len(self.middle):
                logits[pos, PAD] = 12.0 - 0.05 * k
            elif k == run - 1 and run < len(self.middle):
                logits[pos, EXPAND] = 12.0
                logits[pos, self.middle[k]] = 9.0 - 0.05 * k
            else:
                logits[pos, self.middle[k]] = 10.0 - 0.05 * k
        return logits

    def run_end(self, ids: list[int], start: int) -> int:
        """Where the suffix begins: the last occurrence of the suffix's ids (or the canvas's end)."""
        n = len(self.suffix)
        for end in range(len(ids), start - 1, -1):
            if ids[end - n : end] == self.suffix and end - n >= start:
                return end - n
        return len(ids)


def knowing(prefix: str, suffix: str, middle: str, context: int = 256):
    predict = Knows(prefix, suffix, middle)
    dlm = dataclasses.replace(char_dlm(predict, context), expand_id=EXPAND, delete_id=PAD)
    dlm = dataclasses.replace(dlm, special_ids=dlm.special_ids | {EXPAND})
    return dlm, predict


def test_a_bare_marker_grows_to_the_fill_the_model_knows():
    dlm, predict = knowing("ab", "cd", "0123456789")
    result = fill.prepare_infill("ab⟦fill⟧cd", dlm=dlm).run()
    assert result.text == "ab0123456789cd"
    assert result.sized == (10,) and result.expanded == 6 and result.deleted == 0  # 4 holes, six expands: 10
    assert result.calls == predict.calls == 6 + 10  # one call each: six expands, ten tokens (low-confidence)
    assert result.filled == 16 and result.tpf == 1.0


def test_a_bare_marker_shrinks_by_deletes():
    dlm, predict = knowing("ab", "cd", "x")
    result = fill.prepare_infill("ab⟦fill⟧cd", dlm=dlm).run()
    assert result.text == "abxcd" and result.sized == (1,) and result.deleted == 3 and result.expanded == 0
    assert result.calls == predict.calls == 2  # the first delete ends the fill: its holes after it go at once


def test_the_budget_bans_expand_and_the_second_choice_stands():
    dlm, _ = knowing("ab", "cd", "0123456789")
    result = fill.prepare_infill("ab⟦fill⟧cd", dlm=dlm, length="auto").run()
    assert result.text == "ab0123456789cd"
    growth = fill.grows(dlm, [0], 6)  # a fill may reach 6 positions: then its last one takes its own token
    plan = fill.spans.plan_infill("ab⟦fill⟧cd", dlm.vocab, None, None, bare=[expanding.START])
    job = fill.Job(plan, dlm, decoders.build("low-confidence"), 0, None, growth=growth)
    result = job.run()
    assert result.text == "ab012345cd" and result.sized == (6,) and result.expanded == 2


def test_a_given_length_never_expands_or_deletes():
    dlm, _ = knowing("ab", "cd", "0123456789")
    result = fill.prepare_infill("ab⟦fill:4⟧cd", dlm=dlm).run()  # the model asks to expand; the length is given
    assert result.text == "ab0123cd" and result.expanded == result.deleted == 0 and result.sized == ()
    assert EXPAND not in result.ids and result.calls == 4


NEEDS = {"codila"}  # an assistant of the model's tokenizer: not for a hand-made model


@pytest.mark.parametrize("name", [n for n in decoders.DECODERS if n not in NEEDS])
def test_every_decoder_grows_the_fill(name):
    dlm, _ = knowing("ab", "cd", "0123456789")
    result = fill.prepare_infill("ab⟦fill⟧cd", dlm=dlm, decoder=name, lang="python").run()
    assert result.text == "ab0123456789cd", name
    assert result.sized == (10,)


def test_carried_out_expands_and_ends_a_fill():
    tokens = expanding.Tokens(expand=EXPAND, delete=PAD)
    assert expanding.carried_out([5, EXPAND, MASK], MASK, tokens) == ([5, MASK, MASK, MASK], 1, 0)
    # a delete ends the fill: the holes after it go, tokens committed after it stay (DreamOn's rule)
    assert expanding.carried_out([5, MASK, PAD, MASK, 7, MASK], MASK, tokens) == ([5, MASK, 7], 0, 3)


def test_edited_plan_moves_the_holes_after_an_edit():
    dlm, _ = knowing("ab", "cd", "0")
    plan = fill.spans.plan_infill("a⟦fill⟧b⟦fill⟧c", dlm.vocab, None, None, bare=[2, 2])
    tokens = plan.canvas.tokens.clone()
    first, second = plan.positions
    tokens[first.start] = EXPAND
    tokens[second.start] = PAD
    canvas = dataclasses.replace(plan.canvas, tokens=tokens)
    new, moved = expanding.edited(plan, canvas, [0, 1], expanding.Tokens(EXPAND, PAD))
    assert [len(r) for r in new.positions] == [3, 0]
    assert new.canvas.tokens.tolist() == [BOS, 4 + ord("a"), MASK, MASK, MASK, 4 + ord("b"), 4 + ord("c"), EOS]
    assert moved.tolist() == [0, 1, -1, 4, 5, -1, -1, 6, 7]  # the expand and the deleted fill leave; the rest move


def test_generate_auto_grows_the_continuation():
    predict = Knows("ab", "", "xyz12")
    dlm = dataclasses.replace(char_dlm(predict), expand_id=EXPAND, delete_id=PAD)
    result = fill.prepare_generate("ab", dlm=dlm, length="auto", lang=None, chat=False).run()
    assert result.text == "abxyz12" and result.sized == (5,)


def test_a_model_without_expand_keeps_the_length_rule():
    dlm, _ = knowing("ab", "cd", "0123456789")
    plain = dataclasses.replace(dlm, expand_id=None, delete_id=None)
    job = fill.prepare_infill("ab⟦fill⟧cd", dlm=plain)
    assert job.growth is None and job.sized is not None  # probed, as before


def test_the_guard_holds_while_the_fill_grows():
    """A model that knows a fill which breaks the file: unguarded it is written; guarded, with the holes growing
    under it (a witness for the holes that exist now), what comes out parses."""
    dlm, _ = knowing("x = ", "\ny = 2\n", "(1 + [2")
    plain = fill.prepare_infill("x = ⟦fill⟧\ny = 2\n", dlm=dlm, lang="python").run()
    assert plain.text == "x = (1 + [2\ny = 2\n" and plain.breakage.broken and plain.expanded == 3
    guarded = fill.prepare_infill("x = ⟦fill⟧\ny = 2\n", dlm=dlm, lang="python", options={"guard": True}).run()
    assert not guarded.breakage.broken and guarded.guard is not None, guarded.text


# ---------------------------------------------------------------- serve: one rule for every editor face

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\n\nprint(add(1, 2))\n"
LINES = "x = a + b\n    y = x * 2\n    return y"
UNGUARDED = {"guard": "false"}  # the mechanics of growing, apart from the guard (on by default in serve)


def test_serve_grows_the_fill_and_streams_it_in_whole_lines():
    from dlmcode.serve.engine import Engine
    from dlmcode.serve.request import Fill

    dlm, predict = knowing(PREFIX.rstrip(" \t"), SUFFIX, LINES)
    engine = Engine(dlm, lang="python", lines=0, options=UNGUARDED)
    pieces: list[str] = []
    answer = engine.run(Fill(PREFIX, SUFFIX, ceiling=48), emit=pieces.append)
    assert answer.text == LINES and answer.holes == len(LINES) and answer.stop == "end"
    assert answer.calls == predict.calls == (len(LINES) - expanding.START) + len(LINES)  # expands, then tokens
    assert pieces == ["x = a + b", "\n    y = x * 2"] and "".join(pieces) == LINES[: len("".join(pieces))]
    short, _ = knowing(PREFIX.rstrip(" \t"), SUFFIX, "x")
    assert Engine(short, lang="python", lines=0, options=UNGUARDED).run(Fill(PREFIX, SUFFIX, ceiling=48)).text == "x"


def test_serve_batches_growing_fills_and_answers_each():
    import asyncio

    from dlmcode.serve.engine import Engine
    from dlmcode.serve.queue import Queue
    from dlmcode.serve.request import Fill

    dlm, predict = knowing(PREFIX.rstrip(" \t"), SUFFIX, LINES)
    queue = Queue(Engine(dlm, lang="python", lines=0, batch=3, options=UNGUARDED))

    async def arrive():
        return await asyncio.gather(*(queue.answer(Fill(PREFIX, SUFFIX, ceiling=48, seed=i)) for i in range(3)))

    answers = asyncio.run(arrive())
    assert [a.text for a in answers] == [LINES] * 3
    assert queue.counters.rows == predict.calls and queue.counters.forwards < queue.counters.rows  # shared forwards


def test_openai_n_2_and_ollama_grow_the_fill():
    from starlette.testclient import TestClient

    from dlmcode.serve.app import make_app
    from dlmcode.serve.engine import Engine

    dlm, _ = knowing(PREFIX.rstrip(" \t"), SUFFIX, LINES)
    c = TestClient(make_app(Engine(dlm, lang="python", lines=0, options=UNGUARDED)))
    body = {"model": "dlmcode", "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 48, "n": 2}
    choices = c.post("/v1/completions", json=body).json()["choices"]
    assert [ch["text"] for ch in choices] == [LINES, LINES]
    ollama = {"model": "dlmcode", "prompt": PREFIX, "suffix": SUFFIX, "stream": False}
    assert c.post("/api/generate", json=ollama).json()["response"] == LINES


def test_the_live_view_follows_a_growing_fill():
    import io

    from rich.console import Console

    from dlmcode.cli.view import CanvasView, summary

    dlm, _ = knowing("ab", "cd", "0123456789")
    job = fill.prepare_infill("ab⟦fill⟧cd", dlm=dlm)
    view = CanvasView(job, Console(file=io.StringIO()))
    texts = [view.render(step).plain for step in job.steps()]
    assert "0123456789" in texts[-1] and "filled 10/10" in texts[-1]
    assert "expanded 6, deleted 0" in summary(fill.prepare_infill("ab⟦fill⟧cd", dlm=dlm).run())


def test_limits_add_the_rules_constants_where_expand_and_delete_are_allowed():
    tokens = expanding.Tokens(expand=3, delete=0)
    expand = torch.tensor([True, False, True])
    delete = torch.tensor([True, True, False])
    limits = expanding.Limits(tokens, expand, delete, expand_bias=2.5, delete_bias=-1.0)
    out = limits(torch.zeros(3, 4))
    inf = float("-inf")
    assert out.tolist() == [[-1.0, 0.0, 0.0, 2.5], [-1.0, 0.0, 0.0, inf], [inf, 0.0, 0.0, 2.5]]
    assert limits.select(torch.tensor([2])).expand_bias == 2.5  # the rows a call computes keep the constants
    assert expanding.Limits(tokens, expand, delete)(torch.zeros(3, 4))[0].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_a_familys_rule_sets_the_start_and_other_families_keep_dreamons(monkeypatch):
    dlm, predict = knowing("ab", "cd", "x")
    assert fill.grows(dlm, [0], 64).rule == expanding.PUBLISHED == expanding.Rule(4, 0.0, 0.0)
    monkeypatch.setitem(expanding.RULES, dlm.family, expanding.Rule(start=8))
    result = fill.prepare_infill("ab⟦fill⟧cd", dlm=dlm).run()
    assert result.text == "abxcd" and result.sized == (1,) and result.deleted == 7  # 8 holes, then one delete
    assert fill.prepare_middle("ab", "cd", 6, dlm=dlm, unknown=True).plan.canvas.n_holes == 6  # the ceiling caps it
