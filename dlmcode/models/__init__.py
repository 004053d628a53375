"""Loading a dLLM by name: resolve the name to a local folder, pick its family, let the family's adapter build the Dlm.

FAMILIES is the registry of adapters; each module has `matches(config) -> bool` and
`load(path, device, dtype, trust_remote_code) -> Dlm`. Detection asks them in registry order
and the first match wins: builtin (model_type "dlmcode"), llada, dream, and masked-lm last
because it is the broadest. `family=` (--family) overrides detection.

Nothing here touches the network: a name is a local folder or a Hugging Face hub id that is
already in the local cache, and anything else fails at once with one clear line.
"""

from __future__ import annotations

import dataclasses
import os
import re
from importlib import resources
from pathlib import Path

import torch

from ..errors import ModelError, UsageError
from . import builtin, dream, hf, llada, masked_lm
from .base import Dlm, Tokenizer
from .device import resolve_device, resolve_dtype

__all__ = ["FAMILIES", "Dlm", "Tokenizer", "load"]

FAMILIES = {"builtin": builtin, "llada": llada, "dream": dream, "masked-lm": masked_lm}
BUILTIN = "builtin"  # the name (and family) of the model shipped in dlmcode/weights/builtin
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # "org/name" or a legacy bare "name"


def load(
    name_or_path: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    family: str | None = None,
    trust_remote_code: bool = False,
) -> Dlm:
    """The model at a folder or cached hub id (None: the built-in one), on `device` in `dtype`."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # never wait on the network: a miss costs 23 s of retries otherwise
    if family is not None and family not in FAMILIES:
        raise UsageError(f"--family {family!r}: unknown model family; use one of {', '.join(FAMILIES)}")
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    name = name_or_path or BUILTIN
    path = builtin_path() if name == BUILTIN else resolve(name)
    hf.check_folder(path)
    key = family or (BUILTIN if name == BUILTIN else detect(path))
    try:
        dlm = FAMILIES[key].load(path, dev, dt, trust_remote_code)
    except torch.OutOfMemoryError:
        size = str(dt).removeprefix("torch.")
        raise ModelError(f"model {name!r} does not fit in {dev} memory as {size}; try --dtype bf16 or another --device") from None
    return dataclasses.replace(dlm, name=name)


def builtin_path() -> Path:
    path = Path(str(resources.files("dlmcode.weights") / BUILTIN))
    if not path.is_dir():
        raise ModelError(f"the built-in model is not installed (no folder {path}); reinstall dlmcode")
    return path


def resolve(name: str) -> Path:
    """A local folder, or the cached snapshot of a hub id; ModelError for anything else."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelError(f"model {name!r} is a file, not a model folder")
    if not HUB_ID.fullmatch(name):
        raise ModelError(f"no such model folder: {name}")
    return cached(name)


def cached(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (OSError, ValueError):  # LocalEntryNotFoundError (an OSError), HFValidationError (a ValueError)
        raise ModelError(
            f"model {repo_id!r} is not a local folder and is not in the Hugging Face cache; "
            f"download it first with `hf download {repo_id}` on a machine with network"
        ) from None


def detect(path: Path) -> str:
    """The registry key of the first family whose `matches` accepts the folder's config.json."""
    config = hf.read_config(path)
    for key, fam in FAMILIES.items():
        if fam.matches(config):
            return key
    raise ModelError(
        f"cannot tell which model family {hf.label(path)!r} is (model_type {config.get('model_type')!r}, "
        f"architectures {config.get('architectures')}); pass --family, one of {', '.join(FAMILIES)}"
    )
