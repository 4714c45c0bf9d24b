"""The training step's live-memory timeline: folded like the peak, thinned, its peak marked."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from mhaudit.cost.devices import get_profile
from mhaudit.data import TrainingCost
from mhaudit.memory.timeline import thinned
from mhaudit.phases.step_timeline import POINTS
from mhaudit.phases.training import training_step
from tests.fixtures.small_models import LayerEncoder

H100 = get_profile("h100")



def _step(tokens: int, **options: Any) -> TrainingCost:
    with torch.device("meta"):
        model, ids = LayerEncoder(), torch.zeros(2, tokens, dtype=torch.long)
    return training_step(model, (ids,), {}, [], H100, **options)


@pytest.mark.parametrize("tokens", [64, 2], ids=["peak-in-backward", "peak-in-update"])
def test_the_folded_timeline_is_the_full_models(tokens: int) -> None:
    folded, full = _step(tokens), _step(tokens, fold_layers=False)
    assert folded.folded_layers == 5 and full.folded_layers == 0
    assert folded.timeline == full.timeline  # the copies stand where the layers ran
    for cost in (folded, full):
        assert cost.timeline_peak_index is not None
        peak = cost.timeline[cost.timeline_peak_index]
        assert peak.live_bytes == cost.peak_bytes
        assert peak.step == cost.peak_phase
        assert max(p.live_bytes for p in cost.timeline) == cost.peak_bytes
        assert len(cost.timeline) <= POINTS + 1
        steps = [p.step for p in cost.timeline]
        assert steps == sorted(steps, key=("forward", "backward", "optimizer").index)
        assert steps[-1] == "optimizer" and steps[0] == "forward"


def test_thinning_keeps_each_runs_highest_point_in_order() -> None:
    points = [("forward", v) for v in (1, 5, 2, 2)] + [("backward", 3), ("backward", 9)]
    assert thinned(points, 3) == [("forward", 5), ("forward", 2), ("backward", 9)]
    assert thinned(points, 10) == points


def test_the_timeline_is_in_the_json() -> None:
    from mhaudit.data.schema import training_to_dict

    cost = _step(16)
    data = training_to_dict(cost)
    assert data["timeline"][0] == {"step": "forward", "live_bytes": cost.timeline[0].live_bytes}
    assert data["timeline"][data["timeline_peak_index"]]["live_bytes"] == data["peak_bytes"]
