"""Where a walk back from a core operand to its projections must stop.

Attention cores, softmaxes, embeddings and norms over the residual stream sit before
the projections. A norm of one head's features (QK-norm on a (B, n, h, d_k) tensor, or a
per-head module's norm of one head's slice) or of a projection's whole output (QK-norm over
h·d_k) sits after them and is walked through, and so is a softmax of a projection's output
(the feature map of Q or K in efficient attention).
"""

from __future__ import annotations

from itertools import pairwise

from torch import fx

from mhaudit.trace.graphs import shape
from mhaudit.trace.ops import (
    BARRIER_OPS,
    HEAD_PICK_OPS,
    NORM_OPS,
    PROJECTION_OPS,
    SOFTMAX_OPS,
    VIEW_OPS,
    op_name,
)
from mhaudit.trace.walks import chain


def is_barrier(node: fx.Node) -> bool:
    """Ops a walk back to the projections must not cross.

    Norms over the residual stream sit before the projections; a norm over the last
    dim of a (B, n, h, d_k)-shaped tensor normalises each head after them (QK-norm).
    A softmax of a projection's output is a feature map of Q or K, not a core.
    """
    name = op_name(node)
    if name not in BARRIER_OPS:
        return False
    if name in SOFTMAX_OPS and node.args and isinstance(node.args[0], fx.Node):
        return not _projected(node.args[0])
    if name in NORM_OPS and node.args and isinstance(node.args[0], fx.Node):
        if _projected(node.args[0]):
            return False  # Linear + BatchNorm, QK-norm over h·d_k: a norm of the projection
        return len(shape(node.args[0])) < 4 and not _one_head(node.args[0])
    return True


def _projected(node: fx.Node) -> bool:
    """``node`` is a projection's output, through views (a norm folded into it)."""
    return op_name(chain(node, VIEW_OPS, 4)[-1]) in PROJECTION_OPS


def _one_head(node: fx.Node) -> bool:
    """A slice of one head of a tensor split into heads (rank 4 or more), through views.

    A per-head module (one LayerNorm per head) normalises such a slice.
    """
    path = chain(node, VIEW_OPS, 4)
    return any(op_name(view) in HEAD_PICK_OPS and len(shape(source)) >= 4
               for view, source in pairwise(path))
