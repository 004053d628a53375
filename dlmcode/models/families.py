"""What each model family can do, as `dlmcode models` lists it and README's model table says it.

One row a family of the registry (models/__init__.FAMILIES; a test keeps them in step, and
checks a loaded model's own `Dlm.decoder`, `Dlm.infill` and `Dlm.blocks` against its row).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Family:
    name: str  # registry key (--family)
    models: str  # the published models it runs
    attention: str  # "full" (every position sees every other) or "blocks of N" (block diffusion, exact cache)
    canvas: str  # what a hole is to the model: "mask" or "noise"
    decoder: str  # its own decoder, what a run without --decoder uses
    infill: str  # "native" (the span sees both sides) or "prompt" (the code after the span is read first)
    runs_on: str  # the code that runs it
    checked: str  # how its equivalence with the reference was checked
    serve: str = "batched"  # `dlmcode serve --batch N`: concurrent requests share each forward, or one at a time

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# A table, one row a family, written out field by field (LLaDA's and Dream's rows differ only in name and models).
# one row a family, its fields positional as a table's columns: the rows are alike in shape by design
ROWS = (
    Family("builtin", "the shipped model (default)", "full", "mask", "low-confidence", "native", "dlmcode", "its own"),
    Family(
        "llada",
        "LLaDA-8B-Base/Instruct, LLaDA-1.5",
        "full",
        "mask",
        "low-confidence",
        "native",
        "dlmcode (native)",
        "tests/test_native.py",
    ),
    Family(
        "dream",
        "Dream-v0, Dream-Coder, DiffuCoder, DreamOn",
        "full",
        "mask",
        "low-confidence",
        "native",
        "dlmcode (native)",
        "tests/test_native.py",
    ),
    Family(
        "diffusion-gemma",
        "DiffusionGemma (DiffusionGemmaForBlockDiffusion)",
        "blocks of canvas_length (256)",
        "noise",
        "renoise",
        "prompt",
        "transformers' own model",
        "logits equal (torch.equal) transformers' generate's at every call, cache and all; tokens equal its"
        " generate at fixed seeds (tests/test_diffusion_gemma.py)",
        "one decode a forward (each decode's noise and self-conditioning)",
    ),
    Family(
        "sdar",
        "SDAR 1.7B-30B, dense and MoE",
        "blocks of 4",
        "mask",
        "dynamic",
        "prompt",
        "transformers' Qwen3 / Qwen3-MoE",
        "logits equal (torch.equal) a restated reference run as generate.py runs it; tokens equal generate.py's"
        " rule (tests/test_sdar.py)",
    ),
    Family(
        "llada2",
        "LLaDA2.0 / 2.1 mini and flash (MoE)",
        "blocks of 32",
        "mask",
        "dynamic",
        "prompt",
        "dlmcode (native)",
        "logits equal (torch.equal) a restated reference recomputing its window as its generate does (it keeps no"
        " cache), within 2e-5 with the exact cache; tokens equal its generate's rule (tests/test_llada2.py)",
    ),
    Family(
        "fast-dllm-v2",
        "Fast-dLLM v2 (Qwen2.5-based: Fast_dLLM_v2_7B)",
        "blocks of 32",
        "mask",
        "subblocks",
        "prompt",
        "transformers' Qwen2",
        "logits equal (torch.equal), read one place back, a restated reference run as its generate runs it; tokens"
        " equal its generate's batch_sample (tests/test_fast_dllm.py)",
    ),
    Family(
        "masked-lm",
        "any Hugging Face masked LM (BERT, ModernBERT, ...)",
        "full",
        "mask",
        "low-confidence",
        "native",
        "transformers' AutoModelForMaskedLM",
        "tests/test_models.py",
    ),
)
