"""Inputs that are sibling mixes of one tensor: several outputs of one ``unbind``."""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import numel, param_root, shape
from mhaudit.trace.ops import op_name

_MAX_STEPS = 32


def _unbound_from(node: fx.Node, params: dict[str, str]) -> fx.Node | None:
    """The ``unbind`` whose output ``node`` is, through per-token ops that keep its size
    (casts, norms, a scale by a parameter); None when another activation joins in."""
    current = node
    for _ in range(_MAX_STEPS):
        if op_name(current) == "getitem" and current.args and isinstance(
                current.args[0], fx.Node) and op_name(current.args[0]) == "unbind":
            return current.args[0]
        if current.op != "call_function":
            return None
        full = [i for i in current.all_input_nodes if param_root(i, params) is None
                and i.op != "get_attr" and numel(i) == numel(current)]
        if len(full) != 1:
            return None
        current = full[0]
    return None


def sibling_mixes(q_in: fx.Node, k_in: fx.Node, params: dict[str, str]) -> bool:
    """Q and K read different outputs of one ``unbind`` of the same shape: per-position
    mixes of the same tokens (Inkling2's block attention residual gives each of Q, K and V
    its own learned mix of the earlier blocks' states), so the attention is over one
    sequence."""
    q_from, k_from = _unbound_from(q_in, params), _unbound_from(k_in, params)
    return q_from is not None and q_from is k_from and shape(q_in) == shape(k_in)
