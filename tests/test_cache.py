"""The prefix/dual KV cache behind predict: exact when it refreshes every call, runs only the block otherwise,
works the block out from the canvas, and never lets one decode depend on another."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dlmcode import models
from dlmcode.core.canvas import Canvas, last
from dlmcode.core.errors import UsageError
from dlmcode.decoders import build
from dlmcode.jobs import fill
from dlmcode.models import cache, dream, forward, native_dream, native_llada
from dlmcode.models.builtin import BuiltinConfig, DlmcodeDiffusionLM

from tiny import TINY_DREAM, TINY_LLADA, randomize

CPU = torch.device("cpu")
MASK = 63


class Spy:
    """A Runner that records (start, positions run) of every call."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.runs = model, []

    def __call__(self, ids, start=0, kv=None):
        self.runs.append((start, ids.shape[1]))
        return self.model.hidden(ids, start, kv)


def builtin_model() -> DlmcodeDiffusionLM:
    return randomize(DlmcodeDiffusionLM(BuiltinConfig(vocab_size=64, dim=32, n_layers=2, n_heads=2, mask_id=MASK)))


def llada_model() -> native_llada.LladaLM:
    return randomize(native_llada.LladaLM(native_llada.LladaConfig.from_json(TINY_LLADA)))


def dream_model() -> native_dream.DreamLM:
    return randomize(native_dream.DreamLM(native_dream.DreamConfig.from_json(TINY_DREAM)))


ARCHS = {  # name -> (model, align, shift) as the family adapters wire them
    "builtin": (builtin_model, None, 0),
    "llada": (llada_model, None, 0),
    "dream": (dream_model, dream.align, dream.SHIFT),
}


def cached(arch: str, mode: str, block: int, refresh: int = 0, spy: bool = False):
    make, _, shift = ARCHS[arch]
    model = make()
    run = Spy(model) if spy else model.hidden
    settings = cache.CacheSettings(mode, block, refresh)
    return model, cache.CachedPredict(run, model.head, settings, MASK, CPU, shift)


def uncached(model: torch.nn.Module, align=None):
    def predict(tokens):
        with torch.inference_mode():
            logits = model(tokens[None])[0]
            return (align(logits) if align else logits).float().clone()

    return predict


def canvas(prompt: int = 10, holes: int = 12, suffix: int = 0) -> Canvas:
    g = torch.Generator().manual_seed(1)
    ids = torch.cat(
        [
            torch.randint(0, 60, (prompt,), generator=g),
            torch.full((holes,), MASK),
            torch.randint(0, 60, (suffix,), generator=g),
        ]
    )
    return Canvas(ids, MASK)


def decode(predict, c: Canvas, decoder: str = "low-confidence", **options):
    return last(build(decoder, options)(c, predict, torch.Generator().manual_seed(0)))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", ["prefix", "dual"])
def test_refresh_every_call_is_exactly_the_uncached_model(arch, mode):
    model, pr = cached(arch, mode, block=4, refresh=1)
    plain = uncached(model, ARCHS[arch][1])

    def both(tokens):
        got = pr(tokens)
        assert torch.equal(got, plain(tokens))
        return got

    final = decode(both, canvas(suffix=3), block=4)
    assert torch.equal(final.canvas.tokens, decode(plain, canvas(suffix=3), block=4).canvas.tokens)
    assert pr.cached_calls == 0 and pr.full_calls == final.calls


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", ["prefix", "dual"])
def test_a_cached_call_on_an_unchanged_canvas_equals_the_full_run(arch, mode):
    model, pr = cached(arch, mode, block=4)
    c = canvas(suffix=3)
    full = pr(c.tokens)
    again = pr(c.tokens)  # the same canvas: every kept k/v is exactly what a full run would compute
    assert pr.cached_calls == 1
    torch.testing.assert_close(again[10:14], full[10:14], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_callers_may_edit_the_logits_in_place(arch):
    _, pr = cached(arch, "prefix", block=4)
    c = canvas()
    for tokens in (c.tokens, c.tokens):  # a full call, then a cached one
        logits = pr(tokens)
        want = logits.clone()
        logits[:, 0] -= 1.0  # outside inference mode, as decoders and the end-of-text wrapper do
        assert torch.equal(forward.head_rows(pr.head, pr.hidden, None, pr.shift), want)  # never the cache's own buffer


def test_a_cached_call_at_a_fixed_shape_keeps_the_canvas_in_one_buffer():
    """The canvas a cached predict remembers between calls is copied into the same buffer at every call of a decode
    (no new tensor per call at a fixed shape); another length gets its own."""
    _, pr = cached("builtin", "prefix", block=4)
    c = canvas()
    pr(c.tokens)
    kept = pr.prev
    later = c.fill(torch.tensor([10]), torch.tensor([5]))
    pr(later.tokens)
    assert pr.prev is kept and torch.equal(kept, later.tokens) and pr.cached_calls == 1
    longer = canvas(holes=13)
    pr(longer.tokens)
    assert pr.prev is not kept and torch.equal(pr.prev, longer.tokens)


@pytest.mark.parametrize(("mode", "runs"), [("prefix", (10, 15)), ("dual", (10, 4))])
def test_block_start_runs_everything_then_only_the_blocks_positions(mode, runs):
    _, pr = cached("builtin", mode, block=4, spy=True)
    final = decode(pr, canvas(suffix=3), block=4)  # 12 holes, 3 blocks, one commit a call
    assert final.calls == 12 and (pr.full_calls, pr.cached_calls) == (3, 9)
    spy = pr.run.runs
    assert (
        spy[0] == (0, 25) and spy[1] == runs
    )  # a full run at the block's start, then positions 10.. (prefix) or 10..13 (dual)
    assert [s for s, _ in spy[4:8]] == [0, 14, 14, 14]  # the second block starts with a full run


def test_dream_runs_one_position_before_the_block():
    _, pr = cached("dream", "dual", block=4, spy=True)
    decode(pr, canvas(), block=4)
    assert pr.run.runs[1] == (9, 5)  # logits of position 10 come from hidden state 9


def test_refresh_every_n_calls():
    _, pr = cached("builtin", "prefix", block=0, refresh=3)
    decode(pr, canvas(holes=9))
    assert (pr.full_calls, pr.cached_calls) == (3, 6)  # full, cached, cached, full, ...


def test_a_commit_outside_the_block_forces_a_full_run():
    _, pr = cached("builtin", "dual", block=4)
    c = canvas()
    pr(c.tokens)
    pr(c.fill(torch.tensor([11]), torch.tensor([5])).tokens)  # inside the block: cached
    assert (pr.full_calls, pr.cached_calls) == (1, 1)
    pr(c.fill(torch.tensor([11, 20]), torch.tensor([5, 6])).tokens)  # position 20 is in the dual cache's suffix
    assert (pr.full_calls, pr.cached_calls) == (2, 1)


def test_a_decode_never_depends_on_the_one_before():
    _, pr = cached("builtin", "prefix", block=0)
    first = decode(pr, canvas())
    again = decode(pr, canvas())  # the same cached predict: a new canvas starts afresh
    _, fresh = cached("builtin", "prefix", block=0)
    assert torch.equal(first.canvas.tokens, again.canvas.tokens)
    assert torch.equal(again.canvas.tokens, decode(fresh, canvas()).canvas.tokens)


@pytest.mark.parametrize("decoder", ["low-confidence", "threshold", "eb", "entropy"])
@pytest.mark.parametrize("mode", ["prefix", "dual"])
def test_cached_decodes_fill_every_hole_and_match_the_uncached_decode_until_the_cache_is_used(decoder, mode):
    model, pr = cached("llada", mode, block=4)
    c = canvas(prompt=12, holes=16, suffix=4)
    steps = list(build(decoder, {"block": 4})(c, pr, torch.Generator().manual_seed(0)))
    plain = list(build(decoder, {"block": 4})(c, uncached(model), torch.Generator().manual_seed(0)))
    got, want = steps[-1].canvas.tokens, plain[-1].canvas.tokens
    assert (
        not bool((got == MASK).any()) and torch.equal(got[:12], c.tokens[:12]) and torch.equal(got[-4:], c.tokens[-4:])
    )
    # a decode's first call is a full run, so its first commits are exactly the uncached decode's ...
    assert torch.equal(steps[0].filled, plain[0].filled)
    assert torch.equal(steps[0].canvas.tokens, plain[0].canvas.tokens)
    # ... and the later calls of each block did run on the cache (random weights: agreement after that is not a quality
    # bar)
    assert pr.cached_calls > 0 and pr.full_calls == 4  # one full run per block: 16 holes in blocks of 4
    agreement = float((got[12:28] == want[12:28]).float().mean())
    assert agreement >= len(steps[0].filled) / 16


def test_settings_are_checked():
    with pytest.raises(UsageError, match="--cache 'prefx': use one of none, prefix, dual"):
        cache.CacheSettings("prefx")
    with pytest.raises(UsageError, match="--cache-refresh -1"):
        cache.CacheSettings("prefix", refresh=-1)


@pytest.fixture(scope="module")
def tiny_dlm(tmp_path_factory):
    from tiny import tiny_builtin

    return models.load(str(tiny_builtin(tmp_path_factory.mktemp("builtin") / "m")), device="cpu")


def test_attach_gives_each_job_its_own_cached_predict(tiny_dlm):
    assert cache.with_cache(tiny_dlm, "none") is tiny_dlm
    one, two = cache.with_cache(tiny_dlm, "prefix", block=8), cache.with_cache(tiny_dlm, "prefix", block=8)
    assert isinstance(one.predict, cache.CachedPredict) and one.predict is not two.predict
    assert one.predict.settings == cache.CacheSettings("prefix", 8, 0)
    nocache = dataclasses.replace(tiny_dlm, cached=None, family="masked-lm")
    with pytest.raises(UsageError, match="has no KV cache"):
        cache.with_cache(nocache, "dual")


def test_generate_with_a_cache_through_fill(tiny_dlm):
    prompt = "def add(a, b):\n"
    plain = fill.generate(prompt, dlm=tiny_dlm, options={"block": 8}, length=16)
    exact = fill.generate(prompt, dlm=tiny_dlm, options={"block": 8}, length=16, cache="dual", cache_refresh=1)
    approx = fill.generate(prompt, dlm=tiny_dlm, options={"block": 8}, length=16, cache="prefix")
    assert exact.ids == plain.ids and exact.calls == plain.calls
    assert approx.calls == plain.calls == 16 and len(approx.ids) == 16


def test_speed_bench_rows_ratios_and_targets(tiny_dlm):
    from dlmcode.bench import speed
    from dlmcode.bench.speed import report

    cfg = speed.SpeedConfig(lengths=(12,), gen=8, block=4, caches=("prefix",), names=("threshold", "low-confidence"))
    rows = speed.run(tiny_dlm, cfg)
    assert [(r.decoder, r.cache) for r in rows] == [
        ("low-confidence", "none"),
        ("low-confidence", "prefix"),
        ("threshold", "none"),
        ("threshold", "prefix"),
    ]
    base, cached_row = rows[0], rows[1]
    assert base.ratios["call_speedup"] == base.ratios["tokens_s"] == 1.0 and base.tpf == 1.0 and base.calls == 8
    assert cached_row.full_calls == 2 and base.full_calls is None  # one full run per block of 4
    assert all(r.prompt == 12 and r.holes == 8 and r.call_s > 0 and r.overhead_s >= 0 for r in rows)
    # on a CPU the same times in the decoding thread's CPU time, and the targets are judged on those shares
    assert all(r.call_cpu_s > 0 and r.overhead_cpu_s >= 0 for r in rows)
    assert rows[2].ratios["overhead_of_forward_cpu"] == rows[2].overhead_cpu_s / base.call_cpu_s
    doc = speed.summary(rows, tiny_dlm, cfg)
    assert set(doc["targets"]["overhead_ok"]) == {"low-confidence", "threshold"} and len(doc["rows"]) == 4
    assert doc["targets"]["overhead_judged_in"] == "cpu"
    worst = max(r.ratios["overhead_of_forward_cpu"] for r in rows if r.decoder == "threshold")
    assert doc["targets"]["overhead_of_forward_cpu_max"]["threshold"] == round(worst, 4)
    assert doc["targets"]["overhead_ok"]["threshold"] == (worst <= report.TRAINING_FREE_TARGET)
    assert doc["rows"][1]["ratios"]["calls"] == 1.0
    assert doc["decoder_settings"] == {"low-confidence": {"block": 4}, "threshold": {"block": 4}}


def test_speed_times_the_remasking_and_early_commit_decoders(tiny_dlm):
    from dlmcode.bench import speed

    assert {"wino", "saber", "prophet", "dus"} <= set(speed.SpeedConfig().decoder_names)
    assert [speed.options_for(n, 32) for n in ("wino", "saber", "prophet", "dus")] == [{"block": 32}] * 4
    cfg = speed.SpeedConfig(lengths=(12,), gen=8, block=4, caches=(), names=("wino", "dus"))
    rows = speed.run(tiny_dlm, cfg)
    assert [r.decoder for r in rows] == ["low-confidence", "wino", "dus"]
    assert rows[2].calls == 4 and rows[2].overhead_s >= 0  # dus: two blocks of 4 holes, log2 4 = 2 calls each
    assert rows[1].calls <= 8 + rows[1].reopened  # every call commits a hole
    assert "reopened" in speed.summary(rows, tiny_dlm, cfg)["rows"][1]


def test_speed_builds_each_decoder_once_for_every_length(tiny_dlm, monkeypatch):
    from dlmcode.bench import speed
    from dlmcode.bench.speed import timed

    made, real = [], timed.make_decoder
    monkeypatch.setattr(timed, "make_decoder", lambda name, *a, **k: made.append(name) or real(name, *a, **k))
    cfg = speed.SpeedConfig(lengths=(12, 20), gen=8, block=4, caches=(), names=("threshold",))
    rows = speed.run(tiny_dlm, cfg)
    assert made == ["low-confidence", "threshold"]  # not once per length
    assert [(r.prompt, r.decoder) for r in rows] == [(p, d) for p in (12, 20) for d in ("low-confidence", "threshold")]
    # the decoder kept from the first length decodes the second exactly as a fresh one does
    fresh = speed.run(tiny_dlm, dataclasses.replace(cfg, lengths=(20,)))
    assert [(r.calls, r.tpf) for r in rows[2:]] == [(r.calls, r.tpf) for r in fresh]


def test_speed_gives_every_decoder_the_same_holes_per_call():
    from dlmcode.bench import speed

    assert speed.options_for("mean-field", 32) == {"block": 32}
    assert speed.options_for("codila", 32) == {"window": 8}  # B stays the paper's 4: 8 blocks of 4 holes
    assert speed.options_for("codila", 2) == {"window": 1}


SMALL = {
    "llada-8b": {"d_model": 32, "n_heads": 4, "n_kv_heads": 4, "n_layers": 2, "mlp_hidden_size": 64},
    "dream-7b": {
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "intermediate_size": 56,
    },
}


@pytest.mark.parametrize("shape", ["llada-8b", "dream-7b"])
def test_a_published_stand_in_runs_the_native_code_with_its_cache(shape):
    from dlmcode.bench import speed, standins

    dlm = standins.published(shape, torch.device("cpu"), torch.float32, SMALL[shape])
    assert dlm.mask_id in (126336, 151666) and dlm.cached is not None
    full = dlm.predict(speed.canvas(dlm, 20, 8).tokens)
    assert full.shape == (28, standins.SHAPES[shape][1]["vocab_size"]) and torch.isfinite(full).all()
    rows = speed.run(
        dlm, speed.SpeedConfig(lengths=(20,), gen=8, block=4, caches=("prefix",), names=("low-confidence",))
    )
    assert [(r.cache, r.calls) for r in rows] == [("none", 8), ("prefix", 8)]
    with pytest.raises(UsageError, match="--shape 'gpt-9'"):
        standins.published("gpt-9", torch.device("cpu"), torch.float32)


def test_speed_settings_are_checked():
    from dlmcode.bench import speed

    with pytest.raises(UsageError, match="unknown decoder 'nope'"):
        speed.SpeedConfig(names=("nope",))
    with pytest.raises(UsageError, match="--cache 'fast'"):
        speed.SpeedConfig(caches=("fast",))
    with pytest.raises(UsageError, match="--lengths 'a,b'"):
        speed.parse_lengths("a,b")


def test_cli_cache_flag_and_speed_command(tiny_dlm, tmp_path):
    import json

    from typer.testing import CliRunner

    from dlmcode.cli.commands import app

    model = str(tiny_dlm.name)
    prompt = tmp_path / "p.py"
    prompt.write_text("def add(a, b):\n")
    runner = CliRunner()
    base = ["generate", str(prompt), "-m", model, "--device", "cpu", "--length", "8", "-o", "block=4", "--json", "-q"]
    plain = json.loads(runner.invoke(app, base).stdout)
    exact = json.loads(runner.invoke(app, [*base, "--cache", "dual", "--cache-refresh", "1"]).stdout)
    assert exact["ids"] == plain["ids"]
    bad = runner.invoke(app, [*base, "--cache", "fast"])
    assert bad.exit_code == 2 and "--cache 'fast': use one of none, prefix, dual" in bad.output
    out = runner.invoke(
        app,
        [
            "speed",
            "-m",
            model,
            "--device",
            "cpu",
            "--lengths",
            "8",
            "--gen",
            "4",
            "--block",
            "2",
            "-d",
            "threshold",
            "--cache",
            "dual",
            "--json",
        ],
    )
    doc = json.loads(out.stdout)
    assert out.exit_code == 0 and "x call" in out.stderr  # the table goes to stderr, the JSON to stdout
    assert [(r["decoder"], r["cache"]) for r in doc["rows"]] == [
        ("low-confidence", "none"),
        ("low-confidence", "dual"),
        ("threshold", "none"),
        ("threshold", "dual"),
    ]


def test_speed_says_which_item_of_how_many_it_is_timing_one_line_each_without_a_terminal(tiny_dlm):
    from typer.testing import CliRunner

    from dlmcode.cli.commands import app

    out = CliRunner().invoke(
        app,
        [
            "speed",
            "-m",
            str(tiny_dlm.name),
            "--device",
            "cpu",
            "--lengths",
            "8,12",
            "--gen",
            "4",
            "--block",
            "2",
            "-d",
            "threshold",
            "--cache",
            "dual",
        ],
    )
    assert out.exit_code == 0, out.output
    said = [line for line in out.stderr.splitlines() if line.startswith("speed ") and line[6].isdigit()]
    assert said[0] == "speed 1/8: 8-token prompt · low-confidence · cache none"
    assert said[-1] == "speed 8/8: 12-token prompt · threshold · cache dual" and len(said) == 8


def test_speed_quick_is_a_small_grid_and_flags_given_still_win(tiny_dlm):
    import json

    from typer.testing import CliRunner

    from dlmcode.bench import speed
    from dlmcode.cli.commands import app

    out = CliRunner().invoke(
        app,
        [
            "speed",
            "-m",
            str(tiny_dlm.name),
            "--device",
            "cpu",
            "--quick",
            "--lengths",
            "8",
            "--gen",
            "4",
            "--block",
            "2",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert [(r["prompt"], r["decoder"], r["cache"]) for r in doc["rows"]] == [
        (8, name, cache)
        for name in ("low-confidence", "threshold", "factor", "mean-field")
        for cache in ("none", "prefix")
    ]
    assert doc["settings"]["gen"] == 4 and speed.grid(None, None, 32, None, [], 1, True).gen == 32


def test_speed_sets_threads_as_every_command_does(tiny_dlm, monkeypatch):
    # speed loaded its model without the CLI's thread rule, so on a busy 2-core machine it ran on
    # torch's one thread per core, several times slower than the other commands.
    import json

    from typer.testing import CliRunner

    from dlmcode.cli.commands import app

    before = torch.get_num_threads()
    monkeypatch.setenv("DLMCODE_THREADS", str(before + 1))
    try:
        out = CliRunner().invoke(
            app,
            [
                "speed",
                "-m",
                str(tiny_dlm.name),
                "--device",
                "cpu",
                "--lengths",
                "8",
                "--gen",
                "4",
                "-d",
                "low-confidence",
                "--cache",
                "none",
                "--json",
            ],
        )
        assert json.loads(out.stdout)["threads"] == before + 1
    finally:
        torch.set_num_threads(before)


def test_speed_stand_ins_leave_the_global_rng_alone_and_are_seeded():
    from dlmcode.bench import standins

    torch.manual_seed(123)
    state = torch.get_rng_state()
    one = standins.published("llada-8b", CPU, torch.float32, SMALL["llada-8b"])
    two = standins.published("llada-8b", CPU, torch.float32, SMALL["llada-8b"])
    other = standins.published("llada-8b", CPU, torch.float32, SMALL["llada-8b"], seed=1)
    assert torch.equal(torch.get_rng_state(), state)
    ids = torch.arange(12)
    assert torch.equal(one.predict(ids), two.predict(ids)) and not torch.equal(one.predict(ids), other.predict(ids))
    built = standins.builtin_stand_in(CPU)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(built.predict(ids), standins.builtin_stand_in(CPU).predict(ids))


@pytest.mark.parametrize("mode", ["prefix", "dual"])
def test_a_cache_without_block_decoding_still_caches_the_context_around_the_holes(mode):
    """block=0 (the CLI's default) makes all holes one block: the context before (prefix) or around (dual)
    them is kept, so --cache without a block is not a no-op and is accepted."""
    model, pr = cached("builtin", mode, block=0, spy=True)
    final = decode(pr, canvas(prompt=10, holes=6, suffix=5))
    assert pr.full_calls == 1 and pr.cached_calls == final.calls - 1 > 0
    last_run = pr.run.runs[-1]
    assert last_run == (
        (10, 11) if mode == "prefix" else (10, 6)
    )  # (start, positions run): the holes onward, or the holes


GUARD_FILES: dict = {}


def test_speed_prompt_is_the_first_tokens_of_the_whole_text_read_from_a_prefix(tiny_dlm):
    import sysconfig
    from pathlib import Path

    from dlmcode.bench.speed import timed

    text = (Path(sysconfig.get_paths()["stdlib"]) / "queue.py").read_text(encoding="utf-8")
    text += "ünïcödé = '日本語'  # ✓\r\n\tx = [\n" * 300  # cuts inside CRLF, tabs, non-ASCII, open brackets
    for tokenizer in (tiny_dlm.tokenizer, models.load().tokenizer):
        whole = tokenizer.encode(text)
        for count in (1, 7, 100, 999, len(whole) - 1, len(whole), len(whole) + 50):
            read: list[int] = []

            def encode(part: str, read=read, tokenizer=tokenizer) -> list[int]:
                read.append(len(part))
                return tokenizer.encode(part)

            assert timed.first_tokens(encode, text, count) == whole[:count], count
            if count <= 100:
                assert max(read) < len(text) // 10  # never the whole text for a short prompt
    short = timed.prompt_ids(tiny_dlm, 40)
    assert len(short) == 40 and short[1:] == tiny_dlm.tokenizer.encode(timed.source()[:2000])[:39]


def test_speed_times_the_guard_per_call_when_asked(tiny_dlm):
    import json

    from typer.testing import CliRunner

    from dlmcode.cli.commands import app

    def rows(*extra):
        out = CliRunner().invoke(
            app,
            [
                "speed",
                "-m",
                str(tiny_dlm.name),
                "--device",
                "cpu",
                "--lengths",
                "16",
                "--gen",
                "6",
                "--cache",
                "none",
                "-d",
                "threshold",
                "-d",
                "syntax-guard",
                "--json",
                *extra,
            ],
        )
        assert out.exit_code == 0, out.output
        assert "guard ms" in out.stderr
        doc = json.loads(out.stdout)
        assert ("guard_files" in doc) == ("--guard" in extra)
        GUARD_FILES["rows"] = doc.get("guard_files")
        return {r["decoder"]: r for r in doc["rows"]}

    plain, guarded = rows(), rows("--guard", "--guard-places", "0")  # no standard-library files (test_guard_cost.py)
    assert GUARD_FILES["rows"] == []
    assert plain["threshold"]["guard_s"] is None and plain["low-confidence"]["guard_s"] is None
    assert plain["syntax-guard"]["guard_s"] is not None  # guarded by default
    assert guarded["threshold"]["guard_s"] is not None and guarded["threshold"]["guard_s"] >= 0
    # the guard's gates in CPU time: part of the decoder's own CPU time, none for an unguarded row
    sg = plain["syntax-guard"]
    assert plain["threshold"]["guard_cpu_s"] is None and 0 < sg["guard_cpu_s"] <= sg["overhead_cpu_s"]
    share = sg["guard_cpu_s"] / plain["low-confidence"]["call_cpu_s"]  # both rounded to the microsecond in the JSON
    assert sg["ratios"]["guard_of_forward_cpu"] == pytest.approx(share, rel=0.02)
