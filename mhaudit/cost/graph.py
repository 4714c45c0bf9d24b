"""Evaluate the FLOP registry over an fx graph and estimate peak live activation bytes."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import Graph, GraphModule, Node

from mhaudit.cost.formulas import (
    FAMILIES,
    FormulaInputError,
    OpCall,
    TensorArg,
    canonical_op,
    is_zero_flop,
    lookup,
)
from mhaudit.data import Coverage
from mhaudit.trace.ops import ALIAS_OPS as _ALIAS_OPS
from mhaudit.trace.ops import MAYBE_ALIAS_OPS as _MAYBE_ALIAS_OPS
from mhaudit.trace.ops import qualified, qualified_name

ALIAS_OPS: frozenset[str] = qualified(_ALIAS_OPS)
"""Ops whose output shares its first input's storage (dropout: in inference mode)."""

MAYBE_ALIAS_OPS: frozenset[str] = qualified(_MAYBE_ALIAS_OPS)
"""Ops that return a view or their input when they can and a copy otherwise."""

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

    def coverage(self) -> Coverage:
        """The coverage gaps as the data model records them."""
        return Coverage(ops_without_formula=dict(self.ops_without_formula))


op_name = qualified_name
"""Registry name of a call_function target: ``aten.mm``, ``operator.getitem``, ..."""


def _dim(size: Any) -> int:
    if isinstance(size, torch.SymInt):
        hint = size.node.hint
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
        return value.node.hint
    return value


def _tensor_outputs(value: Any) -> list[torch.Tensor | None]:
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
    total = 0
    node_flops: dict[str, int] = {}
    node_families: dict[str, dict[str, int]] = {}
    families: Counter[str] = Counter()
    missing: Counter[str] = Counter()
    for node in graph.nodes:
        if node.op in ("call_module", "call_method"):  # not aten level: never silently zero
            missing[_module_or_method_name(node)] += 1
            continue
        if node.op != "call_function":
            continue
        name = op_name(node.target)
        if name in WRAPPER_OPS:
            subgraphs = list(_subgraphs(node))
            missing.update([] if subgraphs else [name])
            for prefix, sub in subgraphs:
                inner = graph_flops(sub)
                total += inner.flops
                node_flops.update({f"{prefix}.{k}": v for k, v in inner.node_flops.items()})
                node_families.update(
                    {f"{prefix}.{k}": v for k, v in inner.node_families.items()}
                )
                families.update(inner.family_flops)
                missing.update(inner.ops_without_formula)
            continue
        if is_zero_flop(name):
            continue
        entry = lookup(name)
        if entry is None:
            val = node.meta.get("val")
            if "val" not in node.meta or any(t is not None for t in _tensor_outputs(val)):
                missing[name] += 1  # unknown outputs count as missing too
            continue
        try:
            call = OpCall(
                args=tuple(_formula_value(a) for a in node.args),
                kwargs={k: _formula_value(v) for k, v in node.kwargs.items()},
                out=_formula_value(node.meta.get("val")),
            )
            flops = entry.formula(call)
            parts = entry.by_family(call, flops)
        except FormulaInputError:  # shapes it cannot read; any other exception is a bug
            missing[name] += 1
            continue
        total += flops
        node_flops[node.name] = flops
        node_families[node.name] = parts
        families[entry.family] += flops
    return GraphFlops(total, node_flops, dict(families), node_families, dict(missing))


def exported_param_names(program: ExportedProgram) -> frozenset[str]:
    """Placeholder names of an exported program's parameters, buffers and constants."""
    signature = program.graph_signature
    return frozenset(
        {*signature.inputs_to_parameters, *signature.inputs_to_buffers,
         *signature.inputs_to_lifted_tensor_constants}
    )


def _aliases_input(node: Node, name: str) -> bool:
    """True when the node's outputs share the storage of its first input."""
    if name in ALIAS_OPS or canonical_op(name) != name:  # views, in-place ops
        return True
    if name not in MAYBE_ALIAS_OPS or not node.args or not isinstance(node.args[0], Node):
        return False
    out, base = node.meta.get("val"), node.args[0].meta.get("val")
    if not (isinstance(out, torch.Tensor) and isinstance(base, torch.Tensor)):
        return False
    try:
        return bool(out.untyped_storage()._cdata == base.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError):  # no storage: a contiguous base is viewable
        return out.dtype == base.dtype and base.is_contiguous()


@dataclass(frozen=True)
class Lifetime:
    """One activation storage: its bytes and the node indices where it is born and last used."""

    size_bytes: int
    born: int
    last_use: int


def storage_lifetimes(
    graph: Graph,
    param_names: Collection[str] = (),
    is_param: Callable[[Node], bool] | None = None,
) -> list[Lifetime]:
    """The liveness pass: every activation storage of ``graph`` with its lifetime.

    Each allocating node's outputs (numel · element size) are born at the node and
    live until their last user (the output node keeps returned tensors to the end).
    Views, aliases, in-place ops, ``getitem`` and dropout share their base's storage;
    reshape/contiguous/to share it when the node's fake tensors share storage.
    Placeholders named in ``param_names`` or accepted by ``is_param`` (weights,
    buffers) and get_attr constants are not activations; user inputs are.
    """
    excluded = set(param_names)
    sizes: list[int] = []
    last_use: list[int] = []
    born: list[int] = []
    refs: dict[Node, list[tuple[int, ...]]] = {}

    def allocate(tensor: torch.Tensor | None, index: int) -> tuple[int, ...]:
        if tensor is None:
            return ()
        sizes.append(tensor.numel() * tensor.element_size())
        born.append(index)
        last_use.append(index)
        return (len(sizes) - 1,)

    for index, node in enumerate(graph.nodes):
        outputs = _tensor_outputs(node.meta.get("val"))
        name = op_name(node.target) if node.op == "call_function" else ""
        if node.op == "get_attr" or (
            node.op == "placeholder"
            and (node.name in excluded or (is_param is not None and is_param(node)))
        ):
            refs[node] = [() for _ in outputs]
        elif node.op == "call_function" and node.target is operator.getitem:
            source, item = node.args[0], node.args[1]
            source_refs = refs.get(source, []) if isinstance(source, Node) else []
            picked = source_refs[item] if isinstance(item, int) and item < len(source_refs) else ()
            refs[node] = [picked]
        elif node.op == "call_function" and _aliases_input(node, name):
            base = node.args[0]
            base_refs = refs.get(base, []) if isinstance(base, Node) else []
            shared = tuple(s for r in base_refs for s in r)
            refs[node] = [shared for _ in outputs] or [shared]
        elif node.op == "output":
            refs[node] = []
        else:
            refs[node] = [allocate(t, index) for t in outputs]
        for user_input in node.all_input_nodes:
            for storage in {s for r in refs.get(user_input, []) for s in r}:
                last_use[storage] = index
    return [Lifetime(*entry) for entry in zip(sizes, born, last_use, strict=True)]


def peak_live_bytes(lifetimes: Collection[Lifetime]) -> int:
    """The peak sweep: the largest sum of storages alive at one node (inputs and output
    of a node are live together)."""
    if not lifetimes:
        return 0
    delta = [0] * (max(lt.last_use for lt in lifetimes) + 2)
    for lt in lifetimes:
        delta[lt.born] += lt.size_bytes
        delta[lt.last_use + 1] -= lt.size_bytes
    peak = live = 0
    for change in delta:
        live += change
        peak = max(peak, live)
    return peak


def peak_activation_bytes(
    graph: Graph,
    param_names: Collection[str] = (),
    is_param: Callable[[Node], bool] | None = None,
) -> int:
    """Peak bytes of live activations during an inference forward over ``graph``, with
    tensors freed at their last graph use (``storage_lifetimes`` then ``peak_live_bytes``).

    Eager Python keeps tensors alive until the module that made them returns, so this is
    a lower bound (25–30% below a real run on HF models); the report uses the fake-tensor
    forward of :mod:`mhaudit.cost.peak` and falls back to this when that cannot run.
    Ignores kernel workspaces, allocator rounding and temporaries inside fused ops.
    """
    return peak_live_bytes(storage_lifetimes(graph, param_names, is_param))
