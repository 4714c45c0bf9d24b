"""Trace: a module and its inputs -> an aten-level fx graph on fake tensors.

Takes an ``nn.Module`` with example inputs; returns a :class:`TracedGraph` whose nodes carry
shapes and the module path they ran in. Repeated identical layers can be folded so that
one representative is traced (:mod:`mhaudit.trace.fold`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mhaudit.trace.export import TracedGraph, trace

# Entry points load on first use, so that importing a stage (for its data or its
# profiles) does not import torch.
_LAZY = {
    "TracedGraph": "mhaudit.trace.export",
    "trace": "mhaudit.trace.export",
}

__all__ = ["TracedGraph", "trace"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
