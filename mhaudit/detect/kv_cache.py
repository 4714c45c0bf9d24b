"""Find what traced code writes to its KV cache: the tensors concatenated onto an empty cache."""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import (
    FRESH_OPS,
    SDPA_OPS,
    SOFTMAX_OPS,
    in_place_writes,
    numel,
    op_name,
    param_root,
)

_MAX_VISITS = 300
_STOP = SDPA_OPS | SOFTMAX_OPS


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
    seen: set[fx.Node] = set()
    stack = list(operands)
    while stack and len(seen) < _MAX_VISITS:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if _is_cache_write(node):
            writes.add(node)
            continue
        name = op_name(node)
        if node.op != "call_function" or name in _STOP:
            continue
        if name in FRESH_OPS:  # a buffer filled in place: its contents are what was copied in
            stack.extend(source for _, source in in_place_writes(node))
            continue
        stack.extend(i for i in node.all_input_nodes if param_root(i, params) is None)
    if not writes or not positions:
        return None
    return sum(numel(w) for w in writes) // positions
