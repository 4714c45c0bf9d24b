"""Load: a target (``model.py[:NAME]``, ``pkg.mod:NAME``, ``config.json``) -> a built model.

Takes a target string and build options; returns a :class:`LoadedModel` (the module, its
example inputs, and where it came from), built on the meta device unless asked otherwise.
"""

from __future__ import annotations

from mhaudit.load.device import parse_device
from mhaudit.load.target import LoadedModel, infer_inputs, load_target, normalize_inputs

__all__ = ["LoadedModel", "infer_inputs", "load_target", "normalize_inputs", "parse_device"]
