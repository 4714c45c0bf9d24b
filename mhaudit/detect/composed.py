"""Softmax maps multiplied with one another instead of with V: no block, listed with why.

Nyström attention approximates softmax(QKᵀ)·V with three maps over landmarks,
``(A1 · pinv(A2)) · (A3 · V)``: A1 meets a function of A2 (its pseudo-inverse) where V
would be, A2 meets functions of itself inside the pseudo-inverse, and A3's context meets
A1·pinv(A2). No one of these maps is an n_q×n_kv block of the model. A softmax map is
read as composed when, a few products on from it, a product's other operand derives from
a softmax map computed in the same module; its core is no block, and
:mod:`~mhaudit.detect.unread` lists the softmax with why.
"""

from __future__ import annotations

from torch import fx

from mhaudit.detect.operands import is_activation_matmul, matmul_operands
from mhaudit.trace.graphs import innermost_module, tensor_inputs
from mhaudit.trace.ops import PROJECTION_OPS, SOFTMAX_OPS, op_name
from mhaudit.trace.walks import Walk

FORWARD_NODES = 8
"""Nodes walked forward from a softmax map to the products it takes part in."""
BACK_NODES = 256
"""Nodes walked back from a product's other operand to a softmax map (an iterative
pseudo-inverse runs a few dozen products)."""


def composed_map(softmax: fx.Node, params: dict[str, str]) -> bool:
    """True when the probabilities of ``softmax`` (or a context they make) meet, in an
    activation product, an operand that derives from a softmax map of the same module."""
    module = innermost_module(softmax)
    walk: Walk[fx.Node] = Walk([softmax], FORWARD_NODES)
    for node in walk:
        for user in node.users:
            if is_activation_matmul(user, params) and any(
                    _from_map(other, params, module)
                    for other in matmul_operands(user) if other is not node):
                return True
            if op_name(user) not in PROJECTION_OPS or is_activation_matmul(user, params):
                walk.push([user])
    return False


def _from_map(start: fx.Node, params: dict[str, str], module: str) -> bool:
    """``start`` derives from a softmax of ``module`` through ops that are no projection."""
    walk: Walk[fx.Node] = Walk([start], BACK_NODES)
    for node in walk:
        if op_name(node) in SOFTMAX_OPS:
            return innermost_module(node) == module
        if op_name(node) in PROJECTION_OPS and not is_activation_matmul(node, params):
            continue
        walk.push(tensor_inputs(node))
    return False
