"""The inference peak of live activations, from a forward run on fake tensors.

The forward runs as Python runs it, under ``FakeTensorMode``: no memory is allocated and
no arithmetic done, but every op's output storage is created and freed when Python drops
its last reference. The live-storage counter (:class:`~mhaudit.fake.counter.ForwardCounter`)
adds each new storage's bytes to a live count and takes them off when the storage is
freed, so tensors live as long as the eager code keeps them (locals until the module
returns, caches until the end), which is what an allocator sees. Torch's ``MemTracker``
counts the same way; this is the lean version of it.

The first rung of the tracer counts the same storages while it records the graph, so
the peak is read from that run (:func:`peak_of`); :func:`fake_forward_peak` runs the
forward for the other rungs. With folded layer lists only the representatives run, and
stand-ins hold the other positions: the bytes each copy leaves alive (its cache entries,
outputs kept for later) are added from the position where it would have run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mhaudit.fake.counter import ForwardCounter, ForwardStorages
from mhaudit.fake.run import fake_forward
from mhaudit.trace.fold import FoldedList


@dataclass(frozen=True)
class PeakEstimate:
    """Peak of live activation bytes in one inference forward, at the dtypes it ran at."""

    activation_bytes: int
    """Largest sum of live op-output storages (user inputs, parameters and buffers not
    included), per-layer leftovers of folded layers added."""
    retained_bytes: int
    """Bytes still alive when the forward returned (outputs, caches)."""


def _sources(plans: tuple[FoldedList, ...]) -> dict[str, str]:
    """Each left-out layer's path, to the path of the representative it stands in for."""
    found: dict[str, str] = {}
    for plan in plans:
        prefix = f"{plan.path}." if plan.path else ""
        for index, members in zip(plan.kept, plan.members, strict=True):
            for member in members:
                if member != index:
                    found[prefix + plan.name_of(member)] = prefix + plan.name_of(index)
    return found


def peak_of(storages: ForwardStorages, plans: tuple[FoldedList, ...] = ()) -> PeakEstimate:
    """The activation peak of a counted forward, with ``plans``' folded layers added back.

    Each left-out layer was called at its own position as a stand-in that passed its input
    on (:mod:`mhaudit.trace.left_out`), so the live bytes when it was called are what the
    real copy would have started from, less the leftovers of the copies before it. A copy
    would have risen above its start as its representative did, and left behind, besides
    its output (which replaces its input in the next layer), what its representative left:
    its cache entries and tensors kept for later.
    """
    sources = _sources(plans)
    reps = {span.path: span for span in storages.spans if span.path in set(sources.values())}
    levels = storages.levels
    peak = extra = seen = 0
    for span in storages.spans:
        rep = reps.get(sources.get(span.path, ""))
        if rep is None:
            continue
        peak = max(peak, max(levels[seen:span.end], default=0) + extra)
        seen = max(seen, span.end)
        rise = max(levels[rep.start:rep.end], default=0) - rep.live_start_bytes
        peak = max(peak, span.live_start_bytes + extra + max(0, rise))
        extra += max(0, rep.live_end_bytes - rep.live_start_bytes - rep.output_bytes)
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

    ``plans`` are the folded layer lists in effect (the model's lists already hold
    stand-ins for the copies); floating state and inputs run at ``dtype`` (None keeps
    their own). Raises whatever the forward raises on fake tensors.
    """
    # fake CPU state and inputs: a meta-built model runs the kernels a real run does
    with fake_forward(model, args, kwargs, dtype) as forward:
        counter = ForwardCounter()
        counter.known(forward.tensors())
        out = forward(counter, counter.layers(model))
        storages = counter.result()
        del out
    return peak_of(storages, plans)
