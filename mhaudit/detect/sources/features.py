"""Feature axes: which axes of a tensor carry a projection's output features, op by op."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from torch import fx

from mhaudit.trace.graphs import arg, shape
from mhaudit.trace.ops import (
    FEATURE_KEEP_OPS,
    PERMUTE_OPS,
    REDUCE_OPS,
    RESHAPE_OPS,
    SLICE_OPS,
    SPLIT_OPS,
    op_name,
)


def axis_groups(before: tuple[int, ...], after: tuple[int, ...]
                ) -> list[tuple[list[int], list[int]]]:
    """Pair runs of input axes with runs of output axes whose sizes multiply to the same value.

    Size-1 axes belong to no run. Returns an empty list when the shapes do not align.
    """
    i = j = 0
    result: list[tuple[list[int], list[int]]] = []
    while True:
        while i < len(before) and before[i] == 1:
            i += 1
        while j < len(after) and after[j] == 1:
            j += 1
        if i == len(before) or j == len(after):
            break
        ins, outs = [i], [j]
        a, b = before[i], after[j]
        i, j = i + 1, j + 1
        while a != b:
            if a < b:
                if i == len(before):
                    return []
                a *= before[i]
                ins.append(i)
                i += 1
            else:
                if j == len(after):
                    return []
                b *= after[j]
                outs.append(j)
                j += 1
        result.append((ins, outs))
    rest_in = math.prod(before[i:])
    rest_out = math.prod(after[j:])
    return result if rest_in == rest_out == 1 else []


def _dim(value: object, rank: int) -> int | None:
    if not isinstance(value, int) or rank == 0:
        return None
    return value % rank


def _permutation(node: fx.Node, rank: int) -> list[int] | None:
    """The dims of a ``permute`` (output axis i reads input axis dims[i]), else None."""
    dims = node.args[1] if op_name(node) == "permute" and len(node.args) > 1 else None
    if not isinstance(dims, (list, tuple)) or len(dims) != rank:
        return None
    if not all(isinstance(d, int) for d in dims):
        return None
    return [int(d) % rank for d in dims]  # type: ignore[arg-type]


def _removed_dim(node: fx.Node, source: fx.Node, before: tuple[int, ...]) -> int | None:
    """The input dim a ``select`` (or a ``getitem`` of ``unbind``) drops, else None."""
    if len(shape(node)) != len(before) - 1:
        return None
    if op_name(node) == "select":
        return _dim(node.args[1], len(before))
    if op_name(node) == "getitem" and op_name(source) == "unbind":
        return _dim(arg(source, 1, "dim", 0), len(before))
    return None


@dataclass(frozen=True)
class _Step:
    """One op on a path: its node, the input followed, and their shapes."""

    node: fx.Node
    source: fx.Node
    name: str
    before: tuple[int, ...]
    after: tuple[int, ...]


_AxesHandler = Callable[[_Step, frozenset[int]], "frozenset[int] | None"]
"""An op's own rule; None hands the step to the shape-based rule."""


def _swap(step: _Step) -> dict[int | None, int | None] | None:
    if len(step.after) != len(step.before):
        return None
    d0, d1 = _dim(step.node.args[1], len(step.after)), _dim(step.node.args[2], len(step.after))
    return {d0: d1, d1: d0}


def _fwd_keep(step: _Step, axes: frozenset[int]) -> frozenset[int] | None:
    return axes


def _fwd_removed(step: _Step, axes: frozenset[int]) -> frozenset[int] | None:
    if step.name == "getitem" and op_name(step.source) in REDUCE_OPS:
        # The values of a reduction that also returns indices (``max(dim=…)``).
        return _fwd_reduce(_Step(step.source, step.source, step.name, step.before, step.after),
                           axes)
    d = _removed_dim(step.node, step.source, step.before)
    return None if d is None else frozenset(a - (a > d) for a in axes if a != d)


def _fwd_transpose(step: _Step, axes: frozenset[int]) -> frozenset[int] | None:
    swap = _swap(step)
    return None if swap is None else frozenset(swap.get(a, a) for a in axes)  # type: ignore[misc]


def _fwd_t(step: _Step, axes: frozenset[int]) -> frozenset[int] | None:
    return frozenset(1 - a for a in axes) if len(step.after) == 2 else None


def _fwd_permute(step: _Step, axes: frozenset[int]) -> frozenset[int] | None:
    dims = _permutation(step.node, len(step.after))
    return None if dims is None else frozenset(i for i, d in enumerate(dims) if d in axes)


def _fwd_view_as_complex(step: _Step, axes: frozenset[int]) -> frozenset[int] | None:
    rank = len(step.after)
    if rank != len(step.before) - 1:
        return None
    return frozenset(a for a in axes if a < rank) or frozenset({rank - 1})


def _fwd_view_as_real(step: _Step, axes: frozenset[int]) -> frozenset[int] | None:
    if len(step.after) != len(step.before) + 1:
        return None
    return axes | {len(step.after) - 1} if len(step.before) - 1 in axes else axes


def _reduced_dims(node: fx.Node, before: tuple[int, ...]) -> frozenset[int]:
    """The input axes a reduction ``op(x, dim, …)`` runs over."""
    dims = arg(node, 1, "dim")
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    return frozenset(d % len(before) for d in dims if isinstance(d, int))


def _fwd_reduce(step: _Step, axes: frozenset[int]) -> frozenset[int] | None:
    if len(step.after) >= len(step.before):
        return None
    gone = _reduced_dims(step.node, step.before)
    kept = [a for a in range(len(step.before)) if a not in gone]
    return frozenset(kept.index(a) for a in axes if a in kept)


def _fwd_unfold(step: _Step, axes: frozenset[int]) -> frozenset[int] | None:
    """``unfold(dim, size, step)`` turns axis ``dim`` into window counts and appends the
    window as a new last axis: the other axes stay where they are (halo attention's
    overlapping K/V windows, unfolded along H and W, keep the channels on axis 1)."""
    dim = arg(step.node, 1, "dimension")
    if not isinstance(dim, int) or len(step.after) != len(step.before) + 1:
        return None
    return None if dim % len(step.before) in axes else axes


def _fwd_im2col(step: _Step, axes: frozenset[int]) -> frozenset[int] | None:
    """``F.unfold`` keeps the channels on their axis, (N, C, H, W) -> (N, C·∏kernel, L),
    each channel's window under it; features on a spatial axis are not followed."""
    rank = len(step.after)
    ok = rank in (2, 3) and len(step.before) == rank + 1 and axes == {rank - 2}
    return axes if ok else None


_FORWARD: dict[str, _AxesHandler] = {
    **dict.fromkeys(SPLIT_OPS | {"unbind"}, _fwd_keep),
    "select": _fwd_removed,
    "getitem": _fwd_removed,
    "transpose": _fwd_transpose,
    "swapaxes": _fwd_transpose,
    "t": _fwd_t,
    "permute": _fwd_permute,
    "view_as_complex": _fwd_view_as_complex,
    "view_as_real": _fwd_view_as_real,
    "unfold": _fwd_unfold,
    "im2col": _fwd_im2col,
    **dict.fromkeys(REDUCE_OPS, _fwd_reduce),
}
"""Ops with their own rule for where features go; the rest follow shapes."""


def _forward_by_shape(step: _Step, axes: frozenset[int]) -> frozenset[int] | None:
    before, after = step.before, step.after
    if after == before or (len(after) == len(before) and step.name not in RESHAPE_OPS):
        return axes
    if step.name in RESHAPE_OPS or math.prod(after) == math.prod(before):
        groups = axis_groups(before, after)
        if not groups:
            return None
        return frozenset(o for ins, outs in groups if set(ins) & axes for o in outs)
    if len(after) > len(before):
        # Broadcasting elementwise op: axes align from the right.
        return frozenset(a + len(after) - len(before) for a in axes)
    return None


def forward_axes(
    node: fx.Node, source: fx.Node, axes: frozenset[int], before: tuple[int, ...]
) -> frozenset[int] | None:
    """The axes of ``node`` that carry the features ``axes`` of its input ``source``.

    ``before`` is the shape of ``source`` (the input of a multi-output op for its
    ``getitem``). None when the op moves axes in a way this does not follow.
    """
    after = shape(node)
    if not after:
        return axes
    step = _Step(node, source, op_name(node), before, after)
    handler = _FORWARD.get(step.name)
    moved = handler(step, axes) if handler is not None else None
    return moved if moved is not None else _forward_by_shape(step, axes)


def carried_width(path: list[fx.Node], feature_axes: tuple[int, ...] = ()) -> int | None:
    """Distinct features of ``path[-1]``'s last axis that reach ``path[0]``, per token.

    See :func:`carried`, which also names the ops that cut the features.
    """
    found = carried(path, feature_axes)
    return found[0] if found is not None else None


def carried(path: list[fx.Node], feature_axes: tuple[int, ...] = ()
            ) -> tuple[int, frozenset[fx.Node]] | None:
    """Distinct features of ``path[-1]``'s last axis that reach ``path[0]``, per token,
    and the ops on the path that cut them (a fused split, a chunk of each head).

    ``path`` runs from a core operand back to a projection output, each node an
    input of the one before. Slices and selects on feature axes shrink the count;
    ops on token or block axes (pads, window joins, pooling), head repeats and
    joins of other parts along a feature axis leave it alone. None when an op on
    the path moves axes in a way this does not follow.
    """
    start = path[-1]
    dims = shape(start)
    if not dims:
        return None
    axes = frozenset(a % len(dims) for a in feature_axes) or frozenset({len(dims) - 1})
    width = float(math.prod(dims[a] for a in axes))
    before = dims
    cuts: set[fx.Node] = set()
    spread = 1  # copies of each feature a product made by broadcasting a size-1 feature axis
    for index in range(len(path) - 2, -1, -1):
        was = width
        node, source = path[index], path[index + 1]
        after = shape(node)
        moved = forward_axes(node, source, axes, before)
        if moved is None:
            return None
        name = op_name(node)
        removed = _removed_dim(node, source, before)
        if removed is not None:
            if removed in axes:
                width /= before[removed]
        elif name in REDUCE_OPS and len(after) < len(before):
            # A reduction that drops feature axes (a mean over each group of heads)
            # leaves one feature per group; after a broadcast product it is a matmul
            # written out, (x[..., None, :] * M).sum(-1), that keeps the features it mixes.
            reduced = math.prod(before[a] for a in _reduced_dims(node, before) & axes)
            width = width * min(spread, reduced) / reduced
            spread = 1
        elif name == "mul" and len(after) == len(before):
            spread *= _broadcast(before, after, axes)
        elif len(after) == len(before) and name not in FEATURE_KEEP_OPS | RESHAPE_OPS | PERMUTE_OPS:
            for a in axes:
                if after[a] < before[a] and (name in SLICE_OPS or before[a] % after[a] == 0):
                    width *= after[a] / before[a]
        if width < was:
            cuts.add(node)
        if after:
            axes, before = moved, after
    return round(width), frozenset(cuts)


def _broadcast(before: tuple[int, ...], after: tuple[int, ...], axes: frozenset[int]) -> int:
    """How many copies a same-rank elementwise op makes of each feature by broadcasting
    size-1 feature axes (a pair rotation's ``x.reshape(..., d // 2, 1, 2) * R``, R of
    shape (..., d // 2, 2, 2), before the ``sum(-1)`` that completes R·x)."""
    return math.prod(after[a] for a in axes if before[a] == 1 and after[a] > 1)


_AxisHandler = Callable[[_Step, int], "int | None"]
"""An op's own rule for the input axis; None hands the step to the shape-based rule."""


def _bwd_keep(step: _Step, axis: int) -> int | None:
    return axis


def _bwd_unbind(step: _Step, axis: int) -> int | None:
    d = _dim(arg(step.node, 1, "dim", 0), len(step.before))
    return axis + (d is not None and axis >= d)


def _bwd_transpose(step: _Step, axis: int) -> int | None:
    swap = _swap(step)
    return None if swap is None else swap.get(axis, axis)


def _bwd_t(step: _Step, axis: int) -> int | None:
    return 1 - axis if len(step.after) == 2 else None


def _bwd_permute(step: _Step, axis: int) -> int | None:
    dims = _permutation(step.node, len(step.after))
    return None if dims is None else dims[axis]


def _bwd_select(step: _Step, axis: int) -> int | None:
    if len(step.before) != len(step.after) + 1:
        return None
    d = _dim(step.node.args[1], len(step.before))
    return axis + (d is not None and axis >= d)


def _bwd_reduce(step: _Step, axis: int) -> int | None:
    """A reduction over some axes without keepdim: output axis i is the i-th kept one."""
    dims = arg(step.node, 1, "dim")
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    rank = len(step.before)
    if not dims or bool(arg(step.node, 2, "keepdim", False)) or not rank:
        return None
    gone = {d % rank for d in dims if isinstance(d, int)}
    kept = [a for a in range(rank) if a not in gone]
    return kept[axis] if axis < len(kept) else None


def _bwd_view_as_real(step: _Step, axis: int) -> int | None:
    return min(axis, len(step.before) - 1) if len(step.after) == len(step.before) + 1 else None


def _bwd_view_as_complex(step: _Step, axis: int) -> int | None:
    return axis if len(step.after) == len(step.before) - 1 else None


_BACKWARD: dict[str, _AxisHandler] = {
    **dict.fromkeys(SPLIT_OPS | {"getitem"}, _bwd_keep),
    "unbind": _bwd_unbind,
    "transpose": _bwd_transpose,
    "swapaxes": _bwd_transpose,
    "t": _bwd_t,
    "permute": _bwd_permute,
    "select": _bwd_select,
    "view_as_real": _bwd_view_as_real,
    "view_as_complex": _bwd_view_as_complex,
    **dict.fromkeys(REDUCE_OPS, _bwd_reduce),
}
"""Ops with their own rule for which input axis an output axis reads."""


def _backward_by_shape(step: _Step, axis: int) -> int | None:
    before, after = step.before, step.after
    if after == before or (len(after) == len(before) and step.name not in RESHAPE_OPS):
        return axis
    if math.prod(after) == math.prod(before) and step.name not in REDUCE_OPS:
        for ins, outs in axis_groups(before, after):
            if axis in outs:
                return ins[-1]
        return None
    if len(after) > len(before):
        mapped = axis - (len(after) - len(before))
        return mapped if mapped >= 0 else None
    return None


def backward_axis(node: fx.Node, source: fx.Node, axis: int | None) -> int | None:
    """The axis of input ``source`` that becomes ``axis`` of ``node`` (None when unknown)."""
    if axis is None:
        return None
    after = shape(node)
    name = op_name(node)
    if name == "unbind":  # a multi-output op: its own value is a list, not a tensor
        return _bwd_unbind(_Step(node, source, name, shape(source), after), axis) if shape(
            source) else axis
    if not after:  # a multi-output op (``max(dim=…)``: values and indices)
        multi = _bwd_reduce(_Step(node, source, name, shape(source), after), axis) if (
            name in REDUCE_OPS and shape(source)) else None
        return axis if multi is None else multi
    step = _Step(node, source, name, shape(source) or after, after)
    handler = _BACKWARD.get(name)
    mapped = handler(step, axis) if handler is not None else None
    return mapped if mapped is not None else _backward_by_shape(step, axis)
