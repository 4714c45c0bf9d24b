"""Memory: live activation bytes, counted from storages as tensors are made and freed.

Takes a model and its inputs (or a traced graph); returns the inference activation peak
of a fake-tensor forward, counted while the first tracer rung records the graph
(:func:`peak_of`) or in a forward of its own (:func:`fake_forward_peak`), the same peak
from graph lifetimes when that forward cannot run (:func:`peak_activation_bytes`), and,
for the training phase, the timeline of the live-storage counter's log folded to the full
depth (:func:`fold`). The counters themselves live below the tracer, in
:mod:`mhaudit.fake`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from mhaudit.memory.timeline import fold

# Entry points load on first use, so that importing the package does not import torch.
_LAZY = {
    "fake_forward_peak": "mhaudit.memory.peak",
    "fold": "mhaudit.memory.timeline",
    "peak_activation_bytes": "mhaudit.memory.lifetimes",
    "peak_of": "mhaudit.memory.peak",
}

__all__ = ["fake_forward_peak", "fold", "peak_activation_bytes", "peak_of"]


__getattr__ = lazy_attributes(__name__, _LAZY)
