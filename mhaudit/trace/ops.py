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


SDPA_VARIANTS: dict[str, SdpaVariant] = {
    v.name: v
    for v in (
        SdpaVariant("scaled_dot_product_attention", 5, 3),
        SdpaVariant("_scaled_dot_product_attention_math", 5, 3),
        SdpaVariant("_scaled_dot_product_flash_attention", 4, None),
        SdpaVariant("_scaled_dot_product_flash_attention_for_cpu", 4, None),
        SdpaVariant("_scaled_dot_product_efficient_attention", 6, 3),
        SdpaVariant("_scaled_dot_product_cudnn_attention", 6, 3),
        SdpaVariant("_scaled_dot_product_fused_attention_overrideable", 5, 3),
    )
}
"""Every SDPA op, the public one and the backends it dispatches to."""
SDPA_OPS = frozenset(SDPA_VARIANTS)
SOFTMAX_OPS = frozenset({"softmax", "_softmax", "_safe_softmax"})
MATMUL_OPS = frozenset({"matmul", "bmm", "mm", "einsum", "baddbmm"})
PROJECTION_OPS = frozenset({"linear", "addmm", "mm", "matmul", "einsum", "bmm"})
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
PAD_OPS = frozenset({"constant_pad_nd", "pad"})
"""Ops that pad a tensor with constants."""

FORMULA_FAMILIES = ("matmul", "conv", "attention", "softmax", "norm", "elementwise",
                    "reduction")
"""The families a FLOP formula may declare."""

TABLES: dict[str, frozenset[str]] = {
    "SDPA_OPS": SDPA_OPS, "SOFTMAX_OPS": SOFTMAX_OPS, "MATMUL_OPS": MATMUL_OPS,
    "PROJECTION_OPS": PROJECTION_OPS, "NORM_OPS": NORM_OPS,
    "VIEW_OPS": VIEW_OPS - {"getitem"}, "EXPAND_OPS": EXPAND_OPS, "ALIAS_OPS": ALIAS_OPS,
    "MAYBE_ALIAS_OPS": MAYBE_ALIAS_OPS, "FRESH_OPS": FRESH_OPS, "PAD_OPS": PAD_OPS,
}
"""Every aten-name table above, for the test that checks the names against ``torch.ops``."""
