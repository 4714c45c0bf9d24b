"""Projections the forward computes and never reads: their values reach no model output."""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import param_root, tensor_inputs
from mhaudit.trace.ops import FRESH_OPS, PROJECTION_OPS, SIZE_OPS, op_name
from mhaudit.trace.traced import TracedGraph


def value_inputs(node: fx.Node) -> list[fx.Node]:
    """The inputs whose values ``node`` reads: a fresh buffer shaped like its input
    (``zeros_like``) and a size query read only the shape."""
    name = op_name(node)
    if name in FRESH_OPS or name in SIZE_OPS:
        return []
    return list(node.all_input_nodes)


def _writes_in_place(node: fx.Node) -> bool:
    """``aten.copy_``, ``aten.add_.Tensor``, ``setitem``: an op that writes into its input."""
    if node.op != "call_function":
        return False
    parts = str(node.target).split(".")
    name = parts[1] if parts[0] == "aten" and len(parts) > 1 else parts[-1]
    return (name.endswith("_") and not name.endswith("__")) or "setitem" in name


def _live(graph: fx.Graph) -> set[fx.Node]:
    """Nodes whose values reach an output or an in-place write (a cache update)."""
    roots = [n for n in graph.nodes if n.op == "output" or _writes_in_place(n)]
    live: set[fx.Node] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in live:
            continue
        live.add(node)
        stack.extend(value_inputs(node))
    return live


def unread_projections(traced: TracedGraph) -> tuple[str, ...]:
    """Modules whose projections (a matmul or 1×1 conv with a parameter) produce values no
    output reads, sorted: an attention path that returns a constant shaped like its query
    (MRA without its CUDA kernel returns ``zeros_like(query)``) leaves its Q, K and V
    projections computed and unread. Their FLOPs still count; no block is made of them."""
    live = _live(traced.graph)
    found = {
        traced.module_path(node) for node in traced.graph.nodes
        if op_name(node) in PROJECTION_OPS and node not in live
        and any(param_root(i, traced.params) for i in tensor_inputs(node))
    }
    return tuple(sorted(found))
