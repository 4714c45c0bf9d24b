"""Detection is exact on the zoo of attention variants and finds nothing in non-attention code."""

from __future__ import annotations

import pytest
import torch
from fixtures.zoo import CASES, Case

from mhaudit.detect.blocks import detect
from mhaudit.load.target import normalize_inputs
from mhaudit.trace.export import trace


def _layouts(case: Case) -> list:
    with torch.device("meta"):
        model = case.build()
        args, kwargs = normalize_inputs(case.inputs())
    return detect(trace(model, args, kwargs), model)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_zoo_case_is_detected_exactly(case: Case) -> None:
    found = _layouts(case)
    got = [
        (lay.name, lay.kind, lay.implementation, lay.d_model, lay.num_heads, lay.num_kv_heads,
         lay.head_dim, lay.v_head_dim,
         lay.q.params if lay.q else 0, lay.k.params if lay.k else 0,
         lay.v.params if lay.v else 0, lay.o.params if lay.o else 0)
        for lay in found
    ]
    want = [
        (e.name, e.kind, e.implementation, e.d_model, e.num_heads, e.num_kv_heads, e.head_dim,
         e.v_head_dim, e.q_params, e.k_params, e.v_params, e.o_params)
        for e in case.blocks
    ]
    assert got == want
