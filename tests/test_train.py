"""Training the built-in model: corpus rules, masking invariants, a micro run, resume."""

from __future__ import annotations

import os
import shutil
import sysconfig
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"

from dlmcode import train as T  # noqa: E402
from dlmcode.errors import UsageError  # noqa: E402
from dlmcode.models import builtin  # noqa: E402

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
        out=str(out), stdlib=str(root), minutes=5, vocab_size=384, dim=32, n_layers=2, n_heads=2,
        seq=64, batch=8, lr=3e-3, warmup_steps=5, log_every=5, eval_windows=8, ckpt_minutes=100,
    )  # fmt: skip
    return replace(base, **kw)


def test_corpus_rules(mini_stdlib):
    files = T.corpus_files(mini_stdlib)
    assert sorted(files) == sorted(FILES)  # test folders and unparsable files are dropped
    train, heldout = T.split(files)
    assert set(train) | set(heldout) == set(files) and not set(train) & set(heldout)
    assert T.file_list_hash(files) == T.file_list_hash(dict(files))


def test_heldout_split_is_about_five_percent():
    names = [f"pkg/mod{i}.py" for i in range(4000)]
    share = sum(map(T.is_heldout, names)) / len(names)
    assert 0.03 < share < 0.07


def test_tokenizer_is_line_aligned(mini_stdlib):
    texts = list(T.corpus_files(mini_stdlib).values())
    tok = T.train_tokenizer(texts, 384)
    a, b = "def f(x):\n    \n\treturn  x \n", "    y = [MASK] + '\\n'\n"
    assert tok.encode(a + b) == tok.encode(a) + tok.encode(b)
    assert tok.decode(tok.encode(a + b)) == a + b
    assert builtin.SPECIAL_TOKENS.index("[MASK]") not in tok.encode(b)  # literal text is never a hole


def test_noise_invariants():
    rng = np.random.default_rng(0)
    nl = 5
    line_end = np.zeros(64, dtype=np.uint8)
    line_end[nl] = T.IS_NEWLINE
    x = np.array([T.BOS] + [10 + i % 7 if i % 6 else nl for i in range(1, 80)], dtype=np.int64)
    cfg = T.TrainConfig(seq=64)
    for _ in range(200):
        inp, tgt, msk = T.noise(x.copy(), 64, line_end, cfg, rng)
        assert len(inp) == len(tgt) == len(msk) == 64
        assert inp[0] == T.BOS and not msk[0] and msk.any()
        assert (inp[msk] == T.MASK).all() and (inp[~msk] == tgt[~msk]).all()
        assert T.MASK not in tgt


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
    assert T.parse_overrides(["dim=64", "bf16=false", "lr=1e-3"]) == replace(T.TrainConfig(), dim=64, bf16=False, lr=1e-3)
    with pytest.raises(UsageError, match="nope"):
        T.parse_overrides(["nope=1"])
