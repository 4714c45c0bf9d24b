"""Rule of thumb for padded head dims: zero-padding of Q/K/V's last axis around the core.

Kernels that need a head dim multiple of 8 or 16 get Q, K and V zero-padded along the
head dim (``F.pad(q, (0, p))``) and the context sliced back (``y[..., :d_k]``). The
layout's head dim is the unpadded width; the padded one is what the kernel runs at.
"""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import shape
from mhaudit.trace.ops import PAD_OPS, op_name


def unpadded(node: fx.Node) -> fx.Node | None:
    """The tensor ``node`` zero-pads along its last axis only, or None."""
    if op_name(node) not in PAD_OPS or not node.args or not isinstance(node.args[0], fx.Node):
        return None
    pads = node.args[1] if len(node.args) > 1 else node.kwargs.get("pad")
    value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
    if not isinstance(pads, (list, tuple)) or len(pads) < 2 or value not in (0, 0.0, None):
        return None
    if any(p != 0 for p in pads[2:]) or not all(isinstance(p, int) and p >= 0 for p in pads[:2]):
        return None
    inner = node.args[0]
    return inner if shape(inner) and shape(inner)[-1] < shape(node)[-1] else None


def head_dims(q: fx.Node, v: fx.Node) -> tuple[int, int, int | None]:
    """d_k, d_v and the padded kernel head dim (None when Q is not padded)."""
    inner_q, inner_v = unpadded(q), unpadded(v)
    d_k = shape(inner_q if inner_q is not None else q)[-1]
    d_v = shape(inner_v if inner_v is not None else v)[-1]
    return d_k, d_v, shape(q)[-1] if inner_q is not None else None
