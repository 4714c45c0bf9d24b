"""Storage lifetimes over an fx graph: each activation from its node to its last use; the peak."""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch
from torch.export import ExportedProgram
from torch.fx import Graph, Node

from mhaudit.cost.formulas import canonical_op
from mhaudit.flops.graph import tensor_outputs
from mhaudit.trace.ops import ALIAS_OPS as _ALIAS_OPS
from mhaudit.trace.ops import MAYBE_ALIAS_OPS as _MAYBE_ALIAS_OPS
from mhaudit.trace.ops import qualified, qualified_name

ALIAS_OPS: frozenset[str] = qualified(_ALIAS_OPS)
"""Ops whose output shares its first input's storage (dropout: in inference mode)."""

MAYBE_ALIAS_OPS: frozenset[str] = qualified(_MAYBE_ALIAS_OPS)
"""Ops that return a view or their input when they can and a copy otherwise."""


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
        outputs = tensor_outputs(node.meta.get("val"))
        name = qualified_name(node.target) if node.op == "call_function" else ""
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
    forward of :mod:`mhaudit.memory.peak` and falls back to this when that cannot run.
    Ignores kernel workspaces, allocator rounding and temporaries inside fused ops.
    """
    return peak_live_bytes(storage_lifetimes(graph, param_names, is_param))
