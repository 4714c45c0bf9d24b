"""A registry of pure FLOP formulas: one small function per op family, from shapes to an int."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from mhaudit.cost.arithmetic import (
    SOFTMAX_FLOPS_PER_ELEMENT,
    FormulaInputError,
    attention_flops,
    broadcast_matmul_flops,
    conv_flops,
    einsum_flops,
    matmul_flops,
    softmax_flops,
)
from mhaudit.trace.ops import SDPA_OPS, qualified, strip_inplace

__all__ = [
    "SOFTMAX_FLOPS_PER_ELEMENT", "FormulaInputError", "attention_flops",
    "broadcast_matmul_flops", "conv_flops", "einsum_flops", "matmul_flops", "softmax_flops",
]

# FLOPs here are floating-point operations counted as 2 per multiply-add; every
# formula counts the dense work and ignores padding, masking and bias adds unless
# its docstring says otherwise.

NORM_FLOPS_PER_ELEMENT = 5
"""layer/group/batch norm per element: mean, subtract, square, sum, multiply by rstd."""

RMS_NORM_FLOPS_PER_ELEMENT = 3
"""RMS norm per element: square, sum, multiply by rsqrt(mean)."""

Shape = tuple[int, ...]


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument or output as a formula sees it: its shape and number kind."""

    shape: Shape
    floating: bool = True
    """True for floating-point (and complex) dtypes, False for integer and bool."""

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)


@dataclass(frozen=True)
class OpCall:
    """One call of an op: tensors replaced by ``TensorArg``, lists by tuples, rest as given."""

    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    out: Any = None
    """A ``TensorArg``, a tuple of them (multi-output ops), or None."""

    def arg(self, index: int, name: str, default: Any = None) -> Any:
        """The argument at ``index`` or keyword ``name``, else ``default``."""
        if index < len(self.args):
            return self.args[index]
        return self.kwargs.get(name, default)

    def tensor(self, index: int, name: str) -> TensorArg:
        """The tensor argument at ``index`` or ``name``; raises if it is not a tensor."""
        value = self.arg(index, name)
        if not isinstance(value, TensorArg):
            raise FormulaInputError(f"argument {name!r} is not a tensor: {value!r}")
        return value

    def first_out(self) -> TensorArg:
        """The (first) tensor output."""
        out = self.out[0] if isinstance(self.out, tuple) and self.out else self.out
        if not isinstance(out, TensorArg):
            raise FormulaInputError(f"output is not a tensor: {self.out!r}")
        return out


Formula = Callable[[OpCall], int]
Parts = Callable[[OpCall, int], dict[str, int]]
"""A formula's figure for one call, split over ``FAMILIES``, given the figure itself."""

FAMILIES: tuple[str, ...] = ("matmul", "conv", "softmax", "norm", "elementwise", "other")
"""The families ``totals.flops_by_family`` reports: every matrix product (QKᵀ and PV inside
SDPA and routed experts included) is ``matmul``; reductions and the rest are ``other``.
``matmul + conv`` is what torch's FlopCounterMode counts."""

REGISTRY_FAMILIES: frozenset[str] = frozenset(
    {"matmul", "conv", "attention", "softmax", "norm", "elementwise", "reduction"}
)
"""The families a formula may be registered under; ``attention`` splits into matmul and
softmax, ``reduction`` reports as ``other``."""


@dataclass(frozen=True)
class FormulaEntry:
    """A registered formula and the family its op belongs to."""

    op: str
    """Op name, ``namespace.packet`` (e.g. ``aten.mm``), covering every overload."""
    family: str
    """One of ``REGISTRY_FAMILIES``."""
    formula: Formula
    parts: Parts | None = None
    """The formula split over ``FAMILIES`` (summing to it); None when it is all one family."""

    def by_family(self, call: OpCall, flops: int) -> dict[str, int]:
        """``flops`` of this call over the reported ``FAMILIES``."""
        if self.parts is not None:
            return self.parts(call, flops)
        return {_REPORTED.get(self.family, self.family): flops}


_REPORTED = {"reduction": "other", "attention": "matmul"}


def op_names(namespace: str, names: str) -> list[str]:
    """``namespace.name`` for each space-separated name."""
    return [f"{namespace}.{name}" for name in names.split()]


ZERO_FLOP_OPS: frozenset[str] = frozenset(op_names("aten", (
    # views and aliases
    "view _unsafe_view reshape reshape_as view_as transpose t permute expand expand_as slice "
    "select narrow split split_with_sizes unbind chunk tensor_split unsqueeze squeeze flatten "
    "unflatten movedim swapaxes as_strided diagonal unfold alias detach view_as_real "
    "view_as_complex real imag resolve_conj resolve_neg numpy_T "
    # copies, conversions, gathers and scatters
    "contiguous clone _to_copy to type_as copy cat stack concat concatenate repeat "
    "repeat_interleave tile flip roll pad constant_pad_nd lift_fresh lift_fresh_copy "
    "slice_scatter select_scatter index_put scatter _unsafe_index index index_select gather "
    "embedding masked_fill where tril triu "
    # factories
    "empty empty_strided empty_like zeros zeros_like ones ones_like full full_like new_empty "
    "new_zeros new_ones new_full arange scalar_tensor fill "
    # comparisons and logic (they build masks; sorts only compare)
    "sort argsort eq ne lt le gt ge logical_not logical_and logical_or logical_xor bitwise_not "
    "bitwise_and bitwise_or bitwise_xor __and__ __or__ __xor__ isnan isinf "
    # dropout (inference: identity), assertions, scalars and metadata
    "dropout feature_dropout alpha_dropout native_dropout _assert_tensor_metadata _assert_scalar "
    "_assert_async _functional_assert_async sym_size sym_numel sym_stride sym_storage_offset "
    "sym_constrain_range sym_constrain_range_for_size item _local_scalar_dense"
)) + op_names("operator", "getitem add sub mul floordiv truediv mod neg pow eq ne lt le gt ge"))
"""Ops that do no floating-point arithmetic; ``dropout`` assumes inference (eval) mode."""

_REGISTRY: dict[str, FormulaEntry] = {}
REGISTRY: Mapping[str, FormulaEntry] = MappingProxyType(_REGISTRY)
"""Op name to formula entry (read-only view)."""


def register(
    *ops: str, family: str, parts: Parts | None = None
) -> Callable[[Formula], Formula]:
    """Register a formula for each op name; a name already registered (or known to do
    no arithmetic), or an undeclared family, raises ValueError and nothing is registered."""

    def decorate(formula: Formula) -> Formula:
        taken = [op for op in ops if op in _REGISTRY or op in ZERO_FLOP_OPS]
        if taken or len(set(ops)) != len(ops):
            raise ValueError(f"a FLOP formula for {taken or ops} is already registered")
        if family not in REGISTRY_FAMILIES:
            raise ValueError(f"unknown formula family {family!r}")
        _REGISTRY.update({op: FormulaEntry(op, family, formula, parts) for op in ops})
        return formula

    return decorate


canonical_op = strip_inplace
"""Map an in-place op name (``aten.add_``) to its functional form (``aten.add``)."""


def lookup(name: str) -> FormulaEntry | None:
    """The formula entry for an op name (``namespace.packet``), or None."""
    return _REGISTRY.get(name) or _REGISTRY.get(canonical_op(name))


def is_zero_flop(name: str) -> bool:
    """True for ops known to do no floating-point arithmetic (views, copies, gathers...)."""
    return name in ZERO_FLOP_OPS or canonical_op(name) in ZERO_FLOP_OPS


# ---- registered formulas -------------------------------------------------------


@register("aten.linear", family="matmul")
def _linear(call: OpCall) -> int:
    """2·rows·in·out for x (..., in) and W (out, in); bias add ignored. Exact."""
    x, w = call.tensor(0, "input"), call.tensor(1, "weight")
    out_features = w.shape[0] if len(w.shape) == 2 else 1
    return matmul_flops(math.prod(x.shape[:-1]), x.shape[-1], out_features)


def _matmul(first: int, doc: str) -> Formula:
    def formula(call: OpCall) -> int:
        a, b = call.tensor(first, "self"), call.tensor(first + 1, "mat2")
        return broadcast_matmul_flops(a.shape, b.shape)

    formula.__doc__ = doc
    return formula


register("aten.mm", "aten.bmm", "aten.matmul", "aten.dot", "aten.vdot", "aten.mv",
         family="matmul")(_matmul(0, "2·m·k·n per (m, k) @ (k, n) product, with torch.matmul's "
                                     "1-D promotion and batch broadcasting. Exact."))
register("aten.addmm", "aten.baddbmm", "aten.addbmm", "aten.addmv", family="matmul")(
    _matmul(1, "As mm/bmm/mv on arguments 1 and 2; bias add, alpha/beta and addbmm's sum over "
               "the batch ignored. Exact for the products."))


@register("aten.einsum", family="matmul")
def _einsum(call: OpCall) -> int:
    """See ``einsum_flops``: exact for two operands, an upper bound for more."""
    operands = call.arg(1, "tensors", ())
    if not all(isinstance(t, TensorArg) for t in operands):
        raise FormulaInputError("einsum operands are not all tensors")
    return einsum_flops(str(call.arg(0, "equation")), [t.shape for t in operands])


def _conv(transposed: bool | None, doc: str) -> Formula:
    def formula(call: OpCall) -> int:
        flag = bool(call.arg(6, "transposed", False)) if transposed is None else transposed
        numel = call.tensor(0, "input").numel if flag else call.first_out().numel
        return conv_flops(numel, call.tensor(1, "weight").shape)

    formula.__doc__ = doc
    return formula


register("aten.convolution", "aten._convolution", family="conv")(_conv(None, (
    "2·out_numel·in/groups·kernel (transposed: input_numel); bias ignored. Exact.")))
register("aten.conv1d", "aten.conv2d", "aten.conv3d", family="conv")(_conv(False, (
    "2·out_numel·in/groups·kernel; bias ignored, zero padding counted as work. Exact.")))
register("aten.conv_transpose1d", "aten.conv_transpose2d", "aten.conv_transpose3d",
         family="conv")(_conv(True, "2·input_numel·out/groups·kernel; bias ignored. Exact."))


def _sdpa_split(call: OpCall) -> tuple[int, int]:
    """QKᵀ and probs·V, and the softmax over the scores."""
    q, k, v = call.tensor(0, "query"), call.tensor(1, "key"), call.tensor(2, "value")
    bh, n_q, n_kv = math.prod(q.shape[:-2]), q.shape[-2], k.shape[-2]
    products = attention_flops(bh, n_q, n_kv, q.shape[-1], v.shape[-1], with_softmax=False)
    return products, softmax_flops(bh * n_q * n_kv)


def _sdpa_parts(call: OpCall, flops: int) -> dict[str, int]:
    """QKᵀ and probs·V as ``matmul``, the softmax over the scores as ``softmax``."""
    q, k = call.tensor(0, "query"), call.tensor(1, "key")
    scores = softmax_flops(math.prod(q.shape[:-2]) * q.shape[-2] * k.shape[-2])
    return {"matmul": flops - scores, "softmax": scores}


@register(*sorted(qualified(SDPA_OPS)), family="attention", parts=_sdpa_parts)
def _sdpa(call: OpCall) -> int:
    """QKᵀ + softmax + probs·V for q (..., h, n_q, d_k), k (..., h_kv, n_kv, d_k), v (.., d_v).

    Counts all q heads (GQA repeats K/V, it does not shrink the work). Dense: an
    upper bound for causal masks; scale, mask add and dropout ignored.
    """
    return sum(_sdpa_split(call))


def _flex_parts(call: OpCall, flops: int) -> dict[str, int]:
    """As :func:`_sdpa_parts`, the softmax over the visited tiles only."""
    parts = _sdpa_parts(call, flops)
    softmax = round(parts["softmax"] * float(call.kwargs.get("visited_fraction", 1.0)))
    return {"matmul": flops - softmax, "softmax": softmax}


@register("higher_order.flex_attention", family="attention", parts=_flex_parts)
def _flex_attention(call: OpCall) -> int:
    """flex_attention: the SDPA formula over the score tiles its block mask visits (the
    ``visited_fraction`` keyword the graph reader adds from the call's mask; 1.0 without);
    score_mod's pointwise work is not counted here (the block's figure counts it)."""
    return round(sum(_sdpa_split(call)) * float(call.kwargs.get("visited_fraction", 1.0)))


@register("aten._grouped_mm", "transformers.grouped_mm_fallback", family="matmul")
def _grouped_mm(call: OpCall) -> int:
    """Grouped GEMM of routed experts: x (rows, k) by stacked W (E, k, n) at offsets.

    Each of the ``rows`` dispatched token copies (tokens · top-k) meets one expert's
    (k, n) weight: 2·rows·k·n, whatever the routing. Both 3-D: E batched products;
    both 2-D (groups along k): 2·m·k·n. Exact for the products.
    """
    a, b = call.tensor(0, "input"), call.tensor(1, "weight")
    if len(a.shape) == 2 and len(b.shape) == 3:
        return matmul_flops(a.shape[0], a.shape[1], b.shape[2])
    if len(a.shape) == 3 and len(b.shape) == 3:
        return matmul_flops(a.shape[1], a.shape[2], b.shape[2], a.shape[0])
    if len(a.shape) == 2 and len(b.shape) == 2:
        return matmul_flops(a.shape[0], a.shape[1], b.shape[1])
    raise FormulaInputError(f"grouped mm shapes do not fit: {a.shape} @ {b.shape}")


@register("aten.softmax", "aten._softmax", "aten._safe_softmax", "aten.log_softmax",
          "aten._log_softmax", family="softmax")
def _softmax(call: OpCall) -> int:
    """SOFTMAX_FLOPS_PER_ELEMENT × input elements, for softmax and log_softmax alike."""
    return softmax_flops(call.tensor(0, "self").numel)


def _norm(per_element: int, weight_at: int, bias_at: int | None, doc: str) -> Formula:
    def formula(call: OpCall) -> int:
        affine = [call.arg(weight_at, "weight")]
        affine += [call.arg(bias_at, "bias")] if bias_at is not None else []
        extra = sum(isinstance(t, TensorArg) for t in affine)
        return (per_element + extra) * call.tensor(0, "input").numel

    formula.__doc__ = doc
    return formula


_AFFINE = "+ 1 per element for an affine weight and 1 for a bias. Estimate"
register("aten.layer_norm", "aten.native_layer_norm", "aten.group_norm", family="norm")(
    _norm(NORM_FLOPS_PER_ELEMENT, 2, 3, f"NORM_FLOPS_PER_ELEMENT {_AFFINE}."))
register("aten.batch_norm", "aten.instance_norm", "aten.native_group_norm",
         "aten.native_batch_norm", "aten._native_batch_norm_legit",
         "aten._native_batch_norm_legit_no_training", family="norm")(
    _norm(NORM_FLOPS_PER_ELEMENT, 1, 2, f"As layer norm {_AFFINE}; upper bound in eval."))
register("aten.rms_norm", "aten._fused_rms_norm", family="norm")(
    _norm(RMS_NORM_FLOPS_PER_ELEMENT, 2, None, f"RMS_NORM_FLOPS_PER_ELEMENT {_AFFINE}."))


_ELEMENTWISE = op_names(
    "aten", "add sub rsub mul div neg exp exp2 expm1 log log1p log2 log10 tanh sigmoid relu "
    "gelu silu mish elu selu celu leaky_relu hardtanh hardswish hardsigmoid softplus pow rsqrt "
    "sqrt square reciprocal abs clamp clamp_min clamp_max maximum minimum fmax fmin erf erfc "
    "sin cos tan acos asin atan sign sgn floor ceil round trunc frac fmod remainder lerp prelu "
    "logit "    "threshold glu diff",
)


@register(*_ELEMENTWISE, family="elementwise")
def _elementwise(call: OpCall) -> int:
    """1 per output element (transcendentals too); 0 for integer and bool outputs."""
    out = call.first_out()
    return out.numel if out.floating else 0


def _reduction(per_element: int) -> Formula:
    def formula(call: OpCall) -> int:
        x = call.tensor(0, "self")
        return per_element * x.numel if x.floating else 0

    formula.__doc__ = f"{per_element} per input element (n, not n - 1, per sum). Upper bound."
    return formula


_REDUCTIONS = {
    1: "sum mean amax amin prod cumsum cumprod argmax argmin nansum nanmean",
    2: "norm linalg_vector_norm frobenius_norm",
    4: "var std var_mean std_mean logsumexp",
}
for _per, _names in _REDUCTIONS.items():
    register(*op_names("aten", _names), family="reduction")(_reduction(_per))


def _max_min_parts(call: OpCall, flops: int) -> dict[str, int]:
    """``max``/``min`` of two tensors is elementwise (as ``maximum``/``minimum``); of one
    tensor, a reduction."""
    binary = isinstance(call.arg(1, "other"), TensorArg)
    return {"elementwise" if binary else "other": flops}


@register("aten.max", "aten.min", family="reduction", parts=_max_min_parts)
def _max_min(call: OpCall) -> int:
    """Two tensors: 1 per output element. One tensor: 1 per input element. Upper bound."""
    if isinstance(call.arg(1, "other"), TensorArg):
        return _elementwise(call)
    return _reduction(1)(call)
