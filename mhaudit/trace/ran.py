"""Proof that a forward ran: it returned tensors, and it read the model's parameters.

A forward that is a generator, returns ``None`` or returns before it touches its weights
traces to an empty (or weightless) graph without raising; audited as it is, it would show
0 FLOPs and pass any budget. :func:`require_ran` turns each of these into a TraceError.
Where it raised instead, :func:`missing_input` names the forward parameter it raised on
because the inputs left it out.
"""

from __future__ import annotations

import inspect
import linecache
import os
import re
from types import TracebackType
from typing import Any

import torch
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


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _model_frames(exc: BaseException) -> list[TracebackType]:
    """The traceback entries of ``exc`` that ran outside torch and mhaudit, deepest last."""
    found, tb = [], exc.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if not path.startswith(_TORCH_DIR) and f"{os.sep}mhaudit{os.sep}" not in path:
            found.append(tb)
        tb = tb.tb_next
    return found


def raised_in_model_code(exc: BaseException) -> bool:
    """Whether ``exc`` passed through code outside torch and mhaudit (the model's own)."""
    return bool(_model_frames(exc))


def _failing_text(tb: TracebackType) -> str:
    """The source of the expression that raised in ``tb``'s frame (its whole span where
    Python records one, else its line)."""
    code, path = tb.tb_frame.f_code, tb.tb_frame.f_code.co_filename
    positions = list(code.co_positions())
    start, end = tb.tb_lineno, tb.tb_lineno
    if 0 <= tb.tb_lasti // 2 < len(positions):
        first, last = positions[tb.tb_lasti // 2][:2]
        start, end = first or start, last or end
    return " ".join(linecache.getline(path, n) for n in range(start, end + 1))


def missing_input(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                  exc: BaseException) -> str | None:
    """The forward parameter left out (or None) that ``exc`` was raised on: a name of
    ``model.forward``'s parameters that the inputs do not give, None where the model's
    deepest frame raised, and read by the expression that raised. None when no such name."""
    try:
        params = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return None
    given = {*params[:len(args)], *(k for k, v in kwargs.items() if v is not None)}
    frames = _model_frames(exc)
    if not frames:
        return None
    deepest = frames[-1]
    local = deepest.tb_frame.f_locals
    for name in _IDENTIFIER.findall(_failing_text(deepest)):
        if name in params and name not in given and name in local and local[name] is None:
            return str(name)
    return None
