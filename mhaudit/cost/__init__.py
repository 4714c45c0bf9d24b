"""Cost: layouts and the graph -> FLOPs, bytes, kernel choice and roofline time on a target.

Takes detected :class:`~mhaudit.data.Layout` objects, the traced graph and a GPU profile;
returns :class:`~mhaudit.data.AttentionBlock` objects (:func:`build_block`, the one block
builder), whole-graph FLOPs with their coverage (:func:`graph_flops`) and the activation
peak. Measurement on a real device lives in :mod:`mhaudit.cost.measure`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mhaudit.cost.builder import build_block
    from mhaudit.cost.graph import graph_flops, peak_activation_bytes

# Entry points load on first use, so that importing a stage (for its data or its
# profiles) does not import torch.
_LAZY = {
    "build_block": "mhaudit.cost.builder",
    "graph_flops": "mhaudit.cost.graph",
    "peak_activation_bytes": "mhaudit.cost.graph",
}

__all__ = ["build_block", "graph_flops", "peak_activation_bytes"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
