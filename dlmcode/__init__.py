"""dlmcode: generate and edit code with discrete diffusion language models.

    import dlmcode
    dlm = dlmcode.load()                      # the built-in model
    result = dlmcode.infill(source, span=(3, 4), dlm=dlm, decoder="threshold", options={"tau": 0.8})
    print(result.text, result.calls, result.breakage)

Names are imported lazily so that `dlmcode --help` does not pay for torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "load": "dlmcode.models",
    "generate": "dlmcode.jobs.fill",
    "infill": "dlmcode.jobs.fill",
    "Result": "dlmcode.jobs.fill",
    "DECODERS": "dlmcode.decoders",
    "Canvas": "dlmcode.core.canvas",
    "Step": "dlmcode.core.canvas",
    "Dlm": "dlmcode.models.base",
    "DlmcodeError": "dlmcode.core.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dlmcode' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
