"""Shared test fixtures: a tiny deterministic stand-in for a dLLM and a canvas builder, and the
skips of the `gpu` and `shipped` markers (pyproject.toml), decided here once.

Keep this small and generic; put fixtures one test file needs in that file.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import pytest
import torch

from dlmcode.core.canvas import Canvas

SHIPPED_BUILTIN = Path(str(resources.files("dlmcode.weights") / "builtin" / "model.safetensors"))

# Tests use tiny tensors: one intra-op thread avoids spin-waiting on busy shared CPUs, where two
# threads made a tiny decode ~100x slower.
torch.set_num_threads(1)
os.environ.setdefault("DLMCODE_THREADS", "1")  # the CLI run in-process (CliRunner) sets threads from the load otherwise


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a `gpu` test without a CUDA device and a `shipped` test without the built-in weights; give every test
    one thread again (a command run in-process may set its own, and the last bits of a product depend on the
    thread count: a test after one that left two threads failed its bit-for-bit reference)."""
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    if item.get_closest_marker("gpu") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if item.get_closest_marker("shipped") and not SHIPPED_BUILTIN.is_file():
        pytest.skip(f"no shipped built-in weights ({SHIPPED_BUILTIN})")


class TinyModel:
    """A deterministic `predict`: (L,) ids -> (L, V) float32 logits that depend on the whole context.

    Each position's logits come from its own token plus a fixed random mix of every other
    position, so committing one hole changes the logits of the others (commit order matters).
    The mask id defaults to `vocab`, outside the logits; pass one inside to test that decoders
    never propose it. `calls` counts forward passes.
    """

    def __init__(
        self,
        vocab: int = 40,
        seed: int = 0,
        scale: float = 3.0,
        dim: int = 16,
        max_len: int = 96,
        mask_id: int | None = None,
    ):
        g = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        self.mask_id = vocab if mask_id is None else mask_id
        self.embed = torch.randn(
            vocab + 1, dim, generator=g
        )  # (V + 1, D): row V embeds a mask id outside the vocabulary
        self.pos = torch.randn(max_len, dim, generator=g)  # (Lmax, D)
        self.mix = torch.randn(max_len, max_len, generator=g) / max_len**0.5  # (Lmax, Lmax)
        self.out = torch.randn(dim, vocab, generator=g) * scale / dim**0.5  # (D, V)
        self.calls = 0

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        assert tokens.dim() == 1 and tokens.dtype == torch.long, (tokens.shape, tokens.dtype)
        self.calls += 1
        n = len(tokens)
        h = self.embed[tokens] + self.pos[:n]  # (L, D)
        h = h + torch.tanh(self.mix[:n, :n] @ h)  # (L, D)
        return h @ self.out  # (L, V)


def make_canvas(runs: list[int], mask_id: int, vocab: int, late_ids: tuple[int, ...] = ()) -> Canvas:
    """Alternating runs of context and holes, starting with context: [3, 4, 2] = 3 context, 4 holes, 2 context.

    Context tokens are fixed ids in range(vocab), never the mask id.
    """
    ids = [t for t in range(vocab) if t != mask_id]
    tokens: list[int] = []
    for i, n in enumerate(runs):
        tokens += [mask_id] * n if i % 2 else [ids[(7 * (len(tokens) + j) + 3) % len(ids)] for j in range(n)]
    return Canvas(torch.tensor(tokens, dtype=torch.long), mask_id, late_ids)


@pytest.fixture
def tiny_model() -> TinyModel:
    return TinyModel()


@pytest.fixture
def make_tiny_model() -> type[TinyModel]:
    """The TinyModel class, for tests that want other seeds or sizes."""
    return TinyModel


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    """The folder of a tiny random built-in model (tests/tiny.py), one per test module: the CLI tests' -m."""
    from tiny import tiny_builtin

    return str(tiny_builtin(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(name="make_canvas")
def make_canvas_fixture():
    return make_canvas


@pytest.fixture
def tiny_assistant_decoders(monkeypatch):
    """For this test, DECODERS' entries that take an assistant (codila) default to a tiny random one for
    TinyModel's vocabulary, so tests that build every decoder by name run them too. Opt in with
    `pytestmark = pytest.mark.usefixtures("tiny_assistant_decoders")`; other tests see the real registry."""
    import dataclasses
    import typing

    from dlmcode.decoders import DECODERS
    from dlmcode.models.assistant_lm import AssistantConfig, TinyAssistant

    for name, cls in DECODERS.items():
        if "assistant" in {f.name for f in dataclasses.fields(cls)}:
            with torch.random.fork_rng():
                torch.manual_seed(0)
                tiny = TinyAssistant(AssistantConfig(vocab_size=40, dim=16, n_layers=1, n_heads=2)).eval()
            field = dataclasses.field(default=tiny, repr=False, compare=False)
            patched = dataclasses.make_dataclass(
                cls.__name__, [("assistant", typing.get_type_hints(cls)["assistant"], field)], bases=(cls,), frozen=True
            )
            patched.__doc__ = cls.__doc__
            monkeypatch.setitem(DECODERS, name, patched)


@pytest.fixture
def source(tmp_path):
    """point.py holding cli_run.SOURCE: the file the CLI tests infill (a test file may define its own)."""
    from cli_run import SOURCE

    path = tmp_path / "point.py"
    path.write_text(SOURCE)
    return path


def pytest_configure(config):
    """No test downloads: HF_HUB_OFFLINE is set before any test module is imported (huggingface_hub reads it
    once, at its own import)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
