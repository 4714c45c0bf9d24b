"""Cost: layouts and the graph -> FLOPs, bytes, kernel choice and roofline time on a target.

Takes detected :class:`~mhaudit.data.Layout` objects, the traced graph and a GPU profile;
returns :class:`~mhaudit.data.AttentionBlock` objects (:func:`build_block`, the one block
builder), whole-graph FLOPs with their coverage (:func:`graph_flops`) and the activation
peak. Measurement on a real device lives in :mod:`mhaudit.cost.measure`.
"""

from __future__ import annotations

from mhaudit.cost.builder import build_block
from mhaudit.cost.graph import graph_flops, peak_activation_bytes

__all__ = ["build_block", "graph_flops", "peak_activation_bytes"]
