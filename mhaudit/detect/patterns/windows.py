"""Rule of thumb for one attention split over windows of one sequence.

The same Q/K/V weights run on chunks of one sequence (each chunk's queries against its
window of keys): every chunk is one more call of the same projections, not more heads
or more parameters, and queries and keys are windows of one sequence (self-attention).
"""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import shape
from mhaudit.trace.ops import COPY_VIEW_OPS, WINDOW_OPS
from mhaudit.trace.walks import chain


def window_root(node: fx.Node, limit: int = 12) -> fx.Node:
    """The tensor ``node`` is a window of (through slices, pads and views only)."""
    width = (shape(node) or (0,))[-1]
    return chain(node, WINDOW_OPS, limit,
                 lambda _, source: (shape(source) or (0,))[-1] == width)[-1]


def view_root(node: fx.Node, limit: int = 12) -> fx.Node:
    """The tensor ``node`` is a view or copy of (an einsum decomposed to ``bmm`` reads its
    input through a fresh chain of unsqueezes and permutes per projection)."""
    return chain(node, COPY_VIEW_OPS, limit, lambda op, _: len(op.all_input_nodes) == 1)[-1]


def same_sequence(a: fx.Node, b: fx.Node) -> bool:
    """True when ``a`` and ``b`` are views or windows of one tensor."""
    if view_root(a) is view_root(b):
        return True
    root = window_root(a)
    return root is window_root(b) and (root is not a or root is not b)


def chunk_count(nodes: list[tuple[str, fx.Node]]) -> int:
    """Most calls of one weight among (weight, projection node) pairs: the window count."""
    calls: dict[str, set[fx.Node]] = {}
    for weight, node in nodes:
        calls.setdefault(weight, set()).add(node)
    return max((len(v) for v in calls.values()), default=1)
