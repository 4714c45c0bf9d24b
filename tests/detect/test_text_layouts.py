"""Text-model layouts: QK-norm over Q's whole width, n-gram streams stacked from chunks of
one projection (hand-made fixtures; the transformers cases are in tests/integration)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from fixtures.zoo_text_layouts import DK, B, D, H, N, NgramStreams, PairRotation, WideQKNorm
from torch import nn

from mhaudit.data import Layout
from mhaudit.detect.blocks import detect
from mhaudit.trace.export import trace


def _layouts(build: Callable[[], nn.Module], tokens: int) -> list[Layout]:
    with torch.device("meta"):
        model = build().eval()
        x = torch.randn(B, tokens, D)
    return detect(trace(model, (x,), {}), model)


def _heads(layout: Layout) -> tuple[int, int, int, int, str]:
    return (layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.d_model,
            layout.kind)


def test_a_norm_over_the_whole_projection_is_walked_through() -> None:
    (layout,) = _layouts(WideQKNorm, N)
    assert _heads(layout) == (H, H, DK, D, "self")
    # Q, K, V and O each 32·32; the norms' weights stay the norms'.
    assert [p.params for p in (layout.q, layout.k, layout.v, layout.o)] == [D * D] * 4


def test_stacked_chunks_of_one_projection_are_one_read() -> None:
    (layout,) = _layouts(NgramStreams, 3 * N)
    # 2 streams stacked on their own axis: still 4 heads of 8, not 8.
    assert _heads(layout) == (H, H, DK, D, "self")
    assert (layout.seq_len_q, layout.seq_len_kv) == (N, 2 * N)
    assert [p.params for p in (layout.q, layout.k, layout.v, layout.o)] == [D * D + D] * 4


@pytest.mark.parametrize("kv", [H, H // 2])
def test_a_rotation_written_as_product_and_sum_keeps_every_feature(kv: int) -> None:
    # (x.reshape(..., 4, 1, 2) * R).sum(-1): the size-1 axis broadcast to 2 and the pair
    # axis summed away is a 2×2 matmul per pair, 8 features in, 8 out, not 4.
    (layout,) = _layouts(lambda: PairRotation(kv), N)
    assert _heads(layout) == (H, kv, DK, D, "self")
    # Q and O 32·32, K and V 32·(kv·8).
    assert [p.params for p in (layout.q, layout.k, layout.v, layout.o)] == [
        D * D, D * kv * DK, D * kv * DK, D * D]
