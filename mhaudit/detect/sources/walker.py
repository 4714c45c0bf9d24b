"""Walk back from a core operand to the projections it is made of: parts, widths, chains."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from torch import fx

from mhaudit.detect.operands import is_activation_matmul
from mhaudit.detect.patterns.score_bias import position_vector
from mhaudit.detect.sources.along import along_sequence, position_map
from mhaudit.detect.sources.barriers import is_barrier
from mhaudit.detect.sources.features import backward_axis, carried, carried_width
from mhaudit.detect.sources.projections import ProjectionOp, as_projection
from mhaudit.detect.sources.ranges import Range, read_range
from mhaudit.trace.graphs import (
    in_place_writes,
    innermost_module,
    numel,
    param_root,
    shape,
    tensor_inputs,
)
from mhaudit.trace.ops import EXPAND_OPS, FACTOR_CHAIN_OPS, FRESH_OPS, PARAM_VIEW_OPS, op_name
from mhaudit.trace.walks import Walk, chain

_MAX_VISITS = 400
_MAX_DEPTH = 200
_MAX_CHAIN_VISITS = 64


@dataclass(frozen=True)
class Source:
    """Where a core operand (or one part of it) comes from: a projection or a raw input."""

    projection: ProjectionOp | None
    root: fx.Node
    """The projection output, or the input tensor when there is no projection."""
    width: int
    """Features per token this operand uses from the source (h·d_k of a fused QKV slice)."""
    extra_bias: int = 0
    """Bias elements added on the way from the projection (a bias added after a split)."""
    part_dim: int = 0
    """Head-dim features this part fills when the operand joins parts along the head dim
    (DeepSeek's K = [k_nope | k_rope]); 0 when the source fills the whole head dim."""
    upstream: tuple[Source, ...] = ()
    """The down-projection feeding ``projection`` through norms and views (a low-rank
    factorised projection such as q_b(norm(q_a(x)))); empty for one matrix."""
    span: Range | None = None
    """The projection's output features this source reads, when the path shows them."""
    cuts: frozenset[fx.Node] = frozenset()
    """The ops that cut this source's features out of the projection's (a fused split, a
    chunk of each head): two reads with different cuts read different features."""
    stream: int = 0
    """1, 2, … for a stream joined with others along the sequence (joint attention over
    two projected streams); 0 when the operand has one stream."""
    over_tokens: bool = False
    """The operand's head-dim axis is the projection's token axis and its features lie
    on another axis (channel attention: the scores are over channels)."""

    @property
    def chain_input(self) -> fx.Node:
        """The activation the whole chain reads (the root input of a factorised projection)."""
        if self.upstream:
            return self.upstream[0].chain_input
        return self.projection.activation if self.projection else self.root

    @property
    def chain_in_width(self) -> int:
        """Input features of the chain's first matrix."""
        if self.upstream:
            return self.upstream[0].chain_in_width
        return self.projection.in_width if self.projection else (shape(self.root) or (0,))[-1]

    @property
    def heads(self) -> int:
        """Distinct heads of this part: width over its share of the head dim (0 if unknown)."""
        return self.width // self.part_dim if self.part_dim else 0


_Part = tuple[ProjectionOp, tuple[fx.Node, ...], int, int]
"""A projection, the path from the walked node back to it, its head-dim share (0: all)
and its stream (0: the only one)."""


def _rank(parts: tuple[_Part, ...]) -> tuple[int, int]:
    """Prefer the largest projection, then the shortest path (as a single walk would)."""
    return max(numel(p[0].node) for p in parts), -min(len(p[1]) for p in parts)


class SourceWalker:
    """Resolves core operands to their sources; caches projections across the whole graph."""

    def __init__(self, params: dict[str, str], user_inputs: frozenset[str] = frozenset()):
        self.params = params
        self.user_inputs = user_inputs
        self._projections: dict[fx.Node, ProjectionOp | None] = {}
        self._chains: dict[fx.Node, tuple[Source, ...]] = {}

    def projection(self, node: fx.Node) -> ProjectionOp | None:
        """The projection computed at ``node`` (cached)."""
        if node not in self._projections:
            self._projections[node] = as_projection(node, self.params)
        return self._projections[node]

    @property
    def cache(self) -> dict[fx.Node, ProjectionOp | None]:
        """The projection cache, shared with the walk forward to O."""
        return self._projections

    def sources(self, operand: fx.Node, axis: int = -1) -> tuple[Source, ...]:
        """The parts ``operand`` is made of; ``axis`` is its head-dim axis.

        A join along the head dim (``cat`` or writes into slices of a fresh buffer)
        gives one part per projection; any other join keeps the best branch.
        Without a projection the source is the deepest user input it derives from.
        """
        dims = shape(operand)
        start = axis % len(dims) if dims else None
        walk = _Walk(self, operand)
        parts = walk.parts(operand, start, 0)
        if not parts:
            return (self._fallback(operand),)
        grouped: dict[tuple[fx.Node, int], list[_Part]] = {}
        for part in parts:
            grouped.setdefault((part[0].node, part[3]), []).append(part)
        return tuple(self._source(group, start) for group in grouped.values())

    def _source(self, group: list[_Part], axis: int | None = None) -> Source:
        """One projection's parts: their widths add up, unless every part reads the same
        features (chunks of the sequence stacked or joined again, as ProphetNet's
        n-gram streams are): then they are one read."""
        proj = group[0][0]
        widths = [self._width(path, proj) for _, path, _, _ in group]
        dims = [dim for _, _, dim, _ in group]
        bias = sum(_added_bias(list(path), self.params, proj) for _, path, _, _ in group)
        axis = proj.feature_axes[0] if len(proj.feature_axes) == 1 else -1
        spans = {read_range(path, proj.out_width, axis) for _, path, _, _ in group}
        span = spans.pop() if len(spans) == 1 else None
        each = {_cuts(path, proj) for _, path, _, _ in group}
        same = span is not None and len(each) == 1 and 0 in dims
        width = max(widths) if same else sum(widths)
        cuts = frozenset().union(*each)
        tokens = all(_over_tokens(path, proj, axis) for _, path, _, _ in group)
        return Source(proj, proj.node, width, bias, 0 if 0 in dims else sum(dims),
                      self._upstream(proj, 0), span, cuts, group[0][3], tokens)

    def _width(self, path: tuple[fx.Node, ...], proj: ProjectionOp) -> int:
        # Features as they leave ``proj``: counted below any K/V transform on the path.
        path = path[max((i + 1 for i, n in enumerate(path[:-1]) if self.projection(n)), default=0):]
        carried = carried_width(list(path), proj.feature_axes)
        return carried if carried is not None else _numel_width(path[0], list(path), proj.rows)

    def _fallback(self, operand: fx.Node) -> Source:
        """The deepest user input ``operand`` derives from (no projection on the way);
        without one, the learned parameter it views (a learned query token)."""
        best: list[fx.Node] = [operand]
        learned = self._learned(operand, [])
        walk = Walk([(operand, [operand])], _MAX_VISITS, key=_first)
        for node, path in walk:
            if node.op == "placeholder" or is_barrier(node):
                if node.name in self.user_inputs and len(path) > len(best):
                    best = path
                continue
            children = list(tensor_inputs(node))
            for child in children:
                learned = learned or self._learned(child, path)
            walk.push((child, [*path, child]) for child in reversed(children)
                      if param_root(child, self.params) is None and child.op != "get_attr")
        if len(best) == 1 and learned:
            best = learned
        root = best[-1]
        dims = shape(root)
        rows = numel(root) // dims[-1] if dims and dims[-1] else 1
        return Source(None, root, _numel_width(operand, best, rows))

    def _learned(self, node: fx.Node, path: list[fx.Node]) -> list[fx.Node]:
        """``path`` on through the views from ``node`` to the parameter it views, if any."""
        if param_root(node, self.params) is None:
            return []
        return [*path, *chain(node, PARAM_VIEW_OPS, _MAX_CHAIN_VISITS)]

    def _upstream(self, proj: ProjectionOp, depth: int) -> tuple[Source, ...]:
        """The down-projection of a low-rank factorised projection, if ``proj`` has one.

        ``proj`` reads, through views, casts and norms only, one other projection's
        output, narrower than both that projection's input and ``proj``'s output
        (a bottleneck), in the same module as ``proj``. Cached per projection.
        """
        if proj.node in self._chains:
            return self._chains[proj.node]
        self._chains[proj.node] = ()
        found = self._feeding_projection(proj.activation)
        result: tuple[Source, ...] = ()
        if found is not None and depth < 3:
            up, path = found
            width = carried_width(list(path)) or 0
            parent = innermost_module(proj.matmul).rpartition(".")[0]
            inside = not parent or innermost_module(up.matmul).startswith(parent + ".")
            if inside and 0 < width < min(up.in_width, proj.out_width):
                result = (Source(up, up.node, width, upstream=self._upstream(up, depth + 1)),)
        self._chains[proj.node] = result
        return result

    def _feeding_projection(
        self, start: fx.Node
    ) -> tuple[ProjectionOp, tuple[fx.Node, ...]] | None:
        """The one projection ``start`` is computed from by chain ops alone, with its path."""
        found: tuple[ProjectionOp, tuple[fx.Node, ...]] | None = None
        walk: Walk[tuple[fx.Node, tuple[fx.Node, ...]]] = Walk(
            [(start, (start,))], _MAX_CHAIN_VISITS, key=_first)
        for node, path in walk:
            up = self.projection(node)
            if up is not None:
                if found is not None and found[0].node is not up.node:
                    return None
                found = found or (up, path)
                continue
            if node.op != "call_function" or op_name(node) not in FACTOR_CHAIN_OPS:
                return None
            inputs = [i for i in tensor_inputs(node) if 0 not in shape(i)
                      and param_root(i, self.params) is None and i.op != "get_attr"]
            full = [i for i in inputs if numel(i) >= numel(node)]
            if len(full) > 1:
                return None  # a residual add or a gate: two streams meet
            # The widest input last, so it is walked first: its path is the data path.
            walk.push((i, (*path, i)) for i in sorted(inputs, key=numel))
        return None if walk.cut else found


class _Walk:
    """One walk back from a core operand, memoised per (node, head-dim axis)."""

    def __init__(self, walker: SourceWalker, operand: fx.Node) -> None:
        self.w = walker
        self.operand = operand
        self.memo: dict[tuple[fx.Node, int | None], tuple[_Part, ...]] = {}
        self.visits = 0

    def parts(self, node: fx.Node, axis: int | None, depth: int) -> tuple[_Part, ...]:
        key = (node, axis)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = ()
        if self.visits >= _MAX_VISITS or depth >= _MAX_DEPTH:
            return ()
        self.visits += 1
        result = self._compute(node, axis, depth)
        self.memo[key] = result
        return result

    def _child(
        self, node: fx.Node, child: fx.Node, axis: int | None, depth: int, dim: int = 0
    ) -> tuple[_Part, ...]:
        sub = self.parts(child, backward_axis(node, child, axis), depth + 1)
        return tuple((p, (node, *path), d or dim, s) for p, path, d, s in sub)

    def _compute(self, node: fx.Node, axis: int | None, depth: int) -> tuple[_Part, ...]:
        proj = self.w.projection(node)
        below = position_map(proj, axis, self.w.projection) if proj is not None else None
        if proj is not None and below is not None:
            deeper = self._child(node, proj.activation, axis, depth)
            if deeper and all(below(p[0]) for p in deeper):
                return deeper  # the feature projection the positions map reads
        if proj is not None:
            return ((proj, (node,), 0, 0),)
        if node.op == "placeholder" or is_barrier(node):
            return ()
        if is_activation_matmul(node, self.w.params) and node is not self.operand:
            return ()
        name = op_name(node)
        if name in FRESH_OPS:
            return self._written(node, axis, depth)
        inputs = [i for i in tensor_inputs(node)
                  if param_root(i, self.w.params) is None and i.op != "get_attr"]
        if name == "stack":
            stacked = self._stacked(node, inputs, axis, depth)
            if stacked:
                return stacked
        if name == "cat" and axis is not None and _cat_dim(node) == axis:
            joined: list[_Part] = []
            for child in inputs:
                size = shape(child)[axis] if len(shape(child)) > axis else 0
                if size:  # an empty part (a zero-width pass-through slice) adds nothing
                    joined.extend(self._child(node, child, axis, depth, size))
            return tuple(joined)
        if name == "cat":
            streams = self._streams(node, inputs, axis, depth)
            if streams:
                return streams
        best: tuple[_Part, ...] = ()
        for child in inputs:
            sub = self._child(node, child, axis, depth)
            if sub and (not best or _rank(sub) > _rank(best)):
                best = sub
        return best

    def _streams(
        self, node: fx.Node, inputs: list[fx.Node], axis: int | None, depth: int
    ) -> tuple[_Part, ...]:
        """Joint attention: a join along the sequence of streams from distinct projections.

        Each joined part reads projection weights no other part reads; a cache update
        (past keys, with no projection, joined to new ones) has one projected part, and one
        weight run on two inputs (keys of local blocks beside keys of global summaries) is
        one projection read twice: neither is a join of streams.
        """
        branches = [b for b in (self._child(node, c, axis, depth) for c in inputs) if b]
        owners = [frozenset(p[0].weight for p in branch) for branch in branches]
        if len(branches) < 2 or len(frozenset().union(*owners)) != sum(map(len, owners)):
            return ()
        return tuple((p, path, d, s or index) for index, branch in enumerate(branches, 1)
                     for p, path, d, s in branch)

    def _stacked(
        self, node: fx.Node, inputs: list[fx.Node], axis: int | None, depth: int
    ) -> tuple[_Part, ...]:
        """Per-head modules: stacked branches that each carry a slice of one projection.

        Joined only when every branch reads the same projection (one head each);
        a stack of different projections (K and V into one cache) keeps one branch.
        """
        branches = [self._child(node, child, axis, depth) for child in dict.fromkeys(inputs)]
        owners = {frozenset(p[0].node for p in branch) for branch in branches}
        if len(branches) < 2 or len(owners) != 1 or not next(iter(owners)):
            return ()
        return tuple(part for branch in branches for part in branch)

    def _written(self, buffer: fx.Node, axis: int | None, depth: int) -> tuple[_Part, ...]:
        """Parts of a fresh buffer filled by ``copy_`` into its slices (a cat written in place)."""
        joined: list[_Part] = []
        best: tuple[_Part, ...] = ()
        for view, value in in_place_writes(buffer):
            size = shape(view)
            whole = shape(buffer)
            if 0 in size:
                continue  # an empty write (a zero-width rope part) fills nothing
            split = [a for a in range(len(size)) if len(size) == len(whole) and size[a] != whole[a]]
            sub = self.parts(value, axis, depth + 1)
            sub = tuple((p, (buffer, *path), d, s) for p, path, d, s in sub)
            if axis is not None and split == [axis]:
                joined.extend((p, path, d or size[axis], s) for p, path, d, s in sub)
            elif sub and (not best or _rank(sub) > _rank(best)):
                best = sub
        return tuple(joined) or best


def _over_tokens(path: tuple[fx.Node, ...], proj: ProjectionOp, axis: int | None) -> bool:
    """The head-dim ``axis`` of ``path[0]`` is, at the projection (``path[-1]``), one of its
    token axes: the projection's features reach the operand on another axis."""
    for node, child in pairwise(path):
        axis = backward_axis(node, child, axis)
    return axis is not None and len(shape(proj.node)) >= 2 and along_sequence(proj, axis)


def _first(item: tuple[fx.Node, object]) -> fx.Node:
    """The node of a (node, path) walk item."""
    return item[0]


def _cuts(path: tuple[fx.Node, ...], proj: ProjectionOp) -> frozenset[fx.Node]:
    found = carried(list(path), proj.feature_axes)
    return found[1] if found is not None else frozenset()


def _cat_dim(node: fx.Node) -> int | None:
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    rank = len(shape(node))
    return dim % rank if isinstance(dim, int) and rank else None


def _added_bias(path: list[fx.Node], params: dict[str, str], proj: ProjectionOp) -> int:
    """Elements of parameters added along the path: biases applied after a fused split.

    The projection's own bias add (``proj.node``, already in its bias count) is skipped,
    and so is a vector only this read of the projection sees (a score bias)."""
    total = 0
    for index, node in enumerate(path):
        if op_name(node) != "add" or node is proj.node:
            continue
        if index + 1 < len(path) and position_vector(node, path[index + 1], params):
            continue
        for operand in node.args:
            if isinstance(operand, fx.Node) and operand not in path and param_root(operand, params):
                total += numel(operand)
    return total


def _numel_width(operand: fx.Node, path: list[fx.Node], rows: int) -> int:
    """Per-token features of ``operand`` before any head repetition, from element counts."""
    expansion = 1.0
    for node in path:
        if op_name(node) in EXPAND_OPS and node.args and isinstance(node.args[0], fx.Node):
            before = numel(node.args[0])
            if before:
                expansion *= numel(node) / before
    if not rows:
        return 0
    return round(numel(operand) / expansion / rows)
