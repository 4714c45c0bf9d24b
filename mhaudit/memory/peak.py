"""The inference peak of live activations, from running the forward on fake tensors.

The forward runs as Python runs it, under ``FakeTensorMode``: no memory is allocated and
no arithmetic done, but every op's output storage is created and freed when Python drops
its last reference. The live-storage counter (:class:`~mhaudit.memory.live.LiveStorages`)
adds each new storage's bytes to a live count and takes them off when the storage is
freed, so tensors live as long as the eager code keeps them (locals
until the module returns, caches until the end), which is what an allocator sees. Torch's
``MemTracker`` counts the same way; this is the lean version of it.

With folded layer lists only the representatives run: the bytes each layer leaves alive
(its cache entries, outputs kept for later) are added once per layer it stands for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from torch import nn

from mhaudit.memory.fakes import fake_forward
from mhaudit.memory.live import LiveStorages
from mhaudit.trace.fold import FoldedList


@dataclass(frozen=True)
class PeakEstimate:
    """Peak of live activation bytes in one inference forward, at the model's dtypes."""

    activation_bytes: int
    """Largest sum of live op-output storages (user inputs, parameters and buffers not
    included), per-layer leftovers of folded layers added."""
    retained_bytes: int
    """Bytes still alive when the forward returned (outputs, caches)."""


@contextlib.contextmanager
def _layer_leftovers(model: nn.Module, plans: tuple[FoldedList, ...], mode: LiveStorages
                     ) -> Iterator[None]:
    """Add, after each representative layer, what it left alive times its other copies."""
    handles = []
    for plan in plans:
        layers = model.get_submodule(plan.path) if plan.path else model
        for position, members in enumerate(plan.members):
            copies = len(members) - 1
            if copies < 1 or position >= len(layers):  # type: ignore[arg-type]
                continue
            layer = layers[position]  # type: ignore[index]
            before: list[tuple[int, int, int]] = []

            def pre(_m: nn.Module, _a: Any, before: list[tuple[int, int, int]] = before
                    ) -> None:
                before.append((mode.live, mode.serial, mode.window_peak))
                mode.window_peak = mode.live

            def post(_m: nn.Module, _a: Any, out: Any,
                     before: list[tuple[int, int, int]] = before, copies: int = copies
                     ) -> None:
                if not before:
                    return
                live, serial, outer_peak = before.pop()
                # what one layer leaves alive besides its output (which replaces its input
                # in the next layer): cache entries, tensors kept for later
                left = max(0, mode.live - live - mode.new_bytes(out, serial))
                # the last copy runs with every earlier copy's leftovers alive
                mode.peak = max(mode.peak, mode.window_peak + mode.extra + copies * left)
                mode.extra += copies * left
                mode.window_peak = max(outer_peak, mode.window_peak)

            handles.append(layer.register_forward_pre_hook(pre))
            handles.append(layer.register_forward_hook(post))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def fake_forward_peak(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    plans: tuple[FoldedList, ...] = (),
) -> PeakEstimate:
    """Run ``model`` once on fake tensors under no_grad and return its activation peak.

    ``plans`` are the folded layer lists in effect (the model's lists already hold only
    their representatives). Raises whatever the forward raises on fake tensors.
    """
    # fake CPU state and inputs: a meta-built model runs the kernels a real run does
    with fake_forward(model, args, kwargs) as forward:
        mode = LiveStorages()
        mode.known(forward.tensors())
        out = forward(mode, _layer_leftovers(model, plans, mode))
        retained = mode.live + mode.extra
        del out
    return PeakEstimate(mode.peak, retained)
