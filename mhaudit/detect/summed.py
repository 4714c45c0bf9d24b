"""Local attention written as a multiply and a sum over keys unfolded beside each query.

``scores = (q.unsqueeze(w) * k_windows).sum(d)``: Q broadcast along a window axis of W keys
(an ``unfold`` of the padded keys), multiplied with them and summed over the head dim;
a softmax over the window axis; then ``(p.unsqueeze(d) * v_windows).sum(w)``. No matmul,
so no score product for :mod:`~mhaudit.detect.cores` to start from: the core is read from
the softmax, the ``unfolded`` score form with ``window`` = W.
"""

from __future__ import annotations

from torch import fx

from mhaudit.detect.cores import Core
from mhaudit.trace.graphs import arg, param_root, shape, tensor_inputs
from mhaudit.trace.ops import POOLED_PASS_OPS, SCORE_OPS, op_name

_STEPS = 8


def summed_core(softmax: fx.Node, params: dict[str, str]) -> Core | None:
    """The unfolded local-attention core around ``softmax`` (see the module), or None."""
    dims = shape(softmax)
    dim = arg(softmax, 1, "dim", -1)
    if len(dims) < 2 or not isinstance(dim, int):
        return None
    window_axis = dim % len(dims)
    found = _scores(softmax.args[0], params)
    if found is None:
        return None
    product, summed, masks = found
    pair = _factors(product, _expanded(window_axis, summed), params)
    context = _context(softmax, params)
    if pair is None or context is None:
        return None
    (q, k), (total, probs, v, window_in_v) = pair, context
    picked = [a for a, size in enumerate(shape(probs)) if size == 1 and shape(v)[a] > 1]
    if not picked or shape(v)[window_in_v] != dims[window_axis]:
        return None
    rank = len(shape(product))
    n_q = max(size for a, size in enumerate(dims) if a != window_axis)
    return Core(output=total, q=q, k=k, v=v,
                head_dim=shape(k)[summed], v_head_dim=shape(v)[picked[0]],
                seq_len_q=n_q, seq_len_kv=n_q, implementation="eager", causal=False,
                scale=None, masks=tuple(masks), axes=(summed - rank, summed - rank,
                                                      picked[0] - len(shape(v))),
                form="unfolded", window=dims[window_axis])


def _expanded(axis: int, summed: int) -> int:
    """The product's axis that the scores' ``axis`` comes from (the sum removed
    ``summed``)."""
    return axis if axis < summed else axis + 1


def _scores(start: object, params: dict[str, str]) -> tuple[fx.Node, int, list[fx.Node]] | None:
    """Back from the softmax's input through scales and masks to ``(a * b).sum(axis)``:
    the product, the summed axis (of the product) and the tensors added on the way."""
    masks: list[fx.Node] = []
    current = start
    for _ in range(_STEPS):
        if not isinstance(current, fx.Node):
            return None
        if op_name(current) == "sum" and isinstance(current.args[0], fx.Node) \
                and op_name(current.args[0]) == "mul":
            dims = arg(current, 1, "dim")
            dims = [dims] if isinstance(dims, int) else list(dims or [])
            rank = len(shape(current.args[0]))
            if len(dims) != 1 or not isinstance(dims[0], int) or not rank:
                return None
            return current.args[0], dims[0] % rank, masks
        if op_name(current) not in SCORE_OPS:
            return None
        inputs = list(tensor_inputs(current))
        if not inputs:
            return None
        current, others = inputs[0], inputs[1:]
        masks.extend(o for o in others if param_root(o, params) is None)
    return None


def _factors(product: fx.Node, window: int, params: dict[str, str]
             ) -> tuple[fx.Node, fx.Node] | None:
    """(Q, K): the activation factor broadcast along the window axis, and the one that
    spans it (the unfolded keys)."""
    factors = list(tensor_inputs(product))
    if len(factors) != 2 or any(param_root(f, params) is not None for f in factors):
        return None
    sizes = [shape(f)[window] if len(shape(f)) > window else 0 for f in factors]
    if sorted(sizes)[0] != 1 or sorted(sizes)[1] < 2:
        return None
    return (factors[0], factors[1]) if sizes[0] == 1 else (factors[1], factors[0])


_Context = tuple[fx.Node, fx.Node, fx.Node, int]
"""The context sum, the probabilities as multiplied, V, and the window axis of V."""


def _context(softmax: fx.Node, params: dict[str, str]) -> _Context | None:
    """Forward from the softmax through views to ``(p * v).sum(window)``."""
    frontier = [softmax]
    for _ in range(_STEPS):
        nxt: list[fx.Node] = []
        for node in frontier:
            for user in node.users:
                if op_name(user) == "mul" and len(user.users) == 1:
                    found = _weighted(user, node, params)
                    if found is not None:
                        return found
                elif op_name(user) in POOLED_PASS_OPS:
                    nxt.append(user)
        frontier = nxt
    return None


def _weighted(product: fx.Node, probs: fx.Node, params: dict[str, str]) -> _Context | None:
    """``product`` = probs · V summed over one axis, as a :data:`_Context`."""
    others = [i for i in tensor_inputs(product) if i is not probs]
    total = next(iter(product.users))
    dims = arg(total, 1, "dim")
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if len(others) != 1 or param_root(others[0], params) is not None or op_name(total) != "sum" \
            or len(dims) != 1 or not isinstance(dims[0], int):
        return None
    v = others[0]
    if len(shape(v)) != len(shape(probs)):
        return None
    return total, probs, v, dims[0] % len(shape(v))
