"""Proof that a forward ran: it returned tensors, and it read the model's parameters.

A forward that is a generator, returns ``None`` or returns before it touches its weights
traces to an empty (or weightless) graph without raising; audited as it is, it would show
0 FLOPs and pass any budget. :func:`require_ran` turns each of these into a TraceError.
"""

from __future__ import annotations

import inspect

from torch import fx, nn

from mhaudit.errors import TraceError
from mhaudit.trace.traced import TracedGraph

_TIP = "Make forward() compute with the model's layers and return the result tensors."


def _outputs(graph: fx.Graph) -> list[fx.Node]:
    found: list[fx.Node] = []
    for node in graph.nodes:
        if node.op == "output":
            stack = list(node.args)
            while stack:
                item = stack.pop()
                if isinstance(item, fx.Node):
                    found.append(item)
                elif isinstance(item, (list, tuple)):
                    stack.extend(item)
                elif isinstance(item, dict):
                    stack.extend(item.values())
    return found


def _holds_parameters(model: nn.Module) -> bool:
    return any(p.numel() for p in model.parameters())


def _reads_parameters(traced: TracedGraph) -> bool:
    return any(node.op == "placeholder" and node.name in traced.params and node.users
               for node in traced.graph.nodes) or any(
        node.op == "get_attr" and node.users for node in traced.graph.nodes)


def _forward_kind(model: nn.Module) -> str:
    forward = getattr(type(model), "forward", None)
    if inspect.isgeneratorfunction(forward) or inspect.isasyncgenfunction(forward):
        return "forward() is a generator (it yields), so calling it ran nothing"
    if inspect.iscoroutinefunction(forward):
        return "forward() is a coroutine (async def), so calling it ran nothing"
    return ""


def require_plain_forward(model: nn.Module) -> None:
    """Raise TraceError when ``forward`` is a generator or a coroutine: calling it runs nothing."""
    kind = _forward_kind(model)
    if kind:
        raise TraceError(f"{type(model).__name__}: {kind}",
                         "Return tensors from forward() instead of yielding or awaiting them.")


def require_ran(model: nn.Module, traced: TracedGraph) -> None:
    """Raise TraceError unless the traced forward returned tensors and read a parameter.

    A module without parameters only needs to return tensors.
    """
    name = type(model).__name__
    if not _outputs(traced.graph):
        raise TraceError(f"{name}: forward() returned no tensors (a None, a generator or "
                         "another non-tensor value), so nothing it computes can be audited",
                         _TIP)
    if _holds_parameters(model) and not _reads_parameters(traced):
        count = sum(p.numel() for p in model.parameters())
        raise TraceError(f"{name}: forward() never read any of the model's {count:,} "
                         "parameters (it returned before using its layers)", _TIP)
