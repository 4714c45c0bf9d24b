"""Recognise projections (an activation times a weight) and walk from a core back to them."""

from __future__ import annotations

from dataclasses import dataclass

from torch import fx

from mhaudit.cores import is_activation_matmul
from mhaudit.graphs import (
    EXPAND_OPS,
    NORM_OPS,
    PROJECTION_OPS,
    SDPA_OPS,
    SOFTMAX_OPS,
    VIEW_OPS,
    numel,
    op_name,
    param_root,
    shape,
    tensor_inputs,
    val,
)

_MAX_VISITS = 400


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

    @property
    def in_width(self) -> int:
        """Input features: weight elements per output feature."""
        return self.weight_numel // self.out_width if self.out_width else 0

    @property
    def rows(self) -> int:
        """Token rows the projection processes."""
        dims = shape(self.node)
        return numel(self.node) // dims[-1] if dims and dims[-1] else 0


def as_projection(node: fx.Node, params: dict[str, str]) -> ProjectionOp | None:
    """The projection computed at ``node``, or None."""
    name = op_name(node)
    if name not in PROJECTION_OPS or val(node) is None:
        return None
    bias: object = None
    if name == "linear":
        x, w = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    elif name == "addmm":
        bias, x, w = node.args[0], node.args[1], node.args[2]
    elif name == "einsum":
        operands = node.args[1]
        if not isinstance(operands, (list, tuple)) or len(operands) != 2:
            return None
        x, w = operands
        if param_root(x, params) is not None:
            x, w = w, x
    else:
        x, w = node.args[0], node.args[1]
    if not isinstance(x, fx.Node) or not isinstance(w, fx.Node):
        return None
    weight = param_root(w, params)
    if weight is None or param_root(x, params) is not None or val(x) is None:
        return None
    out_width = shape(node)[-1]
    bias_name = param_root(bias, params) if isinstance(bias, fx.Node) else None
    bias_numel = numel(bias) if bias_name else 0
    result = node
    if bias_name is None and len(node.users) == 1:
        user = next(iter(node.users))
        other = [a for a in user.args if isinstance(a, fx.Node) and a is not node]
        if op_name(user) == "add" and other and param_root(other[0], params):
            bias_name = param_root(other[0], params)
            bias_numel = numel(other[0])
            result = user
    return ProjectionOp(result, x, weight, bias_name, numel(w), bias_numel, out_width, node)


@dataclass(frozen=True)
class Source:
    """Where a core operand comes from: a projection (or a raw input) and its share."""

    projection: ProjectionOp | None
    root: fx.Node
    """The projection output, or the input tensor when there is no projection."""
    width: int
    """Features per token this operand uses from the source (h·d_k of a fused QKV slice)."""
    extra_bias: int = 0
    """Bias elements added on the way from the projection (a bias added after a split)."""


_BARRIERS = SDPA_OPS | SOFTMAX_OPS | NORM_OPS


def _is_barrier(node: fx.Node) -> bool:
    """Ops a walk back to the projections must not cross.

    Norms over the residual stream sit before the projections; a norm over the last
    dim of a (B, n, h, d_k)-shaped tensor normalises each head after them (QK-norm).
    """
    name = op_name(node)
    if name not in _BARRIERS:
        return False
    if name in NORM_OPS and node.args and isinstance(node.args[0], fx.Node):
        return len(shape(node.args[0])) < 4
    return True


def trace_source(
    operand: fx.Node,
    params: dict[str, str],
    cache: dict[fx.Node, ProjectionOp | None],
    user_inputs: frozenset[str] = frozenset(),
) -> Source:
    """Walk back from a core operand to its projection through views, splits, rotary, repeats.

    Without a projection the source is the deepest user input the operand derives from.
    """
    best: tuple[int, int, ProjectionOp, list[fx.Node]] | None = None
    fallback: list[fx.Node] = [operand]
    stack: list[tuple[fx.Node, list[fx.Node]]] = [(operand, [operand])]
    visited: set[fx.Node] = set()
    while stack and len(visited) < _MAX_VISITS:
        node, path = stack.pop()
        if node in visited:
            continue
        visited.add(node)
        if node not in cache:
            cache[node] = as_projection(node, params)
        proj = cache[node]
        if proj is not None:
            rank = (numel(node), -len(path))
            if best is None or rank > best[:2]:
                best = (rank[0], rank[1], proj, path)
            continue
        if node.op == "placeholder" or _is_barrier(node):
            if node.name in user_inputs and len(path) > len(fallback):
                fallback = path
            continue
        if is_activation_matmul(node, params) and node is not operand:
            continue
        inputs = [i for i in tensor_inputs(node) if param_root(i, params) is None]
        for child in reversed(inputs):
            if child.op != "get_attr":
                stack.append((child, [*path, child]))
    if best is not None:
        proj, path = best[2], best[3]
        return Source(proj, proj.node, _width(operand, path, proj.rows), _added_bias(path, params))
    root = fallback[-1]
    dims = shape(root)
    rows = numel(root) // dims[-1] if dims and dims[-1] else 1
    return Source(None, root, _width(operand, fallback, rows))


def _added_bias(path: list[fx.Node], params: dict[str, str]) -> int:
    """Elements of parameters added along the path: biases applied after a fused split."""
    total = 0
    for node in path:
        if op_name(node) != "add":
            continue
        for operand in node.args:
            if isinstance(operand, fx.Node) and operand not in path and param_root(operand, params):
                total += numel(operand)
    return total


def _width(operand: fx.Node, path: list[fx.Node], rows: int) -> int:
    """Per-token features of ``operand`` before any head repetition."""
    expansion = 1.0
    for node in path:
        if op_name(node) in EXPAND_OPS and node.args and isinstance(node.args[0], fx.Node):
            before = numel(node.args[0])
            if before:
                expansion *= numel(node) / before
    if not rows:
        return 0
    return round(numel(operand) / expansion / rows)


_OUT_PASSTHROUGH = VIEW_OPS | {"cat", "stack", "mul", "div", "getitem"}


def find_output_projection(
    output: fx.Node, params: dict[str, str], cache: dict[fx.Node, ProjectionOp | None]
) -> ProjectionOp | None:
    """Walk forward from a core's context tensor to the projection that consumes it."""
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
                if proj is not None and proj.activation in seen | {node}:
                    return proj
                if op_name(user) in _OUT_PASSTHROUGH or _in_head_layout_add(user):
                    nxt.append(user)
        if not nxt:
            return None
        frontier = nxt
    return None


def _in_head_layout_add(node: fx.Node) -> bool:
    """An add or subtract on a tensor still split into heads (rank 4 or more).

    The residual stream is (B, n, d); a sum in head layout (context plus a
    convolution of V, say) is still part of the block.
    """
    return op_name(node) in ("add", "sub") and len(shape(node)) >= 4


def canonical_input(node: fx.Node) -> fx.Node:
    """The tensor a projection reads, looking through casts, copies and dropout."""
    current = node
    while op_name(current) in {"to", "_to_copy", "contiguous", "clone", "dropout", "detach",
                               "alias", "view", "reshape", "_unsafe_view"}:
        first = current.args[0] if current.args else None
        if not isinstance(first, fx.Node):
            break
        current = first
    return current
