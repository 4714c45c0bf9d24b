"""Recognise projections (an activation times a weight) and walk forward from a core to O."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

from torch import fx

from mhaudit.detect.sources.ranges import (
    Range,
    bias_ranges,
    joined_parameter,
    overlap,
    picked_bias,
)
from mhaudit.trace.einsum import EinsumError, expand_einsum
from mhaudit.trace.graphs import arg, numel, param_root, shape, val
from mhaudit.trace.ops import (
    CONTEXT_PASS_OPS,
    EXPAND_OPS,
    HEAD_LAYOUT_OPS,
    INPUT_PASS_OPS,
    PLAIN_RESHAPE_OPS,
    POINTWISE_CONV_OPS,
    PROJECTION_OPS,
    WEIGHT_ARG_OPS,
    op_name,
)
from mhaudit.trace.walks import chain


@dataclass(frozen=True)
class ProjectionOp:
    """One matmul of an activation with a weight parameter."""

    node: fx.Node
    """The op producing the projection output (the bias add, when separate)."""
    activation: fx.Node
    weight: str
    """Placeholder name of the weight."""
    bias: str | None
    weight_numel: int
    """Elements of the weight slice this op uses."""
    bias_numel: int
    out_width: int
    matmul: fx.Node
    """The matmul-like op itself (``node`` is its bias add when the bias is separate)."""
    bias_ranges: tuple[Range, ...] = ()
    """Output features with a learned bias when the bias is a ``cat`` of learned and
    constant parts; empty when the bias (if any) covers every feature."""

    feature_axes: tuple[int, ...] = ()
    """Output axes holding the projected features when there are several (an einsum with a
    (d_model, h, d_k) weight gives (…, h, …, d_k)); empty for the last axis alone."""
    groups: int = 1
    """Groups of a grouped 1×1 convolution: each output feature reads in_width / groups
    input features."""
    taps: int = 1
    """Kernel positions of a convolution (1 for a linear map of each position's features)."""

    def bias_of(self, span: Range | None, width: int) -> int:
        """Bias elements of the ``width`` features a role reads (``span``, when it names
        them; a wider span says only where they lie, and the share is proportional)."""
        if self.bias_ranges and span is not None and span[1] - span[0] == width:
            return overlap(span, self.bias_ranges)
        return self.bias_numel * width // self.out_width if self.out_width else 0

    @property
    def in_width(self) -> int:
        """Input features: weight elements per output feature, times the groups."""
        per_feature = self.weight_numel * self.groups // self.taps
        return per_feature // self.out_width if self.out_width else 0

    @property
    def rows(self) -> int:
        """Token rows the projection processes."""
        return numel(self.node) // self.out_width if self.out_width else 0


def as_projection(node: fx.Node, params: dict[str, str]) -> ProjectionOp | None:
    """The projection computed at ``node``, or None."""
    name = op_name(node)
    if name not in PROJECTION_OPS or val(node) is None:
        return None
    picked = _operands(node, name, params)
    if picked is None:
        return None
    x, w, bias = picked
    if not isinstance(x, fx.Node) or not isinstance(w, fx.Node):
        return None
    weight = param_root(w, params) or joined_parameter(w, params)
    if weight is None or val(x) is None:
        return None
    if param_root(x, params) is not None and not _learned_input(name, x):
        return None
    out_width, axes = shape(node)[-1], cast(tuple[int, ...], ())
    if name == "einsum":
        found = _einsum_features(node, w)
        if found is None:
            return None
        out_width, axes = found
    elif name in POINTWISE_CONV_OPS:
        out_width, axes = shape(node)[1], (1,)  # (B, C_out, *spatial): channels on axis 1
    bias_name = param_root(bias, params) if isinstance(bias, fx.Node) else None
    bias_numel = numel(bias) if bias_name else 0
    covered: tuple[Range, ...] = ()
    if bias_name is None and isinstance(bias, fx.Node):
        bias_name, covered = bias_ranges(bias, params)
        bias_numel = sum(b - a for a, b in covered)
        if bias_name is None:
            bias_name, bias_numel = picked_bias(bias, params)
    result = node
    if bias_name is None and len(node.users) == 1:
        user, before = next(iter(node.users)), node
        if op_name(user) in PLAIN_RESHAPE_OPS and len(user.users) == 1:
            # A decomposed linear: mm on flattened rows, a view back, then the bias add.
            user, before = next(iter(user.users)), user
        other = [a for a in user.args if isinstance(a, fx.Node) and a is not before]
        # A bias adds one value per output feature: it never broadcasts the output wider
        # (a static kernel added to per-token dynamic kernels is no bias), and a tensor
        # with a value per position (learned queries added back as a residual) is none.
        values = numel(chain(other[0], EXPAND_OPS, 8)[-1]) if other else 0
        if op_name(user) == "add" and values == out_width and param_root(other[0], params) \
                and numel(user) == numel(before):
            bias_name = param_root(other[0], params)
            bias_numel = values
            result = user
    groups = _conv_groups(node) if name in POINTWISE_CONV_OPS else 1
    taps = math.prod(shape(w)[2:]) if name in POINTWISE_CONV_OPS else 1
    return ProjectionOp(result, x, weight, bias_name, numel(w), bias_numel, out_width, node,
                        covered, axes, groups, taps)


def _operands(node: fx.Node, name: str, params: dict[str, str]
              ) -> tuple[object, object, object] | None:
    """The activation, weight and bias arguments of projection op ``name`` at ``node``."""
    if name in ("linear", *POINTWISE_CONV_OPS):
        # By keyword too: ``F.linear(x, weight=w, bias=b)`` (EVA's fused qkv with its bias).
        x, w, bias = arg(node, 0, "input"), arg(node, 1, "weight"), arg(node, 2, "bias")
        if name != "linear" and not _pointwise(node, w):
            return None
        return x, w, bias
    if name == "addmm":
        return node.args[1], node.args[2], node.args[0]
    if name == "einsum":
        operands = node.args[1]
        if not isinstance(operands, (list, tuple)) or len(operands) != 2:
            return None
        x, w = operands
        return (w, x, None) if param_root(x, params) is not None else (x, w, None)
    return node.args[0], node.args[1], None


def _pointwise(node: fx.Node, weight: object) -> bool:
    """A convolution that applies its weight at each position alone: every kernel size 1,
    no padding, not transposed (a 1×1 convolution is a linear map of the channels; with a
    stride it maps the positions it keeps, as halo attention's strided query conv does)."""
    if not isinstance(weight, fx.Node) or len(shape(weight)) < 3:
        return False
    if any(k != 1 for k in shape(weight)[2:]):
        return _local(node, weight)
    transposed = op_name(node) == "convolution" and bool(arg(node, 6, "transposed", False))
    return _all(arg(node, 4, "padding", 0), 0) and not transposed


def _local(node: fx.Node, weight: fx.Node) -> bool:
    """A 1-d convolution over all the channels that keeps every position (stride 1, not
    transposed): a projection that reads a few neighbours (K/V from a kernel-3 conv of a
    channels-first memory); its weight is out·in·k."""
    transposed = op_name(node) == "convolution" and bool(arg(node, 6, "transposed", False))
    return (len(shape(weight)) == 3 and _all(arg(node, 3, "stride", 1), 1)
            and _conv_groups(node) == 1 and not transposed)


def _conv_groups(node: fx.Node) -> int:
    """``groups`` of ``conv1d/2d/3d(x, w, b, stride, padding, dilation, groups)`` or of
    ``convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups)``."""
    value = arg(node, 8 if op_name(node) == "convolution" else 6, "groups", 1)
    return value if isinstance(value, int) else 1


def _all(value: object, want: int) -> bool:
    values = value if isinstance(value, (list, tuple)) else [value]
    return all(v == want for v in values)


def _einsum_features(node: fx.Node, weight: fx.Node) -> tuple[int, tuple[int, ...]] | None:
    """Projected features of an einsum with a weight: their count and output axes.

    They are the weight's letters kept in the output and absent from the activation
    (``bnd,dhk->bhnk``: h·k features on axes 1 and 3).
    """
    operands = node.args[1]
    assert isinstance(operands, (list, tuple))
    try:
        inputs, output, sizes = expand_einsum(str(node.args[0]),
                                              [shape(o) for o in operands])
    except EinsumError:
        return None
    if "->" not in str(node.args[0]) or len(inputs) != 2 \
            or not (set(inputs[0]) | set(inputs[1])) - set(output):
        return None  # none summed: a broadcast scale (GAU's per-dim offsets of q, k), no map
    w_term = inputs[list(operands).index(weight)]
    x_term = inputs[1 - list(operands).index(weight)]
    letters = [c for c in output if c in w_term and c not in x_term]
    if not letters:
        return None
    width = math.prod(sizes[c] for c in letters)
    axes = tuple(output.index(c) for c in letters)
    return width, () if axes == (len(output) - 1,) else axes


def per_head(proj: ProjectionOp) -> bool:
    """An einsum whose weight shares a letter with its activation and its output: one
    matrix per head of an input already split into heads (latent attention's absorbed
    W_UK folded into the query, its W_UV applied to the context), not a map of the model's
    features to heads."""
    node = proj.matmul
    operands = node.args[1] if op_name(node) == "einsum" and len(node.args) > 1 else None
    if not isinstance(operands, (list, tuple)) or len(operands) != 2:
        return False
    try:
        inputs, output, _ = expand_einsum(str(node.args[0]), [shape(o) for o in operands])
    except EinsumError:
        return False
    if len(inputs) != 2 or proj.activation not in operands:
        return False
    x_index = list(operands).index(proj.activation)
    return any(c in inputs[x_index] and c in output for c in inputs[1 - x_index])


def _learned_input(name: str, x: fx.Node) -> bool:
    """A projection of a learned parameter (Perceiver's latent queries, a learned query).

    Only ops whose arguments fix which operand is the weight (``linear``, ``addmm``),
    and only a parameter broadcast over a batch (its value has more axes than a matrix
    or was expanded), so two weights multiplied together are never read as one.
    """
    return name in WEIGHT_ARG_OPS and (len(shape(x)) >= 3 or op_name(x) in EXPAND_OPS)


def projections_after(
    output: fx.Node, params: dict[str, str], cache: dict[fx.Node, ProjectionOp | None],
    follow: Callable[[fx.Node], bool], through: Callable[[ProjectionOp], bool] | None = None,
) -> Iterator[ProjectionOp]:
    """Projections that read a tensor reached forward from ``output`` through ops that
    ``follow`` accepts (and projections ``through`` accepts), nearest first (at most 16
    ops deep)."""
    frontier = [output]
    seen = {output}
    for _ in range(16):
        nxt: list[fx.Node] = []
        for node in frontier:
            for user in node.users:
                if user in seen:
                    continue
                seen.add(user)
                if user not in cache:
                    cache[user] = as_projection(user, params)
                proj = cache[user]
                if proj is not None and through is not None and through(proj):
                    nxt.append(proj.node)
                    seen.add(proj.node)
                elif proj is not None and proj.activation in seen:
                    yield proj
                elif follow(user):
                    nxt.append(user)
        if not nxt:
            return
        frontier = nxt


def find_output_projection(
    output: fx.Node, params: dict[str, str], cache: dict[fx.Node, ProjectionOp | None]
) -> ProjectionOp | None:
    """Walk forward from a core's context tensor to the projection that consumes it."""
    def follow(user: fx.Node) -> bool:
        return op_name(user) in CONTEXT_PASS_OPS or _in_head_layout_add(user) or _token_pool(user)

    # A per-head map of the context (absorbed W_UV) is on the way to O, not O.
    return next((p for p in projections_after(output, params, cache, follow, per_head)), None)


def _token_pool(node: fx.Node) -> bool:
    """A mean or max over positions that keeps the feature axis (an attention-pooling
    head averages its query tokens before the output projection)."""
    if op_name(node) not in {"mean", "amax"} or not node.args:
        return False
    before, dims = shape(node.args[0]), arg(node, 1, "dim")
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    rank = len(before)
    return bool(rank and dims) and all(
        isinstance(d, int) and d % rank != rank - 1 for d in dims)


def _in_head_layout_add(node: fx.Node) -> bool:
    """An add, subtract or norm on a tensor still split into heads (rank 4 or more).

    The residual stream is (B, n, d); a sum in head layout (context plus a
    convolution of V, say, or two maps' difference) and a per-head norm of the
    context are still part of the block.
    """
    return (op_name(node) in HEAD_LAYOUT_OPS and len(shape(node)) >= 4) or _group_norm(node)


def _group_norm(node: fx.Node) -> bool:
    """A group norm of several groups: each group of features (each head of a merged
    context, as retention's per-head GroupNorm) is normalised apart, inside the block."""
    name = op_name(node)
    groups = arg(node, 6, "group") if name == "native_group_norm" else (
        arg(node, 1, "num_groups") if name == "group_norm" else None)
    return isinstance(groups, int) and groups > 1


def canonical_input(node: fx.Node) -> fx.Node:
    """The tensor a projection reads, looking through casts, copies and dropout."""
    return chain(node, INPUT_PASS_OPS, len(node.graph.nodes))[-1]  # no chain is longer
