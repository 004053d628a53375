"""Every path of a served fill is guarded: through the real app (Starlette's TestClient), a scripted model
that writes a fill the client's text would break, and the client's own splice compiled.

The guard judges the text the client splices (the whitespace healing, the line cut, without
input_extra), an early end (the time limit, the fill's end) commits what the guard passes, a large
file's window starts on a statement boundary, and each protocol says when the guard gave up.
"""

from __future__ import annotations

import pytest
import torch
from starlette.testclient import TestClient

from dlmcode.serve.app import make_app
from dlmcode.serve.engine import Engine

from editors import llama_vim_body
from serve_tiny import PAD, VOCAB, CharTokenizer, char_dlm

GUARDED = {"options": {"guard": True}}
UNGUARDED = {"options": {"guard": False}}


class Anchored:
    """A scripted model that writes `script` into the holes right after the first place the canvas holds
    `anchor` (the end of the prefix as the canvas has it), then pads, surer early than late; wherever
    the server's windows put the hole."""

    def __init__(self, anchor: str, script: str) -> None:
        self.anchor = CharTokenizer().encode(anchor)
        self.ids = CharTokenizer().encode(script)
        self.calls = 0

    def start(self, tokens: list[int]) -> int:
        n = len(self.anchor)
        return next(i + n for i in range(len(tokens) - n + 1) if tokens[i : i + n] == self.anchor)

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        start = self.start(tokens.tolist())
        logits = torch.zeros(len(tokens), VOCAB)  # (L, V)
        for pos in range(len(tokens)):
            k = pos - start
            logits[pos, self.ids[k] if 0 <= k < len(self.ids) else PAD] = 10.0 - 0.05 * max(k, 0)
        return logits


def served(anchor: str, script: str, context: int = 256, **engine) -> TestClient:
    dlm = char_dlm(Anchored(anchor, script), context)
    return TestClient(make_app(Engine(dlm, "low-confidence", {"block": "8"}, **{"lang": "python", **engine})))


def infill(c: TestClient, prefix: str, suffix: str, **fields) -> dict:
    r = c.post("/infill", json={**llama_vim_body(prefix, "", suffix), "response_fields": None, **fields})
    assert r.status_code == 200, r.text
    return r.json()


def compiles(text: str) -> bool:
    try:
        compile(text, "<served>", "exec")
    except SyntaxError:
        return False
    return True


# ---------------------------------------------------------------- the text judged is the text the client splices


def test_the_guard_judges_the_fill_after_the_servers_whitespace_healing():
    # the canvas ends before the cursor's indentation: "  y = 2" there is a block at 2 spaces and parses;
    # the client gets it at the user's 4 spaces, above a line at 2: broken (the old guard passed it)
    prefix, suffix = "def add(a, b):\n    ", "\n  return y\n"
    c = served("def add(a, b):\n", "  y = 2\n")
    plain = infill(c, prefix, suffix, **UNGUARDED)
    assert plain["content"] == "y = 2" and not compiles(prefix + plain["content"] + suffix)
    assert plain["dlmcode"]["breakage"]["broken"] is True
    got = infill(c, prefix, suffix, **GUARDED)
    assert compiles(prefix + got["content"] + suffix), got["content"]
    assert got["dlmcode"]["breakage"]["broken"] is False and got["dlmcode"]["guard"]["gave_up"] is False


def test_the_guard_judges_the_one_line_the_client_gets():
    # two lines that parse together; the server's line rule sends the first alone, which does not
    prefix, suffix = "def add(a, b):\n    ", "\n"
    c = served("def add(a, b):\n", "    return (a +\n        b)\n")
    plain = infill(c, prefix, suffix, **UNGUARDED)
    assert plain["content"] == "return (a +" and plain["dlmcode"]["breakage"]["broken"] is True
    got = infill(c, prefix, suffix, **GUARDED)
    assert "\n" not in got["content"] and compiles(prefix + got["content"] + suffix), got["content"]


@pytest.mark.parametrize(
    "chunk",
    [
        'def other():\n    """Starts a docstring that this chunk never ends\n',  # ends inside a docstring
        'the end of a docstring begun in a chunk before"""\nx = 1\n',  # begins inside one
    ],
)
def test_input_extra_is_context_for_the_model_not_the_file_judged(chunk):
    # judged with the chunk, the whole file was a string, and every fill passed
    prefix, suffix = "def add(a, b):\n    ", "\n"
    c = served("def add(a, b):\n", "    return (a + b\n")
    extra = {"input_extra": [{"filename": "other.py", "text": chunk}]}
    plain = infill(c, prefix, suffix, **extra, **UNGUARDED)
    assert plain["content"] == "return (a + b" and plain["dlmcode"]["breakage"]["broken"] is True
    got = infill(c, prefix, suffix, **extra, **GUARDED)
    assert compiles(prefix + got["content"] + suffix), got["content"]
    assert got["dlmcode"]["breakage"]["broken"] is False


# ---------------------------------------------------------------- an early end is guarded too


@pytest.mark.parametrize("budget", [1e-6, 500])
def test_a_time_limit_that_runs_out_commits_what_the_guard_passes(budget):
    # 1e-6 ms has run out after the first call, whatever the machine: the rest is committed at once
    prefix, suffix = "def add(a, b):\n    ", "\n"
    c = served("def add(a, b):\n", "    return (a + b\n")
    got = infill(c, prefix, suffix, t_max_predict_ms=budget, **GUARDED)
    assert compiles(prefix + got["content"] + suffix), got["content"]
    assert got["dlmcode"]["breakage"]["broken"] is False
    if budget < 1:
        assert got["dlmcode"]["timed_out"] is True and got["dlmcode"]["guard"]["rest"] == "cut"
        plain = infill(c, prefix, suffix, t_max_predict_ms=budget, **UNGUARDED)
        assert plain["content"] == "return (a + b"  # unguarded, the model's top tokens, broken


def test_a_time_limit_serves_the_models_own_tokens_cut_where_they_stop_passing_never_a_fillers():
    # the model's top tokens `return (a + b` break the file; the witness's were `pass` and spaces, filler text the
    # model never proposed, and the client got them: now the longest run of the model's own tokens that passes
    prefix, suffix = "def add(a, b):\n    ", "\n"
    c = served("def add(a, b):\n", "    return (a + b\n")
    got = infill(c, prefix, suffix, t_max_predict_ms=1e-6, **GUARDED)
    assert got["content"] == "return " and got["dlmcode"]["guard"]["rest"] == "cut"
    assert compiles(prefix + got["content"] + suffix) and got["dlmcode"]["breakage"]["broken"] is False


def test_a_time_limit_keeps_the_models_tokens_when_the_guard_passes_them():
    prefix, suffix = "def add(a, b):\n    ", "\n"
    c = served("def add(a, b):\n", "    return a + b\n")
    got = infill(c, prefix, suffix, t_max_predict_ms=1e-6, **GUARDED)
    assert got["content"] == "return a + b" and got["dlmcode"]["guard"]["rest"] == "model"


# ---------------------------------------------------------------- a large file's window


def large_file(cursor_line: str) -> tuple[str, str]:
    """A module whose docstring is far longer than the server keeps (its window used to start inside it), a
    class with many methods, and the cursor in the last one."""
    doc = '"""A module.\n\n' + "".join(f"Line {i} of the module's docstring: def f(x): return (x\n" for i in range(400))
    methods = "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(300))
    prefix = doc + '"""\n\nimport os\n\n\nclass Big:\n' + methods + "    def add(self, a, b):\n" + cursor_line
    return prefix, "\n\n    def last(self):\n        return 0\n"


def test_a_large_files_window_starts_on_a_statement_with_the_blocks_around_it():
    from dlmcode.serve import trim
    from dlmcode.serve.request import Fill

    prefix, suffix = large_file("        ")
    kept, cut = trim.trim(Fill(prefix, suffix), 256, "python")
    assert cut and len(prefix) > 16_000 and len(kept.prefix) < len(prefix)
    assert kept.prefix.startswith("class Big:\n    def m")  # the class's head, then whole methods
    assert compiles(kept.prefix + "return a" + kept.suffix)
    plain, _ = trim.trim(Fill(prefix, suffix), 256)  # no language: a line cut, inside the docstring's class body
    assert not compiles(plain.prefix + "return a" + plain.suffix)


def test_a_fill_16_kb_into_a_large_file_is_judged_as_the_file_has_it():
    prefix, suffix = large_file("        ")
    assert len(prefix) > 16_000
    c = served("    def add(self, a, b):\n", "        return (a + b\n")
    plain = infill(c, prefix, suffix, **UNGUARDED)
    assert plain["content"] == "return (a + b" and plain["truncated"] is True
    assert plain["dlmcode"]["breakage"]["broken"] is True  # was false: judged inside a string
    got = infill(c, prefix, suffix, **GUARDED)
    assert compiles(prefix + got["content"] + suffix), got["content"]


# ---------------------------------------------------------------- each protocol says what the guard did


def test_each_protocol_says_when_the_guard_gave_up():
    # no language known to the server: the guard cannot hold, and the answer says so and why
    c = served("def add(a, b):\n", "    return a + b\n", lang=None)
    body = {"decoder": "low-confidence", **GUARDED}
    answers = [
        c.post("/infill", json={"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n", **body}).json(),
        c.post("/v1/completions", json={"prompt": "def add(a, b):\n    ", "suffix": "\n", **body}).json(),
        c.post(
            "/api/generate",
            json={"prompt": "def add(a, b):\n    ", "suffix": "\n", "stream": False, "options": {"guard": True}},
        ).json(),
    ]
    for got in answers:
        guard = got["dlmcode"]["guard"]
        assert guard["gave_up"] is True and "language is unknown" in guard["why"]
    known = served("def add(a, b):\n", "    return a + b\n")
    got = known.post("/v1/completions", json={"prompt": "def add(a, b):\n    ", "suffix": "\n", **body}).json()
    assert got["dlmcode"]["guard"]["gave_up"] is False and got["dlmcode"]["guard"]["why"] is None
    off = known.post(
        "/api/generate", json={"prompt": "def add(a, b):\n    ", "stream": False, "options": {"guard": False}}
    ).json()
    assert off["dlmcode"]["guard"] is None  # not asked for


def test_a_fill_never_comments_out_the_rest_of_the_users_line_whatever_input_extra_holds():
    # the comment check reads the client's file too: with the chunk in it, the whole file was a string
    prefix, suffix = "def f(x, y):\n    return x", " + y\n"
    c = served("def f(x, y):\n    return x", "  # the rest\n")
    extra = {"input_extra": [{"filename": "other.py", "text": 'def other():\n    """Never ended\n'}]}
    plain = infill(c, prefix, suffix, **extra, **UNGUARDED)
    assert "#" in plain["content"]  # the model's own, unguarded
    got = infill(c, prefix, suffix, **extra, **GUARDED)
    assert "#" not in got["content"] and compiles(prefix + got["content"] + suffix), got["content"]
