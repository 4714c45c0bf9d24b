"""FLOPs of one dispatched op of a training step: forward ops and the backward kernels.

Forward ops use mhaudit's formula registry. Backward kernels that torch's flop
counter knows (matmuls, convolution and SDPA backwards) use its formulas; the
fused elementwise backward kernels get per-element counts here. Anything else is
returned in ``missing`` and never counted as zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import flop_counter

from mhaudit.cost.formulas import (
    SOFTMAX_FLOPS_PER_ELEMENT,
    FormulaInputError,
    OpCall,
    TensorArg,
    is_zero_flop,
    lookup,
)
from mhaudit.trace.flex import visited_fraction
from mhaudit.trace.ops import ZERO_BACKWARD_OPS, qualified_name

aten = torch.ops.aten

BACKWARD_PER_ELEMENT: dict[str, int] = {
    "aten.threshold_backward": 1,
    "aten.gelu_backward": 8,
    "aten.silu_backward": 4,
    "aten.sigmoid_backward": 3,
    "aten.tanh_backward": 3,
    "aten.native_dropout_backward": 1,
    "aten._softmax_backward_data": SOFTMAX_FLOPS_PER_ELEMENT + 1,
    "aten._log_softmax_backward_data": SOFTMAX_FLOPS_PER_ELEMENT,
    "aten.native_layer_norm_backward": 8,
    "aten.embedding_dense_backward": 1,
    "aten.nll_loss_backward": 0,
    "aten.nll_loss_forward": 1,
    "aten.native_group_norm_backward": 8,
    "aten.native_batch_norm_backward": 8,
    "aten._fused_rms_norm_backward": 6,
}
"""Backward kernel to FLOPs per element of its first input (the incoming gradient).

Estimates from the math each one does: threshold (ReLU) 1 select-multiply; GELU's
tanh form 8 (its polynomial, tanh derivative and products); SiLU 4; sigmoid and
tanh 3; dropout 1 multiply by the mask; softmax 4 (y·(dy − Σ dy·y)); log-softmax 3
(dy − exp(y)·Σdy); layer/group/batch norm 8 (two reductions and the affine terms);
RMS norm 6; the embedding backward 1 add per gradient element; nll_loss 1 per
gathered element forward, 0 backward (a scatter).
"""

ZERO_BACKWARD: frozenset[str] = frozenset(f"aten.{name}" for name in ZERO_BACKWARD_OPS)
"""Copies, fills and scatters that do no floating-point arithmetic."""


def _name(func: Any) -> str:
    if isinstance(func, torch._ops.HigherOrderOperator):
        return qualified_name(func)  # higher_order.flex_attention
    packet = getattr(func, "overloadpacket", func)
    return str(packet)


def _as_formula(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        floating = value.dtype.is_floating_point or value.dtype.is_complex
        return TensorArg(tuple(int(s) for s in value.shape), floating)
    if isinstance(value, (list, tuple)):
        return tuple(_as_formula(v) for v in value)
    return value


def _sdpa_cpu_backward(args: tuple[Any, ...]) -> int:
    """CPU flash backward (grad_out, q, k, v, ...): torch's SDPA backward count."""
    grad_out, q, k, v = args[:4]
    count: int = flop_counter.sdpa_backward_flop_count(  # type: ignore[no-untyped-call]
        grad_out.shape, q.shape, k.shape, v.shape)
    return count


FLEX_MASK_ARG = 4
"""Position of the block mask (``BlockMask.as_tuple()``) in a ``flex_attention`` call."""
FLEX_BACKWARD_MASK_ARG = 9
"""Its position in a ``flex_attention_backward`` call (q, k, v, out, lse, grad_out,
grad_lse, fw_graph, joint_graph, block_mask, ...)."""


def _flex_forward(args: tuple[Any, ...]) -> int:
    """flex_attention forward: the registry's formula (the SDPA one with its softmax, over
    the tiles the block mask visits), as the forward audit counts it; score_mod's
    pointwise ops are not counted (as in the forward's totals)."""
    entry = lookup("higher_order.flex_attention")
    assert entry is not None
    call = OpCall(tuple(_as_formula(a) for a in args[:3]),
                  {"visited_fraction": visited_fraction(args[FLEX_MASK_ARG])})
    return entry.formula(call)


def _flex_backward(args: tuple[Any, ...]) -> int:
    """flex_attention backward (q, k, v, out, lse, grad_out, ...): torch's SDPA backward
    count (the scores recomputed, then dV, dP, dQ, dK: 5 products of n_q·n_kv) over the
    tiles the block mask visits, as a backward kernel that reads it computes; the softmax
    gradient's elementwise work and score_mod's are not counted (nor are SDPA's)."""
    query, key, value, out, _lse, grad_out = args[:6]
    grad_shape = (grad_out if grad_out is not None else out).shape
    count: int = flop_counter.sdpa_backward_flop_count(  # type: ignore[no-untyped-call]
        grad_shape, query.shape, key.shape, value.shape)
    return round(count * visited_fraction(args[FLEX_BACKWARD_MASK_ARG]))


_EXTRA: dict[str, Callable[[tuple[Any, ...]], int]] = {
    "aten._scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_cpu_backward,
}

_FIRST: dict[str, Callable[[tuple[Any, ...]], int]] = {
    "higher_order.flex_attention": _flex_forward,
    "higher_order.flex_attention_backward": _flex_backward,
}
"""Calls whose count needs more than their shapes (the block mask's visited tiles)."""


def _first_numel(args: tuple[Any, ...]) -> int:
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return math.prod(int(s) for s in arg.shape)
    return 0


def op_flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
             missing: dict[str, int]) -> int:
    """FLOPs of one call (2 per multiply-add); adds the op to ``missing`` when none applies."""
    name = _name(func)
    if name in _FIRST:
        return _FIRST[name](args)
    base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    entry = lookup(name) or lookup(base)
    if entry is not None:
        try:
            return entry.formula(OpCall(tuple(_as_formula(a) for a in args),
                                        {k: _as_formula(v) for k, v in kwargs.items()},
                                        _as_formula(out)))
        except (FormulaInputError, IndexError, TypeError, ValueError):
            missing[name] = missing.get(name, 0) + 1
            return 0
    packet = getattr(func, "overloadpacket", None)
    if packet in flop_counter.flop_registry:
        count: int = flop_counter.flop_registry[packet](*args, **kwargs, out_val=out)
        return count
    if name in _EXTRA:
        return _EXTRA[name](args)
    if name in BACKWARD_PER_ELEMENT:
        return BACKWARD_PER_ELEMENT[name] * _first_numel(args)
    if is_zero_flop(name) or is_zero_flop(base) or name in ZERO_BACKWARD or \
            name.startswith("prim."):
        return 0
    missing[name] = missing.get(name, 0) + 1
    return 0
