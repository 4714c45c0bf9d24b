"""Small helpers for reading aten-level fx graphs: op names, shapes, parameter roots."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator
from typing import Any

import torch
from torch import fx

SDPA_IS_CAUSAL_INDEX: dict[str, int] = {
    "scaled_dot_product_attention": 5,
    "_scaled_dot_product_flash_attention": 4,
    "_scaled_dot_product_flash_attention_for_cpu": 4,
    "_scaled_dot_product_efficient_attention": 6,
    "_scaled_dot_product_cudnn_attention": 6,
    "_scaled_dot_product_fused_attention_overrideable": 5,
}
"""The SDPA op variants, each with the position of ``is_causal`` in its arguments."""
SDPA_OPS = frozenset(SDPA_IS_CAUSAL_INDEX)
SOFTMAX_OPS = frozenset({"softmax", "_softmax", "_safe_softmax"})
MATMUL_OPS = frozenset({"matmul", "bmm", "mm", "einsum", "baddbmm"})
PROJECTION_OPS = frozenset({"linear", "addmm", "mm", "matmul", "einsum", "bmm"})
NORM_OPS = frozenset(
    {"layer_norm", "native_layer_norm", "rms_norm", "group_norm", "native_group_norm",
     "batch_norm",
     "_native_batch_norm_legit_no_training"}
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
"""Ops that move, cast or select data without mixing features."""
EXPAND_OPS = frozenset({"expand", "expand_as", "broadcast_to", "repeat_interleave", "repeat",
                        "tile"})


def op_name(node: fx.Node) -> str:
    """``linear`` for ``aten.linear.default``; ``getitem`` for operator.getitem."""
    if node.op != "call_function":
        return node.op
    target = node.target
    if target is operator.getitem:
        return "getitem"
    packet = getattr(target, "overloadpacket", None)
    name = str(packet.__name__) if packet is not None else str(getattr(target, "__name__", target))
    # In-place variants (div_, mul_, detach_) compute what their out-of-place op does.
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def innermost_module(node: fx.Node) -> str:
    """Qualified name (as traced) of the innermost module that ran ``node``; ``""`` if none."""
    stack = node.meta.get("nn_module_stack")
    return str(list(stack.values())[-1][0]) if stack else ""


def val(node: Any) -> torch.Tensor | None:
    """The fake tensor a node produces, or None for non-tensor values."""
    if not isinstance(node, fx.Node):
        return None
    value = node.meta.get("val")
    return value if isinstance(value, torch.Tensor) else None


def shape(node: Any) -> tuple[int, ...]:
    """Concrete shape of a node's tensor value (empty when unknown)."""
    tensor = val(node)
    if tensor is None:
        return ()
    return tuple(int(s) for s in tensor.shape)


def numel(node: Any) -> int:
    """Element count of a node's tensor value (0 when unknown)."""
    return math.prod(shape(node)) if val(node) is not None else 0


def tensor_inputs(node: fx.Node) -> Iterator[fx.Node]:
    """Input nodes that carry tensors, in argument order (lists flattened)."""
    for arg in (*node.args, *node.kwargs.values()):
        if isinstance(arg, fx.Node):
            if val(arg) is not None or _is_tensor_list(arg):
                yield arg
        elif isinstance(arg, (list, tuple)):
            for item in arg:
                if isinstance(item, fx.Node) and val(item) is not None:
                    yield item


def _is_tensor_list(node: fx.Node) -> bool:
    """A multi-output op (split, chunk, unbind, ...) whose getitem users pick tensors."""
    value = node.meta.get("val")
    return isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value)


def arg(node: fx.Node, index: int, name: str, default: Any = None) -> Any:
    """A call argument by position or keyword."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


_PARAM_PASSTHROUGH = frozenset(
    {"t", "numpy_T", "mT", "adjoint", "transpose", "permute", "view", "reshape", "_unsafe_view",
     "to", "_to_copy",
     "contiguous", "clone", "detach", "alias", "slice", "select", "narrow", "getitem",
     "chunk", "split", "split_with_sizes", "unbind", "unflatten", "flatten", "type_as",
     "lift_fresh_copy", "unsqueeze", "squeeze", "expand"}
)


def param_root(node: Any, params: dict[str, str], depth: int = 8) -> str | None:
    """Placeholder name of the parameter a node is a view or cast of, if any."""
    current = node
    for _ in range(depth):
        if not isinstance(current, fx.Node):
            return None
        if current.op == "placeholder":
            return current.name if current.name in params else None
        if current.op == "get_attr":
            return None
        if op_name(current) not in _PARAM_PASSTHROUGH or not current.args:
            return None
        current = current.args[0]
    return None


def tokens(node: fx.Node) -> int:
    """Rows of a feature-last tensor: numel / last dim."""
    dims = shape(node)
    return math.prod(dims[:-1]) if dims else 0


FRESH_OPS = frozenset(
    {"new_empty", "new_zeros", "new_ones", "new_full", "empty_like", "zeros_like", "ones_like",
     "full_like", "empty", "zeros", "ones", "full", "empty_strided", "new_empty_strided"}
)
"""Ops that allocate a buffer: its contents come from later in-place writes, not its inputs."""
_WRITE_VIEWS = frozenset({"slice", "narrow", "select", "view", "alias"})


def in_place_writes(buffer: fx.Node) -> list[tuple[fx.Node, fx.Node]]:
    """(view of ``buffer``, value copied into it) for each in-place ``copy_`` into it."""
    found: list[tuple[fx.Node, fx.Node]] = []
    frontier = [buffer]
    for _ in range(3):
        nxt: list[fx.Node] = []
        for node in frontier:
            for user in node.users:
                name = op_name(user)
                if name == "copy" and user.args[0] is node and isinstance(user.args[1], fx.Node):
                    found.append((node, user.args[1]))
                elif name in _WRITE_VIEWS and user.args and user.args[0] is node:
                    nxt.append(user)
        frontier = nxt
    return found
