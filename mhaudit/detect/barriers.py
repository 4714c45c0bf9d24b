"""Where a walk back from a core operand to its projections must stop.

Attention cores, softmaxes, embeddings and norms over the residual stream sit before
the projections. A norm of one head's features (QK-norm on a (B, n, h, d_k) tensor, or a
per-head module's norm of one head's slice) sits after them and is walked through.
"""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import shape
from mhaudit.trace.ops import BARRIER_OPS, HEAD_PICK_OPS, NORM_OPS, VIEW_OPS, op_name


def is_barrier(node: fx.Node) -> bool:
    """Ops a walk back to the projections must not cross.

    Norms over the residual stream sit before the projections; a norm over the last
    dim of a (B, n, h, d_k)-shaped tensor normalises each head after them (QK-norm).
    """
    name = op_name(node)
    if name not in BARRIER_OPS:
        return False
    if name in NORM_OPS and node.args and isinstance(node.args[0], fx.Node):
        return len(shape(node.args[0])) < 4 and not _one_head(node.args[0])
    return True


def _one_head(node: fx.Node) -> bool:
    """A slice of one head of a tensor split into heads (rank 4 or more), through views.

    A per-head module (one LayerNorm per head) normalises such a slice.
    """
    current = node
    for _ in range(4):
        name = op_name(current)
        if name not in VIEW_OPS or not current.args or not isinstance(current.args[0], fx.Node):
            return False
        source = current.args[0]
        if name in HEAD_PICK_OPS and len(shape(source)) >= 4:
            return True
        current = source
    return False
