"""--device and --dtype: turn the user's strings into a torch.device and torch.dtype, or a clear error."""

from __future__ import annotations

import torch

from ..core.errors import ModelError
from ..core.run import DTYPE_NAMES, check_device, check_dtype

DTYPES = {name: getattr(torch, attribute) for name, attribute in DTYPE_NAMES.items()}

AVAILABLE = {  # device kind -> is it usable here
    "cuda": lambda: torch.cuda.is_available(),
    "mps": lambda: torch.backends.mps.is_available(),
    "cpu": lambda: True,
}
AUTO_ORDER = ("cuda", "mps", "cpu")  # "auto" takes the first one available


def resolve_device(name: str) -> torch.device:
    """'auto', 'cpu', 'cuda', 'cuda:N' or 'mps' -> a device that exists on this machine."""
    name = name.strip().lower()
    m = check_device(name)  # a UsageError for a misspelt one (run.py)
    if m is None:
        return torch.device(next(kind for kind in AUTO_ORDER if AVAILABLE[kind]()))
    if not AVAILABLE[m["kind"]]():
        raise ModelError(
            f"--device {name}: no {m['kind'].upper()} device is available here; use --device cpu or --device auto"
        )
    if m["index"] is not None and m["kind"] == "cuda" and int(m["index"]) >= torch.cuda.device_count():
        raise ModelError(
            f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), numbered from 0"
        )
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """'auto' (bf16 on CUDA, fp32 on CPU and MPS) or one of DTYPES."""
    name = name.strip().lower()
    if name == "auto":
        return auto_dtype(device)
    check_dtype(name)
    return DTYPES[name]


def auto_dtype(device: torch.device) -> torch.dtype:
    if device.type != "cuda":
        return torch.float32  # CPU bf16 matmuls are slow, and MPS bf16 support varies by OS version
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16  # pre-Ampere GPUs lack bf16
