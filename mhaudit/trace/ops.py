"""One op table: op names, SDPA variants, view/alias sets and in-place name stripping.

Every name here is an aten op (``torch.ops.aten.<name>``) unless it says otherwise; a
test checks each against ``torch.ops`` so a typo cannot silently match nothing.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import fx


def strip_inplace(name: str) -> str:
    """``add`` for ``add_`` (an in-place op computes what its functional form does).

    Dunder names (``__and__``) are left alone.
    """
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def is_in_place(node: fx.Node) -> bool:
    """True for a call of an in-place op (``aten.copy_``), which writes its first argument."""
    if node.op != "call_function":
        return False
    name = qualified_name(node.target).rpartition(".")[2]
    return name.endswith("_") and not name.endswith("__")


def qualified_name(target: Any) -> str:
    """Registry name of a call_function target: ``aten.mm``, ``operator.getitem``, ...

    In-place names are kept (``aten.add_``); :func:`strip_inplace` maps them.
    """
    try:
        return _cached_name(target)
    except TypeError:  # an unhashable callable
        return _name(target)


def _name(target: Any) -> str:
    import torch  # the op table itself stays importable without torch

    if isinstance(target, torch._ops.OpOverload):
        return str(target.overloadpacket)
    if isinstance(target, torch._ops.OpOverloadPacket):
        return str(target)
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target._name}"
    module = getattr(target, "__module__", None) or "builtins"
    module = "operator" if module == "_operator" else module
    return f"{module}.{getattr(target, '__name__', repr(target))}"


_cached_name = functools.lru_cache(maxsize=4096)(_name)


def op_name(node: fx.Node) -> str:
    """Short, functional name of the op a node runs: ``linear`` for ``aten.linear.default``,
    ``mul`` for ``aten.mul_``, ``getitem`` for ``operator.getitem``; ``node.op`` otherwise."""
    if node.op != "call_function":
        return node.op
    if node.target is operator.getitem:
        return "getitem"
    return strip_inplace(qualified_name(node.target).rpartition(".")[2])


def qualified(names: frozenset[str], namespace: str = "aten") -> frozenset[str]:
    """``namespace.name`` for each short name."""
    return frozenset(f"{namespace}.{name}" for name in names)


@dataclass(frozen=True)
class SdpaVariant:
    """One scaled-dot-product-attention op and where its arguments sit."""

    name: str
    causal_index: int
    """Position of ``is_causal``."""
    mask_index: int | None
    """Position of ``attn_mask``/``attn_bias`` (None: keyword only)."""
    dropout_index: int = 4
    """Position of ``dropout_p``."""


SDPA_VARIANTS: dict[str, SdpaVariant] = {
    v.name: v
    for v in (
        SdpaVariant("scaled_dot_product_attention", 5, 3),
        SdpaVariant("_scaled_dot_product_attention_math", 5, 3),
        SdpaVariant("_scaled_dot_product_flash_attention", 4, None, 3),
        SdpaVariant("_scaled_dot_product_flash_attention_for_cpu", 4, None, 3),
        SdpaVariant("_scaled_dot_product_efficient_attention", 6, 3, 5),
        SdpaVariant("_scaled_dot_product_cudnn_attention", 6, 3, 5),
        SdpaVariant("_scaled_dot_product_fused_attention_overrideable", 5, 3),
    )
}
"""Every SDPA op, the public one and the backends it dispatches to."""
SDPA_OPS = frozenset(SDPA_VARIANTS)
SOFTMAX_OPS = frozenset({"softmax", "_softmax", "_safe_softmax"})
LOG_NORMALISE_OPS = frozenset({"log_softmax", "_log_softmax", "logsumexp"})
"""Log-space normalisations: an attention core when they normalise a product of two
activations (chunked softmax by hand), a loss's otherwise."""
MATMUL_OPS = frozenset({"matmul", "bmm", "mm", "einsum", "baddbmm"})
POINTWISE_CONV_OPS = frozenset({"conv1d", "conv2d", "conv3d", "convolution"})
"""Convolutions read as projections when their kernel is 1×1 (a map of the channels)."""
PROJECTION_OPS = frozenset({"linear", "addmm", "mm", "matmul", "einsum", "bmm"}) \
    | POINTWISE_CONV_OPS
FROZEN_NORM_OPS = frozenset({"batch_norm", "_native_batch_norm_legit_no_training"})
"""Norms with stored statistics: in eval, a per-feature affine map (foldable into the
projection before it)."""
NORM_OPS = frozenset(
    {"layer_norm", "native_layer_norm", "rms_norm", "group_norm", "native_group_norm",
     "batch_norm", "_native_batch_norm_legit_no_training"}
)
"""Normalisations: they act on each position's features without mixing positions."""
VIEW_OPS = frozenset(
    {
        "view", "_unsafe_view", "reshape", "transpose", "t", "permute", "contiguous", "clone",
        "unsqueeze", "squeeze", "flatten", "unflatten", "expand", "alias", "detach",
        "to", "_to_copy", "type_as", "slice", "select", "narrow", "getitem", "split",
        "split_with_sizes", "chunk", "unbind", "lift_fresh_copy", "_assert_tensor_metadata",
        "repeat_interleave", "repeat", "tile", "broadcast_to", "expand_as", "movedim",
        "swapaxes", "dropout", "native_dropout",
    }
)
"""Ops that move, cast or select data without mixing features (``getitem``: operator)."""
EXPAND_OPS = frozenset({"expand", "expand_as", "broadcast_to", "repeat_interleave", "repeat",
                        "tile"})
"""Ops that repeat data (head repeats of GQA, batch broadcasts)."""
ALIAS_OPS = frozenset(
    {"view", "_unsafe_view", "view_as", "transpose", "t", "permute", "expand", "expand_as",
     "slice", "select", "narrow", "split", "split_with_sizes", "unbind", "chunk", "tensor_split",
     "unsqueeze", "squeeze", "unflatten", "movedim", "swapaxes", "as_strided", "diagonal",
     "alias", "detach", "numpy_T", "view_as_real", "view_as_complex", "real", "imag",
     "dropout", "feature_dropout", "alpha_dropout"}
)
"""Ops whose output shares its first input's storage (dropout: in inference mode)."""
MAYBE_ALIAS_OPS = frozenset({"reshape", "reshape_as", "flatten", "contiguous", "to", "type_as"})
"""Ops that return a view or their input when they can and a copy otherwise."""
FRESH_OPS = frozenset(
    {"new_empty", "new_zeros", "new_ones", "new_full", "empty_like", "zeros_like", "ones_like",
     "full_like", "empty", "zeros", "ones", "full", "empty_strided", "new_empty_strided"}
)
"""Ops that allocate a buffer: its contents come from later in-place writes, not its inputs."""
UNSET_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
"""Ops that allocate a buffer and leave its values unset (no values to compute for real)."""
PAD_OPS = frozenset({"constant_pad_nd", "pad"})
"""Ops that pad a tensor with constants."""

SPLIT_OPS = frozenset({"split", "split_with_sizes", "chunk"})
"""Ops that split a tensor into parts along one axis (their ``getitem`` users pick one)."""
SLICE_OPS = frozenset({"slice", "narrow", "getitem", "index_select", "gather"})
"""Ops that pick part of an axis (``getitem``: operator)."""
HEAD_PICK_OPS = frozenset({"select", "getitem", "slice"})
"""Ops that pick one head (or a run of heads) out of a tensor split into heads."""
RESHAPE_OPS = frozenset(
    {"view", "_unsafe_view", "reshape", "flatten", "unflatten", "unsqueeze", "squeeze",
     "view_as", "reshape_as"}
)
"""Ops that regroup axes without moving data."""
PLAIN_RESHAPE_OPS = frozenset({"view", "_unsafe_view", "reshape"})
"""Reshapes to any shape (a decomposed linear's view back to tokens)."""
PERMUTE_OPS = frozenset({"transpose", "swapaxes", "t", "permute", "movedim"})
"""Ops that reorder axes."""
FEATURE_HOLD_OPS = frozenset({"add", "sub", "mul", "div", "view", "_unsafe_view", "reshape",
                              "clone", "contiguous", "transpose", "permute", "unsqueeze",
                              "expand", "to", "_to_copy"})
"""Ops whose output holds every feature of each input (a bias added, a view)."""
REGROUP_OPS = RESHAPE_OPS | PERMUTE_OPS | SPLIT_OPS | frozenset(
    {"clone", "contiguous", "alias", "to", "_to_copy", "unbind", "getitem", "select", "slice"})
"""Ops that move, regroup or pick parts of a tensor's axes without computing anything."""
REDUCE_OPS = frozenset({"mean", "sum", "amax", "amin", "max", "min"})
"""Reductions over axes."""
FEATURE_KEEP_OPS = EXPAND_OPS | frozenset({"cat", "stack", "constant_pad_nd", "pad", "copy"})
"""Same-rank ops whose changed sizes add no features: repeats, joins along other axes, padding."""
POOL_OPS = frozenset(
    {"avg_pool1d", "avg_pool2d", "max_pool1d", "max_pool2d", "adaptive_avg_pool1d",
     "adaptive_avg_pool2d"}
)
"""Pools of positions."""
TOKEN_AXIS_OPS = ((RESHAPE_OPS | SLICE_OPS | FEATURE_KEEP_OPS | REDUCE_OPS | POOL_OPS)
                  - {"copy"}) | frozenset(
    {"select", "transpose", "permute", "contiguous", "clone", "to", "_to_copy", "alias",
     "detach", "split", "split_with_sizes", "chunk", "unbind"}
)
"""Ops along a tensor's tokens that may keep its feature width: slices, joins, pools."""
TOKEN_GATHER_OPS = frozenset({"index", "index_select", "gather"})
"""Ops that pick tokens by an index tensor: the first input is the data, the rest pick."""
TOKEN_REDUCING_OPS = POOL_OPS | frozenset(
    {"conv1d", "conv2d", "conv3d", "convolution", "max_pool2d_with_indices"}
)
"""Strided convolutions and pools that shrink the tokens (spatial-reduction attention)."""
REDUCTION_TAIL_OPS = frozenset({"add", "mul", "gelu"})
"""What follows a token reduction inside it: bias, scale, activation."""
EMBEDDING_OPS = frozenset({"embedding"})
"""Lookups of token embeddings: the start of the residual stream."""
BARRIER_OPS = SDPA_OPS | SOFTMAX_OPS | NORM_OPS | EMBEDDING_OPS
"""Ops a walk back from a core operand to its projections stops at (norms: some of them)."""
CORE_OPS = SDPA_OPS | SOFTMAX_OPS
"""Ops at the heart of an attention core: a walk back to one layer's cache stops there."""
RESIDUAL_OPS = frozenset({"add", "sub", "cat"})

RESCALE_OPS = frozenset({"div", "mul"})
"""Ops that rescale a tensor by another: a chunked softmax's division by its normaliser."""

SAME_VALUE_OPS = frozenset(
    {"clone", "contiguous", "alias", "detach", "to", "_to_copy", "type_as", "lift_fresh_copy",
     "slice", "narrow", "view", "_unsafe_view", "reshape", "expand", "mul", "div", "add",
     "sub", "neg"}
)
"""Ops that, when they keep a tensor's shape, give a copy, a cast, a whole slice or an
elementwise rescale of it (``q.clone()``, ``q[:, :, :]``, ``q * scale``): chunks whose Q
comes from one tensor through them read one Q."""
CHUNK_JOIN_OPS = frozenset({"add", "sub", "to", "_to_copy"}) | RESCALE_OPS
"""Ops that carry a chunk's partial context into the sum of the chunks: adds, rescales,
casts."""
"""Ops that join two activations (a residual add, a concatenation)."""
PARAM_VIEW_OPS = frozenset(
    {"t", "numpy_T", "mT", "adjoint", "transpose", "permute", "view", "reshape", "_unsafe_view",
     "to", "_to_copy", "contiguous", "clone", "detach", "alias", "slice", "select", "narrow",
     "getitem", "chunk", "split", "split_with_sizes", "unbind", "unflatten", "flatten",
     "type_as", "lift_fresh_copy", "unsqueeze", "squeeze", "expand"}
)
"""Ops a parameter is read through and still counts as that parameter: views, casts, picks."""
WRITE_VIEW_OPS = frozenset({"slice", "narrow", "select", "view", "alias"})
"""Views of a buffer that an in-place ``copy_`` writes through."""
WRITTEN_VALUE_ARG: dict[str, int] = {"copy": 1, "index_put": 2, "masked_scatter": 2,
                                     "index_copy": 3, "scatter": 3}
"""Ops that, called in place (``copy_``), write values into their first argument: the
position of the argument holding the values."""
IN_PLACE_WRITE_OPS = frozenset(WRITTEN_VALUE_ARG)
SCATTERED_VALUE_ARG: dict[str, int] = {
    "slice_scatter": 1, "select_scatter": 1, "diagonal_scatter": 1, "as_strided_scatter": 1,
    "index_put": 2, "masked_scatter": 2}
"""Functional writes, a copy of the first argument with values written into part of it:
the position of the argument holding the values."""
SCATTER_OPS = frozenset(SCATTERED_VALUE_ARG)
WRITE_TARGET_OPS = ALIAS_OPS - frozenset({"dropout", "feature_dropout", "alpha_dropout"})
"""Views of a buffer through which an in-place write reaches it (any alias of it)."""
BAND_MOVE_OPS = PAD_OPS | frozenset(
    {"slice", "narrow", "select", "diagonal", "view", "_unsafe_view", "reshape", "as_strided",
     "transpose", "permute", "contiguous", "clone"})
"""Ops that move scores or probabilities between chunked and banded layouts (the pads,
strided views and slices that skew a chunk's diagonals into rows) without computing."""
PROB_CHUNK_OPS = PAD_OPS | frozenset({"slice", "narrow", "as_strided"})
"""Ops that pad and cut probabilities back into chunks on their way to V."""
WHOLE_OPS = frozenset({"linear", "scaled_dot_product_attention", "einsum", "matmul",
                       "__matmul__", "softmax", "pad", "rms_norm"})
"""Composite torch functions the recorder keeps as one node, as export does
(``__matmul__``: the ``Tensor`` method, recorded as ``matmul``)."""

MASK_PASS_OPS = frozenset(
    {"unsqueeze", "view", "reshape", "_unsafe_view", "expand", "to", "_to_copy", "clone",
     "contiguous", "alias", "type_as", "detach", "lift_fresh_copy"}
)
"""Ops a mask's value passes through unchanged."""
AND_OPS = frozenset({"__and__", "bitwise_and", "logical_and"})
"""Conjunctions of boolean masks."""
NOT_OPS = frozenset({"logical_not", "bitwise_not"})
"""Negations of boolean masks (``~mask`` runs ``bitwise_not``)."""
COMPARE_OPS = frozenset({"ge", "gt", "le", "lt"})
"""Order comparisons (of position indices, in a mask)."""
TRIANGLE_OPS = frozenset({"tril", "triu"})
"""Ops that keep one triangle of a matrix."""
CAUSAL_MASK_OPS = TRIANGLE_OPS | COMPARE_OPS
"""Ops a causal mask is built from: a triangle, or a comparison of position ranges."""
ONES_OPS = frozenset({"ones", "ones_like", "new_ones"})
"""Tensors of ones: a mask that keeps everything."""
VALUE_FREE_OPS = frozenset(
    {"arange", "ones", "zeros", "full", "scalar_tensor", "eye", "ones_like", "zeros_like",
     "full_like", "new_ones", "new_zeros", "new_full"})
"""Ops whose values come from sizes and numbers alone, never from their inputs' values."""
PICK_OPS = frozenset({"index", "index_select", "gather", "take", "take_along_dim"})
"""Ops that pick elements of their first argument at positions the others hold."""

SCORE_OPS = frozenset(
    {"mul", "div", "add", "sub", "masked_fill", "where", "to", "_to_copy", "view", "reshape",
     "_unsafe_view", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "max", "min",
     "tanh", "contiguous", "clone", "_assert_tensor_metadata", "type_as", "nan_to_num"}
)
"""Ops that may sit between QKᵀ and softmax: scaling, masks, biases, soft-capping, a
floor on masked logits (``torch.max(scores, finfo.min)``) and ``nan_to_num`` (which keeps
every finite score as it is)."""
PROB_OPS = frozenset(
    {"dropout", "native_dropout", "getitem", "to", "_to_copy", "mul", "masked_fill", "where",
     "view", "reshape", "_unsafe_view", "type_as", "contiguous", "clone", "nan_to_num",
     "_assert_tensor_metadata", "expand"}
)
"""Ops that may sit between softmax and probs·V: casts, dropout, head masks."""
SOFTMAX_TO_CONTEXT_OPS = frozenset(
    {"to", "_to_copy", "dropout", "native_dropout", "getitem", "type_as", "contiguous",
     "clone", "view", "reshape", "_unsafe_view", "expand", "masked_fill", "where", "mul",
     "_assert_tensor_metadata"}
)
"""Ops a walk back from the context op to the softmax that feeds it follows (casts,
dropout, masks)."""
MAP_COMBINE_OPS = frozenset({"select", "sub"})
"""Ops that pick softmax maps apart and combine them (differential attention)."""
KERNEL_MAP_OPS = frozenset(
    {"acos", "asin", "atan", "cos", "sigmoid", "relu", "elu", "exp", "pow", "square",
     "softplus", "gelu", "silu", "abs", "erf"})
"""Nonlinear elementwise maps that turn QKᵀ into weights without a softmax."""
KERNEL_PATH_OPS = SCORE_OPS | PROB_OPS | KERNEL_MAP_OPS | frozenset({"rsub", "neg", "reciprocal"})
"""Ops between QKᵀ and the context matmul of a kernel core: maps, scales, masks, casts."""
POOLED_PASS_OPS = frozenset(
    {"view", "reshape", "_unsafe_view", "unsqueeze", "expand", "expand_as", "repeat",
     "contiguous", "clone", "to", "_to_copy", "dropout", "native_dropout", "getitem",
     "_assert_tensor_metadata", "type_as"})
"""Ops a separable core's scores and pooled vector may pass on their way to V."""
SCATTER_SUM_OPS = frozenset({"index_add", "scatter_add", "scatter_reduce"})
"""Ops that sum (or reduce) rows into the targets an index names: a softmax normalised
over each graph node's incoming edges (a scatter softmax)."""
SIZE_OPS = frozenset({"sym_size", "size", "sym_numel", "sym_stride", "dim"})
"""Ops that read a tensor's metadata, not its values."""
PROB_RENORM_OPS = frozenset({"add", "div", "detach"})
"""Ops that turn probabilities into weights before V: a straight-through hard assignment
(``hard - soft.detach() + soft``) and a division by the weights' sum."""
LOGIT_MOVE_OPS = frozenset({"permute", "transpose"})
"""Ops that move the head axis out of the way of a head-axis map and back."""
HEAD_MIX_OPS = frozenset({"linear", "matmul", "einsum", "conv2d", "convolution", "mm"})
"""Ops a head-axis linear map of the logits (talking heads) may run as."""

WEIGHT_ARG_OPS = frozenset({"linear", "addmm"})
"""Projections whose arguments fix which operand is the weight."""
CONTEXT_ACTIVATION_OPS = frozenset({"hardswish", "relu", "gelu", "silu"})
"""Pointwise activations a block may apply to its context before the output projection
(LeViT's Hardswish)."""
CONTEXT_PASS_OPS = VIEW_OPS | CONTEXT_ACTIVATION_OPS | frozenset(
    {"cat", "stack", "mul", "div", "getitem"})
"""Ops a walk forward from a core's context to its output projection follows."""
HEAD_LAYOUT_OPS = NORM_OPS | frozenset({"add", "sub"})
"""Sums and norms that stay inside a block while the context is still split into heads."""
INPUT_PASS_OPS = frozenset(
    {"to", "_to_copy", "contiguous", "clone", "dropout", "detach", "alias", "view", "reshape",
     "_unsafe_view"}
)
"""Casts, copies, dropout and reshapes a projection reads its input through."""
FACTOR_CHAIN_OPS = (VIEW_OPS | NORM_OPS | frozenset(
    {"pow", "mean", "var", "var_mean", "rsqrt", "sqrt", "add", "sub", "mul", "div", "neg",
     "native_layer_norm", "getitem", "cat"}
)) - EXPAND_OPS
"""Ops allowed between the two matrices of a factorised projection: views, casts, norms."""
WINDOW_OPS = PAD_OPS | frozenset(
    {"slice", "narrow", "select", "getitem", "split", "split_with_sizes", "chunk", "unbind",
     "view", "reshape", "_unsafe_view", "unfold", "contiguous", "clone"}
)
"""Ops that cut a window out of a sequence (slices, pads, views) without mixing features."""
COPY_VIEW_OPS = frozenset(
    {"view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "permute", "transpose",
     "expand", "contiguous", "clone", "alias", "detach", "to", "_to_copy"}
)
"""Views, copies and casts of a whole tensor (nothing selected, nothing padded)."""

ZERO_BACKWARD_OPS = frozenset({
    "new_empty_strided", "zero_", "zero", "copy_", "detach", "new_zeros", "fill_",
    "index_put_", "scatter_add", "select_backward", "slice_backward", "masked_fill_",
    "index_add", "bernoulli_", "bernoulli", "_to_copy", "set_", "lift_fresh_copy",
    "empty_like",
})
"""Copies, fills and scatters of a backward that do no floating-point arithmetic."""
GATHER_OPS = frozenset({"embedding"})
"""Ops that read rows of a weight by index (a step touches only the rows it gathers)."""

NON_ATEN = {"getitem": "operator.getitem", "__matmul__": "torch.Tensor.__matmul__"}
"""The names in the tables above that are not aten ops, and what they are."""

FORMULA_FAMILIES = ("matmul", "conv", "attention", "softmax", "norm", "elementwise",
                    "reduction")
"""The families a FLOP formula may declare."""


def op_tables() -> dict[str, frozenset[str]]:
    """Every op-name table of this module by name, for the test that checks each name
    against ``torch.ops``."""
    return {name: value for name, value in globals().items()
            if name.isupper() and isinstance(value, frozenset)}
