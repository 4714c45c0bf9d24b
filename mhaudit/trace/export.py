"""Trace stage: a module and its inputs become an aten-level fx graph, no real compute."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn

from mhaudit.errors import TraceError, first_line
from mhaudit.trace.graphs import innermost_module

_WRAPPER = "m"


@dataclass(frozen=True)
class TracedGraph:
    """An fx graph with the facts detection needs about its placeholders."""

    graph: fx.Graph
    method: str
    """Name of the tracer that produced it."""
    params: dict[str, str]
    """Placeholder name to parameter qualified name."""
    buffers: dict[str, str]
    """Placeholder name to buffer qualified name."""
    user_inputs: tuple[str, ...]
    """Placeholder names of the user's inputs."""

    def module_path(self, node: fx.Node) -> str:
        """Qualified name of the innermost module that ran ``node`` (``""`` for the root)."""
        return strip_wrapper(innermost_module(node))


def strip_wrapper(path: str) -> str:
    """Drop the tracing wrapper's attribute from a qualified name."""
    if path == _WRAPPER:
        return ""
    if path.startswith(_WRAPPER + "."):
        return path[len(_WRAPPER) + 1 :]
    return path


Tracer = Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], "TracedGraph"]


class _FlatOutputs(nn.Module):
    """Runs the model and returns only the tensors in its output.

    Outputs such as key/value cache objects are not traceable containers; the
    audit needs the computation, not the output structure.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
        return tuple(output_tensors(self.m(*args, **kwargs)))


def output_tensors(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a model output (nested tuples, lists, mappings); caches dropped."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from output_tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from output_tensors(item)
    elif hasattr(value, "to_tuple"):
        yield from output_tensors(value.to_tuple())


def _export(strict: bool) -> Tracer:
    def run(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TracedGraph:
        program = torch.export.export(_FlatOutputs(model), args, kwargs, strict=strict)
        sig = program.graph_signature
        return TracedGraph(
            graph=program.graph_module.graph,
            method="torch.export" + ("-strict" if strict else ""),
            params={k: strip_wrapper(v) for k, v in sig.inputs_to_parameters.items()},
            buffers={k: strip_wrapper(v) for k, v in sig.inputs_to_buffers.items()},
            user_inputs=tuple(sig.user_inputs),
        )

    return run


TRACERS: tuple[tuple[str, Tracer], ...] = (
    ("torch.export", _export(strict=False)),
    ("torch.export-strict", _export(strict=True)),
)
"""The ladder, tried in order until one succeeds."""


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    loggers = [logging.getLogger(n) for n in ("torch._dynamo", "torch.export", "torch._export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def trace(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TracedGraph:
    """Run the tracer ladder; raise TraceError naming the first tracer's cause."""
    was_training = model.training
    model.eval()
    failures: list[tuple[str, BaseException]] = []
    try:
        with _quiet():
            for name, tracer in TRACERS:
                try:
                    return tracer(model, args, kwargs)
                except Exception as exc:
                    failures.append((name, exc))
    finally:
        model.train(was_training)
    name, first = failures[0]
    raise TraceError(
        f"could not trace {type(model).__name__}: {name} failed with {first_line(first)}",
        "Check that example_inputs() match forward() and that forward has no "
        "data-dependent Python control flow on tensor values.",
    ) from first
