"""Operands of the matmuls of an attention core: Q, K, V, their head dims and axes."""

from __future__ import annotations

import math

from torch import fx

from mhaudit.trace.einsum import EinsumError, expand_einsum
from mhaudit.trace.graphs import param_root, shape, val
from mhaudit.trace.ops import FEATURE_HOLD_OPS, MATMUL_OPS, op_name


def is_activation_matmul(node: fx.Node, params: dict[str, str]) -> bool:
    """A matmul-family op whose two operands are both activations."""
    if op_name(node) not in MATMUL_OPS:
        return False
    operands = matmul_operands(node)
    return len(operands) == 2 and all(
        val(o) is not None and param_root(o, params) is None for o in operands
    )


def matmul_operands(node: fx.Node) -> list[fx.Node]:
    """The activation operands of a matmul-family op (einsum's list, baddbmm's two)."""
    name = op_name(node)
    if name == "einsum":
        ops = node.args[1] if len(node.args) > 1 else []
        return [o for o in ops if isinstance(o, fx.Node)] if isinstance(ops, (list, tuple)) else []
    if name == "baddbmm":
        return [a for a in node.args[1:3] if isinstance(a, fx.Node)]
    return [a for a in node.args[:2] if isinstance(a, fx.Node)]


def scores_operands(
    scores: fx.Node,
) -> tuple[fx.Node | None, fx.Node | None, int, tuple[int, int]]:
    """Q, K, d_k and the head-dim axis of Q and K of the scores op."""
    operands = matmul_operands(scores)
    if op_name(scores) == "einsum":
        sizes, inputs, output = _einsum_sizes(scores)
        if sizes is None or len(operands) != 2:
            return None, None, 0, (-1, -1)
        k_index = 0 if output[-1] in inputs[0] else 1
        contracted = (set(inputs[0]) & set(inputs[1])) - set(output)
        d_k = math.prod(sizes[c] for c in _trailing(inputs[1 - k_index], contracted))
        axes = [_last_of(inputs[i], contracted) for i in (1 - k_index, k_index)]
        return operands[1 - k_index], operands[k_index], d_k, (axes[0], axes[1])
    return operands[0], operands[1], shape(operands[0])[-1], (-1, -2)


Product = tuple[fx.Node, fx.Node, int, tuple[int, int]]
"""Q, K, d_k and their head-dim axes of one scores product."""


def joined_products(scores: fx.Node, others: list[fx.Node], params: dict[str, str]
                    ) -> dict[fx.Node, Product]:
    """Products added to ``scores`` that score the same (query, key) pairs with another
    share of the head dim: QKᵀ written as q₁k₁ᵀ + q₂k₂ᵀ (latent attention in its absorbed
    form scores the latent and the rope key apart and adds them). Each is an activation
    matmul of the scores' shape (and, for einsums, the same output subscripts) whose Q
    and K hold none of the scores' Q and K features (:func:`_kept`), by its node."""
    found: dict[fx.Node, Product] = {}
    for other in others:
        if not is_activation_matmul(other, params) or shape(other) != shape(scores):
            continue
        if op_name(other) != op_name(scores) or (
                op_name(other) == "einsum" and _einsum_sizes(other)[2] != _einsum_sizes(scores)[2]):
            continue
        q, k, d_k, axes = scores_operands(other)
        q_1, k_1, _, _ = scores_operands(scores)
        if q is None or k is None or q_1 is None or k_1 is None or not d_k:
            continue
        if not (_kept(q) & _kept(q_1)) and not (_kept(k) & _kept(k_1)):
            found[other] = (q, k, d_k, axes)
    return found


def _kept(node: fx.Node) -> set[fx.Node]:
    """``node`` and the tensors it holds every feature of, back through :data:`FEATURE_HOLD_OPS`:
    two operands that reach one such tensor read the same features (Transformer-XL's
    content and position terms both read q, with two biases), not two shares of them."""
    seen: set[fx.Node] = set()
    pending = [node]
    while pending and len(seen) < 64:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        if op_name(current) in FEATURE_HOLD_OPS:
            pending.extend(i for i in current.all_input_nodes if val(i) is not None)
    return seen


def summed_rows(scores: fx.Node) -> int:
    """Rows the scores also sum over: the sizes of the letters an einsum contracts besides
    Q's head dim (``brihc,brjhc->bhij`` sums R rows of an alignment into one map: R);
    1 for any other scores op."""
    if op_name(scores) != "einsum":
        return 1
    sizes, inputs, output = _einsum_sizes(scores)
    if sizes is None or len(inputs) != 2 or not output:
        return 1
    k_index = 0 if output[-1] in inputs[0] else 1
    contracted = (set(inputs[0]) & set(inputs[1])) - set(output)
    head = set(_trailing(inputs[1 - k_index], contracted))
    return math.prod(sizes[c] for c in contracted - head)


def _trailing(term: str, letters: set[str]) -> str:
    """The run of ``letters`` that ends ``term`` (Q's head dim), or every one of them when
    none ends it. Contracted letters before that run sum over another axis too (rows
    of an alignment tied into one map: ``brihc,brjhc->bhij`` sums over r and c, and
    its head dim is c)."""
    run = len(term) - len(term.rstrip("".join(letters))) if letters else 0
    return term[len(term) - run:] if run else "".join(letters)


def _last_of(term: str, letters: set[str]) -> int:
    """Index of the rightmost of ``letters`` in ``term`` (-1 when none)."""
    picks = [i for i, c in enumerate(term) if c in letters]
    return picks[-1] if picks else -1


def context_value(context: fx.Node, probs: fx.Node) -> tuple[fx.Node | None, int, int]:
    """V, d_v and V's head-dim axis of the probs·V op."""
    operands = matmul_operands(context)
    others = [o for o in operands if o is not probs]
    if len(others) != 1:
        return None, 0, -1
    if op_name(context) == "einsum":
        sizes, inputs, output = _einsum_sizes(context)
        if sizes is None:
            return None, 0, -1
        v_index = operands.index(others[0])
        own = set(inputs[v_index]) & set(output)
        own -= set(inputs[1 - v_index])
        head = _trailing(inputs[v_index], own)
        return others[0], math.prod(sizes[c] for c in head), _last_of(inputs[v_index], own)
    if operands.index(probs) == 1:  # V·Pᵀ: V is (…, d_v, n) and so is the context
        return others[0], shape(context)[-2], -2
    return others[0], shape(context)[-1], -1


def _einsum_sizes(node: fx.Node) -> tuple[dict[str, int] | None, list[str], str]:
    """Subscript letters to sizes, the operands' subscripts and the output's."""
    equation = str(node.args[0])
    if "->" not in equation:
        return None, [], ""
    try:
        inputs, output, sizes = expand_einsum(
            equation, [shape(o) for o in matmul_operands(node)]
        )
    except EinsumError:
        return None, [], ""
    return sizes, inputs, output
