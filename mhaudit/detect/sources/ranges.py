"""Which output features of a fused projection a role reads, and which of them have a bias.

Rule of thumb for biases assembled with ``cat``: ``F.linear(x, W, cat(q_bias, zeros,
v_bias))`` gives Q and V a bias and K none; each role's bias is the learned part of the
concatenation that falls in the slice of the output it reads.
"""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import arg, param_root, shape
from mhaudit.trace.ops import SPLIT_OPS, op_name

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


def overlap(span: Range, ranges: tuple[Range, ...]) -> int:
    """Features of ``span`` inside ``ranges``."""
    return sum(max(0, min(span[1], b) - max(span[0], a)) for a, b in ranges)


def read_range(path: tuple[fx.Node, ...], width: int) -> Range | None:
    """The output features of ``path[-1]`` (a projection) that reach ``path[0]``.

    Follows splits, chunks and slices of the last axis until the first op that
    reshapes it; None when the path does not cut the last axis in a way this follows.
    """
    lo, hi = 0, width
    pending: list[int] | None = None
    for node, source in zip(reversed(path[:-1]), reversed(path[1:]), strict=True):
        name = op_name(node)
        if pending is not None:
            if name != "getitem" or not isinstance(node.args[1], int):
                return None
            index = node.args[1]
            lo, hi = lo + sum(pending[:index]), lo + sum(pending[: index + 1])
            pending = None
            continue
        dims = shape(source)
        last = len(dims) - 1
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
                if shape(node)[-1:] != (hi - lo,):
                    return None
                continue  # a slice of tokens
            begin = arg(node, 2, "start", 0) or 0
            if not isinstance(begin, int) or begin < 0:
                return None
            lo = lo + begin
            hi = lo + shape(node)[-1]
        elif not shape(node) or shape(node)[-1] != hi - lo:
            return lo, hi
    return lo, hi


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
