"""torch's MemTracker on a fake-tensor training step: the reference the training audit meets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from mhaudit.phases.indices import RealIndices
from mhaudit.verify.step import memtracker_step


def memtracker_peak(build: Callable[[], nn.Module], inputs: Callable[[], dict[str, Any]], *,
                    layers: str | None = None, autocast: bool = False,
                    framework_checkpointing: bool = False) -> dict[str, int]:
    """Peak of a steady-state AdamW step (foreach) under MemTracker, by category and total.

    The model and its inputs are made under FakeTensorMode, with size-fed index
    arithmetic on real values as in a real step (``RealIndices``: with the cache off,
    transformers reads the position ids to tell packed sequences); a first step makes the
    optimizer states, the second is tracked. ``layers`` names a ModuleList whose
    layers are checkpointed; ``framework_checkpointing`` checkpoints as transformers does
    (``gradient_checkpointing_enable()``, which also turns the KV cache off in training).
    """
    with FakeTensorMode(allow_non_fake_inputs=True), RealIndices():
        model = build()
        recomputed = list(model.get_submodule(layers)) if layers is not None else []
        return memtracker_step(model, (), inputs(),
                               precision="bf16-mixed" if autocast else "fp32",
                               checkpoint_layers=recomputed,
                               framework_checkpointing=framework_checkpointing)
