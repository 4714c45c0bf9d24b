"""Trace: a module and its inputs -> an aten-level fx graph on fake tensors.

Takes an ``nn.Module`` with example inputs; returns a :class:`TracedGraph` whose nodes carry
shapes and the module path they ran in. Repeated identical layers can be folded so that
one representative is traced (:mod:`mhaudit.trace.fold`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from mhaudit.trace.export import TracedGraph, trace

# Entry points load on first use, so that importing a stage (for its data or its
# profiles) does not import torch.
_LAZY = {
    "TracedGraph": "mhaudit.trace.export",
    "trace": "mhaudit.trace.export",
}

__all__ = ["TracedGraph", "trace"]


__getattr__ = lazy_attributes(__name__, _LAZY)
