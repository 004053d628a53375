"""CoDiLA's assistant: soft embeddings, the block input, decoding, folders, the tokenizer checks,
attaching it to a decoder, and `dlmcode train-assistant` on a micro config (loss goes down, resumes)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sysconfig
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dlmcode.cli.commands import app
from dlmcode.core import assistant as A
from dlmcode.core.errors import ModelError, UsageError
from dlmcode.decoders.codila import Codila
from dlmcode.decoders.threshold import Threshold
from dlmcode.jobs.wiring import with_assistant
from dlmcode.models import assistant_lm as MA
from dlmcode.models import load
from dlmcode.training import train_assistant as TA

from tiny import tiny_builtin

STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILES = ["textwrap.py", "shlex.py", "glob.py", "fnmatch.py", "bisect.py", "copy.py"]  # copy.py is held out


def tiny(vocab: int = 30, seed: int = 0, sha: str = "") -> MA.TinyAssistant:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return MA.TinyAssistant(
            MA.AssistantConfig(vocab_size=vocab, dim=16, n_layers=1, n_heads=2, vocab_sha256=sha)
        ).eval()


def test_soft_embedding_of_a_one_hot_is_the_hard_embedding():
    model = tiny()
    ids = torch.tensor([[3, 0, 29, 7]])
    one_hot = torch.nn.functional.one_hot(ids, 30).float()  # (1, 4, V)
    assert torch.allclose(A.soft_embed(one_hot, model.table), model.embed_ids(ids))
    mix = 0.25 * one_hot[0, 0] + 0.75 * one_hot[0, 1]
    assert torch.allclose(A.soft_embed(mix, model.table), 0.25 * model.table[3] + 0.75 * model.table[0])


def test_the_block_input_is_b_plus_2_long_between_the_boundary_tokens():
    model = tiny()
    probs = torch.softmax(torch.randn(3, 5, 30), -1)
    x = A.prefix(model, probs)
    assert x.shape == (3, 5 + 2, 16)
    assert torch.equal(x[:, 0], model.embed.weight[30].expand(3, -1)) and torch.equal(
        x[:, -1], model.embed.weight[31].expand(3, -1)
    )
    assert model.open_id == 30 and model.close_id == 31 and model(x).shape == (3, 7, 30)  # outputs only shared ids


def test_decode_is_left_to_right_with_per_token_entropies():
    model = tiny()
    probs = torch.softmax(torch.randn(2, 4, 30), -1)
    ids, entropies = A.decode(model, probs, 0.0, torch.Generator(), banned=5)
    assert ids.shape == entropies.shape == (2, 4) and not (ids == 5).any()
    assert ((entropies >= 0) & (entropies <= torch.log(torch.tensor(30.0)) + 1e-4)).all()
    x = A.prefix(model, probs[:1])
    for j in range(4):  # greedy: each token is the argmax given the ones before it
        logits = model(x)[:, -1].clone()
        logits[:, 5] = -torch.inf
        assert int(logits.argmax()) == int(ids[0, j])
        x = torch.cat([x, model.embed_ids(ids[:1, j])[:, None]], 1)
    a = A.decode(model, probs, 1.0, torch.Generator().manual_seed(3))[0]
    assert torch.equal(a, A.decode(model, probs, 1.0, torch.Generator().manual_seed(3))[0])


@pytest.mark.parametrize("split", [[7], [5, 2], [5, 1, 1], [3, 3, 1]])
def test_extending_a_kept_past_equals_running_the_whole_sequence(split):
    model = tiny()
    x = torch.randn(2, 7, 16)
    whole = model(x)  # (2, 7, V)
    past, at = None, 0
    for n in split:  # chunks after the kept positions: several new ones at once, or one
        last, past = model.extend(x[:, at : at + n], past)
        at += n
        assert torch.allclose(last, whole[:, at - 1], atol=1e-5)


def test_block_loss_is_the_teacher_forced_decode():
    model = tiny()
    probs = torch.softmax(torch.randn(1, 3, 30), -1)
    targets = torch.tensor([[4, 9, 2]])
    x = torch.cat([A.prefix(model, probs), model.embed_ids(targets[:, :2])], 1)
    logp = torch.log_softmax(model(x), -1)[0, 4:]  # rows after E(close), y1, y2
    assert torch.allclose(A.block_loss(model, probs, targets), -logp[[0, 1, 2], [4, 9, 2]].sum(), atol=1e-5)


def test_folder_round_trip(tmp_path):
    model = tiny(sha="abc")
    MA.save(model, tmp_path / "a")
    assert json.loads((tmp_path / "a" / "config.json").read_text())["model_type"] == MA.MODEL_TYPE
    again = MA.load(tmp_path / "a")
    x = A.prefix(model, torch.softmax(torch.randn(2, 3, 30), -1))
    assert torch.equal(model(x), again(x)) and again.vocab_sha256 == "abc"
    with pytest.raises(ModelError, match="no assistant"):
        MA.load(tmp_path)


def test_marginals_drop_dllm_only_ids_and_renormalise():
    logits = torch.log(torch.tensor([[0.2, 0.3, 0.5]]))
    assert torch.allclose(A.marginals(logits, 2), torch.tensor([[0.4, 0.6]]))
    with pytest.raises(ModelError, match="do not share a vocabulary"):
        A.marginals(logits, 4)


# --- the tokenizer must be shared -------------------------------------------------------------


def test_shared_ids_accepts_a_few_different_added_tokens_and_rejects_another_tokenizer():
    base = [f"t{i}" for i in range(1000)]
    assert A.shared_ids(base + ["<|mask|>"], base + ["<think>", "</think>"]) == 1000  # Dream vs Qwen3 shape
    with pytest.raises(ModelError, match="tokenizer does not match.*first 256 ids"):
        A.shared_ids(base, base[:256] + [f"other{i}" for i in range(744)])


@pytest.fixture(scope="module")
def dlm_path(tmp_path_factory) -> Path:
    return tiny_builtin(tmp_path_factory.mktemp("dlm") / "model")


@pytest.fixture(scope="module")
def dlm(dlm_path):
    return load(str(dlm_path), device="cpu")


def fitted(dlm) -> MA.TinyAssistant:
    table = A.token_table(dlm.tokenizer)
    return tiny(len(table), sha=A.fingerprint(table, len(table)))


def test_attach_passes_other_decoders_through_and_checks_the_tokenizer(dlm):
    assert with_assistant(Threshold(), dlm) == Threshold()
    ours = fitted(dlm)
    assert with_assistant(dataclasses.replace(Codila(), assistant=ours), dlm).assistant is ours
    with pytest.raises(ModelError, match="does not share the tokenizer"):
        with_assistant(
            dataclasses.replace(Codila(), assistant=tiny(len(A.token_table(dlm.tokenizer)), sha="0" * 64)), dlm
        )


def test_attach_without_an_assistant_says_how_to_train_one(dlm):
    other = dataclasses.replace(dlm, family="masked-lm")
    with pytest.raises(
        ModelError, match=r"codila needs an assistant for this model; train one with `dlmcode train-assistant"
    ):
        with_assistant(Codila(), other)


def test_attach_loads_a_path(dlm, tmp_path):
    MA.save(fitted(dlm), tmp_path / "a")
    attached = with_assistant(Codila(assistant=str(tmp_path / "a")), dlm)
    assert isinstance(attached.assistant, MA.TinyAssistant)


# --- train-assistant ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mini_stdlib(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stdlib")
    for name in FILES:
        shutil.copy(STDLIB / name, root / name)
    return root


def micro(dlm_path: Path, root: Path, out: Path, **kw) -> TA.AssistantTrainConfig:
    base = TA.AssistantTrainConfig(
        out=str(out),
        model=str(dlm_path),
        stdlib=str(root),
        device="cpu",
        dim=32,
        n_layers=1,
        n_heads=2,
        seq=48,
        batch=4,
        block=4,
        lr=3e-3,
        warmup_steps=5,
        log_every=5,
        eval_windows=4,
        threads=1,
        max_steps=40,
    )
    return dataclasses.replace(base, **kw)


def test_train_assistant_loss_goes_down_and_resumes(dlm_path, mini_stdlib, tmp_path):
    records = list(TA.logged(micro(dlm_path, mini_stdlib, tmp_path / "run")))
    losses = [r["loss"] for r in records if "loss" in r]
    assert {"step", "loss", "tok_s", "elapsed", "budget"} <= set(records[1])
    assert sum(losses[-2:]) / 2 < losses[0] - 0.5, losses
    checks = [r for r in records if r.get("event") == "checkpoint"]
    assert checks[-1]["heldout_loss"] < checks[-1]["heldout_dllm_loss"]  # beats the random dLLM's marginals
    assert MA.load(tmp_path / "run" / "best").vocab == len(A.token_table(load(str(dlm_path), device="cpu").tokenizer))
    more = list(TA.logged(micro(dlm_path, mini_stdlib, tmp_path / "run", max_steps=45)))
    assert more[1]["event"] == "resumed" and more[1]["step"] == 40
    assert [r["step"] for r in more if "loss" in r] == [45]


def test_train_assistant_command_exports_an_assistant_codila_then_uses(dlm_path, mini_stdlib, tmp_path):
    cfg = micro(dlm_path, mini_stdlib, tmp_path / "run", max_steps=5)
    opts = [f"-o{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg) if f.name not in ("model", "device")]
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "train-assistant",
            "--model",
            str(dlm_path),
            "--device",
            "cpu",
            "-q",
            *opts,
            "--export",
            str(tmp_path / "ship"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["event"] == "done"
    card = (tmp_path / "ship" / "MODEL_CARD.md").read_text()
    assert "dlmcode train-assistant --model" in card and "Held-out" in card
    source = tmp_path / "f.py"
    source.write_text("def add(a, b):\n    return a + b\n")
    args = [
        "infill",
        str(source),
        "--span",
        "2",
        "-m",
        str(dlm_path),
        "-d",
        "codila",
        "-o",
        f"assistant={tmp_path / 'ship'}",
        "--json",
    ]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["decoder"]["name"] == "codila"


def test_train_assistant_rejects_unknown_settings():
    with pytest.raises(UsageError, match="unknown training setting 'nope'"):
        TA.parse_overrides(["nope=1"])
    assert TA.parse_overrides(["block=4"], model="m", assistant=None).model == "m"


def test_the_shipped_assistant_fits_the_builtin_tokenizer():
    path = MA.shipped_path()
    if not (path / "config.json").exists() or not (Path(str(path.parent / "builtin" / "tokenizer.json"))).exists():
        pytest.skip("the built-in model or its assistant is not exported yet")
    from dlmcode.models.builtin import BuiltinTokenizer

    A.check(MA.load(path), A.token_table(BuiltinTokenizer.from_file(path.parent / "builtin" / "tokenizer.json")))
    assert "Held-out" in (path / "MODEL_CARD.md").read_text()


# --- a Hugging Face causal LM as the assistant --------------------------------------------------


@pytest.mark.slow
def test_a_hf_causal_lm_reads_soft_embeddings_and_round_trips(dlm, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    table = A.token_table(dlm.tokenizer)
    config = LlamaConfig(
        vocab_size=len(table) + 2,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = MA.HfAssistant(
        LlamaForCausalLM(config).eval(), len(table), len(table), len(table) + 1, A.fingerprint(table, len(table))
    )
    probs = torch.softmax(torch.randn(2, 3, len(table)), -1)
    ids, entropies = A.decode(model, probs, 0.0, torch.Generator(), banned=dlm.mask_id)
    assert ids.shape == (2, 3) and A.block_loss(model, probs, ids).item() > 0
    x = torch.cat([A.prefix(model, probs), model.embed_ids(ids[:, :2])], 1)  # the decode's whole sequence
    whole = torch.log_softmax(model(x)[:, -3:].float(), -1)  # next-token distributions without the model's cache
    assert torch.allclose(-(whole.exp() * whole).sum(-1), entropies, atol=1e-4)  # the cached decode saw the same
    MA.save(model, tmp_path / "hf")
    again = with_assistant(Codila(assistant=str(tmp_path / "hf")), dlm).assistant
    assert isinstance(again, MA.HfAssistant) and torch.equal(A.decode(again, probs, 0.0, torch.Generator())[0], ids)


@pytest.mark.slow
def test_train_assistant_fine_tunes_a_hf_causal_lm_with_the_same_tokenizer(dlm_path, mini_stdlib, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(dlm_path / "tokenizer.json"))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    records = list(
        TA.logged(micro(dlm_path, mini_stdlib, tmp_path / "run", assistant=str(tmp_path / "hf"), max_steps=3))
    )
    assert records[-1]["event"] == "done"
    trained = MA.load(tmp_path / "run" / "best")
    assert isinstance(trained, MA.HfAssistant) and (trained.open_id, trained.close_id) == (
        len(tokenizer),
        len(tokenizer) + 1,
    )
    assert trained.vocab == len(tokenizer)  # the same tokenizer: every id is shared


def test_block_masking_invariants():
    import numpy as np

    cfg, rng = TA.AssistantTrainConfig(block=8, blocks_per_window=8), np.random.default_rng(0)
    for _ in range(200):
        x = np.arange(100, 164)
        hole = np.zeros(64, dtype=bool)
        if rng.random() < 0.5:
            x, hole = TA.pad_hole(x, 1, 0, rng)
            assert len(x) == 64 and (x[hole] == 0).any() and not hole[0]
        holes, blocks = TA.mask(64, 1, cfg, rng, hole)
        assert not holes[0] and holes[hole].all()
        covered = np.concatenate(blocks)
        assert holes[covered].all() and len(set(covered.tolist())) == len(covered)
        assert all(1 <= len(b) <= 8 and (np.diff(b) == 1).all() for b in blocks)
        assert all(b[0] > a[-1] + 1 for a, b in zip(blocks, blocks[1:], strict=False))  # never touching
        if hole.any():
            assert any(hole[b[0]] for b in blocks)  # a block starts inside the over-allocated hole


def test_codila_on_a_model_without_a_fitting_assistant_is_one_clear_line(dlm_path, tmp_path):
    source = tmp_path / "f.py"
    source.write_text("def add(a, b):\n    return a + b\n")
    result = CliRunner().invoke(app, ["infill", str(source), "--span", "2", "-m", str(dlm_path), "-d", "codila"])
    assert result.exit_code == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "assistant" in lines[0] and "train-assistant" in lines[0], result.stderr
