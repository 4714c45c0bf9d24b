"""torch's MemTracker on a fake-tensor training step: the reference the training audit meets."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.checkpoint import checkpoint


def memtracker_peak(build: Callable[[], nn.Module], inputs: Callable[[], dict[str, Any]], *,
                    layers: str | None = None, autocast: bool = False,
                    framework_checkpointing: bool = False) -> dict[str, int]:
    """Peak of a steady-state AdamW step (foreach) under MemTracker, by category and total.

    The model and its inputs are made under FakeTensorMode; a first step makes the
    optimizer states, the second is tracked. ``layers`` names a ModuleList whose
    layers are checkpointed; ``framework_checkpointing`` checkpoints as transformers does
    (``gradient_checkpointing_enable()``, which also turns the KV cache off in training).
    """
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        model = build().train()
        if layers is not None:
            for layer in model.get_submodule(layers):
                layer.forward = functools.partial(checkpoint, layer.forward,
                                                  use_reentrant=False, preserve_rng_state=False)
        if framework_checkpointing:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        batch = inputs()

        def step() -> None:
            cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast)
            with cast:
                loss = model(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad()

        step()
        tracker = MemTracker()
        tracker.track_external(model, opt, *batch.values())
        with tracker:
            step()
    snapshot = tracker.get_tracker_snapshot("peak")
    (device_snapshot,) = snapshot.values()
    return {str(getattr(k, "name", k)): int(v) for k, v in device_snapshot.items()}
