"""Which weights a decode step reads in full, read from the traced graph."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import fx, nn

from mhaudit.assemble.expand import expand_names
from mhaudit.data import ExpertLayer
from mhaudit.flops.moe import expert_tensor_numel
from mhaudit.phases.decode import ExpertGroup
from mhaudit.trace.export import TracedGraph
from mhaudit.trace.fold import FoldedList
from mhaudit.trace.ops import GATHER_OPS

_GATHERS = frozenset(f"aten.{name}" for name in GATHER_OPS)


def _op(node: fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target.overloadpacket)
    return str(target)


def gathered_parameters(traced: TracedGraph, plans: tuple[FoldedList, ...] = ()
                        ) -> frozenset[str]:
    """Parameters the forward only gathers rows from (embedding tables not tied to a head),
    in every layer a folded representative stands for."""
    names: set[str] = set()
    for node in traced.graph.nodes:
        if node.op != "placeholder" or node.name not in traced.params or not node.users:
            continue
        if all(u.op == "call_function" and _op(u) in _GATHERS and u.args[0] is node
               for u in node.users):
            names.add(traced.params[node.name])
    return frozenset(expand_names(names, plans))


def step_weight_bytes(model: nn.Module, gathered: frozenset[str], rows: int,
                      element_bytes: int, prefill_only: frozenset[str] = frozenset()) -> int:
    """Bytes of weights one step reads: every parameter once but those only prefill reads
    (an encoder's, a tower's), gathered tables ``rows`` rows."""
    total = 0
    for name, param in model.named_parameters():
        if name in prefill_only:
            continue
        numel = param.numel()
        if name in gathered and param.dim() == 2:
            numel = min(numel, rows * param.shape[1])
        total += numel
    return math.prod((total, element_bytes))


def prefill_only_bytes(model: nn.Module, prefill_only: frozenset[str],
                       element_bytes: int) -> int:
    """Bytes of the parameters only prefill reads (an encoder's, a tower's)."""
    return sum(p.numel() for name, p in model.named_parameters()
               if name in prefill_only) * element_bytes


def expert_groups(experts: Sequence[ExpertLayer], model: nn.Module, element_bytes: int
                  ) -> list[ExpertGroup]:
    """Routed experts as the forward routes them: the layers
    :func:`~mhaudit.flops.moe.routed_experts` finds for ``params_active`` (a selection over
    E expert scores, top-k or sampled as PhiMoE's sparsemixer, feeding per-expert weights,
    whatever the experts implementation: grouped_mm, batched_mm or a loop over experts).

    One expert's bytes are its layer's tensors stacked E deep, divided by E. ``experts``
    holds every layer (a report's folded layers are already expanded).
    """
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    groups: list[ExpertGroup] = []
    for layer in experts:
        if not 0 < layer.top_k <= layer.num_experts:
            continue
        per_expert = expert_tensor_numel(shapes, layer) // layer.num_experts
        if per_expert:
            groups.append(ExpertGroup(layer.num_experts, layer.top_k, per_expert * element_bytes))
    return groups
