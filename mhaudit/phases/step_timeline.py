"""The live-memory timeline of a training step, folded to the full depth and thinned."""

from __future__ import annotations

from collections.abc import Sequence

from mhaudit.data import TimelinePoint
from mhaudit.fake.live import StepLog
from mhaudit.memory.timeline import Repeat, live_over_step, thinned

POINTS = 240
"""Most points the timeline keeps for the forward and backward."""


def step_timeline(log: StepLog, repeats: Sequence[Repeat], forward_end: int, fixed_bytes: int,
                  update_bytes: int, peak_in_update: bool
                  ) -> tuple[tuple[TimelinePoint, ...], int | None]:
    """A training step's ``timeline`` and ``timeline_peak_index``.

    ``fixed_bytes`` is what stays alive over the forward and the backward (weights,
    optimizer states, inputs, buffers); ``update_bytes`` the optimizer update's peak, the
    last point; ``peak_in_update`` says whether the step peaks there.
    """
    points = [TimelinePoint(phase, fixed_bytes + live)
              for phase, live in thinned(live_over_step(log, repeats, forward_end), POINTS)]
    points.append(TimelinePoint("optimizer", update_bytes))
    if peak_in_update:
        return tuple(points), len(points) - 1
    peak = max(range(len(points) - 1), key=lambda i: points[i].live_bytes, default=None)
    return tuple(points), peak
