"""Score-bias parameters: outside Q, K, V and O, listed per block, on every relative-position
scheme (hand-made fixtures and real transformers models)."""

from __future__ import annotations

import pytest
import torch
from fixtures.zoo_score_bias import SCHEMES, Scheme

from mhaudit.data import Layout
from mhaudit.detect.blocks import detect
from mhaudit.detect.params import count
from mhaudit.load.target import normalize_inputs
from mhaudit.trace.export import trace


def _layouts(scheme: Scheme) -> list[Layout]:
    with torch.device("meta"):
        model = scheme.build().eval()
        args, kwargs = normalize_inputs(scheme.inputs())
    return detect(trace(model, args, kwargs), model)


def _role_params(layout: Layout) -> tuple[int, ...]:
    return tuple(p.params if p else 0 for p in (layout.q, layout.k, layout.v, layout.o))


@pytest.mark.parametrize("scheme", SCHEMES, ids=[s.id for s in SCHEMES])
def test_score_biases_are_listed_apart_from_the_projections(scheme: Scheme) -> None:
    found = _layouts(scheme)
    assert [_role_params(lay) for lay in found] == [scheme.params] * len(scheme.score_bias)
    assert tuple(lay.score_bias_params for lay in found) == scheme.score_bias


def test_the_breakdown_carries_score_biases_outside_its_total() -> None:
    layout = _layouts(SCHEMES[0])[0]
    breakdown = count(layout)
    assert breakdown.score_bias == layout.score_bias_params == 32
    assert breakdown.total == sum(_role_params(layout))
    assert any("score biases: 32 learned" in d.reason and d.params == 0
               for d in breakdown.deviations)
