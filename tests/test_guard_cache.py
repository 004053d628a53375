"""What the guard remembers between checks and calls (issue 26: its cost per model call) answers as a fresh
computation does: the same fillers, bridges and witnesses whatever was asked before, so caching changes what the
guard costs, never what it admits.

Texts: the guard's sample and files of this interpreter's standard library, cut at random places.
"""

from __future__ import annotations

import random
import sysconfig
from pathlib import Path

import torch

from dlmcode.text import guard, literals, pyahead, pylines, pyshape

DATA = Path(__file__).parent / "data" / "guard"
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def sources() -> list[str]:
    found = [(DATA / "sample.py").read_text()]
    return found + [(STDLIB / name).read_text() for name in ("queue.py", "textwrap.py") if (STDLIB / name).exists()]


def cuts(rnd: random.Random, text: str, n: int) -> list[tuple[str, str]]:
    """n (before, after) pairs around a hole: a few places, each cut at several lengths of what the decode wrote
    before it (the same code after it, as when a decode writes a hole from its start)."""
    out = []
    for _ in range(n):
        at = rnd.randrange(len(text))
        end = min(len(text), at + rnd.randrange(0, 40))
        for written in sorted(rnd.sample(range(0, 60), 4)):
            out.append((text[: max(0, at - written)], text[end:]))
    return out


def fresh_bridges(before: str, after: str) -> tuple[tuple[str, str], ...]:
    pyshape.forget()
    return pyshape.bridges(before, after)


def test_bridges_remembered_across_cuts_are_the_bridges_of_a_fresh_replay():
    rnd = random.Random(26)
    pairs = [pair for text in sources() for pair in cuts(rnd, text, 8)]
    expected = [fresh_bridges(b, a) for b, a in pairs]
    pyshape.forget()
    order = list(range(len(pairs)))
    rnd.shuffle(order)  # the lines after a hole replayed from the shapes of other cuts first
    for i in order:
        pyshape.bridges.cache_clear()  # only the replays of the code after the hole stay remembered
        assert pyshape.bridges(*pairs[i]) == expected[i], pairs[i]
    assert sum(map(bool, expected)) > len(pairs) // 10  # the cuts do get bridges


def test_a_replay_remembered_for_one_shape_is_not_read_for_another():
    after = pyshape.lines("    x = 1\nelse:\n    y = 2\n")
    ahead = pyahead._ahead(tuple(after))
    inside_if = pyshape.replay(pyshape.lines("if a:\n    b = 1\n"))
    plain = pyshape.replay(pyshape.lines("b = 1\n"))
    assert ahead.clean(inside_if, True, inside_if.errors)  # `else` after an `if`: no new error
    assert not ahead.clean(plain, True, plain.errors)  # after a plain statement: one
    assert ahead.clean(inside_if, True, inside_if.errors)


def test_a_line_remembered_before_the_lines_after_a_hole_is_told_from_its_head():
    ahead = pyshape.Ahead(tuple(pyshape.lines("    y = 1\nz = 2\n")))
    shape = pyshape.replay(pyshape.lines("a = 1\n"))
    head, plain = pyshape.Line("", "if x:"), pyshape.Line("", "if x: y")  # the same word, one waits for a body
    assert ahead.clean_after(shape, shape.key(), head.indent, head, False, shape.errors)
    assert not ahead.clean_after(shape, shape.key(), plain.indent, plain, False, shape.errors)


def test_the_lines_after_a_hole_count_from_every_shape_as_a_fresh_replay_does():
    rnd = random.Random(3)
    for text in sources():
        found = pyshape.lines(text)
        for _ in range(20):
            at = rnd.randrange(1, len(found))
            rest = tuple(found[at : at + pyshape.AHEAD])
            ahead = pyshape.Ahead(rest)
            for _ in range(30):  # shapes of other places in the file, each replayed from a window's start
                start = rnd.randrange(0, at)
                stop = rnd.randrange(start, at + 1)
                shape = pyshape.replay(found[start:stop])
                for whole in (False, True):
                    fresh = pyshape.replay(list(rest), shape.copy())
                    assert ahead.errors(shape, whole) == (fresh.end() if whole else fresh.errors)
                    line = rnd.choice(found)  # a line the bridge puts first, then the lines after the hole
                    fresh = pyshape.replay(list(rest), shape.copy().feed(line))
                    count = fresh.end() if whole else fresh.errors
                    for base in (count, count + 1):
                        assert ahead.clean_after(shape, shape.key(), line.indent, line, whole, base) == (base == count)


# ---------------------------------------------------------------- the sweep reads a run only when it gets there


def eager_first_witness(canvas, runs, around, fit, judge, seeds, budget):
    """first_witness as it was before it read runs lazily: every run's fillers first."""
    options = [fit(b, a, len(r)) for r, (b, a) in zip(runs, around, strict=True)]
    options = [[s, *(o for o in opts if o != s)] for s, opts in zip(seeds, options, strict=True)]
    choice = [0] * len(runs)

    def assemble():
        out = canvas.clone()
        for r, opts, c in zip(runs, options, choice, strict=True):
            out[r.start : r.stop] = torch.tensor(opts[c], dtype=torch.long)
        return out

    best, spent = judge(assemble()), 1
    for _ in range(2):
        for i, opts in enumerate(options):
            for c in range(len(opts)):
                if best == 0:
                    return assemble()
                if spent >= budget:
                    return None
                keep, choice[i] = choice[i], c
                errors, spent = judge(assemble()), spent + 1
                if errors < best:
                    best = errors
                else:
                    choice[i] = keep
    return assemble() if best == 0 else None


def test_a_sweep_that_reads_runs_lazily_finds_the_witness_an_eager_one_finds():
    rnd = random.Random(7)
    for trial in range(300):
        n_runs = rnd.randrange(1, 5)
        runs, at = [], 0
        for _ in range(n_runs):
            at += rnd.randrange(1, 3)
            length = rnd.randrange(1, 4)
            runs.append(range(at, at + length))
            at += length
        canvas = torch.zeros(at + 1, dtype=torch.long)
        around = [(f"b{i}", f"a{i}") for i in range(n_runs)]
        table = {i: [[rnd.randrange(1, 4) for _ in runs[i]] for _ in range(rnd.randrange(0, 5))] for i in range(n_runs)}
        seeds = [[rnd.randrange(1, 4) for _ in r] for r in runs]
        target = {rnd.randrange(1, 4) for _ in range(2)}  # the judge: errors = tokens outside a random set

        def fit(before, after, n, table=table):
            return table[int(before[1:])]

        def judge(c, target=target):
            return sum(int(t) not in target and int(t) != 0 for t in c.tolist())

        budget = rnd.choice([4, 16, 64])
        read = []
        lazy = guard.first_witness(
            canvas, runs, lambda i, read=read, around=around: read.append(i) or around[i], fit, judge, seeds, budget
        )
        eager = eager_first_witness(canvas, runs, around, fit, judge, seeds, budget)
        assert (lazy is None) == (eager is None), trial
        assert lazy is None or torch.equal(lazy, eager), trial
        assert len(read) == len(set(read))  # each run's text read once at most


def test_a_sweep_that_ends_in_the_first_run_never_reads_the_others():
    runs = [range(0, 2), range(3, 5), range(6, 8)]
    read = []

    def around(i):
        read.append(i)
        return "", ""

    found = guard.first_witness(
        torch.zeros(9, dtype=torch.long),
        runs,
        around,
        lambda b, a, n: [[2] * n, [1] * n],
        lambda c: int((c == 3).sum()),
        [[3, 3], [1, 1], [1, 1]],
        budget=16,
    )
    assert found is not None and found[:2].tolist() == [2, 2]
    assert read == [0]


# ---------------------------------------------------------------- scans resumed from a remembered prefix or suffix

NASTY = ["'", '"', "'''", '"""', "\\", "\\\n", "#", "/*", "*/", "//", "`", "\n", "(", ")", "[", "]", "{", "}", "rb'"]


def edited_end(rnd: random.Random, text: str) -> str:
    """`text` cut somewhere and continued with a few pieces a decode might write (quotes, backslashes, comments)."""
    cut = text[: rnd.randrange(len(text) + 1)]
    return cut + "".join(rnd.choice(NASTY + ["x", " ", "pass"]) for _ in range(rnd.randrange(0, 6)))


def edited_start(rnd: random.Random, text: str) -> str:
    return (
        "".join(rnd.choice(NASTY + ["x", " ", "pass"]) for _ in range(rnd.randrange(0, 6)))
        + text[rnd.randrange(len(text) + 1) :]
    )


def brackets_open(text: str) -> list[str]:
    stack: list[str] = []
    for ch in guard.STRINGS.sub("", text):
        if ch in "([{":
            stack.append(ch)
        elif ch in ")]}" and stack and stack[-1] == "([{"[")]}".index(ch)]:
            stack.pop()
    return stack


def brackets_unopened(text: str) -> list[str]:
    stack: list[str] = []
    for ch in reversed(guard.STRINGS.sub("", text)):
        if ch in ")]}":
            stack.append(ch)
        elif ch in "([{" and stack and stack[-1] == ")]}"["([{".index(ch)]:
            stack.pop()
    return stack[::-1]


def test_a_scan_resumed_from_a_remembered_prefix_finds_what_a_fresh_scan_finds():
    from dlmcode.text import scans

    rnd = random.Random(11)
    texts = sources()
    patterns = [
        (guard.STRINGS, ("'''", '"""', "/*", "`"), 0),
        (pyshape.MASK, ("'''", '"""'), 1),
        (guard.LEXED["python"], (), 0),
        (guard.LEXED["c"], (), 0),
    ]
    for pattern, openers, group in patterns:
        scan = scans.Prefixes(pattern, openers, literals._push, (), group)
        for _ in range(150):
            base = rnd.choice(texts)
            at = rnd.randrange(len(base) + 1)
            for _ in range(3):  # the same hole, as the decode writes more of its start
                text = base[:at] + "".join(rnd.choice(NASTY + ["x", " "]) for _ in range(rnd.randrange(0, 8)))
                found = scan.scan(text)
                assert found.spans == [m.span() for m in pattern.finditer(text)], (pattern.pattern, text[-80:])
                assert list(found.state) == brackets_open_with(pattern, text)
            text = edited_end(rnd, base)
            assert scan.scan(text).spans == [m.span() for m in pattern.finditer(text)]


def brackets_open_with(pattern, text: str) -> list[str]:
    stack: list[str] = []
    for ch in pattern.sub("", text):
        if ch in "([{":
            stack.append(ch)
        elif ch in ")]}" and stack and stack[-1] == "([{"[")]}".index(ch)]:
            stack.pop()
    return stack


def test_a_scan_joined_to_a_remembered_suffix_finds_what_a_fresh_scan_finds():
    from dlmcode.text import scans

    rnd = random.Random(12)
    texts = sources()
    scan = scans.Suffixes(guard.STRINGS, literals._pull, (), head=64)
    for _ in range(300):
        base = rnd.choice(texts)
        at = rnd.randrange(len(base) + 1)
        for _ in range(3):  # the same hole, as the decode writes more of its end
            text = "".join(rnd.choice(NASTY + ["x", " "]) for _ in range(rnd.randrange(0, 8))) + base[at:]
            found = scan.scan(text)
            assert found.spans == [m.span() for m in guard.STRINGS.finditer(text)], text[:80]
            assert list(found.state)[::-1] == brackets_unopened(text)
        text = edited_start(rnd, base)
        assert scan.scan(text).spans == [m.span() for m in guard.STRINGS.finditer(text)]


def test_the_guard_s_literal_and_bracket_reads_answer_as_a_fresh_read_of_the_whole_text():
    rnd = random.Random(13)
    for _ in range(200):
        base = rnd.choice(sources())
        before, after = edited_end(rnd, base), edited_start(rnd, base)
        assert literals._open_stack(before) == brackets_open(before)
        assert literals._unopened(after) == brackets_unopened(after)
        for lang in ("python", "c"):
            last = ([None, *guard.LEXED[lang].finditer(before)])[-1]
            fresh = "" if last is None or last.end() != len(before) else last.group()
            got = guard.LITERALS[lang].scan(before).spans
            assert (before[got[-1][0] :] if got and got[-1][1] == len(before) else "") == fresh


def test_a_string_continued_by_an_escaped_line_break_is_read_again_when_its_closer_comes():
    from dlmcode.text import scans

    scan = scans.Prefixes(guard.STRINGS, ("'''", '"""', "/*", "`"), literals._push, ())
    for text in ("a = ('x\\\nb", "a = ('x\\\nb')", "a = ('x\\\nb)"):  # the quote's attempt reads past the line break
        assert scan.scan(text).spans == [m.span() for m in guard.STRINGS.finditer(text)], text
        assert list(scan.scan(text).state) == brackets_open(text), text


def test_a_window_read_on_from_a_remembered_prefix_reads_as_a_fresh_read():
    rnd = random.Random(14)
    for _ in range(150):
        base = rnd.choice(sources())
        at, start = rnd.randrange(len(base) + 1), 0
        start = pyshape.code_start(base, at - rnd.randrange(200, 3000))
        for _ in range(3):  # the same window, as the decode writes more of the hole's start
            window = base[start:at] + "".join(rnd.choice(NASTY + ["x", " ", ":"]) for _ in range(rnd.randrange(0, 8)))
            read = pyshape.reading(window)
            found = pyshape.lines(window)
            assert read.last == (found[-1] if found else None), window[-60:]
            assert read.shape.key() == pyshape.replay(found[:-1]).key()
            assert read.shape.errors == pyshape.replay(found[:-1]).errors
            assert read.chars == pylines._depth(pyshape.mask(window))
            assert read.item() == pylines._item(pyshape.mask(window))


def test_a_remembered_tokenizer_answers_as_the_tokenizer_and_asks_it_once_per_text():
    class Counting:
        calls = 0

        def encode(self, text):
            self.calls += 1
            return [ord(c) for c in text]

        def decode(self, ids):
            self.calls += 1
            return "".join(map(chr, ids))

    plain, counted = Counting(), Counting()
    coder = guard.Remembered(counted)
    fillers = [guard.Filler("if x:", " ", "\n"), guard.Filler("", "x", ")"), guard.Filler("(", " ", "")]
    for n in (3, 8, 3, 8):
        assert guard.fits(fillers, n, coder, None) == guard.fits(fillers, n, plain, None)
    assert counted.calls < plain.calls / 3


def test_each_thread_remembers_its_own_replays_and_scans():
    """serve decodes each request in a thread of its own: a remembered iterator is never read by two at once."""
    import threading

    from dlmcode.text import scans

    rest = tuple(pyshape.lines("    x = 1\nelse:\n    y = 2\n"))
    scan = scans.Prefixes(guard.STRINGS, ("'''", '"""', "/*", "`"), literals._push, ())
    mine = pyahead._ahead(rest)
    scan.scan("a = (1,\nb = 2\n")
    seen = {}

    def other() -> None:
        seen["ahead"] = pyahead._ahead(rest)
        seen["entries"] = list(scan.entries)
        seen["found"] = scan.scan("a = (1,\nb = 2\n").state

    worker = threading.Thread(target=other)
    worker.start()
    worker.join()
    assert pyahead._ahead(rest) is mine and seen["ahead"] is not mine
    assert scan.entries and seen["entries"] == []
    assert seen["found"] == scan.scan("a = (1,\nb = 2\n").state == ("(",)


def test_the_plans_remembered_for_a_shape_are_those_of_a_fresh_one():
    rnd = random.Random(15)
    texts = [*sources(), "def f():\n\tif a:\n\t\tb = 1\n\ttry:\n\t\tc = 2\n"]  # a tab-indented file too
    shapes = []
    for text in texts:
        found = pyshape.lines(text)
        for _ in range(40):
            start = rnd.randrange(0, len(found))
            shapes.append(pyshape.replay(found[start : rnd.randrange(start, len(found) + 1)]))
    for shape in shapes:  # remembered from the other shapes before it, then fresh
        step = shape.step()
        kept = [(planned, now.key(), now.errors - shape.errors) for planned, now in pyahead._planned(shape, step)]
        pyshape.forget()
        fresh = [(planned, now.key(), now.errors - shape.errors) for planned, now in pyahead._planned(shape, step)]
        assert kept == fresh
