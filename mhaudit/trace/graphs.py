"""Small helpers for reading aten-level fx graphs: shapes, parameter roots, in-place writes.

Op names and op tables live in :mod:`mhaudit.trace.ops`."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import fx

from mhaudit.trace.ops import (
    EXPAND_OPS,
    FRESH_OPS,
    MATMUL_OPS,
    NORM_OPS,
    PARAM_VIEW_OPS,
    PROJECTION_OPS,
    SDPA_OPS,
    SOFTMAX_OPS,
    VIEW_OPS,
    WRITE_TARGET_OPS,
    WRITE_VIEW_OPS,
    is_in_place,
    op_name,
)
from mhaudit.trace.walks import chain

# The op tables are re-exported for modules that read them beside these helpers.
__all__ = [
    "EXPAND_OPS", "FRESH_OPS", "MATMUL_OPS", "NORM_OPS", "PROJECTION_OPS", "SDPA_OPS",
    "SOFTMAX_OPS", "VIEW_OPS", "arg", "in_place_writes", "innermost_module", "known_value",
    "numel", "op_name", "param_root", "shape", "submodule", "tensor_inputs", "tokens", "val",
    "written_in_place",
]


def submodule(model: torch.nn.Module, path: str) -> torch.nn.Module | None:
    """The module at the dotted ``path`` of ``model`` (``""``: the model), or None where no
    module sits there. A ScriptModule refuses ``get_submodule`` (RuntimeError): its
    submodules are read as its attributes."""
    try:
        return model.get_submodule(path)
    except AttributeError:
        return None
    except RuntimeError:
        module: object = model
        for part in path.split(".") if path else ():
            module = getattr(module, part, None)
        return module if isinstance(module, torch.nn.Module) else None


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


def concrete(size: Any) -> int:
    """A size as an int: its value, or for a data-dependent (unbacked) size the largest
    value its range allows (a nonzero's count is at most its input's numel); 0 when the
    range has no finite bound."""
    try:
        return int(size)
    except Exception:  # GuardOnDataDependentSymNode and kin: the value depends on data
        node = getattr(size, "node", None)
        try:
            upper = node.shape_env.bound_sympy(node.expr).upper  # type: ignore[union-attr]
            return int(upper) if upper.is_finite and upper <= 2**40 else 0
        except Exception:
            return 0


def shape(node: Any) -> tuple[int, ...]:
    """Concrete shape of a node's tensor value (empty when unknown); data-dependent sizes
    at their upper bound (:func:`concrete`)."""
    tensor = val(node)
    if tensor is None:
        return ()
    return tuple(concrete(s) for s in tensor.shape)


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


def param_root(node: Any, params: dict[str, str], depth: int = 8) -> str | None:
    """Placeholder name of the parameter a node is a view or cast of, if any (the
    placeholder at most ``depth - 1`` views away)."""
    if not isinstance(node, fx.Node) or depth < 1:
        return None
    root = chain(node, PARAM_VIEW_OPS, depth - 1)[-1]
    return root.name if root.op == "placeholder" and root.name in params else None


def tokens(node: fx.Node) -> int:
    """Rows of a feature-last tensor: numel / last dim."""
    dims = shape(node)
    return math.prod(dims[:-1]) if dims else 0


def in_place_writes(buffer: fx.Node) -> list[tuple[fx.Node, fx.Node]]:
    """(view of ``buffer``, value copied into it) for each in-place ``copy_`` into it
    (a functional ``copy`` returns a new tensor and leaves ``buffer`` as it was)."""
    found: list[tuple[fx.Node, fx.Node]] = []
    frontier = [buffer]
    for _ in range(3):
        nxt: list[fx.Node] = []
        for node in frontier:
            for user in node.users:
                name = op_name(user)
                if (name == "copy" and is_in_place(user) and user.args[0] is node
                        and isinstance(user.args[1], fx.Node)):
                    found.append((node, user.args[1]))
                elif name in WRITE_VIEW_OPS and user.args and user.args[0] is node:
                    nxt.append(user)
        frontier = nxt
    return found


KNOWN_VALUE = "known_value"
"""``meta`` key of a buffer placeholder whose value can be asked for: a callable with no
arguments that returns the value on CPU, or why it cannot be known (a string)."""
KNOWN_INPUT = "known_input"
"""The same for an input placeholder (None where its value is not known)."""


def known_value(node: fx.Node, key: str = KNOWN_VALUE) -> torch.Tensor | str | None:
    """The CPU value of a buffer placeholder (of an input one with ``key`` =
    :data:`KNOWN_INPUT`), why it cannot be known, or None where no value was offered (a
    parameter, an activation)."""
    ask = node.meta.get(key)
    return ask() if callable(ask) else None


def written_in_place(buffer: fx.Node) -> bool:
    """True when the forward writes into ``buffer`` or a view of it in place (its value
    when read is not the one it was built with)."""
    frontier = [buffer]
    for _ in range(4):
        nxt: list[fx.Node] = []
        for node in frontier:
            for user in node.users:
                if not user.args or user.args[0] is not node:
                    continue
                if is_in_place(user):
                    return True
                if op_name(user) in WRITE_TARGET_OPS:
                    nxt.append(user)
        frontier = nxt
    return False
