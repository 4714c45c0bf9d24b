"""Detect: a traced graph -> the attention blocks it computes, with their parameters.

Takes a :class:`~mhaudit.trace.TracedGraph` and the model; returns one
:class:`~mhaudit.data.Layout` per attention block, found from what the graph computes
(never from class names), and counts each layout's parameters against 4·d²
(:func:`count`).
"""

from __future__ import annotations

from mhaudit.detect.blocks import detect
from mhaudit.detect.params import count

__all__ = ["count", "detect"]
