"""Trace: a module and its inputs -> an aten-level fx graph on fake tensors.

Takes an ``nn.Module`` with example inputs; returns a :class:`TracedGraph` whose nodes carry
shapes and the module path they ran in. Repeated identical layers can be folded so that
one representative is traced (:mod:`mhaudit.trace.fold`).
"""

from __future__ import annotations

from mhaudit.trace.export import TracedGraph, trace

__all__ = ["TracedGraph", "trace"]
