"""Tensors computed from one source by ops along its tokens alone (same tokens, fewer or more)."""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import shape
from mhaudit.trace.ops import TOKEN_AXIS_OPS, TOKEN_GATHER_OPS, op_name
from mhaudit.trace.walks import Walk


def same_tokens_source(node: fx.Node, source: fx.Node, limit: int = 64) -> bool:
    """True when ``node`` is computed from ``source`` alone by ops along its tokens.

    Every op on the way keeps the last (feature) dim's size: slices, selects, joins
    and pools of positions (Funnel's pooled queries are strided means of the same
    hidden states). Any other input (a parameter, another activation) makes it False.
    """
    if node is source:
        return True
    width = (shape(source) or (0,))[-1]
    walk, reached = Walk([node], limit), False
    for current in walk:
        name = op_name(current) if current.op == "call_function" else ""
        if name not in TOKEN_AXIS_OPS and name not in TOKEN_GATHER_OPS:
            return False
        dims = shape(current)
        if dims and dims[-1] != width:
            return False
        # Tokens gathered by an index (routed experts' rows): the index only picks them.
        inputs = current.all_input_nodes[:1] if name in TOKEN_GATHER_OPS else (
            current.all_input_nodes)
        reached = reached or source in inputs
        walk.push(i for i in inputs if i is not source)
    return reached and not walk.cut
