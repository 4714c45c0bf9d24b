"""The traced graph as every later stage reads it, and the output walk tracers share."""

from __future__ import annotations

import contextlib
import dataclasses
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
    """Every tensor in a model output, each once: nested tuples (named ones too), lists,
    sets, mappings, dataclasses and transformers' ``ModelOutput``; caches dropped."""
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(value, 0)]
    found: list[torch.Tensor] = []
    while stack:
        item, depth = stack.pop()
        if id(item) in seen or depth > _MAX_OUTPUT_DEPTH:
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            found.append(item)
            continue
        stack.extend((child, depth + 1) for child in reversed(_children(item)))
    yield from found


_MAX_OUTPUT_DEPTH = 64
"""Deepest nesting of containers read in a model output (a cycle is read once)."""


def _children(value: Any) -> list[Any]:
    """The items a container of a model output holds; none for anything else."""
    if isinstance(value, (str, bytes, bytearray)):
        return []
    if isinstance(value, Mapping):
        return list(value.values())
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=id)
    if hasattr(value, "to_tuple"):
        with contextlib.suppress(Exception):
            return list(value.to_tuple())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    return []
