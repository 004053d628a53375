"""Decoders load no model code when imported (test_architecture.py checks every import's layer
on the text; this checks what Python really loads), and the shipped weights give the same
logits through the transformer blocks."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import torch

import dlmcode
from dlmcode.models import assistant_lm as MA
from dlmcode.models import builtin

PACKAGE = Path(dlmcode.__file__).parent
WEIGHTS = Path(str(resources.files("dlmcode.weights")))
ABOVE_MODELS = ("dlmcode.jobs",)  # the jobs, which hand decoders what they need

# Fingerprints of the float32 logits below (12 evenly spaced values, the sum, the largest
# magnitude) of the shipped weights (built-in v2, its assistant). The first ones (v1) were
# recorded on the code before models/layers.py existed, where the logits were bit-identical
# (sha256) to the refactored code's; these were recorded on that same refactored code when the
# weights were replaced. Compared with a tolerance, not bit for bit: another CPU's kernels round
# differently, while a wrong layer (a swapped norm, a RoPE off by one) moves every value.
BUILTIN_LOGITS = [
    3.84282,
    -4.2414,
    -4.49334,
    -1.34821,
    -0.57778,
    -5.75153,
    -4.14622,
    -4.60748,
    -6.3771,
    -0.21584,
    -2.36268,
    -11.01403,
    -874012.591,
    24.5906,
]
ASSISTANT_FULL = [
    7.77116,
    -1.11837,
    -1.44855,
    -2.10839,
    -2.38339,
    -2.78802,
    1.77268,
    -3.7463,
    2.32966,
    -0.02944,
    1.64517,
    -3.00751,
    -157207.141,
    9.96899,
]
ASSISTANT_EXTEND = [
    -0.557,
    -2.98712,
    -4.37449,
    -5.10701,
    -3.82893,
    -4.16078,
    2.56073,
    -1.73684,
    -1.24535,
    -2.05315,
    -2.65665,
    -3.00751,
    -26320.009,
    7.7197,
]


def fingerprint(t: torch.Tensor) -> torch.Tensor:
    flat = t.detach().double().flatten()
    picks = flat[torch.linspace(0, flat.numel() - 1, 12).long()]
    return torch.cat([picks, flat.sum()[None], flat.abs().max()[None]])


def assert_logits(t: torch.Tensor, recorded: list[float]) -> None:
    torch.testing.assert_close(fingerprint(t), torch.tensor(recorded, dtype=torch.float64), rtol=1e-4, atol=2e-3)


def test_importing_the_decoders_loads_no_model_code():
    code = "import sys, dlmcode.decoders; print('\\n'.join(sorted(m for m in sys.modules if m.startswith('dlmcode'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "dlmcode.decoders.codila" in out and "dlmcode.core.assistant" in out  # codila's kernels, yes
    assert [m for m in out if m.startswith("dlmcode.models") or m in ABOVE_MODELS] == []


def test_the_assistant_kernels_hold_no_model():
    import dlmcode.core.assistant as A

    assert not [
        name for name, value in vars(A).items() if isinstance(value, type) and issubclass(value, torch.nn.Module)
    ]


@pytest.mark.shipped
def test_shipped_builtin_logits_are_unchanged():
    model = builtin.load_model(WEIGHTS / "builtin", torch.device("cpu"), torch.float32)
    ids = (torch.arange(48) * 37 % (model.cfg.vocab_size - 4) + 4)[None]  # (1, 48), no special ids
    with torch.inference_mode():
        assert_logits(model(ids), BUILTIN_LOGITS)


@pytest.mark.shipped
def test_shipped_assistant_logits_are_unchanged():
    model = MA.load(MA.shipped_path())
    x = model.embed_ids((torch.arange(24) * 53 % model.vocab)[None])  # (1, 24, D)
    with torch.inference_mode():
        full = model(x)  # (1, 24, vocab)
        first, past = model.extend(x[:, :16])  # the KV-cached path decoding uses
        second, _ = model.extend(x[:, 16:], past)
    assert_logits(full, ASSISTANT_FULL)
    assert_logits(torch.cat([first, second], 1), ASSISTANT_EXTEND)


def test_rope_tables_are_made_once_per_shape_and_are_the_same_bits():
    """A model call at a fixed shape reuses its RoPE tables (no new tensors per call), equal to fresh ones, and they
    are ordinary tensors even when first made under inference mode (training uses them with autograd)."""
    from dlmcode.models import layers

    with torch.inference_mode():
        first = layers.rope_kept(37, 16, 10000.0, torch.device("cpu"), 5)
    again = layers.rope_kept(37, 16, 10000.0, torch.device("cpu"), 5)
    fresh = layers.rope_tables(37, 16, 10000.0, torch.device("cpu"), 5)
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert all(torch.equal(a, b) and not a.is_inference() for a, b in zip(first, fresh, strict=True))
    other = layers.rope_kept(37, 16, 10000.0, torch.device("cpu"), 6)  # another start: other positions
    assert torch.equal(other[0], layers.rope_tables(37, 16, 10000.0, torch.device("cpu"), 6)[0])
    x = torch.randn(1, 2, 37, 16, requires_grad=True)
    layers.apply_rope(x, *first).sum().backward()  # usable where autograd records
    assert x.grad is not None
