"""Load: a target (``model.py[:NAME]``, ``pkg.mod:NAME``, ``config.json``) -> a built model.

Takes a target string and build options; returns a :class:`LoadedModel` (the module, its
example inputs, and where it came from), built on the meta device unless asked otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.lazy import lazy_attributes

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


__getattr__ = lazy_attributes(__name__, _LAZY)
