"""Cost: a detected layout on a target GPU -> its FLOPs, bytes, kernel choice and roofline time.

Takes detected :class:`~mhaudit.data.Layout` objects, a dtype and a GPU profile; returns
:class:`~mhaudit.data.AttentionBlock` objects (:func:`build_block`, the one block builder)
and their projections over sequence lengths. Closed-form arithmetic only: nothing here
imports torch. FLOPs of a traced graph live in :mod:`mhaudit.flops`, memory from running
tensors in :mod:`mhaudit.memory`, training and decode in :mod:`mhaudit.phases`, and
measurement on a real device in :mod:`mhaudit.measure`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from mhaudit.cost.builder import build_block

# Entry points load on first use, so that importing a stage (for its data or its
# profiles) does not pull in more than it needs.
_LAZY = {"build_block": "mhaudit.cost.builder"}

__all__ = ["build_block"]


__getattr__ = lazy_attributes(__name__, _LAZY)
