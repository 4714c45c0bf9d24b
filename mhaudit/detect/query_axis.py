"""The queries' positions when an einsum's scores keep two axes of Q alone.

``bshc,btc->bsht`` (latent attention in its absorbed form, one latent key per position)
keeps s and h of Q beside t of K: one is the query positions, the other the heads, and
the order of the output does not say which (``bhqd,bkd->bhqk`` puts them the other way).
The positions are the axis that, walked back from Q to the projection it is made of, is
one of that projection's token axes; the heads are made of its features.
"""

from __future__ import annotations

from torch import fx

from mhaudit.detect.sources.features import backward_axis
from mhaudit.detect.sources.projections import as_projection, per_head
from mhaudit.trace.einsum import EinsumError, expand_einsum
from mhaudit.trace.graphs import param_root, shape, tensor_inputs
from mhaudit.trace.ops import op_name

_MAX_STEPS = 32


def query_positions(scores: fx.Node, q: fx.Node, params: dict[str, str]) -> int | None:
    """Query positions of einsum ``scores`` whose output keeps two or more axes of ``q``
    alone (see the module); None when it keeps one, or none of them reads as tokens."""
    operands = scores.args[1] if op_name(scores) == "einsum" and len(scores.args) > 1 else None
    if not isinstance(operands, (list, tuple)) or len(operands) != 2 or q not in operands:
        return None
    try:
        inputs, output, sizes = expand_einsum(str(scores.args[0]), [shape(o) for o in operands])
    except EinsumError:
        return None
    q_term, k_term = inputs[operands.index(q)], inputs[1 - operands.index(q)]
    alone = [c for c in output if c in q_term and c not in k_term]
    if len(alone) < 2:
        return None
    tokens = [c for c in alone if _token_axis(q, q_term.index(c), params)]
    return sizes[tokens[0]] if len(tokens) == 1 else None


def _token_axis(node: fx.Node, axis: int | None, params: dict[str, str]) -> bool:
    """Axis ``axis`` of ``node`` is, at the projection it is made of, a token axis."""
    for _ in range(_MAX_STEPS):
        if axis is None:
            return False
        proj = as_projection(node, params)
        if proj is not None and not per_head(proj):
            rank = len(shape(proj.node))
            features = {a % rank for a in proj.feature_axes} or {rank - 1}
            return rank >= 2 and axis % rank not in features
        inputs = [i for i in tensor_inputs(node) if param_root(i, params) is None
                  and i.op != "get_attr"]
        if proj is not None:
            inputs = [proj.activation]
        if len(inputs) != 1:
            return False
        axis, node = backward_axis(node, inputs[0], axis), inputs[0]
    return False
