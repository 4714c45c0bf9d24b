"""The traced graph as every later stage reads it, and the output walk tracers share."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from mhaudit.data.tracing import DataDependence
from mhaudit.trace.graphs import innermost_module

WRAPPER = "m"
"""Attribute the tracing wrapper holds the model under."""


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
    data_dependent: DataDependence | None = None
    """How a later rung fixed values read from the data; None when the first rungs held."""

    def module_path(self, node: fx.Node) -> str:
        """Qualified name of the innermost module that ran ``node`` (``""`` for the root)."""
        return strip_wrapper(innermost_module(node))


def strip_wrapper(path: str) -> str:
    """Drop the tracing wrapper's attribute from a qualified name."""
    if path == WRAPPER:
        return ""
    if path.startswith(WRAPPER + "."):
        return path[len(WRAPPER) + 1 :]
    return path


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
