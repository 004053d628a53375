"""The core's layers: decoders load no model code, models never reach up to jobs, and the
shipped weights give the same logits, bit for bit, through the shared transformer pieces."""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"

import dlmcode  # noqa: E402
from dlmcode.models import assistant as MA  # noqa: E402
from dlmcode.models import builtin  # noqa: E402

PACKAGE = Path(dlmcode.__file__).parent
WEIGHTS = Path(str(resources.files("dlmcode.weights")))
ABOVE_MODELS = ("dlmcode.fill", "dlmcode.batch", "dlmcode.attach")  # jobs and what they hand decoders

# sha256 of the float32 logits below, recorded on the code before models/layers.py existed
# (CPU, one thread, as conftest sets): the refactor must not change a bit. Another CPU or
# torch build may round differently; then re-record from the commit before the refactor.
BUILTIN_SHA = "60b375d9bb8833ff9db2d5b58400e517557016b9182561465db1b8ccad1305ad"
ASSISTANT_FULL_SHA = "bf2c16d450c3b59defc871d6f2c5d87ac2444008e83872422c136ab57939bf24"
ASSISTANT_EXTEND_SHA = "46db2e54c34ae7d1676ee6babfe7a4978ce23c6c20251f8f8bc0c0fd5e695a16"


def sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().float().contiguous().numpy().tobytes()).hexdigest()


def test_importing_the_decoders_loads_no_model_code():
    code = "import sys, dlmcode.decoders; print('\\n'.join(sorted(m for m in sys.modules if m.startswith('dlmcode'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "dlmcode.decoders.codila" in out and "dlmcode.assistant" in out  # codila's kernels, yes
    assert [m for m in out if m.startswith("dlmcode.models") or m in ABOVE_MODELS] == []


def test_the_assistant_kernels_hold_no_model():
    import dlmcode.assistant as A

    assert not [name for name, value in vars(A).items() if isinstance(value, type) and issubclass(value, torch.nn.Module)]


def imported(path: Path, root: Path = PACKAGE.parent) -> set[str]:
    """Absolute names of the modules a file imports (`from .. import fill` counts as dlmcode.fill)."""
    parts = path.relative_to(root).with_suffix("").parts
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(parts[: len(parts) - node.level]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_imported_resolves_relative_imports(tmp_path):
    (tmp_path / "dlmcode" / "models").mkdir(parents=True)
    f = tmp_path / "dlmcode" / "models" / "x.py"
    f.write_text("import torch\nfrom .. import fill\nfrom ..batch import Batcher\nfrom . import cache\n")
    got = imported(f, tmp_path)
    assert {"torch", "dlmcode.fill", "dlmcode.batch", "dlmcode.models.cache"} <= got
    assert sorted(n for n in got if n.startswith(ABOVE_MODELS)) == ["dlmcode.batch", "dlmcode.batch.Batcher", "dlmcode.fill"]


def test_models_never_import_jobs():
    files = sorted((PACKAGE / "models").rglob("*.py"))
    assert len(files) > 10
    bad = {f.name: sorted(n for n in imported(f) if n.startswith(ABOVE_MODELS)) for f in files}
    assert {k: v for k, v in bad.items() if v} == {}


shipped = pytest.mark.skipif(not (WEIGHTS / "builtin" / "model.safetensors").exists(), reason="no shipped weights")


@shipped
def test_shipped_builtin_logits_are_unchanged():
    model = builtin.load_model(WEIGHTS / "builtin", torch.device("cpu"), torch.float32)
    ids = (torch.arange(48) * 37 % (model.cfg.vocab_size - 4) + 4)[None]  # (1, 48), no special ids
    with torch.inference_mode():
        assert sha(model(ids)) == BUILTIN_SHA


@shipped
def test_shipped_assistant_logits_are_unchanged():
    model = MA.load(MA.shipped_path())
    x = model.embed_ids((torch.arange(24) * 53 % model.vocab)[None])  # (1, 24, D)
    with torch.inference_mode():
        full = model(x)  # (1, 24, vocab)
        first, past = model.extend(x[:, :16])  # the KV-cached path decoding uses
        second, _ = model.extend(x[:, 16:], past)
    assert (sha(full), sha(torch.stack([first, second]))) == (ASSISTANT_FULL_SHA, ASSISTANT_EXTEND_SHA)
