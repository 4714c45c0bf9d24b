"""Cores the graph hides: K written into a fresh buffer slice by slice, a softmax over the
queries (an assignment of keys to queries), K reduced from a wider projection."""

from __future__ import annotations

import pytest
import torch
from fixtures.zoo_cores import (
    DK,
    B,
    D,
    DynamicKeyConv,
    H,
    HardAssignment,
    LatentKeyBuffer,
    MeanGroupedKeys,
    N,
    SiblingMixes,
)

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


def test_a_softmax_over_the_queries_is_an_assignment_core() -> None:
    with torch.device("meta"):
        model = HardAssignment().eval()
        groups, x = torch.randn(B, 3, D), torch.randn(B, N, D)
    (layout,) = detect(trace(model, (groups, x), {}), model)
    # One head over the whole width (scores on 32 features), 3 group queries over 6 tokens.
    assert (layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.v_head_dim,
            layout.kind, layout.seq_len_q, layout.seq_len_kv) == (1, 1, D, D, "cross", 3, N)
    assert count(layout).total == 4 * (D * D + D)  # Q, K, V, O with biases


def test_a_mean_over_groups_of_heads_leaves_one_head_per_group() -> None:
    with torch.device("meta"):
        model = MeanGroupedKeys().eval()
        x = torch.randn(B, N, D)
    (layout,) = detect(trace(model, (x,), {}), model)
    # K = mean over pairs of Q's 4 heads of 8: 2 KV heads, as V's 2-head projection has.
    assert (layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.v_head_dim) == (
        H, H // 2, DK, DK)


def test_a_static_kernel_added_to_a_small_projection_is_no_bias() -> None:
    with torch.device("meta"):
        model = DynamicKeyConv().eval()
        x = torch.randn(B, N, D)
    (layout,) = detect(trace(model, (x,), {}), model)
    # K is the k projection (4 heads of 8), not the 8-wide taps projection that the
    # (h, d_k, 2) static kernel broadcasts over every head's features.
    assert (layout.num_heads, layout.num_kv_heads, layout.head_dim) == (H, H, DK)
    assert layout.k is not None and layout.k.weight.endswith("k.weight")


def test_q_and_k_from_sibling_mixes_of_the_same_tokens_are_self_attention() -> None:
    with torch.device("meta"):
        model = SiblingMixes().eval()
        states = torch.randn(B, N, 3, D)
    (layout,) = detect(trace(model, (states,), {}), model)
    # Q and K read two outputs of one unbind (mixes of the same 6 tokens): self, 6 by 6.
    assert (layout.kind, layout.num_heads, layout.seq_len_q, layout.seq_len_kv) == (
        "self", H, N, N)
