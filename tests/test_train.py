"""Training the built-in model: corpus rules, masking invariants, a micro run, resume."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sysconfig
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from dlmcode.bench import heldout as H
from dlmcode.core.errors import DlmcodeError, UsageError
from dlmcode.models import builtin
from dlmcode.training import batches as B
from dlmcode.training import data as D
from dlmcode.training import train as T

STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILES = ["textwrap.py", "shlex.py", "glob.py", "fnmatch.py", "bisect.py", "colorsys.py"]


@pytest.fixture(scope="module")
def mini_stdlib(tmp_path_factory) -> Path:
    """A few real stdlib files plus ones the corpus rules must drop."""
    root = tmp_path_factory.mktemp("stdlib")
    for name in FILES:
        shutil.copy(STDLIB / name, root / name)
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text("x = 1\n")
    (root / "broken.py").write_text("def f(:\n")
    return root


def micro(root: Path, out: Path, **kw) -> T.TrainConfig:
    base = T.TrainConfig(
        out=str(out),
        stdlib=str(root),
        minutes=5,
        vocab_size=384,
        dim=32,
        n_layers=2,
        n_heads=2,
        seq=64,
        batch=8,
        lr=3e-3,
        warmup_steps=5,
        log_every=5,
        eval_windows=8,
        ckpt_minutes=100,
    )
    return replace(base, **kw)


def test_corpus_rules(mini_stdlib):
    files = H.corpus_files(mini_stdlib)
    assert sorted(files) == sorted(FILES)  # test folders and unparsable files are dropped
    train, heldout = H.split(files)
    assert set(train) | set(heldout) == set(files) and not set(train) & set(heldout)
    assert H.file_list_hash(files) == H.file_list_hash(dict(files))


def test_heldout_split_is_about_five_percent():
    names = [f"pkg/mod{i}.py" for i in range(4000)]
    share = sum(map(H.is_heldout, names)) / len(names)
    assert 0.03 < share < 0.07


def test_tokenizer_is_line_aligned(mini_stdlib):
    texts = list(H.corpus_files(mini_stdlib).values())
    tok = builtin.train_tokenizer(texts, 384)
    a, b = "def f(x):\n    \n\treturn  x \n", "    y = [MASK] + '\\n'\n"
    assert tok.encode(a + b) == tok.encode(a) + tok.encode(b)
    assert tok.decode(tok.encode(a + b)) == a + b
    assert builtin.SPECIAL_TOKENS.index("[MASK]") not in tok.encode(b)  # literal text is never a hole


def test_noise_invariants():
    rng = np.random.default_rng(0)
    nl = 5
    line_end = np.zeros(64, dtype=np.uint8)
    line_end[nl] = D.IS_NEWLINE
    x = np.array([D.BOS] + [10 + i % 7 if i % 6 else nl for i in range(1, 80)], dtype=np.int64)
    cfg = T.TrainConfig(seq=64)
    for _ in range(200):
        inp, tgt, msk = T.noise(x.copy(), 64, line_end, cfg, rng)
        assert len(inp) == len(tgt) == len(msk) == 64
        assert inp[0] == D.BOS and not msk[0] and msk.any()
        assert (inp[msk] == D.MASK).all() and (inp[~msk] == tgt[~msk]).all()
        assert D.MASK not in tgt


def test_micro_run_loss_goes_down(mini_stdlib, tmp_path):
    cfg = micro(mini_stdlib, tmp_path / "run", max_steps=60, seed=1)
    records = list(T.train(cfg))
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < losses[0] - 0.5, losses
    assert records[-1]["event"] == "done" and records[-1]["step"] == 60
    dlm = builtin.load(tmp_path / "run" / "best", torch.device("cpu"), torch.float32)
    ids = torch.tensor(dlm.tokenizer.encode("import os\n"), dtype=torch.long)
    assert dlm.predict(ids).shape == (len(ids), cfg.vocab_size)


def test_resume_continues_from_the_saved_step(mini_stdlib, tmp_path):
    out = tmp_path / "run"
    list(T.train(micro(mini_stdlib, out, max_steps=10)))
    records = list(T.train(micro(mini_stdlib, out, max_steps=15)))
    resumed = next(r for r in records if r.get("event") == "resumed")
    assert resumed["step"] == 10
    assert records[-1]["step"] == 15


def test_wall_time_schedule():
    cfg = T.TrainConfig(lr=1.0, warmup_steps=10, minutes=1, decay_frac=0.5, min_lr_frac=0.1)
    assert T.lr_at(cfg, 0, 0.0) == pytest.approx(0.1)
    assert T.lr_at(cfg, 50, 20.0) == 1.0
    assert T.lr_at(cfg, 50, 45.0) == pytest.approx(0.55)
    assert T.lr_at(cfg, 50, 60.0) == pytest.approx(0.1)


def test_overrides_reject_unknown_keys():
    assert T.parse_overrides(["dim=64", "bf16=false", "lr=1e-3"]) == replace(
        T.TrainConfig(), dim=64, bf16=False, lr=1e-3
    )
    with pytest.raises(UsageError, match="nope"):
        T.parse_overrides(["nope=1"])


def test_step_schedule():
    cfg = T.TrainConfig(lr=1.0, warmup_steps=10, steps=100, decay_frac=0.5, min_lr_frac=0.1, minutes=1e-9)
    assert T.lr_at(cfg, 20, 1e9) == 1.0  # wall time is ignored with steps=N
    assert T.lr_at(cfg, 75, 0.0) == pytest.approx(0.55)
    assert T.lr_at(cfg, 100, 0.0) == pytest.approx(0.1)
    assert T.running(replace(cfg, minutes=1), {"step": 99, "elapsed": 0.0}, 60.0)
    assert not T.running(replace(cfg, minutes=1), {"step": 100, "elapsed": 0.0}, 60.0)
    assert not T.running(replace(cfg, max_steps=50, minutes=1), {"step": 50, "elapsed": 0.0}, 60.0)


@pytest.fixture(scope="module")
def data(mini_stdlib):
    """(stream, line_end) of the mini stdlib, for the micro config's vocabulary."""
    texts = list(H.corpus_files(mini_stdlib).values())
    vocab_size = micro(mini_stdlib, Path(".")).vocab_size
    tok = builtin.train_tokenizer(texts, vocab_size)
    line_end = D.line_end_table(tok, vocab_size)
    return D.encode_stream(tok, texts, line_end), line_end


def test_batches_depend_on_seed_and_step_only(mini_stdlib, tmp_path, data):
    cfg = micro(mini_stdlib, tmp_path, seed=3)
    stream, line_end = data
    inline = T.batches(stream, line_end, cfg, 5)
    first = [next(inline) for _ in range(12)]  # past the 8 steps 2 workers build ahead: refills too
    again = T.step_batch(stream, line_end, cfg, 6)
    assert all(
        torch.equal(a, b) for a, b in zip(first[1], again, strict=True)
    )  # step 6 is the same batch however it is reached
    assert not torch.equal(first[0][0], first[1][0])
    forked = T.batches(stream, line_end, replace(cfg, workers=2), 5)
    for expected in first:
        got = next(forked)
        assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    forked.close()


WORKER_BATCH = B._worker_batch  # the real one, for the stand-ins below
FORK = multiprocessing.get_context("fork")
GATE: dict = {}  # made before the pool forks, so the workers inherit them


def gated_batch(step: int):
    """A batch worker that, past the first step, says it has begun and waits for the test's word;
    it leaves a mark once its batch is built."""
    if step > 5:
        GATE["inside"].release()
        GATE["go"].wait(60)  # a safety net only: the test opens it
    arrays = WORKER_BATCH(step)
    (Path(os.environ["DLMCODE_TEST_MARKS"]) / str(step)).touch()
    return arrays


def test_closing_the_batches_lets_the_workers_finish_and_exit(mini_stdlib, tmp_path, data, monkeypatch):
    """A worker is never killed mid-batch (one killed while it wrote its result left the result
    queue locked, and closing hung for ever); closing waits for the batches in flight and ends
    every worker. The workers are held inside steps 6 and 7 until the close has begun."""
    import concurrent.futures
    import threading

    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("DLMCODE_TEST_MARKS", str(marks))
    monkeypatch.setattr(B, "_worker_batch", gated_batch)
    monkeypatch.setitem(GATE, "inside", FORK.Semaphore(0))
    monkeypatch.setitem(GATE, "go", FORK.Event())
    closing = threading.Event()
    shutdown = concurrent.futures.ProcessPoolExecutor.shutdown

    def signalled_shutdown(pool, *args, **kwargs):
        closing.set()
        return shutdown(pool, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures.ProcessPoolExecutor, "shutdown", signalled_shutdown)
    forked = T.batches(*data, replace(micro(mini_stdlib, tmp_path), workers=2), 5)
    next(forked)  # step 5; steps 6-12 are queued or being built
    assert GATE["inside"].acquire(timeout=60) and GATE["inside"].acquire(timeout=60)  # both workers are mid-batch
    closer = threading.Thread(target=forked.close)
    closer.start()
    assert closing.wait(60)  # the close has reached the pool while the two batches are still held
    GATE["go"].set()
    closer.join(60)
    assert not closer.is_alive()
    assert multiprocessing.active_children() == []
    assert {5, 6, 7} <= {int(p.name) for p in marks.iterdir()}


def dying_batch(step: int):
    if step == 7:
        os._exit(1)  # as the OOM killer would end it
    return WORKER_BATCH(step)


def test_a_batch_worker_that_dies_stops_training_with_one_line(mini_stdlib, tmp_path, data, monkeypatch):
    monkeypatch.setattr(B, "_worker_batch", dying_batch)
    forked = T.batches(*data, replace(micro(mini_stdlib, tmp_path), workers=2), 5)
    with pytest.raises(DlmcodeError, match=r"a batch worker died before step \d+'s batch was built"):
        for _ in range(12):
            next(forked)
    assert multiprocessing.active_children() == []


def test_a_worker_death_seen_when_refilling_is_the_same_one_line(mini_stdlib, tmp_path, data, monkeypatch):
    """A worker that dies while training holds a batch breaks the pool before the next refill:
    submit() says so (it escaped as a raw BrokenProcessPool, now and then, in the test above)."""
    import concurrent.futures
    from concurrent.futures.process import BrokenProcessPool

    submit, submitted = concurrent.futures.ProcessPoolExecutor.submit, []

    def breaking(pool, *args, **kwargs):
        submitted.append(args)
        if len(submitted) > 8:  # the 8 steps 2 workers build ahead went in; the first refill finds the pool broken
            raise BrokenProcessPool("A child process terminated abruptly")
        return submit(pool, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures.ProcessPoolExecutor, "submit", breaking)
    forked = T.batches(*data, replace(micro(mini_stdlib, tmp_path), workers=2), 5)
    next(forked)
    with pytest.raises(DlmcodeError, match=r"a batch worker died before step 6's batch was built"):
        next(forked)
    assert multiprocessing.active_children() == []


def test_resume_is_exact(mini_stdlib, tmp_path):
    """A run stopped at step 6 and resumed logs the very losses of one run straight to 12."""
    kw = dict(steps=12, log_every=1, warmup_steps=3, seed=2)
    straight = list(T.train(micro(mini_stdlib, tmp_path / "a", max_steps=12, **kw)))
    list(T.train(micro(mini_stdlib, tmp_path / "b", max_steps=6, **kw)))
    resumed = list(T.train(micro(mini_stdlib, tmp_path / "b", max_steps=12, **kw)))

    def losses(records):
        return {r["step"]: r["loss"] for r in records if "loss" in r}

    assert next(r for r in resumed if r.get("event") == "resumed")["step"] == 6
    assert sorted(losses(resumed)) == list(range(7, 13))
    assert losses(resumed) == {k: v for k, v in losses(straight).items() if k > 6}


def test_a_portable_checkpoint_is_half_the_size_and_resumes_in_another_folder(mini_stdlib, tmp_path):
    """train.portable: bf16 weights and moments; placed as another run folder's ckpt.pt it resumes at the
    saved step on the same batches, its losses within bf16 rounding of an uninterrupted run's."""
    kw = dict(steps=6, log_every=1, warmup_steps=2, seed=2)
    straight = list(T.train(micro(mini_stdlib, tmp_path / "a", max_steps=6, **kw)))
    list(T.train(micro(mini_stdlib, tmp_path / "b", max_steps=3, **kw)))
    (tmp_path / "c").mkdir()
    T.portable(tmp_path / "b" / "ckpt.pt", tmp_path / "c" / "ckpt.pt")
    shutil.copy(tmp_path / "b" / "tokenizer.json", tmp_path / "c" / "tokenizer.json")
    full, half = ((tmp_path / d / "ckpt.pt").stat().st_size for d in "bc")
    assert half < 0.6 * full
    resumed = list(T.train(micro(mini_stdlib, tmp_path / "c", max_steps=6, **kw)))
    assert next(r for r in resumed if r.get("event") == "resumed")["step"] == 3

    def losses(records):
        return {r["step"]: r["loss"] for r in records if "loss" in r}

    assert sorted(losses(resumed)) == [4, 5, 6]
    for step, loss in losses(resumed).items():
        assert loss == pytest.approx(losses(straight)[step], rel=0.02)


def test_training_from_a_tokenized_corpus(tmp_path):
    """data=DIR trains on `python -m dlmcode.training.corpus tokenize`'s folder, validation split kept apart."""
    from dlmcode.training.corpus import build, tokens

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    files = [build.File("stdlib", "3", f"stdlib/{name}", (STDLIB / name).read_text(), "train") for name in FILES]
    files += [
        build.File("pkg", "1", f"pkg/m{i}.py", f"def f{i}(x):\n    return x + {i}\n", "train") for i in range(1000)
    ]
    build.write_jsonl(corpus / "train.jsonl.gz", files)
    last = list(tokens.tokenize(corpus, tmp_path / "tok", vocab_size=384))[-1]
    valid = [f for f in files if tokens.is_valid(f.path)]
    assert last["files_valid"] == len(valid) == 7  # pkg/m423.py, m722, m773, m800, m847, m872, m938
    assert last["files_train"] + last["files_valid"] == len(files)
    meta, train_ids, valid_ids = tokens.load(tmp_path / "tok")
    assert len(train_ids) == meta["tokens_train"] and train_ids.max() < 384
    assert (train_ids == D.BOS).sum() == last["files_train"] and (valid_ids == D.EOS).sum() == len(valid)
    cfg = replace(micro(STDLIB, tmp_path / "run", max_steps=4), data=str(tmp_path / "tok"))
    records = list(T.train(cfg))
    assert records[0]["source"] == "corpus" and records[0]["tokens_train"] == len(train_ids)
    assert records[-1]["event"] == "done" and records[-1]["step"] == 4
    with pytest.raises(UsageError, match="384 tokens"):
        list(T.train(replace(cfg, vocab_size=512, out=str(tmp_path / "run2"))))


def test_tokenize_a_fraction_keeps_a_fixed_share_of_training_files_and_every_validation_file(tmp_path):
    """fraction=0.25: about a quarter of the training files (the same ones on every run), all validation files."""
    from dlmcode.training.corpus import build, tokens

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    files = [
        build.File("pkg", "1", f"pkg/m{i}.py", f"def f{i}(x):\n    return x + {i}\n", "train") for i in range(1000)
    ]
    build.write_jsonl(corpus / "train.jsonl.gz", files)
    tok = tmp_path / "tok"
    part = list(tokens.tokenize(corpus, tok, vocab_size=300, fraction=0.25))[-1]
    kept = [f for f in files if not tokens.is_valid(f.path) and tokens.in_fraction(f.path, 0.25)]
    assert part["files_train"] == len(kept) and 200 < len(kept) < 300 and part["fraction"] == 0.25
    assert part["files_valid"] == 7  # the validation split is never thinned
    meta, train_ids, valid_ids = tokens.load(tok)
    assert (train_ids == D.BOS).sum() == len(kept) and (valid_ids == D.EOS).sum() == 7
    again = list(tokens.tokenize(corpus, tmp_path / "again", tokenizer_path=tok / "tokenizer.json", fraction=0.25))
    assert np.array_equal(tokens.load(tmp_path / "again")[1], train_ids)  # the same share, the same stream
    with pytest.raises(UsageError, match="fraction"):
        list(tokens.tokenize(corpus, tmp_path / "none", fraction=0.0))
    assert again[-1]["files_train"] == len(kept)


def test_expand_lr_mult_scales_only_the_expand_rows_step(mini_stdlib, tmp_path):
    """expand_lr_mult=10: from the same start and batch, [EXPAND]'s row takes 10x the step; every other weight
    takes exactly the step it takes at 1."""
    list(T.train(micro(mini_stdlib, tmp_path / "a", max_steps=2)))
    ends = {}
    for mult in (1.0, 10.0):
        out = tmp_path / f"m{mult}"
        out.mkdir()
        shutil.copy(tmp_path / "a" / "tokenizer.json", out / "tokenizer.json")
        cfg = micro(mini_stdlib, out, max_steps=1, expand=True, init=str(tmp_path / "a" / "best"), expand_lr_mult=mult)
        list(T.train(cfg))
        ends[mult] = builtin.load_model(out / "last", torch.device("cpu"), torch.float32).state_dict()
    start = builtin.load_model(tmp_path / "a" / "best", torch.device("cpu"), torch.float32).embed.weight.mean(0)
    step = {m: w["embed.weight"][384] - start for m, w in ends.items()}
    assert step[1.0].abs().max() > 0 and torch.allclose(step[10.0], 10 * step[1.0], atol=1e-6)
    for key, value in ends[1.0].items():
        other = ends[10.0][key]
        if key == "embed.weight":
            value, other = value[:384], other[:384]
        assert torch.equal(value, other), key


def test_v2_defaults_fit_the_size_budget_and_a_512_token_canvas(tmp_path):
    """The default training config is v2's: context 512, under 25 MB in bf16 with its tokenizer."""
    cfg = T.TrainConfig()
    assert cfg.seq >= 512
    model = builtin.DlmcodeDiffusionLM(T.model_config(cfg))
    tok = builtin.train_tokenizer(["def f(x):\n    return x\n"] * 4, 384)
    builtin.save(model, tok, tmp_path / "v2", dtype=torch.bfloat16)
    size = sum(p.stat().st_size for p in (tmp_path / "v2").iterdir())
    assert size < 25_000_000, size
    loaded = builtin.load(tmp_path / "v2", torch.device("cpu"), torch.float32)
    assert loaded.context == cfg.seq
    assert loaded.predict(torch.full((cfg.seq,), 5, dtype=torch.long)).shape == (cfg.seq, cfg.vocab_size)


def test_init_continues_a_saved_model_at_a_longer_context(mini_stdlib, tmp_path):
    """init=DIR copies a model's weights into a fresh run (v2 continues v1 at context 512), checking it fits."""
    list(T.train(micro(mini_stdlib, tmp_path / "a", max_steps=10)))
    src = tmp_path / "a" / "best"
    cfg = micro(mini_stdlib, tmp_path / "b", max_steps=1, seq=128, lr=0.0, init=str(src))
    records = list(T.train(cfg))
    assert next(r for r in records if r.get("event") == "initialised")["from"] == str(src)
    before = builtin.load_model(src, torch.device("cpu"), torch.float32)
    after = builtin.load_model(tmp_path / "b" / "last", torch.device("cpu"), torch.float32)
    assert after.cfg.context == 128 and before.cfg.context == 64
    assert all(
        torch.equal(a, b) for a, b in zip(before.state_dict().values(), after.state_dict().values(), strict=True)
    )
    fresh = micro(mini_stdlib, tmp_path / "c", max_steps=1, lr=0.0)
    list(T.train(fresh))
    assert not torch.equal(
        builtin.load_model(tmp_path / "c" / "last", torch.device("cpu"), torch.float32).embed.weight,
        before.embed.weight,
    )
    with pytest.raises(UsageError, match="its dim is 32, this run's is 48"):
        list(T.train(micro(mini_stdlib, tmp_path / "d", max_steps=1, dim=48, init=str(src))))
    with pytest.raises(UsageError, match="its tokenizer is not the training data's"):
        list(T.train(micro(mini_stdlib, tmp_path / "e", max_steps=1, vocab_size=384, max_files=2, init=str(src))))


def test_dlmcode_train_exports_the_best_model_with_its_card(mini_stdlib, tmp_path):
    from typer.testing import CliRunner

    from dlmcode.cli.commands import app

    out, ship = tmp_path / "run", tmp_path / "ship"
    settings = [
        f"-o{k}={v}"
        for k, v in [
            ("out", out),
            ("stdlib", mini_stdlib),
            ("max_steps", 10),
            ("vocab_size", 384),
            ("dim", 32),
            ("n_layers", 2),
            ("n_heads", 2),
            ("seq", 64),
            ("batch", 8),
            ("log_every", 5),
            ("eval_windows", 8),
        ]
    ]
    result = CliRunner().invoke(app, ["train", *settings, "--export", str(ship), "-q"])
    assert result.exit_code == 0, result.stderr
    card = (ship / "MODEL_CARD.md").read_text()
    assert card == T.model_card(out)
    assert "| size | d=32, 2 layers, 2 heads, vocab 384, context 64 |" in card
    assert f"stdlib={mini_stdlib}" in card and "max_steps=10" in card  # the command's settings, as given
    assert "| run | 10 steps, 5,120 tokens," in card
    dlm = builtin.load(ship, torch.device("cpu"), torch.float32)
    assert dlm.predict(torch.tensor([5, 6, 7])).shape == (3, 384)


# ---------------------------------------------------------------- DreamOn's objective (training/expand.py)


def test_merge_runs_absorb_only_masked_neighbours():
    from dlmcode.training import expand as E

    masked = np.array([True, True, True, False, True, True, False, True])
    keep, expands = E.merge_runs(masked, 1.0, np.random.default_rng(0))  # p = 1: every chance taken
    assert keep.tolist() == [True, False, False, True, True, False, True, True]
    assert expands.tolist() == [True, False, False, False, True, False, False, False]
    keep, expands = E.merge_runs(masked, 0.0, np.random.default_rng(0))
    assert keep.all() and not expands.any()


def test_expand_examples_keep_the_text_and_count_what_they_stand_for():
    """Reading an example back: a visible token is itself, [EXPAND] stands for >= 2 masked tokens of the middle,
    [PAD] targets follow the middle; prefix + middle + suffix is the window again."""
    from dlmcode.training import expand as E

    rng = np.random.default_rng(3)
    nl = 5
    line_end = np.zeros(64, dtype=np.uint8)
    line_end[nl] = D.IS_NEWLINE
    x = np.array([D.BOS] + [10 + i % 7 if i % 6 else nl for i in range(1, 64 + E.EXTRA + 1)], dtype=np.int64)
    cfg = T.TrainConfig(seq=64, expand=True, max_deletes=8)
    seen = {"expand": 0, "delete": 0}
    for _ in range(300):
        inp, tgt, msk = E.example(x.copy(), 64, line_end, cfg, rng, expand_id=64)
        assert len(inp) == len(tgt) == len(msk) == 64 and inp[0] == D.BOS and msk.any()
        assert (inp[msk] == D.MASK).all() and (inp[~msk] == tgt[~msk]).all()
        assert not ((tgt == 64) & ~msk).any() and not ((tgt == D.PAD) & ~msk).any()  # only holes expand or delete
        hole = np.flatnonzero(msk)
        pads = np.flatnonzero(tgt == D.PAD)
        if len(pads):
            assert (tgt[pads[0] : pads[-1] + 1] == D.PAD).all() and (tgt[pads[0] :][: len(pads)] == D.PAD).all()
            assert not (tgt[pads[-1] + 1 : hole[-1] + 1] == 64).any()  # nothing expands after the deletes
        seen["expand"] += int((tgt == 64).sum())
        seen["delete"] += len(pads)
        # undo the merges: an [EXPAND] at most a whole masked run; the tokens around the middle are the window's
        assert (tgt[: hole[0]] == x[: hole[0]]).all()
    assert seen["expand"] > 100 and seen["delete"] > 100


def test_an_expand_run_grows_the_vocabulary_by_one_from_its_init(mini_stdlib, tmp_path):
    """expand=true on a 384-token corpus: the model has 385 tokens, [EXPAND] at 384 in config and tokenizer;
    init= from a model without it copies every weight and starts [EXPAND]'s row at the mean embedding."""
    list(T.train(micro(mini_stdlib, tmp_path / "a", max_steps=4)))
    src = tmp_path / "a" / "best"
    (tmp_path / "b").mkdir()
    shutil.copy(tmp_path / "a" / "tokenizer.json", tmp_path / "b" / "tokenizer.json")
    cfg = micro(mini_stdlib, tmp_path / "b", max_steps=1, lr=0.0, expand=True, init=str(src))
    list(T.train(cfg))
    before = builtin.load_model(src, torch.device("cpu"), torch.float32)
    after = builtin.load_model(tmp_path / "b" / "last", torch.device("cpu"), torch.float32)
    assert after.cfg.vocab_size == 385 and after.cfg.expand_id == 384 and before.cfg.expand_id == -1
    assert torch.equal(after.embed.weight[:384], before.embed.weight)
    assert torch.allclose(after.embed.weight[384], before.embed.weight.mean(0))
    dlm = builtin.load(tmp_path / "b" / "last", torch.device("cpu"), torch.float32)
    assert dlm.expand_id == 384 and dlm.delete_id == 0 and 384 in dlm.special_ids
    assert dlm.tokenizer.tok.token_to_id("[EXPAND]") == 384 and dlm.tokenizer.encode("[EXPAND]") != [384]
    plain = builtin.load(src, torch.device("cpu"), torch.float32)
    assert plain.expand_id is None and plain.delete_id is None


def test_end_rows_only_moves_the_expand_and_pad_rows_and_nothing_else(mini_stdlib, tmp_path):
    """end_rows_only=true: after three steps at a high lr, every weight but the tied [EXPAND] (384) and
    [PAD] (0) rows is its init's bit for bit, those two rows moved, so the logits of every other token
    are the init's exactly (a hole of given length, which bans both, decodes as init does)."""
    list(T.train(micro(mini_stdlib, tmp_path / "a", max_steps=2)))
    src = tmp_path / "a" / "best"
    (tmp_path / "b").mkdir()
    shutil.copy(tmp_path / "a" / "tokenizer.json", tmp_path / "b" / "tokenizer.json")
    cfg = micro(mini_stdlib, tmp_path / "b", max_steps=3, warmup_steps=1, lr=1e-2, expand=True, init=str(src))
    list(T.train(replace(cfg, end_rows_only=True)))
    before = builtin.load_model(src, torch.device("cpu"), torch.float32)
    after = builtin.load_model(tmp_path / "b" / "last", torch.device("cpu"), torch.float32)
    for key, value in before.state_dict().items():
        if key != "embed.weight":
            assert torch.equal(after.state_dict()[key], value), key
    assert torch.equal(after.embed.weight[1:384], before.embed.weight[1:])
    assert not torch.equal(after.embed.weight[0], before.embed.weight[0])
    assert not torch.allclose(after.embed.weight[384], before.embed.weight.mean(0))
    ids = torch.tensor([[2, 40, 41, 1, 1, 1, 42, 43, 3]])
    with torch.no_grad():
        old, new = before.logits(before.hidden(ids)), after.logits(after.hidden(ids))
    assert torch.equal(new[..., 1:384], old[..., 1:])
    assert not torch.equal(new[..., 0], old[..., 0])


def test_a_side_branch_run_moves_the_side_branch_only_and_every_other_logit_stays_inits(mini_stdlib, tmp_path):
    """side_layers=1: after three steps every weight of init is bit for bit init's (the [EXPAND] row its
    mean), only side.* moved, and the logits of every token but [PAD] (0) and [EXPAND] (384) are init's
    exactly, so a hole of given length (both banned) decodes as init does. The exported folder loads,
    declares expand and delete, and its cached forward (refresh every call) equals the plain one."""
    from dlmcode.core.run import CacheSettings
    from dlmcode.models import cache

    list(T.train(micro(mini_stdlib, tmp_path / "a", max_steps=2)))
    src = tmp_path / "a" / "best"
    (tmp_path / "b").mkdir()
    shutil.copy(tmp_path / "a" / "tokenizer.json", tmp_path / "b" / "tokenizer.json")
    cfg = micro(mini_stdlib, tmp_path / "b", max_steps=3, warmup_steps=1, lr=1e-2, expand=True, init=str(src))
    records = list(T.train(replace(cfg, side_layers=1, p_expand=0.6)))
    assert "expand_bce" in next(r for r in records if r.get("event") == "initialised")
    before = builtin.load_model(src, torch.device("cpu"), torch.float32)
    after = builtin.load_model(tmp_path / "b" / "last", torch.device("cpu"), torch.float32)
    assert after.cfg.side_layers == 1 and after.side is not None
    for key, value in before.state_dict().items():
        assert torch.equal(after.state_dict()[key][: len(value)], value), key
    moved = [k for k in after.state_dict() if k.startswith("side.") and "norm" not in k]
    assert moved and all(torch.count_nonzero(after.state_dict()[k]) for k in moved)  # zero-started, now moved
    ids = torch.tensor([[2, 40, 41, 1, 1, 1, 42, 43, 3]])
    with torch.no_grad():
        old, new = before.logits(before.hidden(ids)), after.logits(after.hidden(ids))
    assert torch.equal(new[..., 1:384], old[..., 1:])
    assert not torch.equal(new[..., 0], old[..., 0])
    dlm = builtin.load(tmp_path / "b" / "last", torch.device("cpu"), torch.float32)
    assert dlm.expand_id == 384 and dlm.delete_id == 0
    settings = CacheSettings(mode="dual", block=2, refresh=1)
    cached = cache.CachedPredict(after.hidden, after.head, settings, 1, torch.device("cpu"))
    with torch.no_grad():
        assert torch.allclose(cached(ids[0]), after.logits(after.hidden(ids))[0], atol=1e-5)
    (tmp_path / "c").mkdir()  # a side-only portable checkpoint resumes: its trunk comes from init= again
    shutil.copy(tmp_path / "a" / "tokenizer.json", tmp_path / "c" / "tokenizer.json")
    T.portable(tmp_path / "b" / "ckpt.pt", tmp_path / "c" / "ckpt.pt", side_only=True)
    small = torch.load(tmp_path / "c" / "ckpt.pt", weights_only=False)["model"]
    assert small and all(k.startswith("side.") for k in small)
    resumed = list(T.train(replace(cfg, out=str(tmp_path / "c"), side_layers=1, p_expand=0.6, max_steps=4)))
    assert next(r for r in resumed if r.get("event") == "resumed")["step"] == 3
    again = builtin.load_model(tmp_path / "c" / "last", torch.device("cpu"), torch.float32)
    assert torch.equal(again.blocks[0].up.weight, before.blocks[0].up.weight)
