"""Rule of thumb for which axis of a softmax'd score map is the keys, and which it normalises.

V is contracted with one axis of the probabilities: that axis is the keys, the other the
queries, whatever order the scores were written in (``K·Qᵀ`` then ``Pᵀ·V`` has the
queries on the last axis). A softmax over the key axis is the textbook form; one over the
query axis (slot attention: each input is shared out among the slots, then each slot takes
a weighted mean of the inputs) is the ``query_softmax`` form.
"""

from __future__ import annotations

from torch import fx

from mhaudit.trace.einsum import EinsumError, expand_einsum
from mhaudit.trace.graphs import shape
from mhaudit.trace.ops import op_name

_STEPS = 16


def key_axis(softmax: fx.Node, probs: fx.Node, context: fx.Node,
             operands: list[fx.Node]) -> int | None:
    """The axis of ``softmax``'s output (0-based) that the context op (its tensor
    ``operands``) contracts with V; None when the path from the softmax to the context
    changes the rank or moves axes in a way not read here (chunked bands, strided views)."""
    axis = _contracted(probs, context, operands)
    node = probs
    for _ in range(_STEPS):
        if axis is None or node is softmax:
            return axis
        source = node.args[0] if node.args else None
        if not isinstance(source, fx.Node) or len(shape(source)) != len(shape(node)):
            return None
        axis = _back_through(node, axis)
        node = source
    return None


def _contracted(probs: fx.Node, context: fx.Node, operands: list[fx.Node]) -> int | None:
    """The axis of ``probs`` the context op sums over with V."""
    rank = len(shape(probs))
    if op_name(context) != "einsum":
        if not rank or probs not in operands:
            return None
        return rank - 1 if operands.index(probs) == 0 else rank - 2
    try:
        terms, output, _ = expand_einsum(str(context.args[0]), [shape(o) for o in operands])
    except EinsumError:
        return None
    if probs not in operands or len(terms) != 2:
        return None
    mine = operands.index(probs)
    shared = [c for c in terms[mine] if c in terms[1 - mine] and c not in output]
    return terms[mine].index(shared[-1]) if len(shared) == 1 else None


def _back_through(node: fx.Node, axis: int) -> int | None:
    """The input axis of ``node`` that becomes its output ``axis`` (the same one for an
    elementwise op or a same-rank view)."""
    rank = len(shape(node))
    name = op_name(node)
    if name == "transpose" and len(node.args) >= 3:
        a, b = (d % rank for d in node.args[1:3] if isinstance(d, int))
        return b if axis == a else a if axis == b else axis
    if name == "permute" and len(node.args) >= 2 and isinstance(node.args[1], (list, tuple)):
        order = [d % rank for d in node.args[1] if isinstance(d, int)]
        return order[axis] if len(order) == rank else None
    if name in ("as_strided", "unfold"):
        return None
    return axis
