"""Rule of thumb for one attention split over windows of one sequence.

The same Q/K/V weights run on chunks of one sequence (each chunk's queries against its
window of keys): every chunk is one more call of the same projections, not more heads
or more parameters, and queries and keys are windows of one sequence (self-attention).
"""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import shape
from mhaudit.trace.ops import COPY_VIEW_OPS, WINDOW_OPS, op_name


def window_root(node: fx.Node, limit: int = 12) -> fx.Node:
    """The tensor ``node`` is a window of (through slices, pads and views only)."""
    current = node
    width = (shape(node) or (0,))[-1]
    for _ in range(limit):
        if op_name(current) not in WINDOW_OPS or not current.args:
            break
        source = current.args[0]
        if not isinstance(source, fx.Node) or (shape(source) or (0,))[-1] != width:
            break
        current = source
    return current


def view_root(node: fx.Node, limit: int = 12) -> fx.Node:
    """The tensor ``node`` is a view or copy of (an einsum decomposed to ``bmm`` reads its
    input through a fresh chain of unsqueezes and permutes per projection)."""
    current = node
    for _ in range(limit):
        if op_name(current) not in COPY_VIEW_OPS or not current.args:
            break
        source = current.args[0]
        if not isinstance(source, fx.Node) or len(current.all_input_nodes) != 1:
            break
        current = source
    return current


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
