"""Which weights a decode step reads in full, read from the traced graph."""

from __future__ import annotations

import math

import torch
from torch import fx, nn

from mhaudit.phases.decode import ExpertGroup
from mhaudit.trace.export import TracedGraph
from mhaudit.trace.fold import FoldedList, node_weight, rename, rep_position
from mhaudit.trace.ops import GATHER_OPS

_GATHERS = frozenset(f"aten.{name}" for name in GATHER_OPS)


def _op(node: fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target.overloadpacket)
    return str(target)


def gathered_parameters(traced: TracedGraph) -> frozenset[str]:
    """Parameters the forward only gathers rows from (embedding tables not tied to a head)."""
    names: set[str] = set()
    for node in traced.graph.nodes:
        if node.op != "placeholder" or node.name not in traced.params or not node.users:
            continue
        if all(u.op == "call_function" and _op(u) in _GATHERS and u.args[0] is node
               for u in node.users):
            names.add(traced.params[node.name])
    return frozenset(names)


def step_weight_bytes(model: nn.Module, gathered: frozenset[str], rows: int,
                      element_bytes: int) -> int:
    """Bytes of weights one step reads: every parameter once, gathered tables ``rows`` rows."""
    total = 0
    for name, param in model.named_parameters():
        numel = param.numel()
        if name in gathered and param.dim() == 2:
            numel = min(numel, rows * param.shape[1])
        total += numel
    return math.prod((total, element_bytes))


def expert_groups(traced: TracedGraph, model: nn.Module, element_bytes: int,
                  plans: tuple[FoldedList, ...] = ()) -> list[ExpertGroup]:
    """Routed experts found from the graph: a ``topk`` over router scores picks k of E.

    The experts are the router's siblings: parameters stacked E deep (``(E, out, in)``)
    or a module list of E experts. Each router of a folded layer counts once per layer
    it stands for.
    """
    groups: list[ExpertGroup] = []
    for node in traced.graph.nodes:
        if node.op != "call_function" or _op(node) != "aten.topk" or len(node.args) < 2:
            continue
        scores = node.args[0]
        value = scores.meta.get("val") if isinstance(scores, fx.Node) else None
        if not isinstance(value, torch.Tensor) or not isinstance(node.args[1], int):
            continue
        experts, k = int(value.shape[-1]), node.args[1]
        path = traced.module_path(node)
        parent = _original(path, plans).rpartition(".")[0]
        per_expert = _expert_elements(model, parent, experts)
        if per_expert and 0 < k <= experts:
            group = ExpertGroup(experts, k, per_expert * element_bytes)
            groups.extend([group] * node_weight(path, plans))
    return groups


def _original(path: str, plans: tuple[FoldedList, ...]) -> str:
    for plan in plans:
        position = rep_position(path, plan)
        if position is not None and position < len(plan.kept):
            return rename(path, plan, position, plan.kept[position])
    return path


def _expert_elements(model: nn.Module, parent: str, experts: int) -> int:
    """Parameter elements of one expert under ``parent``; 0 when none are found."""
    try:
        owner = model.get_submodule(parent)
    except AttributeError:
        return 0
    total = 0
    for module in owner.modules():
        children = list(module.children())
        if isinstance(module, nn.ModuleList) and len(children) == experts:
            total += sum(p.numel() for p in children[0].parameters())
            continue
        for param in module.parameters(recurse=False):
            if param.dim() >= 3 and param.shape[0] == experts:
                total += param.numel() // experts
    return total
