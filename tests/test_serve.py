"""dlmcode serve in-process (Starlette's TestClient) with a scripted tiny model: protocols, length rule, time, queue."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from starlette.testclient import TestClient

from dlmcode.core import settings
from dlmcode.jobs import sizing
from dlmcode.serve import fim, length
from dlmcode.serve.app import make_app
from dlmcode.serve.engine import Engine
from dlmcode.serve.queue import Queue
from dlmcode.serve.request import Fill
from dlmcode.serve.steps import ClientGone

from editors import LLAMA_VIM_WARMUP, LLAMA_VSCODE_WARMUP, llama_vim_body, llama_vscode_body, ollama_body
from serve_tiny import Gated, tiny_dlm, when_queued

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\n\nprint(add(1, 2))\n"
SCRIPT = "return a + b"


def client(script: str = SCRIPT, prefix: str = PREFIX, delay: float = 0.0, **engine) -> tuple[TestClient, object]:
    dlm, predict = tiny_dlm(prefix, script, delay)
    return TestClient(make_app(Engine(dlm, lang="python", **engine))), predict


# ---------------------------------------------------------------- llama.cpp


def test_llama_vim_infill_gets_the_flattened_fields_it_reads():
    c, _ = client()
    r = c.post("/infill", json=llama_vim_body(PREFIX, "", SUFFIX))
    assert r.status_code == 200
    got = r.json()
    assert got["content"] == SCRIPT
    assert set(got) == set(llama_vim_body("", "", "")["response_fields"])  # only the fields asked for, "/"-flattened
    assert got["truncated"] is False and got["tokens_cached"] == 0
    assert got["timings/predicted_n"] == len(SCRIPT)


def test_the_cursor_line_in_prompt_goes_after_the_prefix():
    c, _ = client(script="a + b", prefix=PREFIX + "return ")
    got = c.post("/infill", json=llama_vim_body(PREFIX, "return ", SUFFIX)).json()
    assert got["content"] == "a + b"


def test_warmups_are_answered_at_once_without_a_model_call():
    c, predict = client()
    r = c.post("/infill", json=LLAMA_VIM_WARMUP)
    assert r.status_code == 200 and r.json() == {}  # response_fields [""] picks nothing, as llama.cpp answers
    r = c.post("/infill", json=LLAMA_VSCODE_WARMUP)
    assert r.status_code == 200 and r.json()["content"] == ""
    assert r.json()["dlmcode"]["stop_reason"] == "warmup"
    assert predict.calls == 0


def test_llama_vscode_n_cmpl_gets_a_list_it_reads():
    c, _ = client(prefix="x = 1\n" + PREFIX)  # input_extra's text comes first on the canvas
    r = c.post("/infill", json=llama_vscode_body(PREFIX, SUFFIX))
    got = r.json()
    assert isinstance(got, list) and [g["content"] for g in got] == [SCRIPT] * 3
    assert [g["index"] for g in got] == [0, 1, 2]
    assert got[0]["generation_settings"]["n_ctx"] == 256
    assert set(got[0]["timings"]) >= {
        "prompt_n",
        "prompt_ms",
        "prompt_per_second",
        "predicted_n",
        "predicted_ms",
        "predicted_per_second",
    }


def test_dlmcode_fields_in_the_answer():
    c, _ = client()
    got = c.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 20}).json()
    extra = got["dlmcode"]
    assert extra["decoder"] == "low-confidence" and extra["holes"] == len(
        SCRIPT
    )  # the length rule read the script's end (of 20)
    assert extra["calls"] == 1 + len(SCRIPT)  # the length rule's probe, then one commit per call
    assert extra["tpf"] == pytest.approx(len(SCRIPT) / (1 + len(SCRIPT)), abs=1e-4)
    assert extra["breakage"] == {"broken": False, "new_errors": 0, "first_line": None, "touches_span": False}
    assert extra["stop_reason"] == "end" and extra["timed_out"] is False


def test_health_props_models():
    c, _ = client()
    assert c.get("/health").json() == {"status": "ok"}
    assert c.get("/props").json()["default_generation_settings"]["n_ctx"] == 256
    assert c.get("/v1/models").json()["data"][0]["id"] == "dlmcode"


@pytest.mark.parametrize(
    "prompt",
    [
        f"<PRE> {PREFIX} <SUF>{SUFFIX} <MID>",  # CodeLlama / llama.cpp (Continue's template, with its spaces)
        f"<fim_prefix>{PREFIX}<fim_suffix>{SUFFIX}<fim_middle>",  # StarCoder
        f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",  # Qwen2.5-Coder
        f"<｜fim▁begin｜>{PREFIX}<｜fim▁hole｜>{SUFFIX}<｜fim▁end｜>",  # DeepSeek-Coder
        f"[SUFFIX]{SUFFIX}[PREFIX]{PREFIX}",  # Codestral
    ],
)
def test_completion_takes_prefix_and_suffix_out_of_fim_templates(prompt):
    c, _ = client()
    r = c.post("/completion", json={"prompt": prompt, "n_predict": 32, "stream": False})
    assert r.json()["content"] == SCRIPT


def test_fim_parse_exact():
    assert fim.parse("<fim_prefix>a = <fim_suffix>\nb<fim_middle>1") == ("a = 1", "\nb", "starcoder")
    assert fim.parse("<fim_suffix>\nb<fim_prefix>a = <fim_middle>") == ("a = ", "\nb", "starcoder-spm")
    assert fim.parse("<PRE> x <SUF>y <MID>") == ("x", "y", "codellama")
    assert fim.parse("no template <fim_prefix> only") is None


def test_llama_cpp_stream_is_server_sent_events():
    c, _ = client()
    r = c.post("/completion", json={"prompt": f"<PRE> {PREFIX} <SUF>{SUFFIX} <MID>", "stream": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[len("data: ") :]) for line in r.text.split("\n\n") if line]
    assert [e["stop"] for e in events] == [False, True]
    assert "".join(e["content"] for e in events) == SCRIPT
    assert "timings" in events[-1]


# ---------------------------------------------------------------- OpenAI, Ollama


def test_openai_completion_and_stream():
    c, _ = client()
    got = c.post(
        "/v1/completions", json={"model": "dlmcode", "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 32}
    ).json()
    assert got["object"] == "text_completion" and got["choices"][0]["text"] == SCRIPT
    assert got["choices"][0]["finish_reason"] == "stop" and got["usage"]["completion_tokens"] == len(SCRIPT)
    r = c.post("/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 32, "stream": True})
    frames = [f for f in r.text.split("\n\n") if f]
    assert frames[-1] == "data: [DONE]"
    chunks = [json.loads(f[len("data: ") :]) for f in frames[:-1]]
    assert "".join(ch["choices"][0]["text"] for ch in chunks) == SCRIPT
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_openai_max_tokens_cuts_the_fill_and_says_length():
    c, _ = client()
    got = c.post("/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 6}).json()
    assert got["choices"][0]["text"] == SCRIPT[:6] and got["choices"][0]["finish_reason"] == "length"


def test_ollama_generate_as_its_python_client_sends_it():
    c, _ = client()
    got = c.post("/api/generate", json=ollama_body(PREFIX, SUFFIX)).json()
    assert got["response"] == SCRIPT and got["done"] is True and got["done_reason"] == "stop"
    assert got["eval_count"] == len(SCRIPT)


def test_ollama_streams_ndjson_by_default():
    c, _ = client()
    r = c.post("/api/generate", json=ollama_body(PREFIX, SUFFIX, stream=None))
    assert r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [x["done"] for x in lines] == [False, True]
    assert "".join(x["response"] for x in lines) == SCRIPT


def test_ollama_empty_prompt_only_loads_and_tags_list_the_model():
    c, predict = client()
    got = c.post("/api/generate", json={"model": "dlmcode"}).json()
    assert got["done_reason"] == "load" and got["response"] == "" and predict.calls == 0
    assert c.get("/api/tags").json()["models"][0]["name"] == "dlmcode"


def test_ollama_decoder_settings_ride_in_options():
    c, _ = client()
    body = {
        **ollama_body(PREFIX, SUFFIX),
        "decoder": "threshold",
        "options": {"num_predict": 32, "tau": 0.5, "top_k": 40},
    }
    got = c.post("/api/generate", json=body).json()
    assert got["dlmcode"]["decoder"] == "threshold" and got["dlmcode"]["settings"]["tau"] == 0.5
    assert got["response"] == SCRIPT


# ---------------------------------------------------------------- per-request decoder and bad settings


def test_per_request_decoder_and_options():
    c, _ = client()
    got = c.post(
        "/infill",
        json={
            "input_prefix": PREFIX,
            "input_suffix": SUFFIX,
            "n_predict": 16,
            "decoder": "low-confidence",
            "options": {"block": 4, "steps": 8},
        },
    ).json()
    assert got["dlmcode"]["settings"]["block"] == 4 and got["dlmcode"]["settings"]["steps"] == 8
    assert got["content"] == SCRIPT


@pytest.mark.parametrize("decoder", ["threshold", "mean-field", "dico", "eb", "margin", "syntax-guard"])
def test_other_decoders_through_the_server(decoder):
    # the model writes the line's indentation itself (the canvas's prefix has none): so the fill parses, guarded or not
    c, _ = client(script="    " + SCRIPT)
    got = c.post(
        "/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 20, "decoder": decoder}
    ).json()
    assert got["content"] == SCRIPT and got["dlmcode"]["decoder"] == decoder


BROKEN = "return (a + b"  # unclosed: it breaks the file


def test_the_guard_is_a_server_setting_like_any_decoder_setting():
    c, _ = client(script=BROKEN)
    plain = c.post(
        "/infill",
        json={
            "input_prefix": PREFIX,
            "input_suffix": SUFFIX,
            "n_predict": 20,
            "decoder": "threshold",
            "options": {"guard": False},
        },
    ).json()
    guarded = c.post(
        "/infill",
        json={
            "input_prefix": PREFIX,
            "input_suffix": SUFFIX,
            "n_predict": 20,
            "decoder": "threshold",
            "options": {"guard": True},
        },
    ).json()
    assert plain["content"] == BROKEN and plain["dlmcode"]["breakage"]["broken"] is True
    assert guarded["dlmcode"]["settings"]["guard"] is True and guarded["dlmcode"]["breakage"]["broken"] is False
    assert guarded["content"] != BROKEN and compile(PREFIX + guarded["content"] + SUFFIX, "<fill>", "exec")


def test_a_server_started_unguarded_serves_syntax_guard_which_carries_its_own_guard():
    """Bug: `serve -o guard=false` answered 400 to a request for syntax-guard (the server's guard=false was put
    on a decoder that always guards). The server's setting is a default; a request that says guard=false for
    syntax-guard itself is still told, in one line, why not."""
    c, _ = client(script=BROKEN, options={"guard": "false"})
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 20}
    plain = c.post("/infill", json=body).json()  # the server's own decoder, unguarded as it was told
    assert plain["content"] == BROKEN and plain["dlmcode"]["breakage"]["broken"] is True
    r = c.post("/infill", json={**body, "decoder": "syntax-guard"})
    assert r.status_code == 200
    got = r.json()
    assert got["dlmcode"]["decoder"] == "syntax-guard" and got["dlmcode"]["settings"]["guard"] is True
    assert got["dlmcode"]["breakage"]["broken"] is False
    assert compile(PREFIX + got["content"] + SUFFIX, "<fill>", "exec")
    r = c.post("/infill", json={**body, "decoder": "syntax-guard", "options": {"guard": False}})
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and "syntax-guard always guards" in message and "\n" not in message


@pytest.mark.parametrize(
    ("path", "body", "shape"),
    [
        ("/infill", {"input_prefix": "x", "decoder": "nope"}, lambda j: j["error"]["message"]),
        ("/v1/completions", {"prompt": "x", "decoder": "nope"}, lambda j: j["error"]["message"]),
        ("/api/generate", {"prompt": "x", "decoder": "nope", "stream": False}, lambda j: j["error"]),
    ],
)
def test_unknown_decoder_is_a_400_in_each_protocols_shape(path, body, shape):
    c, _ = client()
    r = c.post(path, json=body)
    assert r.status_code == 400
    message = shape(r.json())
    assert message.startswith("unknown decoder 'nope'") and "\n" not in message


def test_unknown_and_bad_settings_are_400():
    c, _ = client()
    r = c.post("/infill", json={"input_prefix": "x", "options": {"tau": 1}})
    assert r.status_code == 400 and "has no setting 'tau'" in r.json()["error"]["message"]
    r = c.post("/infill", json={"input_prefix": "x", "options": {"steps": [1, 2]}})
    assert r.status_code == 400 and "give a number" in r.json()["error"]["message"]
    r = c.post("/infill", json={"input_prefix": "x", "options": {"steps": "many"}})
    assert r.status_code == 400 and "bad value 'many' for steps" in r.json()["error"]["message"]
    r = c.post("/api/generate", json={"prompt": "x", "stream": False, "options": {"bogus_setting": 1}})
    assert r.status_code == 400 and "bogus_setting" in r.json()["error"]


# ---------------------------------------------------------------- the length rule


def test_holes_follow_the_ceiling_and_the_family_cap():
    dlm, _ = tiny_dlm("", "")
    assert (
        length.holes(128, dlm) == sizing.OTHER.room
        and length.holes(5, dlm) == 5
        and length.holes(-1, dlm) == sizing.OTHER.room
    )
    assert sizing.end_ids(dlm) == (3, 0)


def test_stop_strings_and_n_indent_cut_the_fill():
    script = "x = 1\n    y = 2\nz = 3"
    c, _ = client(script=script, prefix="def f():\n    ")
    body = {"input_prefix": "def f():\n    ", "input_suffix": "\n", "n_predict": 40, "lines": 0}
    assert c.post("/infill", json={**body, "stop": ["y ="]}).json()["content"] == "x = 1\n    "
    got = c.post("/infill", json={**body, "n_indent": 4}).json()
    assert got["content"] == "x = 1\n    y = 2" and got["stop_type"] == "word"


def test_line_rule_ends_the_fill_after_its_first_non_blank_lines_and_saves_calls():
    script = "\n    a = 1\n    b = 2\n    c = 3"
    c, predict = client(script=script, prefix="def f():")
    body = {"input_prefix": "def f():", "input_suffix": "\n", "n_predict": 40, "options": {"block": 8}}
    got = c.post("/infill", json=body).json()  # the server's default: one line
    assert got["content"] == "\n    a = 1" and got["dlmcode"]["stop_reason"] == "end"
    assert predict.calls == 1 + len(
        "\n    a = 1\n"
    )  # the length probe; once those are committed, the other holes are committed at once
    got = c.post("/infill", json={**body, "lines": 2}).json()
    assert got["content"] == "\n    a = 1\n    b = 2"
    assert length.cut_lines("x\n\ny\nz", 2) == ("x\n\ny", True) and length.cut_lines("x", 1) == ("x", False)
    assert length.cut_lines("x\ny", 1, keep_break=True) == ("x\n", True)


def test_the_users_trailing_indentation_is_left_to_the_model_and_taken_back_out():
    c, _ = client(script="    return a + b", prefix=PREFIX)  # the model writes the indentation itself
    assert (
        c.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 32}).json()["content"]
        == SCRIPT
    )
    assert length.heal("x = 1\n    ") == ("x = 1\n", "    ")
    assert (
        length.unheal("  y", "    ") == "y"
        and length.unheal("      y", "    ") == "  y"
        and length.unheal("y", "") == "y"
    )


def test_a_hole_of_whole_lines_keeps_the_line_break_of_its_last_line():
    c, _ = client(script="    b = 2\n    c = 3\n", prefix="def f():\n    a = 1\n")
    got = c.post(
        "/infill", json={"input_prefix": "def f():\n    a = 1\n", "input_suffix": "    return a\n", "n_predict": 40}
    ).json()
    assert got["content"] == "    b = 2\n"  # HumanEval-infilling's single-line holes end with their line break
    assert (
        length.whole_lines("x\n", "y") and not length.whole_lines("x\n", "\ny") and not length.whole_lines("x = ", "y")
    )


def test_syntax_rule_cuts_back_to_the_lines_that_break_nothing():
    c, _ = client(script="return 1\n    x = (", prefix="def f():\n    ")
    body = {"input_prefix": "def f():\n    ", "input_suffix": "\n", "n_predict": 40, "lines": 0}
    got = c.post("/infill", json={**body, "options": {"guard": False}}).json()  # guarded, nothing breaks to cut
    assert got["content"] == "return 1"
    assert got["dlmcode"]["stop_reason"] == "syntax" and got["dlmcode"]["breakage"]["broken"] is False


def test_t_max_predict_ms_commits_the_rest_at_once_and_says_so():
    script = "value = compute(alpha, beta)"
    c, predict = client(script=script, prefix="", delay=0.03)
    got = c.post(
        "/infill", json={"input_prefix": "", "input_suffix": "\n", "n_predict": 40, "t_max_predict_ms": 100}
    ).json()
    assert got["dlmcode"]["timed_out"] is True and got["dlmcode"]["stop_reason"] == "time"
    assert got["content"] == script  # the holes left got the last call's argmax
    assert 1 <= predict.calls < len(script) and got["dlmcode"]["calls"] == predict.calls


# ---------------------------------------------------------------- the queue


def test_queue_is_fifo_and_answers_each_request_once():
    dlm, _ = tiny_dlm(PREFIX, SCRIPT, delay=0.005)
    engine = Engine(dlm)
    order, lock = [], threading.Lock()
    run = engine.run

    def recording(req, cancel=None):
        with lock:
            order.append(req.seed)
        return run(req, cancel)

    engine.run = recording
    queue = Queue(engine)

    async def main():
        # arrival order = creation order: the loop starts tasks in the order they are made (call_soon is FIFO),
        # and each queues its request before its first wait
        tasks = [asyncio.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16, seed=i))) for i in range(6)]
        return await asyncio.gather(*tasks)

    answers = asyncio.run(main())
    assert order == list(range(6))
    assert [a.text for a in answers] == [SCRIPT] * 6
    assert queue.counters.answered == 6 and queue.counters.cancelled == 0 and queue.waiting == 0


def test_a_client_that_left_is_cancelled_and_the_next_one_served():
    dlm, predict = tiny_dlm(PREFIX, SCRIPT)
    dlm.predict = gated = Gated(predict, at=3)  # the first decode is held in its 3rd call until it is cancelled
    queue = Queue(Engine(dlm))
    seen = asyncio.Event()

    async def gone() -> bool:
        if predict.calls >= 2:
            seen.set()  # the queue cancels the decode as soon as this returns, before any other task runs
        return predict.calls >= 2

    async def main():
        first = asyncio.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16), gone))
        second = asyncio.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16)))
        await seen.wait()
        gated.open.set()
        with pytest.raises(ClientGone):
            await first
        return await second

    answer = asyncio.run(main())
    # the second decode makes the calls of a decode alone, and the first stopped right after the call it was held in
    # (it was cancelled before that call returned); counted at the end, not when `first` raised: the second decode
    # goes on meanwhile, and on a loaded machine the loop comes back to `first` late (it read 16 then, not 3)
    alone, solo = tiny_dlm(PREFIX, SCRIPT)
    assert asyncio.run(Queue(Engine(alone)).answer(Fill(PREFIX, SUFFIX, ceiling=16))).text == SCRIPT
    assert predict.calls == solo.calls + 3
    assert answer.text == SCRIPT
    assert queue.counters.cancelled == 1 and queue.counters.answered == 1


def test_a_waiting_request_whose_client_left_never_runs():
    dlm, predict = tiny_dlm(PREFIX, SCRIPT)
    dlm.predict = gated = Gated(predict, at=2)  # the first decode is held in its 2nd call while the second comes
    queue = Queue(Engine(dlm))

    async def always_gone() -> bool:
        return True

    async def main():
        first = asyncio.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16)))
        assert await asyncio.to_thread(gated.held.wait, 30)
        queued = when_queued(queue)
        second = asyncio.create_task(queue.answer(Fill(PREFIX, SUFFIX, ceiling=16, seed=1), always_gone))
        await queued.wait()  # the second is queued behind the first
        (waiting,) = queue.pending
        assert await asyncio.to_thread(waiting.cancel.wait, 30)  # its client was seen gone while it waited
        gated.open.set()
        answer = await first
        with pytest.raises(ClientGone):
            await second
        return answer

    answer = asyncio.run(main())
    assert answer.text == SCRIPT and predict.calls == 1 + len(
        SCRIPT
    )  # only the first decode called the model (its probe, then one call a token)


# ---------------------------------------------------------------- API key


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/infill", {"input_prefix": "x"}, lambda j: j["error"]["message"]),
        ("/v1/completions", {"prompt": "x"}, lambda j: j["error"]["message"]),
        ("/api/generate", {"prompt": "x"}, lambda j: j["error"]),
    ],
)
def test_api_key_is_required_in_every_protocol(path, body, message):
    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    c = TestClient(make_app(Engine(dlm), api_key="s3cret"))
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Basic s3cret"},
        {"Authorization": "Bearer"},
    ):
        r = c.post(path, json=body, headers=headers)
        assert r.status_code == 401 and "API key" in message(r.json())
    assert c.get("/health").status_code == 200  # as llama.cpp: health needs no key
    assert c.post(path, json={**body, "stream": False}, headers={"Authorization": "Bearer s3cret"}).status_code == 200


@pytest.mark.parametrize("batch", [1, 4])
def test_the_guard_is_a_server_wide_setting_too(batch):
    # `dlmcode serve -d threshold -o guard=true`: the options as the CLI parses them, over the recorded llama.vim body

    dlm, _ = tiny_dlm(PREFIX, BROKEN)
    options = settings.parse_options(["guard=true"])
    c = TestClient(make_app(Engine(dlm, "threshold", options, lang="python", batch=batch)))
    got = c.post("/infill", json={**llama_vim_body(PREFIX, "", SUFFIX), "n_predict": 20, "t_max_predict_ms": 0}).json()
    r = c.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 20}).json()
    assert r["dlmcode"]["settings"]["guard"] is True and got["content"] == r["content"] != BROKEN
    assert compile(PREFIX + r["content"] + SUFFIX, "<fill>", "exec")
    off = c.post(
        "/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 20, "options": {"guard": False}}
    ).json()
    assert off["content"] == BROKEN  # per request, as any setting


def test_the_decoder_the_server_builds_at_start_is_the_one_a_plain_request_decodes_with():
    from dlmcode.cli.serve import served_decoder

    dlm, _ = tiny_dlm(PREFIX, SCRIPT)
    own = served_decoder("threshold", {"tau": "0.5"})
    engine = Engine(dlm, "threshold", {"tau": "0.5"}, own=own)
    assert engine.check(Fill(PREFIX, SUFFIX, ceiling=16)) is own  # built once: the check at start and the requests
    assert own.tau == 0.5 and own.guard is True  # guarded, as a request is unless the server or it says no
    other = engine.check(Fill(PREFIX, SUFFIX, ceiling=16, options={"tau": "0.7"}))
    assert other is not own and other.tau == 0.7
