"""FLOPs of a traced graph: the formula registry over every node, MoE routing, fvcore.

Takes the aten-level fx graph of the trace stage; returns its forward FLOPs per node and
per formula family with the ops no formula covers (:func:`graph_flops`), the routed-expert
layers of an MoE graph (:func:`routed_experts`) and, as a cross-check, fvcore's count
(:func:`fvcore_flops`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from mhaudit.flops.fvcore_backend import fvcore_flops
    from mhaudit.flops.graph import graph_flops
    from mhaudit.flops.moe import routed_experts

# Entry points load on first use, so that importing the package does not import torch.
_LAZY = {
    "fvcore_flops": "mhaudit.flops.fvcore_backend",
    "graph_flops": "mhaudit.flops.graph",
    "routed_experts": "mhaudit.flops.moe",
}

__all__ = ["fvcore_flops", "graph_flops", "routed_experts"]


__getattr__ = lazy_attributes(__name__, _LAZY)
