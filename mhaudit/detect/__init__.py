"""Detect: a traced graph -> the attention blocks it computes, with their parameters.

Takes a :class:`~mhaudit.trace.TracedGraph` and the model; returns one
:class:`~mhaudit.data.Layout` per attention block, found from what the graph computes
(never from class names), and counts each layout's parameters against 4·d²
(:func:`count`). :mod:`~mhaudit.detect.sources` walks from each core to its
projections; :mod:`~mhaudit.detect.patterns` reads one attention variant per module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from mhaudit.detect.blocks import detect
    from mhaudit.detect.params import count

# Entry points load on first use, so that importing a stage (for its data or its
# profiles) does not import torch.
_LAZY = {
    "detect": "mhaudit.detect.blocks",
    "count": "mhaudit.detect.params",
}

__all__ = ["count", "detect"]


__getattr__ = lazy_attributes(__name__, _LAZY)
