"""The block families end to end, as a user meets them: `dlmcode generate`, `infill`, `compare`, `bench`,
`speed`, the live view and `serve` on a tiny random model of each (SDAR, LLaDA2, Fast-dLLM v2, DiffusionGemma),
each with its own decoder, and the guard on the code that a continuation writes.

The folders are built as each family's own test file builds them (tests/test_sdar.py, test_llada2.py,
test_fast_dllm.py, test_diffusion_gemma.py: there, the logits and tokens against the references).
"""

from __future__ import annotations

import io
import json

import pytest
import test_diffusion_gemma
import test_fast_dllm
import test_llada2
import test_sdar
import torch
from rich.console import Console

from dlmcode import models
from dlmcode.core.run import RunSettings
from dlmcode.jobs import fill
from dlmcode.models import families

import cli_run

PROMPT = "def add(a, b):\n"
SOURCE = "def f(x):\n    y = 1\n    return y\n"
OWN = {row.name: row.decoder for row in families.ROWS}


def save_sdar(path):
    model = test_sdar.build(False)
    model.save_pretrained(path)
    test_sdar.char_tokenizer().save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"model_type": "sdar", "architectures": ["SDARForCausalLM"]}))


def save_llada2(path):
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in test_llada2.random_weights().items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(test_llada2.CONFIG))
    test_llada2.char_tokenizer().save_pretrained(path)


def save_fast_dllm(path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(**test_fast_dllm.SIZES)).eval().save_pretrained(path)
    test_fast_dllm.char_tokenizer().save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    mine = {"model_type": "Fast_dLLM_Qwen", "architectures": ["Fast_dLLM_QwenForCausalLM"]}
    (path / "config.json").write_text(json.dumps(config | mine | {"bd_size": test_fast_dllm.BLOCK}))


def save_diffusion_gemma(path):
    from transformers import DiffusionGemmaForBlockDiffusion

    torch.manual_seed(0)
    DiffusionGemmaForBlockDiffusion(test_diffusion_gemma.tiny_config()).eval().save_pretrained(path)
    test_diffusion_gemma.char_tokenizer().save_pretrained(path)


BUILDERS = {
    "sdar": save_sdar,
    "llada2": save_llada2,
    "fast-dllm-v2": save_fast_dllm,
    "diffusion-gemma": save_diffusion_gemma,
}


@pytest.fixture(scope="module", params=list(BUILDERS))
def folder(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    BUILDERS[request.param](path)
    return request.param, path


@pytest.fixture(scope="module")
def dlm(folder):
    return models.load(str(folder[1]), device="cpu", dtype="float32")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "prompt.py").write_text(PROMPT)
    (tmp_path / "f.py").write_text(SOURCE)
    return tmp_path


def run_json(*args) -> dict:
    result = cli_run.run(*args, "--device", "cpu", "--json", "-q")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_generate_runs_the_family_s_own_decoder_and_the_guard_keeps_its_code_parsing(folder, files):
    """A continuation with the family's own decoder: the guard on (the default) judges the code the continuation
    writes, and what comes out parses; the same decode unguarded breaks it (a random model writes noise)."""
    name, path = folder
    guarded = run_json("generate", files / "prompt.py", "-m", path, "--length", "12")
    assert guarded["decoder"]["name"] == OWN[name] and guarded["decoder"]["settings"]["guard"] is True
    assert guarded["text"].startswith(PROMPT) and len(guarded["text"]) > len(PROMPT)
    assert guarded["guard"]["guard_checks"] > 0 and guarded["guard"]["guard_rejected"] > 0
    assert guarded["breakage"]["broken"] is False
    compile(guarded["text"], "continuation.py", "exec")  # parses: the guard's promise, checked by Python itself
    bare = run_json("generate", files / "prompt.py", "-m", path, "--length", "12", "-o", "guard=false")
    assert bare["decoder"]["settings"]["guard"] is False and bare["breakage"]["broken"] is True


def test_syntax_guard_runs_inside_the_blocks_given_a_language(folder, files):
    """syntax-guard (drafts, the syntax oracle, repairs) needs a language, which the decoder-contract tests on hand
    made canvases do not give it: from the command line, on a .py file, it decodes every family's blocks to code
    that parses."""
    out = run_json("generate", files / "prompt.py", "-m", folder[1], "--length", "12", "-d", "syntax-guard")
    assert out["decoder"]["name"] == "syntax-guard" and out["filled"] >= 12
    assert out["breakage"]["broken"] is False
    compile(out["text"], "continuation.py", "exec")


def test_infill_goes_through_the_prompt_as_dlmcode_models_says(folder, files):
    """A span filled with the code around it kept; `dlmcode models` says each block family fills through the
    prompt (none was trained to fill in the middle)."""
    name, path = folder
    out = run_json("infill", files / "f.py", "--span", "2:2", "-m", path)
    assert out["text"].startswith("def f(x):\n") and out["text"].endswith("    return y\n")
    assert out["decoder"]["name"] == OWN[name] and out["calls"] >= 1
    models_out = cli_run.run("models", "--json")
    assert models_out.exit_code == 0, models_out.output
    listed = {row["name"]: row for row in json.loads(models_out.stdout)}
    assert listed[name]["infill"] == "prompt" and listed[name]["decoder"] == OWN[name]


def test_compare_and_bench_run_the_family(folder, files, tmp_path):
    """compare: two decoders side by side on one span; bench: a one-task suite, its breakage and TPF reported as
    for every family."""
    name, path = folder
    both = ["-d", "low-confidence", "-d", OWN[name]]
    compared = run_json("compare", files / "f.py", "--span", "2:2", "-m", path, *both)
    assert [r["decoder"] for r in compared["decoders"]] == ["low-confidence", OWN[name]]
    assert all(r["n"] == 1 and r["errors"] == 0 and r["tpf"] > 0 for r in compared["decoders"])
    suite = tmp_path / "one.jsonl"
    task = {"task_id": "t/add", "prompt": PROMPT, "canonical_solution": "    return a + b", "suffix": "\n"}
    suite.write_text(json.dumps(task | {"test": "def check(f):\n    assert f(1, 2) == 3\n", "entry_point": "add"}))
    bench = run_json("bench", "-s", suite, "-m", path, "-d", OWN[name], "--timeout", "5")
    (row,) = bench["rows"]
    assert row["decoder"] == OWN[name] and row["n"] == 1 and row["errors"] == 0
    assert row["tpf"] > 0 and 0.0 <= row["breakage_rate"] <= 1.0


def test_speed_times_it_with_and_without_its_exact_cache(dlm, folder):
    from dlmcode.bench import speed

    name = folder[0]
    rows = speed.run(dlm, speed.SpeedConfig(lengths=(40,), gen=8, caches=("none",), names=(OWN[name],)))
    by = {r.cache: r for r in rows}
    assert by["exact"].calls == by["none"].calls and by["exact"].flops < by["none"].flops


def test_the_live_view_draws_a_block_decode_to_its_end(dlm, folder):
    """The view on a terminal: the prompt, the holes as holes (DiffusionGemma's too, never its noise), and the
    filled canvas at the end."""
    from dlmcode.cli.view import HOLE, CanvasView

    job = fill.generate_job(PROMPT, dlm, RunSettings(decoder=None, length=8), chat=False)
    view = CanvasView(job, Console(file=io.StringIO(), force_terminal=True, width=120))
    start = view.render(None).plain
    holes = job.plan.canvas.n_holes  # 8, or more where the canvas ends on a whole block
    assert "def add(a, b):" in start and start.count(HOLE) == holes >= 8 and f"filled 0/{holes}" in start
    final = view.follow(job.steps())
    assert final is not None and final.canvas.n_holes == 0
    assert HOLE not in view.render(final).plain


def test_serve_fills_a_cursor_and_batches_as_alone(dlm, folder):
    """An editor's request on the family's own decoder, the suffix kept out of the fill; two decodes served
    together (--batch 2) give the tokens and calls each gives alone (DiffusionGemma: one decode a forward)."""
    from dlmcode.jobs import batch
    from dlmcode.serve.engine import Engine
    from dlmcode.serve.request import Fill

    name = folder[0]
    engine = Engine(dlm, dlm.decoder, dict(dlm.decoder_options), "none", 0, "python", name, 0, 1)
    answer = engine.run(Fill("def f(x):\n    y = ", "\n    return y\n", ceiling=8))
    assert answer.decoder == OWN[name] and answer.calls >= 1 and "return y" not in answer.text
    prompts = [PROMPT, "x = [1, 2, 3]\n"]

    def jobs(model):
        return [fill.generate_job(p, model, RunSettings(decoder=None, length=8), chat=False) for p in prompts]

    alone = [(r.canvas, r.calls) for r in (job.run() for job in jobs(dlm))]
    together = batch.run_batched(jobs(batch.batched(dlm)), 2)
    assert [(r.canvas, r.calls) for r in together] == alone


def test_the_decoder_flag_names_each_family_s_own():
    """--decoder's help says which decoder runs when none is named, as `dlmcode models` lists it."""
    from dlmcode.cli import flags

    text = flags.DecoderName.__metadata__[0].help
    for row in families.ROWS:
        assert row.decoder in text, row.name
