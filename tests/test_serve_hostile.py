"""dlmcode serve against hostile requests: each is a one-line 4xx in its protocol's
shape, and the server keeps serving."""

from __future__ import annotations

import dataclasses

import pytest
from starlette.testclient import TestClient

from dlmcode.serve import body as bodies
from dlmcode.serve import warning
from dlmcode.serve.app import make_app
from dlmcode.serve.engine import Engine

from serve_tiny import MASK, CharTokenizer, Gated, tiny_dlm

PREFIX, SUFFIX, SCRIPT = "x = ", "\n", "41 + 1"


@pytest.fixture(scope="module")
def c() -> TestClient:
    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    return TestClient(make_app(Engine(dlm, lang="python")))


def message(path: str, r) -> str:
    data = r.json()
    return data["error"] if path.startswith("/api/") else data["error"]["message"]


def still_serving(c: TestClient) -> None:
    got = c.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 16})
    assert got.status_code == 200 and got.json()["content"] == SCRIPT


RAW = [
    (b"{bad", "not valid JSON"),
    (b"", "the body is empty"),
    (b"[1, 2]", "must be a JSON object, not an array"),
    (b'"text"', "must be a JSON object, not a string"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"n_predict": NaN}', "not valid JSON"),
    (b'{"n_predict": Infinity}', "not valid JSON"),
    (b'{"n_predict": ' + b"9" * 5000 + b"}", "not valid JSON"),
    (b'{"input_prefix": "\xff\xfe"}', "not UTF-8"),
]


@pytest.mark.parametrize("path", ["/infill", "/completion", "/v1/completions", "/api/generate"])
@pytest.mark.parametrize(("raw", "says"), RAW)
def test_malformed_bodies(c, path, raw, says):
    r = c.post(path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400
    text = message(path, r)
    assert says in text and "\n" not in text
    still_serving(c)


WRONG_TYPES = [
    ("/infill", {"input_prefix": 5}, "input_prefix must be a string, not a number"),
    ("/infill", {"input_prefix": "x", "n_predict": "128"}, "n_predict must be an integer, not a string"),
    ("/infill", {"input_prefix": "x", "n_predict": True}, "n_predict must be an integer, not a boolean"),
    ("/infill", {"input_prefix": "x", "n_predict": 12.5}, "n_predict must be an integer"),
    ("/infill", {"input_prefix": "x", "n_predict": -5}, "n_predict -5"),
    ("/infill", {"input_prefix": "x", "n_predict": 100_000}, "past the model's context (256 tokens)"),
    ("/infill", {"input_prefix": "x", "n_predict": 2**62}, "out of range"),
    ("/infill", {"input_prefix": "x", "stream": "yes"}, "stream must be true or false"),
    ("/infill", {"input_prefix": "x", "input_extra": "file"}, "input_extra must be a list"),
    ("/infill", {"input_prefix": "x", "input_extra": [{"text": 3}]}, "text must be a string"),
    ("/infill", {"input_prefix": "x", "stop": [1]}, "stop must be a string or a list of strings"),
    ("/infill", {"input_prefix": "x", "t_max_predict_ms": -1}, "t_max_predict_ms -1"),
    ("/infill", {"input_prefix": "x", "temperature": -0.5}, "temperature -0.5 must be >= 0"),
    ("/infill", {"input_prefix": "x", "options": [1]}, "options must be an object"),
    ("/infill", {"input_prefix": "x", "n_cmpl": 50}, "n_cmpl 50"),
    ("/infill", {"input_prefix": "x", "response_fields": "content"}, "response_fields must be a list"),
    ("/completion", {"prompt": [1, 2, 3]}, "prompt must be a string"),
    ("/v1/completions", {"prompt": {"a": 1}}, "prompt must be a string"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 1e9}, "past the model's context"),
    ("/v1/completions", {"prompt": "x", "n": 0}, "n 0"),
    ("/v1/completions", {"prompt": "x", "max_tokens": -5}, "max_tokens -5: give"),  # the client's own field
    ("/v1/completions", {"prompt": "x", "max_tokens": 100_000}, "max_tokens 100000 is past"),
    ("/v1/completions", {"prompt": "x", "logprobs": 5}, "not supported"),
    ("/api/generate", {"prompt": "x", "options": {"num_predict": "lots"}}, "num_predict must be an integer"),
    ("/api/generate", {"prompt": "x", "options": "fast"}, "options must be an object"),
    ("/api/generate", {"prompt": "x", "options": {"num_predict": -5}}, "options.num_predict -5: give"),
    ("/api/generate", {"prompt": 7}, "prompt must be a string"),
]


@pytest.mark.parametrize(("path", "body", "says"), WRONG_TYPES)
def test_wrong_types_and_values(c, path, body, says):
    r = c.post(path, json=body)
    assert r.status_code == 400, r.text
    assert says in message(path, r)
    still_serving(c)


SURROGATES = [  # raw JSON: "\\ud800" is valid JSON text but decodes to a lone surrogate, which no tokenizer takes
    ("/infill", b'{"input_prefix": "x = \\ud800"}', "input_prefix"),
    ("/infill", b'{"input_prefix": "x", "input_suffix": "\\udfff"}', "input_suffix"),
    ("/infill", b'{"input_prefix": "x", "prompt": "\\ud800"}', "prompt"),
    ("/infill", b'{"input_prefix": "x", "input_extra": [{"filename": "a\\ud800.py", "text": "y"}]}', "input_extra"),
    ("/infill", b'{"input_prefix": "x", "input_extra": [{"text": "\\ud800"}]}', "input_extra"),
    ("/infill", b'{"input_prefix": "x", "stop": ["\\ud800"]}', "stop"),
    ("/infill", b'{"input_prefix": "x", "options": {"\\ud800": 1}}', "options"),
    ("/infill", b'{"input_prefix": "x", "decoder": "\\ud800"}', "decoder"),
    ("/infill", b'{"input_prefix": "x", "lang": "\\udc80"}', "lang"),
    ("/completion", b'{"prompt": "<fim_prefix>x\\ud800<fim_suffix><fim_middle>"}', "prompt"),
    ("/v1/completions", b'{"prompt": ["x = \\ud800"]}', "prompt"),
    ("/v1/completions", b'{"prompt": "x", "suffix": "\\ud800"}', "suffix"),
    ("/api/generate", b'{"prompt": "x = \\ud800"}', "prompt"),
    ("/api/generate", b'{"prompt": "x", "options": {"stop": ["\\ud800"]}}', "options"),
    ("/api/generate", b'{"\\ud800": 1, "prompt": "x"}', "a key"),
]


@pytest.mark.parametrize(("path", "raw", "field"), SURROGATES)
def test_lone_surrogates_are_a_400_naming_the_field(c, path, raw, field):
    r = c.post(path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    text = message(path, r)
    assert text.startswith(f"{field} holds a lone surrogate") and "\n" not in text
    still_serving(c)


def test_a_surrogate_pair_is_one_character_and_taken(c):
    r = c.post(
        "/infill",
        content=b'{"input_prefix": "x = \\ud83d\\ude00\\nx = ", "n_predict": 4}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200, r.text


def test_unknown_routes_and_methods_in_each_shape(c):
    assert c.get("/nowhere").json()["error"]["message"] == "no route GET /nowhere"
    assert c.get("/v1/chat").json()["error"]["code"] == "not_found"
    assert c.get("/api/pull").json() == {"error": "no route GET /api/pull"}
    r = c.get("/infill")
    assert r.status_code == 405 and r.json()["error"]["message"] == "GET is not allowed on /infill"
    still_serving(c)


def test_oversized_bodies_are_413_declared_or_not(c):
    big = b'{"input_prefix": "' + b"a" * (bodies.MAX_BODY + 10) + b'"}'
    r = c.post("/infill", content=big)
    assert r.status_code == 413 and "more than the server takes" in r.json()["error"]["message"]

    def chunks():  # no Content-Length: the limit is enforced while reading
        for _ in range(bodies.MAX_BODY // 65536 + 2):
            yield b" " * 65536

    r = c.post("/v1/completions", content=chunks())
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = c.post("/api/generate", content=b"{}", headers={"content-length": str(10**12)})
    assert r.status_code in (400, 413)  # a lying length: refused by the server or by us, never read
    still_serving(c)


def test_header_games(c):
    r = c.post(
        "/infill",
        json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 16},
        headers={"content-type": "text/plain", "authorization": "Bearer whatever"},
    )
    assert r.status_code == 200  # no key configured: a stray key is ignored; the content type is not trusted anyway
    still_serving(c)


class MaskReadingTokenizer(CharTokenizer):
    """The char tokenizer, but "[MASK]" in the text is the mask token, as with a BPE tokenizer whose special tokens are
    on."""

    def encode(self, text: str) -> list[int]:
        parts = [CharTokenizer.encode(self, part) for part in text.split("[MASK]")]
        return [i for n, part in enumerate(parts) for i in ([MASK] if n else []) + part]


MASK_TEXT = "s = '[MASK]'\n"
MASK_BODIES = [
    ("/infill", {"input_prefix": MASK_TEXT, "input_suffix": "", "n_predict": 4}),
    ("/infill", {"input_prefix": "x = ", "input_suffix": "\n" + MASK_TEXT, "n_predict": 4}),
    ("/completion", {"prompt": MASK_TEXT, "n_predict": 4}),
    ("/v1/completions", {"prompt": MASK_TEXT, "max_tokens": 4}),
    ("/api/generate", {"prompt": MASK_TEXT, "stream": False, "options": {"num_predict": 4}}),
]


@pytest.mark.parametrize(("path", "body"), MASK_BODIES)
def test_text_that_tokenizes_to_the_mask_token_is_refused_not_made_a_hole(path, body):
    """The user's text must never put a hole in the canvas: the model would fill it and change their code."""
    dlm, script = tiny_dlm("", "1")
    dlm = dataclasses.replace(dlm, tokenizer=MaskReadingTokenizer())
    assert MASK in dlm.tokenizer.encode(MASK_TEXT)  # the premise: this text does produce the mask id
    c = TestClient(make_app(Engine(dlm)))
    r = c.post(path, json=body)
    assert r.status_code == 400, r.text
    text = message(path, r)
    assert "mask token" in text and "\n" not in text
    assert script.calls == 0  # refused before any decode
    r = c.post("/infill", json={"input_prefix": "x = ", "input_suffix": "\n", "n_predict": 4})
    assert r.status_code == 200  # text without it is still served


def test_warning_beyond_localhost_without_a_key():
    assert warning("127.0.0.1", None) is None
    assert warning("0.0.0.0", "k") is None
    line = warning("0.0.0.0", None)
    assert line is not None and "without --api-key" in line and "\n" not in line


def test_a_huge_prefix_and_suffix_are_trimmed_before_any_tokenizing():
    """Only what the context could hold is tokenized (a far end cut at a line break), and the answer says truncated."""
    from dlmcode.serve import trim

    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    seen = []
    encode = dlm.tokenizer.encode
    dlm.tokenizer.encode = lambda text: seen.append(len(text)) or encode(text)
    client = TestClient(make_app(Engine(dlm, lang="python")))
    far = "y = 1\n" * 300_000  # 1.8 MB on each side and in input_extra
    r = client.post(
        "/infill",
        json={
            "input_prefix": far + PREFIX,
            "input_suffix": SUFFIX + far,
            "n_predict": 16,
            "input_extra": [{"filename": "a.py", "text": far}],
        },
    )
    assert r.status_code == 200 and r.json()["truncated"] is True
    assert max(seen) <= trim.budget(dlm.context), max(seen)


def test_trim_keeps_the_lines_nearest_the_cursor():
    from dlmcode.serve import trim

    assert trim.nearest_end("aaa\nbbb\nccc", 5) == "ccc"  # from a line start
    assert trim.nearest_end("aaa\nbbb\n", 5) == "bbb\n"
    assert trim.nearest_end("a" * 10, 4) == "aaaa"  # one long line: cut inside it
    assert trim.nearest_start("aaa\nbbb\nccc", 5) == "aaa\n"
    assert trim.nearest_start("a" * 10, 4) == "aaaa"
    assert trim.nearest_end("short", 100) == "short" and trim.nearest_start("short", 100) == "short"


def test_stopping_the_queue_cancels_the_decode_in_flight():
    """What Ctrl-C and SIGTERM call: a decode of many calls ends after its current step. The decode
    is held inside its 3rd call until the stop has been asked for."""
    import asyncio

    from dlmcode.serve.queue import Queue
    from dlmcode.serve.request import Fill
    from dlmcode.serve.steps import ClientGone

    dlm, script = tiny_dlm(PREFIX, SCRIPT * 8)
    gated = Gated(script, at=3)
    dlm.predict = gated
    queue = Queue(Engine(dlm, options={"block": "1"}, lines=0))

    async def stop_when_held():
        assert await asyncio.to_thread(gated.held.wait, 30)
        queue.stop()
        gated.open.set()

    async def ask():
        stopper = asyncio.create_task(stop_when_held())
        with pytest.raises(ClientGone):
            await queue.answer(Fill(prefix=PREFIX, suffix=SUFFIX, ceiling=40))
        await stopper

    asyncio.run(ask())
    assert script.calls == 3  # the held call was its last: 40 calls uncancelled
