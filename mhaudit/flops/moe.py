"""Routed experts from the graph: stacked expert weights read per dispatched token copy
(grouped GEMMs, or rows gathered by the router's choices for a batched matmul), their
router, top-k and expert count."""

from __future__ import annotations

import math
from collections.abc import Callable

from torch import fx

from mhaudit.data import ExpertLayer
from mhaudit.trace.graphs import innermost_module, op_name, param_root, shape, val

GROUPED_MM_OPS = frozenset({"_grouped_mm", "grouped_mm_fallback"})
"""Ops that run each dispatched token copy through one expert of a stacked weight."""


def _common_prefix(a: str, b: str) -> int:
    """Number of leading dotted components two module paths share."""
    count = 0
    for x, y in zip(a.split("."), b.split("."), strict=False):
        if x != y:
            break
        count += 1
    return count


def _router(experts_path: str, num_experts: int, topks: list[fx.Node]) -> fx.Node | None:
    """The top-k over ``num_experts`` scores nearest to the experts in the module tree."""
    fits = [t for t in topks if shape(t.args[0])[-1:] == (num_experts,)]
    if not fits:
        return None
    return max(fits, key=lambda t: _common_prefix(innermost_module(t), experts_path))


_INDEX_VIEWS = frozenset({"view", "reshape", "_unsafe_view", "flatten", "contiguous", "clone",
                          "to", "_to_copy", "alias"})


def _chosen_by(index: object, topks: list[fx.Node]) -> fx.Node | None:
    """The ``topk`` whose indices ``index`` is (through getitem and views): the router."""
    node = index
    for _ in range(8):
        if not isinstance(node, fx.Node):
            return None
        if node in topks:
            return node
        if op_name(node) not in _INDEX_VIEWS | {"getitem"} or not node.args:
            return None
        node = node.args[0]
    return None


_SELECTION_OPS = _INDEX_VIEWS | frozenset({"getitem", "sort", "histc", "cumsum", "bincount"})


def _selection(offsets: object) -> fx.Node | None:
    """The (tokens, k) expert ids a grouped GEMM's group offsets count, whatever chose
    them (a top-k, or a sampled selection such as PhiMoE's sparsemixer): the offsets are
    a cumulative histogram of the sorted, flattened ids."""
    node = offsets
    for _ in range(12):
        if not isinstance(node, fx.Node):
            return None
        value = val(node)
        if value is not None and value.dim() >= 2 and not value.is_floating_point():
            return node
        if op_name(node) not in _SELECTION_OPS or not node.args:
            return None
        node = node.args[0]
    return None


_MATMULS = frozenset({"linear", "mm", "addmm", "matmul", "bmm"})
"""Ops a loop over experts runs one expert's weight slice through."""


def _expert_read(node: fx.Node, params: dict[str, str], topks: list[fx.Node]
                 ) -> tuple[fx.Node, int, fx.Node | None] | None:
    """(stacked weight operand, dispatched token copies, router) when ``node`` reads a
    (E, k, n) parameter per token copy: a grouped GEMM over it, rows of it gathered by
    expert ids (``weight[ids]``, as a batched matmul then uses them), or one expert's
    slice a loop over the chosen experts multiplies by (token copies 0: the router's)."""
    name = op_name(node)
    if name in GROUPED_MM_OPS and len(node.args) >= 2:
        rows = shape(node.args[0])[0] if shape(node.args[0]) else 0
        return node.args[1], rows, None  # type: ignore[return-value]
    if name == "index" and len(node.args) >= 2 and isinstance(node.args[1], (list, tuple)) \
            and len(node.args[1]) == 1 and isinstance(node.args[1][0], fx.Node) \
            and param_root(node.args[0], params) is not None:
        ids = node.args[1][0]
        if any(op_name(u) in ("bmm", "matmul", "baddbmm") for u in node.users):
            return node.args[0], math.prod(shape(ids)), _chosen_by(ids, topks)  # type: ignore[return-value]
    if name == "select" and len(node.args) >= 2 and node.args[1] == 0 \
            and param_root(node.args[0], params) is not None \
            and any(op_name(u) in _MATMULS for u in node.users):
        return node.args[0], 0, None  # type: ignore[return-value]  # one expert of a loop
    return None


def _routed_tokens(router: fx.Node | None) -> int:
    """Token copies a top-k router dispatches: k per row of its scores."""
    if router is None or op_name(router) != "topk" or not isinstance(router.args[1], int):
        return 0
    return math.prod(shape(router.args[0])[:-1]) * router.args[1]


def routed_experts(
    graph: fx.Graph,
    params: dict[str, str],
    path_of: Callable[[fx.Node], str],
) -> tuple[ExpertLayer, ...]:
    """One :class:`ExpertLayer` per module whose matmuls read stacked expert weights.

    A grouped GEMM's second operand is a (E, k, n) parameter (through transposes and
    casts); its first has one row per dispatched token copy, tokens · top-k. top-k is
    read from the ``topk`` over E router scores nearest to the experts in the module
    tree, so tokens = rows / top-k. Rows gathered for a batched matmul and one expert's
    slice per iteration of a loop over the chosen experts are read the same way (the
    loop's tokens are the router's rows). ``path_of`` maps a node to its module path
    without the tracing wrapper. Expert FLOPs themselves come from the grouped-mm
    formula, the batched matmul's or the loop's own matmuls.
    """
    topks = [n for n in graph.nodes if op_name(n) == "topk"]
    found: dict[str, ExpertLayer] = {}
    for node in graph.nodes:
        read = _expert_read(node, params, topks)
        if read is None:
            continue
        operand, rows, router = read
        root = param_root(operand, params)
        weight = val(operand)
        if root is None or weight is None or weight.dim() != 3:
            continue
        qualified = params[root]
        module = qualified.rpartition(".")[0]
        num_experts = int(weight.shape[0])
        router = router or _router(innermost_module(node), num_experts, topks)
        k_arg = router.args[1] if router is not None and len(router.args) > 1 else 0
        top_k = k_arg if isinstance(k_arg, int) else 0
        chosen = _selection(node.args[2]) if not top_k and len(node.args) > 2 else None
        if chosen is not None:  # no top-k: as many experts per token as ids per row
            top_k, router = shape(chosen)[-1], chosen
        if not rows and not top_k:
            continue  # a slice of a stacked weight with no router over its E: not experts
        previous = found.get(module)
        weights = (*(previous.weights if previous else ()), qualified)
        found[module] = ExpertLayer(
            module=module,
            router=path_of(router) if router is not None else "",
            num_experts=num_experts,
            top_k=top_k,
            tokens=(rows or _routed_tokens(router)) // top_k if top_k else 0,
            weights=tuple(dict.fromkeys(weights)),
        )
    return tuple(found.values())


def inactive_fraction(layer: ExpertLayer) -> float:
    """Share of an expert tensor one token does not touch: (E − k) / E."""
    if not layer.num_experts or not layer.top_k:
        return 0.0
    return (layer.num_experts - layer.top_k) / layer.num_experts


def expert_tensor_numel(shapes: dict[str, tuple[int, ...]], layer: ExpertLayer) -> int:
    """Elements of every tensor of the experts module with a leading dim of E (weights, biases)."""
    prefix = layer.module + "."
    return sum(
        math.prod(s) for name, s in shapes.items()
        if name.startswith(prefix) and "." not in name[len(prefix):]
        and s[:1] == (layer.num_experts,)
    )
