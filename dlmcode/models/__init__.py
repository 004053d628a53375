"""Loading a dLLM by name: resolve the name to a local folder, pick its family, let the family's adapter build the Dlm.

FAMILIES is the registry of adapters; each module has `matches(config) -> bool` and
`load(path, device, dtype, trust_remote_code) -> Dlm`. Detection asks them in registry order
and the first match wins: builtin (model_type "dlmcode"), llada, dream, the block-diffusion
families, and masked-lm last because it is the broadest. `family=` (--family) overrides detection.

A name is a local folder or a Hugging Face hub id. A hub id is taken from the local cache
when it is there (no network); otherwise it is downloaded, with huggingface_hub's progress
bars on stderr, unless offline (`offline=True`, --offline, or HF_HUB_OFFLINE=1), where it
fails at once with one clear line. Nothing here changes the process's environment.

A folder that cannot be loaded (a config.json value of the wrong type, truncated weights,
weights of other shapes than config.json says, a corrupt tokenizer) is one ModelError naming
the folder and what is wrong, never a traceback.
"""

from __future__ import annotations

import dataclasses
import os
import re
from importlib import resources
from pathlib import Path

import torch

from ..core.errors import DlmcodeError, ModelError, UsageError
from ..core.vocab import Tokenizer
from . import builtin, diffusion_gemma, dream, fast_dllm, hf, llada, llada2, masked_lm, sdar
from .base import Dlm
from .device import resolve_device, resolve_dtype

__all__ = ["FAMILIES", "Dlm", "Tokenizer", "load"]

FAMILIES = {
    "builtin": builtin,
    "llada": llada,
    "dream": dream,
    "diffusion-gemma": diffusion_gemma,
    "sdar": sdar,
    "llada2": llada2,
    "fast-dllm-v2": fast_dllm,
    "masked-lm": masked_lm,
}
BUILTIN = "builtin"  # the name (and family) of the model shipped in dlmcode/weights/builtin
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # "org/name" or a legacy bare "name"


def load(
    name_or_path: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    family: str | None = None,
    trust_remote_code: bool = False,
    offline: bool | None = None,
) -> Dlm:
    """The model at a folder or hub id (None: the built-in one), on `device` in `dtype`.

    `offline` None follows HF_HUB_OFFLINE; an uncached hub id is downloaded unless offline.
    """
    if family is not None and family not in FAMILIES:
        raise UsageError(f"--family {family!r}: unknown model family; use one of {', '.join(FAMILIES)}")
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    name = name_or_path or BUILTIN
    path = builtin_path() if name == BUILTIN else resolve(name, offline)
    hf.check_folder(path)
    key = family or (BUILTIN if name == BUILTIN else detect(path))
    try:
        dlm = FAMILIES[key].load(path, dev, dt, trust_remote_code)
    except torch.OutOfMemoryError:
        size = str(dt).removeprefix("torch.")
        raise ModelError(
            f"model {name!r} does not fit in {dev} memory as {size}; try --dtype bf16 or another --device"
        ) from None
    except DlmcodeError:
        raise
    except Exception as err:  # what an adapter does not diagnose itself (a broken folder): one line, not a traceback
        raise ModelError(f"model {hf.label(path)!r} cannot be loaded as {key} ({hf.first_line(err)})") from None
    return dataclasses.replace(dlm, name=name)


def builtin_path() -> Path:
    path = Path(str(resources.files("dlmcode.weights") / BUILTIN))
    if not path.is_dir():
        raise ModelError(f"the built-in model is not installed (no folder {path}); reinstall dlmcode")
    return path


def resolve(name: str, offline: bool | None = None) -> Path:
    """A local folder, or the snapshot of a hub id (cached, else downloaded unless offline); ModelError for anything
    else."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelError(f"model {name!r} is a file, not a model folder")
    if not HUB_ID.fullmatch(name):
        raise ModelError(f"no such model folder: {name}")
    found = cached(name)
    if found is not None:
        return found
    if is_offline(offline):
        raise ModelError(
            f"model {name!r} is not a local folder and is not in the Hugging Face cache, and downloads are off"
            f" ({'--offline' if offline else 'HF_HUB_OFFLINE=1'}); download it with `hf download {name}` or go online"
        )
    return download(name)


def is_offline(offline: bool | None) -> bool:
    """`offline` when given, else HF_HUB_OFFLINE as huggingface_hub reads it."""
    if offline is not None:
        return offline
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def cached(repo_id: str) -> Path | None:
    """The local snapshot of a hub id, or None: never touches the network."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (OSError, ValueError):  # LocalEntryNotFoundError (an OSError), HFValidationError (a ValueError)
        return None


WANTED = [
    "*.json",
    "*.safetensors",
    "*.py",
    "*.model",
    "*.txt",
    "*.jinja",
    "*.tiktoken",
]  # config, weights, tokenizer, code
LEGACY_WEIGHTS = ["pytorch_model*.bin"]  # fetched only when a repo has no safetensors


def download(repo_id: str) -> Path:
    """Download a hub model into the Hugging Face cache, with huggingface_hub's progress bars on stderr."""
    from huggingface_hub import snapshot_download

    try:
        path = Path(snapshot_download(repo_id, allow_patterns=WANTED))
        if not any(path.glob("*.safetensors")):
            path = Path(snapshot_download(repo_id, allow_patterns=WANTED + LEGACY_WEIGHTS))
    except Exception as err:  # not found, gated, no network, ...: huggingface_hub and httpx raise many types
        raise ModelError(
            f"model {repo_id!r} is not a local folder or in the Hugging Face cache, and downloading it failed"
            f" ({hf.first_line(err)}); check the id and the network, or pass a local folder"
        ) from None
    return path


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
