"""Feature axes: which axes of a tensor carry a projection's output features, op by op."""

from __future__ import annotations

import math

from torch import fx

from mhaudit.trace.graphs import EXPAND_OPS, arg, op_name, shape

_RESHAPE_OPS = frozenset(
    {"view", "_unsafe_view", "reshape", "flatten", "unflatten", "unsqueeze", "squeeze",
     "view_as", "reshape_as"}
)
_SLICE_OPS = frozenset({"slice", "narrow", "getitem", "index_select", "gather"})
_KEEP_OPS = EXPAND_OPS | frozenset({"cat", "stack", "constant_pad_nd", "pad", "copy"})
"""Same-rank ops whose changed sizes add no features: repeats, joins along other axes, padding."""
_PERMUTE_OPS = frozenset({"transpose", "swapaxes", "t", "permute", "movedim"})
_REDUCE_OPS = frozenset({"mean", "sum", "amax", "amin", "max", "min"})


def _groups(before: tuple[int, ...], after: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
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


def forward_axes(
    node: fx.Node, source: fx.Node, axes: frozenset[int], before: tuple[int, ...]
) -> frozenset[int] | None:
    """The axes of ``node`` that carry the features ``axes`` of its input ``source``.

    ``before`` is the shape of ``source`` (the input of a multi-output op for its
    ``getitem``). None when the op moves axes in a way this does not follow.
    """
    name = op_name(node)
    after = shape(node)
    if name in ("split", "split_with_sizes", "chunk", "unbind") or not after:
        return axes
    d = _removed_dim(node, source, before)
    if d is not None:
        return frozenset(a - (a > d) for a in axes if a != d)
    if name in ("transpose", "swapaxes") and len(after) == len(before):
        d0, d1 = _dim(node.args[1], len(after)), _dim(node.args[2], len(after))
        swap = {d0: d1, d1: d0}
        return frozenset(swap.get(a, a) for a in axes)  # type: ignore[misc]
    if name == "t" and len(after) == 2:
        return frozenset(1 - a for a in axes)
    dims = _permutation(node, len(after))
    if dims is not None:
        return frozenset(i for i, d in enumerate(dims) if d in axes)
    d = _removed_dim(node, source, before)
    if d is not None:
        return frozenset(a - (a > d) for a in axes if a != d)
    if name == "view_as_complex" and len(after) == len(before) - 1:
        return frozenset(a for a in axes if a < len(after)) or frozenset({len(after) - 1})
    if name == "view_as_real" and len(after) == len(before) + 1:
        return axes | {len(after) - 1} if len(before) - 1 in axes else axes
    if name in _REDUCE_OPS and len(after) < len(before):
        dims = arg(node, 1, "dim")
        dims = [dims] if isinstance(dims, int) else list(dims or [])
        gone = {d % len(before) for d in dims}
        kept = [a for a in range(len(before)) if a not in gone]
        return frozenset(kept.index(a) for a in axes if a in kept)
    if after == before or (len(after) == len(before) and name not in _RESHAPE_OPS):
        return axes
    if name in _RESHAPE_OPS or math.prod(after) == math.prod(before):
        groups = _groups(before, after)
        if not groups:
            return None
        return frozenset(o for ins, outs in groups if set(ins) & axes for o in outs)
    if len(after) > len(before):
        # Broadcasting elementwise op: axes align from the right.
        return frozenset(a + len(after) - len(before) for a in axes)
    return None


def carried_width(path: list[fx.Node]) -> int | None:
    """Distinct features of ``path[-1]``'s last axis that reach ``path[0]``, per token.

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
    axes: frozenset[int] = frozenset({len(dims) - 1})
    width = float(dims[-1])
    before = dims
    for index in range(len(path) - 2, -1, -1):
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
        elif len(after) == len(before) and name not in _KEEP_OPS | _RESHAPE_OPS | _PERMUTE_OPS:
            for a in axes:
                if after[a] < before[a] and (name in _SLICE_OPS or before[a] % after[a] == 0):
                    width *= after[a] / before[a]
        if after:
            axes, before = moved, after
    return round(width)


def backward_axis(node: fx.Node, source: fx.Node, axis: int | None) -> int | None:
    """The axis of input ``source`` that becomes ``axis`` of ``node`` (None when unknown)."""
    if axis is None:
        return None
    after = shape(node)
    before = shape(source) if shape(source) else after
    name = op_name(node)
    if name == "unbind" and shape(source):
        d = _dim(arg(node, 1, "dim", 0), len(shape(source)))
        return axis + (d is not None and axis >= d)
    if name in ("getitem", "split", "split_with_sizes", "chunk") or not after:
        return axis
    if name in ("transpose", "swapaxes") and len(after) == len(before):
        d0, d1 = _dim(node.args[1], len(after)), _dim(node.args[2], len(after))
        return {d0: d1, d1: d0}.get(axis, axis)
    if name == "t" and len(after) == 2:
        return 1 - axis
    dims = _permutation(node, len(after))
    if dims is not None:
        return dims[axis]
    if after == before or (len(after) == len(before) and name not in _RESHAPE_OPS):
        return axis
    if name == "select" and len(before) == len(after) + 1:
        d = _dim(node.args[1], len(before))
        return axis + (d is not None and axis >= d)
    if name == "view_as_real" and len(after) == len(before) + 1:
        return min(axis, len(before) - 1)
    if name == "view_as_complex" and len(after) == len(before) - 1:
        return axis
    if math.prod(after) == math.prod(before) and name not in _REDUCE_OPS:
        for ins, outs in _groups(before, after):
            if axis in outs:
                return ins[-1]
        return None
    if len(after) > len(before):
        mapped = axis - (len(after) - len(before))
        return mapped if mapped >= 0 else None
    return None


_TOKEN_OPS = (_RESHAPE_OPS | _SLICE_OPS | _KEEP_OPS | _REDUCE_OPS) - {"copy"} | frozenset(
    {"select", "transpose", "permute", "contiguous", "clone", "to", "_to_copy", "alias",
     "detach", "split", "split_with_sizes", "chunk", "unbind", "avg_pool1d", "avg_pool2d",
     "max_pool1d", "max_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d"}
)


def same_tokens_source(node: fx.Node, source: fx.Node, limit: int = 64) -> bool:
    """True when ``node`` is computed from ``source`` alone by ops along its tokens.

    Every op on the way keeps the last (feature) dim's size: slices, selects, joins
    and pools of positions (Funnel's pooled queries are strided means of the same
    hidden states). Any other input (a parameter, another activation) makes it False.
    """
    if node is source:
        return True
    width = (shape(source) or (0,))[-1]
    stack, seen = [node], set()
    reached = False
    while stack:
        current = stack.pop()
        if current is source:
            reached = True
            continue
        if current in seen:
            continue
        seen.add(current)
        if len(seen) > limit or current.op != "call_function":
            return False
        if op_name(current) not in _TOKEN_OPS:
            return False
        dims = shape(current)
        if dims and dims[-1] != width:
            return False
        for item in current.all_input_nodes:
            stack.append(item)
    return reached
