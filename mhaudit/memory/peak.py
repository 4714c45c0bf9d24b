"""The inference peak of live activations, from a forward run on fake tensors.

The forward runs as Python runs it, under ``FakeTensorMode``: no memory is allocated and
no arithmetic done, but every op's output storage is created and freed when Python drops
its last reference. The live-storage counter (:class:`~mhaudit.memory.forward.ForwardCounter`)
adds each new storage's bytes to a live count and takes them off when the storage is
freed, so tensors live as long as the eager code keeps them (locals until the module
returns, caches until the end), which is what an allocator sees. Torch's ``MemTracker``
counts the same way; this is the lean version of it.

The first rung of the tracer counts the same storages while it records the graph, so
the peak is read from that run (:func:`peak_of`); :func:`fake_forward_peak` runs the
forward for the other rungs. With folded layer lists only the representatives run: the
bytes each layer leaves alive (its cache entries, outputs kept for later) are added once
per layer it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mhaudit.memory.fakes import fake_forward
from mhaudit.memory.forward import ForwardCounter, ForwardStorages
from mhaudit.trace.fold import FoldedList


@dataclass(frozen=True)
class PeakEstimate:
    """Peak of live activation bytes in one inference forward, at the dtypes it ran at."""

    activation_bytes: int
    """Largest sum of live op-output storages (user inputs, parameters and buffers not
    included), per-layer leftovers of folded layers added."""
    retained_bytes: int
    """Bytes still alive when the forward returned (outputs, caches)."""


def _copies(plans: tuple[FoldedList, ...]) -> dict[str, int]:
    """Each representative layer's path, to the copies of it that did not run."""
    found: dict[str, int] = {}
    for plan in plans:
        for index, members in zip(plan.kept, plan.members, strict=True):
            if len(members) > 1:
                name = plan.name_of(index)
                found[f"{plan.path}.{name}" if plan.path else name] = len(members) - 1
    return found


def peak_of(storages: ForwardStorages, plans: tuple[FoldedList, ...] = ()) -> PeakEstimate:
    """The activation peak of a counted forward, with ``plans``' folded layers added back.

    Each representative leaves alive, besides its output (which replaces its input in the
    next layer), its cache entries and tensors kept for later; the copies that did not
    run would have left as much each, from the moment it returned on. The last copy runs
    with every earlier copy's leftovers alive.
    """
    copies = _copies(plans)
    levels = storages.levels
    peak = extra = seen = 0
    for span in storages.spans:
        n = copies.get(span.path, 0)
        if n < 1:
            continue
        peak = max(peak, max(levels[seen:span.end], default=0) + extra)
        seen = max(seen, span.end)
        window = max(span.live_start_bytes, max(levels[span.start:span.end], default=0))
        left = max(0, span.live_end_bytes - span.live_start_bytes - span.output_bytes)
        peak = max(peak, window + extra + n * left)
        extra += n * left
    peak = max(peak, max(levels[seen:], default=0) + extra)
    return PeakEstimate(peak, storages.retained_bytes + extra)


def fake_forward_peak(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    plans: tuple[FoldedList, ...] = (),
    dtype: torch.dtype | None = None,
) -> PeakEstimate:
    """Run ``model`` once on fake tensors under no_grad and return its activation peak.

    ``plans`` are the folded layer lists in effect (the model's lists already hold only
    their representatives); floating state and inputs run at ``dtype`` (None keeps their
    own). Raises whatever the forward raises on fake tensors.
    """
    # fake CPU state and inputs: a meta-built model runs the kernels a real run does
    with fake_forward(model, args, kwargs, dtype) as forward:
        counter = ForwardCounter()
        counter.known(forward.tensors())
        out = forward(counter, counter.layers(model))
        storages = counter.result()
        del out
    return peak_of(storages, plans)
