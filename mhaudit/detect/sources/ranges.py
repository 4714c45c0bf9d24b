"""Which output features of a fused projection a role reads, and which of them have a bias.

Rule of thumb for biases assembled with ``cat``: ``F.linear(x, W, cat(q_bias, zeros,
v_bias))`` gives Q and V a bias and K none; each role's bias is the learned part of the
concatenation that falls in the slice of the output it reads.
"""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import arg, param_root, shape
from mhaudit.trace.ops import PLAIN_RESHAPE_OPS, SPLIT_OPS, op_name

Range = tuple[int, int]
"""Half-open feature range [start, stop) of a projection's output."""


def bias_ranges(bias: fx.Node, params: dict[str, str]) -> tuple[str | None, tuple[Range, ...]]:
    """The first learned part of a ``cat``-assembled bias and the ranges learned parts cover."""
    if op_name(bias) != "cat" or not bias.args or not isinstance(bias.args[0], (list, tuple)):
        return None, ()
    start, first, covered = 0, None, []
    for part in bias.args[0]:
        if not isinstance(part, fx.Node) or len(shape(part)) != 1:
            return None, ()
        size = shape(part)[0]
        name = param_root(part, params)
        if name is not None:
            first = first or name
            covered.append((start, start + size))
        start += size
    return first, tuple(covered)


def picked_bias(bias: fx.Node, params: dict[str, str]) -> tuple[str | None, int]:
    """The first learned part and the learned elements of a piece cut out of a
    ``cat``-assembled bias (``F.multi_head_attention_forward`` chunks its joined
    ``in_proj_bias`` into the q, k and v biases); (None, 0) for any other bias."""
    piece = _piece(bias)
    if piece is None:
        return None, 0
    joined, span = piece
    start, first, learned = 0, None, 0
    for part in joined.args[0]:  # type: ignore[union-attr]
        if not isinstance(part, fx.Node) or len(shape(part)) != 1:
            return None, 0
        stop = start + shape(part)[0]
        name = param_root(part, params)
        inside = overlap(span, ((start, stop),))
        if name is not None and inside:
            first, learned = first or name, learned + inside
        start = stop
    return first, learned


def _piece(bias: fx.Node) -> tuple[fx.Node, Range] | None:
    """The ``cat`` a 1-d bias is a ``getitem`` of a split, or a slice, of, and the range."""
    name = op_name(bias)
    source = bias.args[0] if bias.args else None
    if not isinstance(source, fx.Node):
        return None
    if name == "getitem" and op_name(source) in SPLIT_OPS and isinstance(bias.args[1], int):
        joined = source.args[0]
        if not isinstance(joined, fx.Node) or len(shape(joined)) != 1:
            return None
        sizes = _sizes(source, op_name(source), shape(joined)[0])
        index = bias.args[1]
        if sizes is None or not 0 <= index < len(sizes):
            return None
        span = (sum(sizes[:index]), sum(sizes[: index + 1]))
    elif name in ("slice", "narrow") and len(shape(source)) == 1:
        begin = arg(bias, 2, "start", 0) or 0
        if not isinstance(begin, int) or begin < 0:
            return None
        joined, span = source, (begin, begin + shape(bias)[0])
    else:
        return None
    return (joined, span) if op_name(joined) == "cat" else None


def joined_parameter(weight: fx.Node, params: dict[str, str]) -> str | None:
    """The first part of a weight joined with ``cat`` along its output rows from
    parameters alone (separate q, k, v weights passed as one ``in_proj_weight``)."""
    if op_name(weight) != "cat" or not weight.args or not isinstance(
            weight.args[0], (list, tuple)) or arg(weight, 1, "dim", 0) != 0:
        return None
    names = [param_root(p, params) for p in weight.args[0]]
    return names[0] if names and all(names) else None


def overlap(span: Range, ranges: tuple[Range, ...]) -> int:
    """Features of ``span`` inside ``ranges``."""
    return sum(max(0, min(span[1], b) - max(span[0], a)) for a, b in ranges)


def read_range(path: tuple[fx.Node, ...], width: int, axis: int = -1) -> Range | None:
    """The output features of ``path[-1]`` (a projection, its features on ``axis``: the
    last, or a convolution's channels, 1) that reach ``path[0]``.

    Follows splits, chunks and slices of that axis until the first op that reshapes it,
    and a reshape that splits the last axis into factors (ViT's ``(B, N, 3·h·d) ->
    (B, N, 3, h, d)``) through permutes to the ``unbind`` or ``select`` of its outermost
    factor (``q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)``); None when the path does
    not cut the axis in a way this follows."""
    lo, hi = 0, width
    pending: list[int] | None = None
    factors: dict[int, tuple[int, int]] | None = None  # dim -> (size, features per step)
    unbound: int | None = None  # features per step of the factor an unbind just split
    for node, source in zip(reversed(path[:-1]), reversed(path[1:]), strict=True):
        name = op_name(node)
        if pending is not None:
            if name != "getitem" or not isinstance(node.args[1], int):
                return None if factors is None else (lo, hi)
            index = node.args[1]
            lo, hi = lo + sum(pending[:index]), lo + sum(pending[: index + 1])
            pending = None
            continue
        if factors is not None:
            step = _factor_step(node, name, factors, unbound)
            if step is None:
                return lo, hi
            factors, unbound, picked = step
            if picked is not None:
                lo, hi = lo + picked[0], lo + picked[1]
            continue
        dims = shape(source)
        last = axis % len(dims) if dims else -1
        at = -1 if axis == -1 else last  # where later ops' feature sizes are read
        if name in SPLIT_OPS:
            dim = arg(node, 2, "dim", 0)
            if not isinstance(dim, int) or dim % len(dims) != last:
                return None
            pending = _sizes(node, name, hi - lo)
            if pending is None:
                return None
        elif name in ("slice", "narrow"):
            dim = arg(node, 1, "dim", 0)
            if not isinstance(dim, int) or dim % len(dims) != last:
                if _size(node, at) != hi - lo:
                    return None
                continue  # a slice of tokens
            begin = arg(node, 2, "start", 0) or 0
            if not isinstance(begin, int) or begin < 0:
                return None
            lo = lo + begin
            hi = lo + _size(node, at)
        elif name in PLAIN_RESHAPE_OPS and dims and last == len(dims) - 1 and dims[-1] == hi - lo \
                and shape(node)[-1:] != (hi - lo,):
            factors = _split_factors(dims, shape(node), hi - lo)
            if factors is None:
                return lo, hi
        elif _size(node, at) != hi - lo:
            return lo, hi
    return lo, hi


def _size(node: fx.Node, axis: int) -> int:
    """``node``'s size along ``axis`` (-1 when it has no such axis)."""
    dims = shape(node)
    return dims[axis] if -len(dims) <= axis < len(dims) else -1


def _split_factors(before: tuple[int, ...], after: tuple[int, ...], width: int
                   ) -> dict[int, tuple[int, int]] | None:
    """The trailing dims of ``after`` that a reshape split the last axis of ``before``
    (``width`` features) into, each with its size and features per index step."""
    if tuple(after[: len(before) - 1]) != tuple(before[:-1]):
        return None
    found: dict[int, tuple[int, int]] = {}
    stride = 1
    for dim in range(len(after) - 1, len(before) - 2, -1):
        found[dim] = (after[dim], stride)
        stride *= after[dim]
    return found if stride == width else None


def _factor_step(node: fx.Node, name: str, factors: dict[int, tuple[int, int]],
                 unbound: int | None) -> tuple[dict[int, tuple[int, int]], int | None,
                                               Range | None] | None:
    """The factors after ``node``, the step of a factor it unbinds, and the features it
    picks (from the current start); None for an op this does not follow."""
    if unbound is not None:  # the getitem after an unbind picks one index
        index = node.args[1] if name == "getitem" and len(node.args) > 1 else None
        if not isinstance(index, int) or index < 0:
            return None
        return factors, None, (index * unbound, (index + 1) * unbound)
    rank = len(shape(node.args[0])) if node.args and isinstance(node.args[0], fx.Node) else 0
    if name == "permute":
        order = arg(node, 1, "dims", None)
        if not isinstance(order, (list, tuple)) or len(order) != rank:
            return None
        where = {int(old) % rank: new for new, old in enumerate(order)}
        return {where[d]: f for d, f in factors.items()}, None, None
    if name not in ("unbind", "select") or not rank:
        return None
    dim = arg(node, 1, "dim", 0)
    if not isinstance(dim, int) or dim % rank not in factors:
        return None
    dim %= rank
    size, stride = factors[dim]
    if stride != max(s for _, s in factors.values()):
        return None  # not the outermost factor: the picked features are not contiguous
    rest = {(d - 1 if d > dim else d): f for d, f in factors.items() if d != dim}
    if name == "unbind":
        return rest, stride, None
    index = arg(node, 2, "index", None)
    if not isinstance(index, int):
        return None
    return rest, None, (index % size * stride, (index % size + 1) * stride)


def _sizes(node: fx.Node, name: str, width: int) -> list[int] | None:
    """Part sizes of a chunk or split of ``width`` features."""
    spec = node.args[1] if len(node.args) > 1 else None
    if name == "chunk" and isinstance(spec, int) and spec > 0:
        size = -(-width // spec)
        return [min(size, width - i * size) for i in range(spec) if i * size < width]
    if isinstance(spec, int) and spec > 0:
        return [min(spec, width - i) for i in range(0, width, spec)]
    if isinstance(spec, (list, tuple)) and all(isinstance(s, int) for s in spec):
        return [int(s) for s in spec]
    return None
