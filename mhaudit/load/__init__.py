"""Load: a target (``model.py[:NAME]``, ``pkg.mod:NAME``, ``config.json``) -> a built model.

Takes a target string and build options; returns a :class:`LoadedModel` (the module, its
example inputs, and where it came from), built on the meta device unless asked otherwise.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mhaudit.load.device import parse_device
    from mhaudit.load.target import LoadedModel, infer_inputs, load_target, normalize_inputs

# Entry points load on first use, so that importing a stage (for its data or its
# profiles) does not import torch.
_LAZY = {
    "parse_device": "mhaudit.load.device",
    "LoadedModel": "mhaudit.load.target",
    "infer_inputs": "mhaudit.load.target",
    "load_target": "mhaudit.load.target",
    "normalize_inputs": "mhaudit.load.target",
}

__all__ = ["LoadedModel", "infer_inputs", "load_target", "normalize_inputs", "parse_device"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
