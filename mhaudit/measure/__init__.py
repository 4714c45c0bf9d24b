"""Measure: real latency and peak memory on cpu or cuda, with one timer and one reference block.

Takes a model built on a real device and its inputs; returns a
:class:`~mhaudit.data.Measurement` (forward and per-block times, peak memory) from
:func:`measure`. A what-if layout is timed through the same timer on the reference
attention forward that the training column runs on fake tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from mhaudit.measure.device import measure

# Entry points load on first use, so that importing the package does not import torch.
_LAZY = {"measure": "mhaudit.measure.device"}

__all__ = ["measure"]


__getattr__ = lazy_attributes(__name__, _LAZY)
