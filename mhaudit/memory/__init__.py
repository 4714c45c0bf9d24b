"""Memory: live activation bytes, counted from storages as tensors are made and freed.

Takes a model and its inputs (or a traced graph); returns the inference activation peak
of a fake-tensor forward, counted while the first tracer rung records the graph
(:func:`peak_of`) or in a forward of its own (:func:`fake_forward_peak`), the same peak
from graph lifetimes when that forward cannot run (:func:`peak_activation_bytes`), and,
for the training phase, the one live-storage counter (:class:`LiveStorages`) whose log
the timeline folds to the full depth (:func:`fold`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.lazy import lazy_attributes

if TYPE_CHECKING:  # not the modules that import the tracer, which counts with this package
    from mhaudit.memory.forward import ForwardCounter
    from mhaudit.memory.live import LiveStorages
    from mhaudit.memory.timeline import fold

# Entry points load on first use, so that importing the package does not import torch.
_LAZY = {
    "ForwardCounter": "mhaudit.memory.forward",
    "LiveStorages": "mhaudit.memory.live",
    "fake_forward_peak": "mhaudit.memory.peak",
    "fold": "mhaudit.memory.timeline",
    "peak_activation_bytes": "mhaudit.memory.lifetimes",
    "peak_of": "mhaudit.memory.peak",
}

__all__ = ["ForwardCounter", "LiveStorages", "fake_forward_peak", "fold",
           "peak_activation_bytes", "peak_of"]


__getattr__ = lazy_attributes(__name__, _LAZY)
