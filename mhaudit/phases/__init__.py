"""Phases: the audited model in training and in generation, beside its forward.

Takes a :class:`~mhaudit.data.Report` with the loaded model and its trace; returns the
report with its training step (peak memory, breakdown and FLOPs of one optimizer step,
run on fake tensors) and its decode step (roofline time of one generated token at a
context) attached (:func:`with_phases`); for one what-if layout, its decode and training
columns (:func:`phase_columns`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from mhaudit.phases.attach import with_phases
    from mhaudit.phases.decode import decode_step
    from mhaudit.phases.training import training_step
    from mhaudit.phases.whatif_columns import phase_columns

# Entry points load on first use, so that importing the package does not import torch.
_LAZY = {
    "decode_step": "mhaudit.phases.decode",
    "phase_columns": "mhaudit.phases.whatif_columns",
    "training_step": "mhaudit.phases.training",
    "with_phases": "mhaudit.phases.attach",
}

__all__ = ["decode_step", "phase_columns", "training_step", "with_phases"]


__getattr__ = lazy_attributes(__name__, _LAZY)
