"""Vision and non-standard layouts are read from what the graph computes."""

from __future__ import annotations

import pytest
import torch
from fixtures.zoo_vision import VISION, Vision

from mhaudit.data import Layout
from mhaudit.detect.blocks import detect
from mhaudit.detect.params import count
from mhaudit.load.target import normalize_inputs
from mhaudit.trace.export import trace


def _detect(case: Vision) -> list[Layout]:
    with torch.device("meta"):
        model = case.build().eval()
        args, kwargs = normalize_inputs(case.inputs())
    return detect(trace(model, args, kwargs), model)


@pytest.mark.parametrize("case", VISION, ids=[c.id for c in VISION])
def test_layout_is_one_exact_block(case: Vision) -> None:
    (layout,) = _detect(case)
    got = (layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.d_model,
           layout.seq_len_q, layout.seq_len_kv, layout.kind, count(layout).total)
    want = (case.heads, case.kv_heads, case.d_k, case.d_model, case.seq_len_q,
            case.seq_len_kv, case.kind, case.params)
    assert got == want
