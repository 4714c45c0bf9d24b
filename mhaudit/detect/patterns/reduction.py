"""Rule of thumb for spatial-reduction attention: K/V read a reduced copy of Q's input.

PVT-style blocks shrink the tokens before K and V (a strided convolution or a pooling
of the same feature map, then a norm). The attention is still over one sequence: it is
self-attention with fewer key positions, not cross-attention.
"""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import param_root, shape
from mhaudit.trace.ops import (
    NORM_OPS,
    REDUCTION_TAIL_OPS,
    TOKEN_REDUCING_OPS,
    VIEW_OPS,
    op_name,
)
from mhaudit.trace.walks import Walk

_ALLOWED = TOKEN_REDUCING_OPS | REDUCTION_TAIL_OPS | NORM_OPS | VIEW_OPS
_LIMIT = 48


def reduced_copy(node: fx.Node, source: fx.Node, params: dict[str, str]) -> bool:
    """True when ``node`` is computed from ``source`` alone through a token reduction.

    Every op on the way is a view, a norm or a token-reducing op (a convolution or
    pool), at least one reduces, the only activation it reads is ``source``, and the
    features per token end as wide as ``source``'s.
    """
    width = (shape(source) or (0,))[-1]
    if node is source or (shape(node) or (0,))[-1] != width:
        return False
    walk, reduced, reached = Walk([node], _LIMIT), False, False
    for current in walk:
        name = op_name(current)
        if current.op != "call_function" or name not in _ALLOWED:
            return False
        reduced = reduced or name in TOKEN_REDUCING_OPS
        inputs = [i for i in current.all_input_nodes
                  if param_root(i, params) is None and i.op != "get_attr"]
        reached = reached or source in inputs
        walk.push(i for i in inputs if i is not source)
    return reached and reduced and not walk.cut
