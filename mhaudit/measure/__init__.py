"""Measure: real latency and peak memory on cpu or cuda, with one timer and one reference block.

Takes a model built on a real device and its inputs; returns a
:class:`~mhaudit.data.Measurement` (forward and per-block times, peak memory) from
:func:`measure`. A what-if layout is timed through the same timer on the reference
attention forward that the training column runs on fake tensors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mhaudit.measure.device import measure

# Entry points load on first use, so that importing the package does not import torch.
_LAZY = {"measure": "mhaudit.measure.device"}

__all__ = ["measure"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
