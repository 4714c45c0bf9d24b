"""K written into a fresh buffer slice by slice keeps the heads of the parts that fill it."""

from __future__ import annotations

import pytest
import torch
from fixtures.zoo_writes import DK, B, D, H, LatentKeyBuffer, N

from mhaudit.detect.blocks import detect
from mhaudit.detect.params import count
from mhaudit.trace.export import trace


@pytest.mark.parametrize("rope", [0, 4])
def test_an_empty_write_fills_no_head_features(rope: int) -> None:
    with torch.device("meta"):
        model = LatentKeyBuffer(rope).eval()
        x = torch.randn(B, N, D)
    (layout,) = detect(trace(model, (x,), {}), model)
    # K reads its per-head projection (4 heads of 8) and, when rope > 0, one shared
    # rotary part; with rope == 0 that write has no elements and K is the k projection.
    assert (layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.d_model) == (
        H, H, DK + rope, D)
    # Q 32·(4·(8 + rope)), K 32·32 + 32·rope, V 32·32, O 32·32.
    assert count(layout).total == D * H * (DK + rope) + D * H * DK + D * rope + 2 * D * H * DK
