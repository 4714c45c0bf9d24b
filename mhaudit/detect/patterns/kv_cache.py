"""KV-cache semantics from the graph: what the code writes to its cache, and the latent of
latent attention."""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import in_place_writes, numel, param_root, shape, val
from mhaudit.trace.ops import (
    CORE_OPS,
    EMBEDDING_OPS,
    FRESH_OPS,
    PROJECTION_OPS,
    RESIDUAL_OPS,
    op_name,
)
from mhaudit.trace.walks import Walk

_MAX_VISITS = 300


def _is_cache_write(node: fx.Node) -> bool:
    """A ``cat`` with an empty operand: a cache's update on the first forward."""
    if op_name(node) != "cat" or not node.args or not isinstance(node.args[0], (list, tuple)):
        return False
    parts = [p for p in node.args[0] if isinstance(p, fx.Node)]
    return len(parts) >= 2 and any(numel(p) == 0 for p in parts)


def cached_elements_per_position(
    operands: tuple[fx.Node, ...], params: dict[str, str], positions: int
) -> int | None:
    """Elements the code caches per key/value position for these core operands.

    Walks back from K and V to the cache writes nearest to them (the cache may hold
    K and V themselves, or a compressed latent they are expanded from); ``positions``
    is batch × n_kv. None when the graph writes no cache (the model ran without one).
    The walk stops at other attention cores, so it never reaches an earlier layer's
    cache.
    """
    writes: set[fx.Node] = set()
    walk = Walk(operands, _MAX_VISITS)
    for node in walk:
        if _is_cache_write(node):
            writes.add(node)
            continue
        name = op_name(node)
        if node.op != "call_function" or name in CORE_OPS:
            continue
        if name in FRESH_OPS:  # a buffer filled in place: its contents are what was copied in
            walk.push(source for _, source in in_place_writes(node))
            continue
        walk.push(i for i in node.all_input_nodes if param_root(i, params) is None)
    if not writes or not positions:
        return None
    return sum(numel(w) for w in writes) // positions


def _activation_inputs(node: fx.Node, params: dict[str, str]) -> list[fx.Node]:
    return [i for i in node.all_input_nodes if param_root(i, params) is None]


def _is_projection(node: fx.Node, params: dict[str, str]) -> bool:
    """A matmul-family op that reads a parameter weight."""
    return op_name(node) in PROJECTION_OPS and any(
        param_root(i, params) is not None for i in node.all_input_nodes
    )


def _projections_behind(
    starts: list[fx.Node], params: dict[str, str], through_residuals: bool
) -> tuple[set[fx.Node], bool]:
    """The parameter projections nearest behind ``starts``, and whether the walk met a
    residual (an add, sub or cat of two activations) before reaching one."""
    found: set[fx.Node] = set()
    walk, blocked = Walk(starts, _MAX_VISITS), False
    for node in walk:
        if _is_projection(node, params):
            found.add(node)
            continue
        name = op_name(node)
        if node.op != "call_function" or name in CORE_OPS or name in EMBEDDING_OPS:
            continue
        if name in FRESH_OPS:  # a buffer filled in place: its contents are what was copied in
            walk.push(source for _, source in in_place_writes(node))
            continue
        inputs = [i for i in _activation_inputs(node, params) if numel(i) or val(i) is None]
        if not through_residuals and name in RESIDUAL_OPS and len(inputs) >= 2:
            blocked = True
            continue
        walk.push(inputs)
    return found, blocked


def latent_elements_per_position(
    operands: tuple[fx.Node, ...], params: dict[str, str], positions: int,
    query: fx.Node | None = None,
) -> int | None:
    """Elements per position of the latent K and V are expanded from, if they are.

    Walks back from K and V to the projections that make them. A projection that
    widens its input (an up-projection) and reads, through norms, splits and views
    only (no residual add), the output of another projection stands for that
    down-projection's output: multi-head latent attention caches the down-projection
    (kv_lora_rank + the decoupled rope key, which reads it directly). None when K and
    V come from projections of the residual stream (nothing latent to cache), or from the
    projection that makes ``query`` too (a fused QKV widens its input threefold, and in a
    first layer reads an embedding's projection through a norm: nothing is cached
    compressed there).
    """
    first, _ = _projections_behind(list(operands), params, through_residuals=True)
    if not first or not positions:
        return None
    if query is not None and first & _projections_behind([query], params,
                                                         through_residuals=True)[0]:
        return None
    frontier: set[fx.Node] = set()
    for projection in first:
        widens = tokens_width(projection.all_input_nodes, params) < numel(projection) // positions
        downs, blocked = _projections_behind(
            _activation_inputs(projection, params), params, through_residuals=False
        )
        frontier |= downs if widens and downs and not blocked else {projection}
    if frontier == first:
        return None
    return sum(numel(p) for p in frontier) // positions


def tokens_width(inputs: list[fx.Node], params: dict[str, str]) -> int:
    """Feature width (last dim) of the activation a projection reads."""
    for node in inputs:
        if param_root(node, params) is None:
            dims = shape(node)
            return dims[-1] if dims else 0
    return 0
