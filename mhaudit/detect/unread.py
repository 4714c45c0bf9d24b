"""Ops that can be an attention core but are in no reported block, each with why.

A candidate is an attention call (SDPA, flex_attention) or a normalisation over a product
of two activations: softmax, log-softmax, logsumexp, or ``exp`` whose output is summed (a
softmax written by hand), or summed into the targets of an index (a scatter softmax over a
graph's edges). One inside the span of a block's core (from its Q, K, V to its
context) is read; every other is listed in ``coverage.unread_cores``, so that a model with
attention and no block says why.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import fx

from mhaudit.data import UnreadCore
from mhaudit.detect.composed import composed_map
from mhaudit.detect.cores import Core
from mhaudit.detect.operands import is_activation_matmul
from mhaudit.trace.export import TracedGraph
from mhaudit.trace.flex import FLEX_OP
from mhaudit.trace.graphs import arg, param_root, shape, tensor_inputs
from mhaudit.trace.ops import (
    LOG_NORMALISE_OPS,
    PROJECTION_OPS,
    SCATTER_SUM_OPS,
    SDPA_OPS,
    SOFTMAX_OPS,
    op_name,
)

CALL_OPS = SDPA_OPS | {FLEX_OP}
"""Ops that are attention whatever their inputs."""
NORMALISING_OPS = SOFTMAX_OPS | LOG_NORMALISE_OPS
"""Ops that are an attention core when they normalise a product of two activations."""
PRODUCT_DEPTH = 10
"""Ops walked back from a normalisation to the product it normalises."""
SPAN_NODES = 2000
"""Nodes walked back from a core's context to its Q, K and V."""

_WHY = {
    "call": "an attention call no block was made of: its Q, K, V or output were not read "
            "back to projections",
    "softmax": "a softmax over a product of two activations that detection did not follow "
               "to a product with V (the weights reach V through ops it does not read, or "
               "never do)",
    "by hand": "a softmax written by hand (exp or logsumexp, then a normaliser) over a "
               "product of two activations, which detection does not read as a core",
    "summed": "a softmax over a product of two activations written as a multiply and a "
              "sum (no matmul, as local attention over unfolded keys is), which detection "
              "does not read as scores",
    "composed": "a softmax map multiplied with another softmax map, or with a function of "
                "one (a pseudo-inverse), instead of with V: one of several maps composed "
                "into an approximation of attention (Nyström's landmarks), which no single "
                "block describes",
    "joined": "a softmax over the logits of several score products joined side by side "
              "(cat), whose parts meet V apart (criss-cross attention: a pixel's row and "
              "its column), which detection does not read as one block",
    "scatter": "a softmax written by hand (exp, then a sum scattered by an index: "
               "index_add, scatter_add) over a product of two activations, normalised over "
               "each target's gathered rows (a graph's edges): sparse attention with no "
               "n_q×n_kv score form to read as a block",
}


def unread_cores(traced: TracedGraph, read: Iterable[Core]) -> tuple[UnreadCore, ...]:
    """Every candidate core op outside the span of the ``read`` cores, in graph order."""
    spanned = _spans(read)
    found: list[UnreadCore] = []
    for node in traced.graph.nodes:
        kind = _candidate(node, traced.params)
        if kind is not None and node not in spanned:
            found.append(UnreadCore(traced.module_path(node), op_name(node), _WHY[kind]))
    return tuple(found)


def _candidate(node: fx.Node, params: dict[str, str]) -> str | None:
    """Which kind of candidate ``node`` is (a key of ``_WHY``), or None."""
    name = op_name(node)
    if name in CALL_OPS:
        return "call"
    scattered = name == "exp" and any(op_name(u) in SCATTER_SUM_OPS for u in node.users)
    by_hand = name == "logsumexp" or (
        name == "exp" and any(op_name(u) == "sum" for u in node.users))
    if name not in NORMALISING_OPS and not by_hand and not scattered:
        return None
    product = _normalised_product(node, params)
    if product is None:
        return None
    if scattered:
        return "scatter"
    if name in SOFTMAX_OPS and composed_map(node, params):
        return "composed"
    if name in SOFTMAX_OPS and _joined(node, params):
        return "joined"
    return "by hand" if by_hand else "summed" if product == "summed" else "softmax"


def _normalised_product(node: fx.Node, params: dict[str, str]) -> str | None:
    """``"matmul"`` when an activation product (QKᵀ) feeds ``node`` through ops that are
    not projections, ``"summed"`` when the product is a multiply then a sum (None when
    neither)."""
    frontier, seen = list(tensor_inputs(node)), set()
    for _ in range(PRODUCT_DEPTH):
        nxt: list[fx.Node] = []
        for current in frontier:
            if current in seen:
                continue
            seen.add(current)
            if is_activation_matmul(current, params):
                return "matmul"
            if _summed_product(current, params):
                return "summed"
            if op_name(current) not in PROJECTION_OPS:
                nxt.extend(tensor_inputs(current))
        frontier = nxt
    return None


def _joined(node: fx.Node, params: dict[str, str]) -> bool:
    """The logits ``node`` normalises are a ``cat`` of two or more parts that each come
    from an activation product (a few views or masks back)."""
    frontier = list(tensor_inputs(node))
    for _ in range(PRODUCT_DEPTH):
        cats = [n for n in frontier if op_name(n) == "cat"]
        if cats:
            parts = list(tensor_inputs(cats[0]))
            return sum(is_activation_matmul(p, params) or _normalised_product(p, params)
                       == "matmul" for p in parts) >= 2
        frontier = [i for n in frontier if op_name(n) not in PROJECTION_OPS
                    and not is_activation_matmul(n, params) for i in tensor_inputs(n)]
    return False


def _summed_product(node: fx.Node, params: dict[str, str]) -> bool:
    """``(a * b).sum(dim)`` of two activations that both span the summed axis (a dot
    product written elementwise, not a weighted pooling by a parameter)."""
    product = node.args[0] if node.args else None
    if op_name(node) != "sum" or not isinstance(product, fx.Node) or op_name(product) != "mul":
        return False
    factors = list(tensor_inputs(product))
    dims = arg(node, 1, "dim")
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if len(factors) != 2 or len(dims) != 1 or not isinstance(dims[0], int):
        return False
    ranks = {len(shape(f)) for f in factors}
    if len(ranks) != 1 or any(param_root(f, params) is not None for f in factors):
        return False
    axis = dims[0] % ranks.pop()
    return all(shape(f)[axis] > 1 for f in factors)


def _spans(cores: Iterable[Core]) -> set[fx.Node]:
    """The nodes between each core's Q, K, V and its context, the context included."""
    spanned: set[fx.Node] = set()
    for core in cores:
        stops = {core.q, core.k, core.v, *core.parts}
        pending = [core.output]
        local: set[fx.Node] = set()
        while pending and len(local) < SPAN_NODES:
            node = pending.pop()
            if node in local or node in stops:
                continue
            local.add(node)
            pending.extend(tensor_inputs(node))
        spanned |= local
    return spanned
