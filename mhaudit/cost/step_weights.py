"""Which weights a decode step reads in full, read from the traced graph."""

from __future__ import annotations

import math

import torch
from torch import fx, nn

from mhaudit.trace.export import TracedGraph

_GATHERS = frozenset({"aten.embedding"})


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
