"""Memory: live activation bytes, counted from storages as tensors are made and freed.

Takes a model and its inputs (or a traced graph); returns the inference activation peak
from a fake-tensor forward (:func:`fake_forward_peak`), the same peak from graph
lifetimes when that forward cannot run (:func:`peak_activation_bytes`), and, for the
training phase, the one live-storage counter (:class:`LiveStorages`) whose log the
timeline folds to the full depth (:func:`fold`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from mhaudit.memory.lifetimes import peak_activation_bytes
    from mhaudit.memory.live import LiveStorages
    from mhaudit.memory.peak import fake_forward_peak
    from mhaudit.memory.timeline import fold

# Entry points load on first use, so that importing the package does not import torch.
_LAZY = {
    "LiveStorages": "mhaudit.memory.live",
    "fake_forward_peak": "mhaudit.memory.peak",
    "fold": "mhaudit.memory.timeline",
    "peak_activation_bytes": "mhaudit.memory.lifetimes",
}

__all__ = ["LiveStorages", "fake_forward_peak", "fold", "peak_activation_bytes"]


__getattr__ = lazy_attributes(__name__, _LAZY)
