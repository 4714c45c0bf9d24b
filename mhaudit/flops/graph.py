"""Evaluate the FLOP registry over an fx graph: FLOPs per node and family, and coverage."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node

from mhaudit.cost.formulas import (
    FAMILIES,
    FormulaInputError,
    OpCall,
    TensorArg,
    is_zero_flop,
    lookup,
)
from mhaudit.data import Coverage
from mhaudit.trace.flex import facts_of
from mhaudit.trace.ops import qualified_name

WRAPPER_OPS: frozenset[str] = frozenset(
    {"higher_order.wrap_with_set_grad_enabled", "higher_order.wrap_with_autocast"}
)
"""Higher-order ops that just run a submodule graph; their FLOPs are that graph's."""


@dataclass(frozen=True)
class GraphFlops:
    """Forward FLOPs of a graph (2 per multiply-add) and what the registry could not cover."""

    flops: int
    """Sum over every node with a formula."""
    node_flops: dict[str, int] = field(default_factory=dict)
    """Node name to FLOPs, for nodes with a formula (wrapped graphs: ``outer.inner``)."""
    family_flops: dict[str, int] = field(default_factory=dict)
    """Formula family (``matmul``, ``attention``, ``softmax``, ...) to FLOPs."""
    node_families: dict[str, dict[str, int]] = field(default_factory=dict)
    """Node name to its FLOPs over the reported ``FAMILIES`` (summing to ``node_flops``)."""
    ops_without_formula: dict[str, int] = field(default_factory=dict)
    """Op name to calls that no formula covers (or whose shapes it could not read)."""
    missing_nodes: dict[str, str] = field(default_factory=dict)
    """Node name to op name, for each call counted in ``ops_without_formula``."""

    def by_family(self, weights: Callable[[str], int] | None = None) -> dict[str, int]:
        """FLOPs over every reported family (``FAMILIES``), each node times ``weights(name)``.

        Sums exactly to ``flops`` (to the weighted total with ``weights``).
        """
        totals = dict.fromkeys(FAMILIES, 0)
        for name, parts in self.node_families.items():
            weight = 1 if weights is None else weights(name)
            for family, flops in parts.items():
                totals[family] += flops * weight
        return totals

    def without_formula(self, weights: Callable[[str], int] | None = None) -> dict[str, int]:
        """``ops_without_formula`` with each call counted ``weights(node name)`` times (a
        folded layer's call once per layer it stands for)."""
        if weights is None:
            return dict(self.ops_without_formula)
        counts: Counter[str] = Counter()
        for node, name in self.missing_nodes.items():
            counts[name] += weights(node)
        return dict(counts)

    def coverage(self) -> Coverage:
        """The coverage gaps as the data model records them."""
        return Coverage(ops_without_formula=dict(self.ops_without_formula))


op_name = qualified_name
"""Registry name of a call_function target: ``aten.mm``, ``operator.getitem``, ..."""


def _dim(size: Any) -> int:
    if isinstance(size, torch.SymInt):
        hint = getattr(size.node, "hint", None)  # a nested tensor's ragged size has none
        if hint is None:
            raise FormulaInputError(f"symbolic size {size} has no hint")
        return int(hint)
    return int(size)


def _formula_value(value: Any) -> Any:
    """A node value as formulas see it: tensors become TensorArg, sequences tuples."""
    if isinstance(value, Node):
        return _formula_value(value.meta.get("val"))
    if isinstance(value, torch.Tensor):
        floating = value.dtype.is_floating_point or value.dtype.is_complex
        return TensorArg(tuple(_dim(s) for s in value.shape), floating)
    if isinstance(value, (list, tuple)):
        return tuple(_formula_value(v) for v in value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        if not hasattr(value.node, "hint"):  # a nested tensor's ragged size
            raise FormulaInputError(f"symbolic value {value} has no hint")
        return value.node.hint
    return value


def tensor_outputs(value: Any) -> list[torch.Tensor | None]:
    """One entry per output of a node: the tensor, or None where it is not one."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v if isinstance(v, torch.Tensor) else None for v in value]
    return []


def _subgraphs(node: Node) -> Iterator[tuple[str, Graph]]:
    owner = node.graph.owning_module
    for arg in node.args:
        if isinstance(arg, Node) and arg.op == "get_attr" and owner is not None:
            sub = getattr(owner, str(arg.target), None)
            if isinstance(sub, GraphModule):
                yield arg.name, sub.graph


def _module_or_method_name(node: Node) -> str:
    owner = node.graph.owning_module
    if node.op == "call_module" and owner is not None:
        return f"module.{type(owner.get_submodule(str(node.target))).__name__}"
    return f"{node.op.removeprefix('call_')}.{node.target}"


def graph_flops(graph: Graph) -> GraphFlops:
    """Apply the formula registry to every call_function node of ``graph``.

    Known zero-FLOP ops add nothing; an op with no formula, or whose formula cannot
    read the node's shapes, is counted in ``ops_without_formula`` and never as zero.
    Nodes whose ``meta["val"]`` holds no tensor (symbolic-size arithmetic,
    assertions) are bookkeeping and add nothing; nodes without ``meta["val"]`` are
    counted as missing, and so are call_module and call_method nodes (graphs
    should be at aten level, as torch.export makes them). Wrapper higher-order ops
    (set_grad_enabled, autocast) are costed through their submodule graphs.
    """
    node_flops: dict[str, int] = {}
    node_families: dict[str, dict[str, int]] = {}
    families: Counter[str] = Counter()
    missing: dict[str, str] = {}
    for node in graph.nodes:
        if node.op in ("call_module", "call_method"):  # not aten level: never silently zero
            missing[node.name] = _module_or_method_name(node)
            continue
        if node.op != "call_function":
            continue
        name = op_name(node.target)
        if name in WRAPPER_OPS:
            subgraphs = list(_subgraphs(node))
            if not subgraphs:
                missing[node.name] = name
            for prefix, sub in subgraphs:
                inner = graph_flops(sub)
                node_flops.update({f"{prefix}.{k}": v for k, v in inner.node_flops.items()})
                node_families.update(
                    {f"{prefix}.{k}": v for k, v in inner.node_families.items()})
                families.update(inner.family_flops)
                missing.update({f"{prefix}.{k}": v for k, v in inner.missing_nodes.items()})
            continue
        if is_zero_flop(name):
            continue
        costed = _costed(node, name)
        if costed is None:
            missing[node.name] = name
        elif costed:
            flops, parts, family = costed
            node_flops[node.name] = flops
            node_families[node.name] = parts
            families[family] += flops
    return GraphFlops(sum(node_flops.values()), node_flops, dict(families), node_families,
                      dict(Counter(missing.values())), missing)


def _costed(node: Node, name: str) -> tuple[int, dict[str, int], str] | tuple[()] | None:
    """A node's FLOPs, its FLOPs by reported family and its formula's family; ``()`` for
    bookkeeping (no tensor out, nothing to count); None when no formula covers it or its
    formula cannot read the node's shapes (any other exception is a bug)."""
    entry = lookup(name)
    if entry is None:
        val = node.meta.get("val")
        if "val" not in node.meta or any(t is not None for t in tensor_outputs(val)):
            return None  # unknown outputs count as missing too
        return ()
    try:
        kwargs = {k: _formula_value(v) for k, v in node.kwargs.items()}
        flex = facts_of(node)
        if flex is not None:  # the block mask's share of tiles, which shapes cannot say
            kwargs["visited_fraction"] = flex.visited_fraction
        call = OpCall(args=tuple(_formula_value(a) for a in node.args), kwargs=kwargs,
                      out=_formula_value(node.meta.get("val")))
        flops = entry.formula(call)
        return flops, entry.by_family(call, flops), entry.family
    except FormulaInputError:
        return None
